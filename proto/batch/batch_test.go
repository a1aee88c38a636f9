package batch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const baseTS = 1_700_000_000_000

// testRecord is the input of one Builder.Add call.
type testRecord struct {
	ts      int64
	key     []byte
	value   []byte
	headers []batch.RecordHeader
}

func sampleRecords() []testRecord {
	return []testRecord{
		{ts: baseTS, key: []byte("k0"), value: []byte("v0")},
		{ts: baseTS + 7, value: []byte("value one"), headers: []batch.RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "trace", Value: nil}}},
		{ts: baseTS - 3, key: []byte("k2")},
		{ts: baseTS + 2, key: []byte("k3"), value: bytes.Repeat([]byte{0xab}, 300), headers: []batch.RecordHeader{{Key: "", Value: []byte("empty key")}}},
	}
}

// build returns a canonical batch of recs.
func build(t testing.TB, p batch.Producer, attrs uint32, recs []testRecord) []byte {
	t.Helper()
	var b batch.Builder
	b.Reset(baseTS)
	for _, r := range recs {
		b.Add(r.ts, r.key, r.value, r.headers)
	}
	out := b.Finish(p, attrs)
	if out == nil {
		t.Fatal("Finish returned nil")
	}
	return out
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// withHeader rewrites the header of a canonical batch through fn and sets
// the CRC to 0 (so that Canonicalize computes it).
func withHeader(t testing.TB, b []byte, fn func(*batch.Header)) []byte {
	t.Helper()
	b = clone(b)
	h, err := batch.ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	fn(&h)
	h.CRC = 0
	batch.PutHeader(b, h)
	return b
}

// toMessage decodes a batch with the generated code.
func toMessage(t testing.TB, b []byte) *sluicev1.RecordBatch {
	t.Helper()
	m := &sluicev1.RecordBatch{}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatalf("proto.Unmarshal: %v", err)
	}
	return m
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("proto.Marshal: %v", err)
	}
	return b
}

// shuffled encodes a batch with the records first and the header fields in
// reverse field order, all of them present.
func shuffled(t testing.TB, canonical []byte) []byte { return reorder(t, canonical, true) }

// reorder encodes a batch with the header fields in reverse field order,
// all of them present, before or after the records.
func reorder(t testing.TB, canonical []byte, recordsFirst bool) []byte {
	t.Helper()
	h, err := batch.ParseHeader(canonical)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	if recordsFirst {
		out = append(out, canonical[batch.HeaderSize:]...)
	}
	f32 := func(num protowire.Number, v uint32) {
		out = protowire.AppendTag(out, num, protowire.Fixed32Type)
		out = protowire.AppendFixed32(out, v)
	}
	f64 := func(num protowire.Number, v uint64) {
		out = protowire.AppendTag(out, num, protowire.Fixed64Type)
		out = protowire.AppendFixed64(out, v)
	}
	f32(11, uint32(h.RecordCount))
	f32(10, uint32(h.BaseSequence))
	f32(9, uint32(h.ProducerEpoch))
	f64(8, uint64(h.ProducerID))
	f64(7, uint64(h.MaxTimestamp))
	f64(6, uint64(h.BaseTimestamp))
	f32(5, uint32(h.LastOffsetDelta))
	f32(4, h.Attributes)
	f32(3, h.CRC)
	f32(2, uint32(h.PartitionLeaderEpoch))
	f64(1, uint64(h.BaseOffset))
	if !recordsFirst {
		out = append(out, canonical[batch.HeaderSize:]...)
	}
	return out
}

