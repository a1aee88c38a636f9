package batch_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// simpleMessage is a simple-produce batch (decision 43) as a client in any
// language fills it: base_timestamp, producer fields and records with
// their timestamp deltas; record_count, last_offset_delta, crc and every
// offset_delta left 0.
func simpleMessage(p batch.Producer, recs []testRecord) *sluicev1.RecordBatch {
	m := &sluicev1.RecordBatch{BaseTimestamp: baseTS}
	if p.ID >= 0 {
		m.ProducerId, m.ProducerEpoch, m.BaseSequence = p.ID, p.Epoch, p.BaseSequence
	}
	for _, r := range recs {
		rec := &sluicev1.Record{TimestampDelta: r.ts - baseTS, Key: r.key, Value: r.value}
		for _, h := range r.headers {
			rec.Headers = append(rec.Headers, &sluicev1.Header{Key: h.Key, Value: h.Value})
		}
		m.Records = append(m.Records, rec)
	}
	return m
}

// simpleBatch is simpleMessage encoded by proto.Marshal (the slow path).
func simpleBatch(t testing.TB, p batch.Producer, recs []testRecord) []byte {
	t.Helper()
	return marshal(t, simpleMessage(p, recs))
}

// simpleCanonical is a simple-produce batch in the canonical layout (the
// fast path): header with record_count, last_offset_delta and crc 0, then
// the records without offset deltas.
func simpleCanonical(t testing.TB, p batch.Producer, recs []testRecord) []byte {
	t.Helper()
	out := make([]byte, batch.HeaderSize)
	batch.PutHeader(out, batch.Header{BaseTimestamp: baseTS, ProducerID: p.ID, ProducerEpoch: p.Epoch, BaseSequence: p.BaseSequence})
	for _, r := range simpleMessage(p, recs).Records {
		out = protowire.AppendTag(out, 12, protowire.BytesType)
		out = protowire.AppendBytes(out, marshal(t, r))
	}
	return out
}

// Simple produce: whichever encoding the client sends, the broker stores
// exactly the batch the Go client's Builder would have sent with the
// bookkeeping filled.
func TestSimpleProduceFillsBookkeeping(t *testing.T) {
	producers := map[string]batch.Producer{
		"plain":      batch.PlainProducer,
		"idempotent": {ID: 7, Epoch: 2, BaseSequence: 40},
	}
	for pname, p := range producers {
		for _, n := range []int{1, 2, len(sampleRecords())} {
			recs := sampleRecords()[:n]
			want, wantH, err := batch.Canonicalize(build(t, p, 0, recs))
			if err != nil {
				t.Fatal(err)
			}
			inputs := map[string][]byte{
				"proto.Marshal": simpleBatch(t, p, recs),
				"canonical":     simpleCanonical(t, p, recs),
				"shuffled":      reorder(t, simpleCanonical(t, p, recs), true),
			}
			for iname, in := range inputs {
				got, h, err := batch.Canonicalize(in)
				if err != nil {
					t.Fatalf("%s %d records %s: %v", pname, n, iname, err)
				}
				if !bytes.Equal(got, want) || h != wantH {
					t.Errorf("%s %d records %s:\n got %x %+v\nwant %x %+v", pname, n, iname, got, h, want, wantH)
				}
				if h.RecordCount != int32(n) || h.LastOffsetDelta != int32(n-1) {
					t.Errorf("%s %d records %s: header %+v", pname, n, iname, h)
				}
			}
		}
	}
}

// A one-record simple batch in the canonical layout needs only its count:
// it stays on the zero-copy path.
func TestSimpleProduceOneRecordInPlace(t *testing.T) {
	in := simpleCanonical(t, batch.PlainProducer, sampleRecords()[:1])
	out, _, err := batch.Canonicalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] {
		t.Error("one-record simple batch was copied")
	}
}

// An explicit offset_delta 0 (an encoder that writes default values) is
// replaced, not kept beside the filled one.
func TestSimpleProduceExplicitZeroDelta(t *testing.T) {
	recs := sampleRecords()[:3]
	want, _, err := batch.Canonicalize(build(t, batch.PlainProducer, 0, recs))
	if err != nil {
		t.Fatal(err)
	}
	in := make([]byte, batch.HeaderSize)
	batch.PutHeader(in, batch.Header{BaseTimestamp: baseTS, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})
	for _, r := range simpleMessage(batch.PlainProducer, recs).Records {
		body := marshal(t, r)
		// Insert offset_delta = 0 after timestamp_delta (or first).
		var withZero []byte
		if r.TimestampDelta != 0 {
			_, _, k := protowire.ConsumeTag(body)
			k += protowire.ConsumeFieldValue(1, protowire.VarintType, body[k:])
			withZero = append(append(append(withZero, body[:k]...), 2<<3, 0), body[k:]...)
		} else {
			withZero = append([]byte{2 << 3, 0}, body...)
		}
		in = protowire.AppendTag(in, 12, protowire.BytesType)
		in = protowire.AppendBytes(in, withZero)
	}
	got, _, err := batch.Canonicalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("got  %x\nwant %x", got, want)
	}
}

// Validation stays strict outside the simple rule: a batch is simple only
// when record_count, last_offset_delta and crc are all 0, and a simple
// batch's offset deltas must all be 0.
func TestSimpleProduceStrictOtherwise(t *testing.T) {
	recs := sampleRecords()[:3]
	simple := simpleCanonical(t, batch.PlainProducer, recs)
	filled := build(t, batch.PlainProducer, 0, recs)
	withCRC := func(b []byte) []byte {
		b = clone(b)
		h, _ := batch.ParseHeader(b)
		h.CRC = batch.ComputeCRC(b)
		batch.PutHeader(b, h)
		return b
	}
	withDelta := simpleMessage(batch.PlainProducer, recs)
	withDelta.Records[2].OffsetDelta = 2
	tests := []struct {
		name string
		in   []byte
	}{
		{"crc given", withCRC(simple)},
		{"last_offset_delta given", withHeader(t, simple, func(h *batch.Header) { h.LastOffsetDelta = 2 })},
		{"record_count given", withHeader(t, simple, func(h *batch.Header) { h.RecordCount = 3 })},
		{"record_count 0 with deltas filled", withHeader(t, filled, func(h *batch.Header) { h.RecordCount, h.LastOffsetDelta = 0, 0 })},
		{"one offset_delta filled", marshal(t, withDelta)},
		{"no records", marshal(t, &sluicev1.RecordBatch{BaseTimestamp: baseTS})},
	}
	for _, tc := range tests {
		out, _, err := batch.Canonicalize(tc.in)
		if got := errs.Code(err); got != sluicev1.ErrorCode_INVALID_RECORD {
			t.Errorf("%s: code %v (%v), want INVALID_RECORD", tc.name, got, err)
		}
		if out != nil {
			t.Errorf("%s: output on error", tc.name)
		}
	}
}