func TestCanonicalizeEncodingsAgree(t *testing.T) {
	producers := map[string]batch.Producer{
		"plain":      batch.PlainProducer,
		"idempotent": {ID: 42, Epoch: 3, BaseSequence: 100},
	}
	for name, p := range producers {
		t.Run(name, func(t *testing.T) {
			canonical := build(t, p, batch.AttrTransactional, sampleRecords())
			batch.SetBaseOffset(canonical, 1234)
			batch.SetPartitionLeaderEpoch(canonical, 9)
			want, wantH, err := batch.Canonicalize(clone(canonical))
			if err != nil {
				t.Fatalf("fast path: %v", err)
			}
			if !bytes.Equal(want, canonical) {
				t.Fatal("fast path changed an already canonical batch built by Builder")
			}
			noCRC := withHeader(t, canonical, func(h *batch.Header) {})
			inputs := map[string][]byte{
				"proto.Marshal":           marshal(t, toMessage(t, canonical)),
				"proto.Marshal crc=0":     marshal(t, toMessage(t, noCRC)),
				"shuffled":                shuffled(t, canonical),
				"shuffled crc=0":          shuffled(t, noCRC),
				"canonical crc=0":         noCRC,
				"proto.Marshal wrong max": marshal(t, toMessage(t, withHeader(t, canonical, func(h *batch.Header) { h.MaxTimestamp = 5 }))),
			}
			for in, b := range inputs {
				got, h, err := batch.Canonicalize(b)
				if err != nil {
					t.Errorf("%s: %v", in, err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s: output differs from the fast path\n got %x\nwant %x", in, got, want)
				}
				if h != wantH {
					t.Errorf("%s: header %+v, want %+v", in, h, wantH)
				}
			}
		})
	}
}

func TestCanonicalizeFastPathInPlace(t *testing.T) {
	in := withHeader(t, build(t, batch.PlainProducer, 0, sampleRecords()), func(h *batch.Header) {})
	out, _, err := batch.Canonicalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] {
		t.Error("fast path copied a canonical batch")
	}
}

func TestCanonicalizeRules(t *testing.T) {
	good := build(t, batch.PlainProducer, 0, sampleRecords())
	two := build(t, batch.PlainProducer, 0, sampleRecords()[:2])

	// Offset deltas 1, 0 (out of order).
	outOfOrder := marshal(t, &sluicev1.RecordBatch{
		LastOffsetDelta: 1, RecordCount: 2, BaseTimestamp: baseTS,
		Records: []*sluicev1.Record{{OffsetDelta: 1}, {OffsetDelta: 0}},
	})
	// A skipped offset delta.
	gap := marshal(t, &sluicev1.RecordBatch{
		LastOffsetDelta: 1, RecordCount: 2,
		Records: []*sluicev1.Record{{OffsetDelta: 0}, {OffsetDelta: 2}},
	})
	zeroHeader := make([]byte, batch.HeaderSize)
	batch.PutHeader(zeroHeader, batch.Header{LastOffsetDelta: -1, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})

	badUTF8 := build(t, batch.PlainProducer, 0, []testRecord{{ts: baseTS, value: []byte("v"), headers: []batch.RecordHeader{{Key: "\xff\xfe", Value: []byte("v")}}}})

	unknownInRecord := clone(good[:batch.HeaderSize])
	rec := protowire.AppendTag(nil, 4, protowire.BytesType)
	rec = protowire.AppendBytes(rec, []byte("v"))
	rec = protowire.AppendTag(rec, 6, protowire.VarintType)
	rec = protowire.AppendVarint(rec, 1)
	unknownInRecord = protowire.AppendTag(unknownInRecord, 12, protowire.BytesType)
	unknownInRecord = protowire.AppendBytes(unknownInRecord, rec)
	unknownInRecord = withHeader(t, unknownInRecord, func(h *batch.Header) { h.RecordCount, h.LastOffsetDelta = 1, 0 })

	wrongWireRecord := clone(good[:batch.HeaderSize])
	rec = protowire.AppendTag(nil, 4, protowire.VarintType) // value as varint
	rec = protowire.AppendVarint(rec, 1)
	wrongWireRecord = protowire.AppendTag(wrongWireRecord, 12, protowire.BytesType)
	wrongWireRecord = protowire.AppendBytes(wrongWireRecord, rec)
	wrongWireRecord = withHeader(t, wrongWireRecord, func(h *batch.Header) { h.RecordCount, h.LastOffsetDelta = 1, 0 })

	appendField := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		b = clone(b)
		b = protowire.AppendTag(b, num, typ)
		switch typ {
		case protowire.VarintType:
			b = protowire.AppendVarint(b, 1)
		case protowire.BytesType:
			b = protowire.AppendBytes(b, []byte("x"))
		case protowire.Fixed32Type:
			b = protowire.AppendFixed32(b, 1)
		case protowire.Fixed64Type:
			b = protowire.AppendFixed64(b, 1)
		}
		return b
	}
	noCRC := withHeader(t, good, func(h *batch.Header) {})

	tests := []struct {
		name string
		in   []byte
		want sluicev1.ErrorCode
	}{
		{"good", clone(good), sluicev1.ErrorCode_NONE},
		{"good crc=0", clone(noCRC), sluicev1.ErrorCode_NONE},
		{"wrong crc fast", func() []byte { b := clone(good); b[15] ^= 1; return b }(), sluicev1.ErrorCode_CORRUPT_RECORD},
		{"wrong crc slow", func() []byte {
			m := toMessage(t, good)
			m.Crc ^= 0x10
			return marshal(t, m)
		}(), sluicev1.ErrorCode_CORRUPT_RECORD},
		{"record changed under crc", func() []byte { b := clone(good); b[len(b)-1] ^= 0x55; return b }(), sluicev1.ErrorCode_CORRUPT_RECORD},
		// A codec's batch carries compressed_records, not records
		// (compressed_test.go has the compressed rules).
		{"codec with records gzip", build(t, batch.PlainProducer, 1, sampleRecords()), sluicev1.ErrorCode_INVALID_RECORD},
		{"codec with records zstd", build(t, batch.PlainProducer, 4, sampleRecords()), sluicev1.ErrorCode_INVALID_RECORD},
		{"codec with records slow", marshal(t, toMessage(t, build(t, batch.PlainProducer, 2, sampleRecords()))), sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown attribute bit", withHeader(t, good, func(h *batch.Header) { h.Attributes = 1 << 6 }), sluicev1.ErrorCode_INVALID_RECORD},
		{"zero records canonical", zeroHeader, sluicev1.ErrorCode_INVALID_RECORD},
		{"zero records empty input", []byte{}, sluicev1.ErrorCode_INVALID_RECORD},
		{"zero records nil input", nil, sluicev1.ErrorCode_INVALID_RECORD},
		{"zero records proto", marshal(t, &sluicev1.RecordBatch{BaseTimestamp: baseTS}), sluicev1.ErrorCode_INVALID_RECORD},
		{"record_count too high", withHeader(t, good, func(h *batch.Header) { h.RecordCount++ }), sluicev1.ErrorCode_INVALID_RECORD},
		{"record_count too low", withHeader(t, good, func(h *batch.Header) { h.RecordCount-- }), sluicev1.ErrorCode_INVALID_RECORD},
		{"last_offset_delta wrong", withHeader(t, good, func(h *batch.Header) { h.LastOffsetDelta = 0 }), sluicev1.ErrorCode_INVALID_RECORD},
		{"last_offset_delta and count wrong", withHeader(t, two, func(h *batch.Header) { h.LastOffsetDelta, h.RecordCount = 2, 3 }), sluicev1.ErrorCode_INVALID_RECORD},
		{"offset_delta out of order", outOfOrder, sluicev1.ErrorCode_INVALID_RECORD},
		{"offset_delta gap", gap, sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown batch field varint slow", appendField(marshal(t, toMessage(t, good)), 14, protowire.VarintType), sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown batch field bytes fast", appendField(noCRC, 14, protowire.BytesType), sluicev1.ErrorCode_INVALID_RECORD},
		{"compressed_records wrong wire type", appendField(marshal(t, toMessage(t, good)), 13, protowire.VarintType), sluicev1.ErrorCode_INVALID_RECORD},
		{"compressed_records without a codec", appendField(noCRC, 13, protowire.BytesType), sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown batch field fixed32 slow", appendField(marshal(t, toMessage(t, noCRC)), 99, protowire.Fixed32Type), sluicev1.ErrorCode_INVALID_RECORD},
		{"known field wrong wire type", appendField(marshal(t, toMessage(t, noCRC)), 1, protowire.VarintType), sluicev1.ErrorCode_INVALID_RECORD},
		{"records field wrong wire type", appendField(marshal(t, toMessage(t, noCRC)), 12, protowire.VarintType), sluicev1.ErrorCode_INVALID_RECORD},
		{"unknown record field", unknownInRecord, sluicev1.ErrorCode_INVALID_RECORD},
		{"record field wrong wire type", wrongWireRecord, sluicev1.ErrorCode_INVALID_RECORD},
		{"header key not UTF-8", badUTF8, sluicev1.ErrorCode_INVALID_RECORD},
		{"header key not UTF-8 slow", shuffled(t, badUTF8), sluicev1.ErrorCode_INVALID_RECORD},
		{"group wire type", append(marshal(t, toMessage(t, noCRC)), 0x6b), sluicev1.ErrorCode_CORRUPT_RECORD},
		{"garbage", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, sluicev1.ErrorCode_CORRUPT_RECORD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, h, err := batch.Canonicalize(tc.in)
			if got := errs.Code(err); got != tc.want {
				t.Fatalf("Canonicalize: code %v (%v), want %v", got, err, tc.want)
			}
			if err != nil {
				var e *errs.Error
				if !errors.As(err, &e) {
					t.Errorf("error %T is not *errs.Error", err)
				}
				if out != nil {
					t.Errorf("output %x on error", out)
				}
				return
			}
			vh, err := batch.Verify(out)
			if err != nil {
				t.Fatalf("Verify(output): %v", err)
			}
			if vh != h {
				t.Errorf("Verify header %+v, Canonicalize header %+v", vh, h)
			}
		})
	}
}

func TestCanonicalizeCRCZeroComputed(t *testing.T) {
	good := build(t, batch.Producer{ID: 7, Epoch: 1, BaseSequence: 0}, 0, sampleRecords())
	want, _ := batch.ParseHeader(good)
	out, h, err := batch.Canonicalize(withHeader(t, good, func(h *batch.Header) {}))
	if err != nil {
		t.Fatal(err)
	}
	if h.CRC == 0 || h.CRC != want.CRC || h.CRC != batch.ComputeCRC(out) {
		t.Errorf("CRC %08x, want %08x", h.CRC, want.CRC)
	}
	if _, err := batch.Verify(out); err != nil {
		t.Error(err)
	}
	if !bytes.Equal(out, good) {
		t.Error("canonicalized crc=0 batch differs from the Builder's")
	}
}

func TestCanonicalizeProducerIdentity(t *testing.T) {
	recs := []*sluicev1.Record{{Value: []byte("a")}, {OffsetDelta: 1, Value: []byte("b")}}
	tests := []struct {
		name string
		in   *sluicev1.RecordBatch
		want batch.Producer
	}{
		{"absent", &sluicev1.RecordBatch{ProducerEpoch: 5, BaseSequence: 9}, batch.PlainProducer},
		{"absent all", &sluicev1.RecordBatch{}, batch.PlainProducer},
		{"zero explicit", &sluicev1.RecordBatch{ProducerId: 0, ProducerEpoch: 0, BaseSequence: 0}, batch.PlainProducer},
		{"negative", &sluicev1.RecordBatch{ProducerId: -5, ProducerEpoch: 2, BaseSequence: 3}, batch.PlainProducer},
		{"plain", &sluicev1.RecordBatch{ProducerId: -1, ProducerEpoch: -1, BaseSequence: -1}, batch.PlainProducer},
		{"idempotent", &sluicev1.RecordBatch{ProducerId: 77, ProducerEpoch: 2, BaseSequence: 10}, batch.Producer{ID: 77, Epoch: 2, BaseSequence: 10}},
		{"idempotent seq 0", &sluicev1.RecordBatch{ProducerId: 1}, batch.Producer{ID: 1, Epoch: 0, BaseSequence: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Records, tc.in.RecordCount, tc.in.LastOffsetDelta = recs, 2, 1
			wire := marshal(t, tc.in)
			for path, in := range map[string][]byte{"slow": wire, "fast": canonicalOf(t, wire)} {
				out, h, err := batch.Canonicalize(in)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				got := batch.Producer{ID: h.ProducerID, Epoch: h.ProducerEpoch, BaseSequence: h.BaseSequence}
				if got != tc.want {
					t.Errorf("%s: producer %+v, want %+v", path, got, tc.want)
				}
				m := toMessage(t, out)
				if m.ProducerId != tc.want.ID || m.ProducerEpoch != tc.want.Epoch || m.BaseSequence != tc.want.BaseSequence {
					t.Errorf("%s: stored producer %d/%d/%d", path, m.ProducerId, m.ProducerEpoch, m.BaseSequence)
				}
			}
		})
	}
}

// canonicalOf puts a proto-encoded batch in canonical layout without
// applying the producer rules (crc 0), to drive the fast path.
func canonicalOf(t testing.TB, wire []byte) []byte {
	t.Helper()
	m := toMessage(t, wire)
	b := make([]byte, batch.HeaderSize)
	batch.PutHeader(b, batch.Header{
		BaseOffset: m.BaseOffset, PartitionLeaderEpoch: m.PartitionLeaderEpoch, Attributes: m.Attributes,
		LastOffsetDelta: m.LastOffsetDelta, BaseTimestamp: m.BaseTimestamp, MaxTimestamp: m.MaxTimestamp,
		ProducerID: m.ProducerId, ProducerEpoch: m.ProducerEpoch, BaseSequence: m.BaseSequence, RecordCount: int32(m.RecordCount),
	})
	for _, r := range m.Records {
		b = protowire.AppendTag(b, 12, protowire.BytesType)
		b = protowire.AppendBytes(b, marshal(t, r))
	}
	return b
}

func TestCanonicalizeMaxTimestamp(t *testing.T) {
	tests := []struct {
		name   string
		deltas []int64
		want   int64
	}{
		{"all base", []int64{0, 0}, baseTS},
		{"later last", []int64{0, 5, 10}, baseTS + 10},
		{"later middle", []int64{0, 50, -3, 7}, baseTS + 50},
		{"all earlier", []int64{-10, -3}, baseTS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &sluicev1.RecordBatch{BaseTimestamp: baseTS, MaxTimestamp: 1, RecordCount: uint32(len(tc.deltas)), LastOffsetDelta: int32(len(tc.deltas) - 1)}
			for i, d := range tc.deltas {
				m.Records = append(m.Records, &sluicev1.Record{TimestampDelta: d, OffsetDelta: int32(i), Value: []byte{byte(i)}})
			}
			for path, in := range map[string][]byte{"slow": marshal(t, m), "fast": canonicalOf(t, marshal(t, m))} {
				out, h, err := batch.Canonicalize(in)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if h.MaxTimestamp != tc.want || toMessage(t, out).MaxTimestamp != tc.want {
					t.Errorf("%s: max timestamp %d, want %d", path, h.MaxTimestamp, tc.want)
				}
			}
		})
	}
}

func TestCanonicalizeTruncated(t *testing.T) {
	good := build(t, batch.Producer{ID: 5, Epoch: 1, BaseSequence: 1}, 0, sampleRecords())
	inputs := map[string][]byte{
		"canonical":       good,
		"canonical crc=0": withHeader(t, good, func(h *batch.Header) {}),
		"proto.Marshal":   marshal(t, toMessage(t, withHeader(t, good, func(h *batch.Header) {}))),
		"reversed header": reorder(t, withHeader(t, good, func(h *batch.Header) {}), false),
		"reversed crc":    reorder(t, good, false),
	}
	for name, full := range inputs {
		for n := 0; n < len(full); n++ {
			in := clone(full[:n])
			var out []byte
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s truncated to %d: panic %v", name, n, r)
					}
				}()
				out, _, err = batch.Canonicalize(in)
			}()
			if err == nil {
				t.Fatalf("%s truncated to %d bytes: accepted (%x)", name, n, out)
			}
			if c := errs.Code(err); c != sluicev1.ErrorCode_CORRUPT_RECORD && c != sluicev1.ErrorCode_INVALID_RECORD {
				t.Fatalf("%s truncated to %d bytes: code %v (%v)", name, n, c, err)
			}
		}
	}
}

func TestVerifyDetectsFlips(t *testing.T) {
	good := build(t, batch.Producer{ID: 5, Epoch: 1, BaseSequence: 1}, batch.AttrTransactional, sampleRecords())
	if _, err := batch.Verify(good); err != nil {
		t.Fatal(err)
	}
	positions := []int{0, 9, 14} // tags before the CRC-covered range
	for i := batch.CRCStart - 5; i < len(good); i++ {
		positions = append(positions, i) // the CRC itself and everything it covers
	}
	for _, pos := range positions {
		for _, mask := range []byte{0x01, 0x80, 0xff, 0x5a} {
			b := clone(good)
			b[pos] ^= mask
			if _, err := batch.Verify(b); err == nil {
				t.Fatalf("flip 0x%02x at byte %d not detected", mask, pos)
			} else if c := errs.Code(err); c != sluicev1.ErrorCode_CORRUPT_RECORD {
				t.Fatalf("flip at byte %d: code %v", pos, c)
			}
		}
	}
	// Truncation and extension are detected too.
	for n := 0; n < len(good); n++ {
		if _, err := batch.Verify(good[:n]); err == nil {
			t.Fatalf("Verify accepted a batch truncated to %d bytes", n)
		}
	}
	if _, err := batch.Verify(append(clone(good), 0x62, 0x00)); err == nil {
		t.Fatal("Verify accepted an extra record entry")
	}
}

func TestPatchesKeepVerify(t *testing.T) {
	b := build(t, batch.PlainProducer, 0, sampleRecords())
	crc := batch.ComputeCRC(b)
	for _, off := range []int64{0, 1, 1 << 40, math.MaxInt64 - 10} {
		batch.SetBaseOffset(b, off)
		batch.SetPartitionLeaderEpoch(b, int32(off%1000))
		h, err := batch.Verify(b)
		if err != nil {
			t.Fatalf("after patching offset %d: %v", off, err)
		}
		if h.BaseOffset != off || h.PartitionLeaderEpoch != int32(off%1000) || h.CRC != crc {
			t.Errorf("header %+v after patching offset %d", h, off)
		}
		if h.NextOffset() != off+int64(len(sampleRecords())) {
			t.Errorf("NextOffset %d", h.NextOffset())
		}
		m := toMessage(t, b)
		if m.BaseOffset != off || m.PartitionLeaderEpoch != int32(off%1000) {
			t.Errorf("decoded base offset %d epoch %d", m.BaseOffset, m.PartitionLeaderEpoch)
		}
	}
	batch.SetMaxTimestamp(b, baseTS+1000)
	h, err := batch.Verify(b)
	if err != nil {
		t.Fatalf("after SetMaxTimestamp: %v", err)
	}
	if h.MaxTimestamp != baseTS+1000 {
		t.Errorf("max timestamp %d", h.MaxTimestamp)
	}
}

func TestBuilderAndForEachRecord(t *testing.T) {
	recs := sampleRecords()
	p := batch.Producer{ID: 9, Epoch: 2, BaseSequence: 40}
	var bld batch.Builder
	bld.Reset(baseTS)
	size := batch.HeaderSize
	for i, r := range recs {
		size += batch.RecordSize(r.ts-baseTS, int32(i), r.key, r.value, r.headers)
		bld.Add(r.ts, r.key, r.value, r.headers)
		if bld.Size() != size || bld.Count() != i+1 {
			t.Fatalf("after %d adds: Size %d Count %d, want %d %d", i+1, bld.Size(), bld.Count(), size, i+1)
		}
	}
	b := bld.Finish(p, batch.AttrTransactional)
	if len(b) != size {
		t.Fatalf("batch is %d bytes, want %d", len(b), size)
	}
	h, err := batch.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	want := batch.Header{
		CRC: h.CRC, Attributes: batch.AttrTransactional, LastOffsetDelta: int32(len(recs) - 1),
		BaseTimestamp: baseTS, MaxTimestamp: baseTS + 7, ProducerID: 9, ProducerEpoch: 2, BaseSequence: 40,
		RecordCount: int32(len(recs)),
	}
	if h != want {
		t.Errorf("header %+v\nwant   %+v", h, want)
	}
	if !h.IsTransactional() || h.IsControl() || h.LastSequence() != 43 {
		t.Errorf("IsTransactional %v IsControl %v LastSequence %d", h.IsTransactional(), h.IsControl(), h.LastSequence())
	}
	batch.SetBaseOffset(b, 500)
	i := 0
	err = batch.ForEachRecord(b, func(r batch.Record) error {
		checkRecord(t, fmt.Sprint("record ", i), r, 500+int64(i), recs[i])
		i++
		return nil
	})
	if err != nil || i != len(recs) {
		t.Fatalf("ForEachRecord: %v after %d records", err, i)
	}
	stop := errors.New("stop")
	i = 0
	if err := batch.ForEachRecord(b, func(batch.Record) error { i++; return stop }); err != stop || i != 1 {
		t.Errorf("ForEachRecord did not stop at fn's error: %v after %d", err, i)
	}

	// Finish hands the buffer out; the next batch does not share it.
	bld.Reset(baseTS)
	bld.Add(baseTS, nil, []byte("other"), nil)
	b2 := bld.Finish(batch.PlainProducer, 0)
	if _, err := batch.Verify(b); err != nil {
		t.Errorf("first batch damaged by reuse: %v", err)
	}
	if _, err := batch.Verify(b2); err != nil {
		t.Error(err)
	}
	bld.Reset(0)
	if bld.Finish(batch.PlainProducer, 0) != nil {
		t.Error("Finish on an empty builder returned a batch")
	}
}

func checkRecord(t *testing.T, what string, r batch.Record, off int64, want testRecord) {
	t.Helper()
	if r.Offset != off || r.Timestamp != want.ts || !bytes.Equal(r.Key, want.key) || !bytes.Equal(r.Value, want.value) {
		t.Errorf("%s: got offset %d ts %d key %q value %q; want %d %d %q %q", what, r.Offset, r.Timestamp, r.Key, r.Value, off, want.ts, want.key, want.value)
	}
	if len(r.Headers) != len(want.headers) {
		t.Fatalf("%s: %d headers, want %d", what, len(r.Headers), len(want.headers))
	}
	for j, h := range r.Headers {
		if h.Key != want.headers[j].Key || !bytes.Equal(h.Value, want.headers[j].Value) {
			t.Errorf("%s header %d: %q=%q, want %q=%q", what, j, h.Key, h.Value, want.headers[j].Key, want.headers[j].Value)
		}
	}
}

func TestFrames(t *testing.T) {
	b1 := build(t, batch.PlainProducer, 0, sampleRecords())
	b2 := build(t, batch.PlainProducer, 0, sampleRecords()[:1])
	big := build(t, batch.PlainProducer, 0, []testRecord{{ts: baseTS, value: bytes.Repeat([]byte("z"), 20000)}})
	batches := [][]byte{b1, b2, big}
	var seg []byte
	for _, b := range batches {
		before := len(seg)
		seg = batch.AppendFrame(seg, b)
		if len(seg)-before != batch.FrameSize(len(b)) {
			t.Fatalf("frame of %d bytes is %d bytes, FrameSize says %d", len(b), len(seg)-before, batch.FrameSize(len(b)))
		}
	}
	// A segment is a LogSegment message.
	var ls sluicev1.LogSegment
	if err := proto.Unmarshal(seg, &ls); err != nil || len(ls.Batches) != len(batches) {
		t.Fatalf("LogSegment decode: %v, %d batches", err, len(ls.Batches))
	}
	rest := seg
	for i, want := range batches {
		got, size, err := batch.NextFrame(rest)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) || size != batch.FrameSize(len(want)) {
			t.Fatalf("frame %d: size %d, batch mismatch", i, size)
		}
		rest = rest[size:]
	}
	if _, _, err := batch.NextFrame(rest); !errors.Is(err, batch.ErrShortFrame) {
		t.Errorf("NextFrame at end: %v, want ErrShortFrame", err)
	}
	for _, b := range batches {
		f := batch.AppendFrame(nil, b)
		for n := 0; n < len(f); n++ {
			if _, _, err := batch.NextFrame(f[:n]); !errors.Is(err, batch.ErrShortFrame) {
				t.Fatalf("frame truncated to %d of %d bytes: %v, want ErrShortFrame", n, len(f), err)
			}
		}
	}
	// Not a frame: wrong tag, overlong length varint, absurd length.
	bad := map[string][]byte{
		"tag":    {0x12, 0x01, 0x00},
		"varint": append([]byte{batch.FrameTag}, bytes.Repeat([]byte{0xff}, 11)...),
		"absurd": protowire.AppendVarint([]byte{batch.FrameTag}, 1<<40),
	}
	for name, f := range bad {
		_, _, err := batch.NextFrame(f)
		if err == nil || errors.Is(err, batch.ErrShortFrame) {
			t.Errorf("%s: %v, want a corruption error", name, err)
		} else if errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
			t.Errorf("%s: code %v", name, errs.Code(err))
		}
	}
}

func TestLastSequence(t *testing.T) {
	tests := []struct {
		base, lastDelta, want int32
	}{
		{-1, 5, -1},
		{0, 0, 0},
		{10, 4, 14},
		{math.MaxInt32 - 1, 2, 0}, // 3 records: MaxInt32-1, MaxInt32, 0
		{math.MaxInt32, 0, math.MaxInt32},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 5, 10, 4},
	}
	for _, tc := range tests {
		h := batch.Header{BaseSequence: tc.base, LastOffsetDelta: tc.lastDelta, RecordCount: tc.lastDelta + 1}
		if got := h.LastSequence(); got != tc.want {
			t.Errorf("LastSequence(base %d, delta %d) = %d, want %d", tc.base, tc.lastDelta, got, tc.want)
		}
	}
}

func TestParseHeaderLayout(t *testing.T) {
	b := make([]byte, batch.HeaderSize)
	h := batch.Header{
		BaseOffset: -2, PartitionLeaderEpoch: 3, CRC: 0xdeadbeef, Attributes: 0x38, LastOffsetDelta: 4,
		BaseTimestamp: -5, MaxTimestamp: 6, ProducerID: 7, ProducerEpoch: 8, BaseSequence: 9, RecordCount: 10,
	}
	batch.PutHeader(b, h)
	if got, err := batch.ParseHeader(b); err != nil || got != h {
		t.Fatalf("ParseHeader(PutHeader(h)) = %+v, %v", got, err)
	}
	// The positions documented in docs/record-format.md.
	tags := map[int]byte{0: 0x09, 9: 0x15, 14: 0x1d, 19: 0x25, 24: 0x2d, 29: 0x31, 38: 0x39, 47: 0x41, 56: 0x4d, 61: 0x55, 66: 0x5d}
	for pos, tag := range tags {
		if b[pos] != tag {
			t.Errorf("byte %d is 0x%02x, want tag 0x%02x", pos, b[pos], tag)
		}
	}
	if binary.LittleEndian.Uint32(b[15:]) != 0xdeadbeef {
		t.Error("crc is not at bytes 15..18")
	}
	m := toMessage(t, b)
	if m.BaseOffset != -2 || m.Crc != 0xdeadbeef || m.Attributes != 0x38 || m.BaseTimestamp != -5 || m.RecordCount != 10 || m.BaseSequence != 9 {
		t.Errorf("generated code decodes the header as %v", m)
	}
	if _, err := batch.ParseHeader(b[:batch.HeaderSize-1]); errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
		t.Errorf("short header: %v", err)
	}
}
