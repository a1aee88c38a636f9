package batch_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The server views in proto/sluice/internal/v1/view.proto must be
// wire-compatible with the public messages they stand for.

func produceBatches() []*sluicev1.RecordBatch {
	return []*sluicev1.RecordBatch{
		{
			BaseTimestamp: baseTS, LastOffsetDelta: 2, RecordCount: 3,
			ProducerId: 42, ProducerEpoch: 3, BaseSequence: 17, Attributes: batch.AttrTransactional,
			Records: []*sluicev1.Record{
				{TimestampDelta: 0, OffsetDelta: 0, Key: []byte("k0"), Value: []byte("v0"),
					Headers: []*sluicev1.Header{{Key: "content-type", Value: []byte("text/plain")}, {Key: "trace", Value: []byte{0, 1, 2}}}},
				{TimestampDelta: 15, OffsetDelta: 1, Value: []byte("no key")},
				{TimestampDelta: -4, OffsetDelta: 2, Key: []byte("k2"), Value: bytes.Repeat([]byte("x"), 200),
					Headers: []*sluicev1.Header{{Key: "only-key"}, {Value: []byte("only value")}}},
			},
		},
		{
			// A plain producer that leaves the producer fields absent.
			BaseTimestamp: baseTS + 1000, RecordCount: 1,
			Records: []*sluicev1.Record{{Key: []byte("solo"), Value: []byte("1")}},
		},
		{
			BaseTimestamp: baseTS + 2000, MaxTimestamp: 123 /* ignored */, LastOffsetDelta: 1, RecordCount: 2,
			ProducerId: -1, ProducerEpoch: -1, BaseSequence: -1,
			Records: []*sluicev1.Record{
				{TimestampDelta: 3, Value: []byte("a"), Headers: []*sluicev1.Header{{Key: "h", Value: []byte("1")}}},
				{TimestampDelta: 1, OffsetDelta: 1, Value: []byte("b")},
			},
		},
	}
}

func TestWireCompatProduceRequest(t *testing.T) {
	bs := produceBatches()
	req := &sluicev1.ProduceRequest{
		TransactionalId: "txn-1",
		Acks:            sluicev1.Acks_ACKS_LEADER,
		TimeoutMs:       1500,
		Topics: []*sluicev1.TopicProduceData{
			{Name: "orders", Partitions: []*sluicev1.PartitionProduceData{
				{Partition: 0, Batch: bs[0]},
				{Partition: 3, Batch: bs[1]},
			}},
			{Name: "events", Partitions: []*sluicev1.PartitionProduceData{
				{Partition: 7, Batch: bs[2]},
			}},
		},
	}
	wire := marshal(t, req)
	var view internalv1.ProduceRequestView
	if err := proto.Unmarshal(wire, &view); err != nil {
		t.Fatal(err)
	}
	if view.TransactionalId != "txn-1" || view.Acks != sluicev1.Acks_ACKS_LEADER || view.TimeoutMs != 1500 {
		t.Errorf("view header: %q %v %d", view.TransactionalId, view.Acks, view.TimeoutMs)
	}
	if len(view.Topics) != len(req.Topics) {
		t.Fatalf("%d topics, want %d", len(view.Topics), len(req.Topics))
	}
	if len(view.ProtoReflect().GetUnknown()) != 0 {
		t.Error("view has unknown fields")
	}
	for i, tp := range req.Topics {
		vt := view.Topics[i]
		if vt.Name != tp.Name || len(vt.Partitions) != len(tp.Partitions) {
			t.Fatalf("topic %d: %q with %d partitions, want %q with %d", i, vt.Name, len(vt.Partitions), tp.Name, len(tp.Partitions))
		}
		for j, pp := range tp.Partitions {
			vp := vt.Partitions[j]
			if vp.Partition != pp.Partition {
				t.Errorf("%s[%d]: partition %d, want %d", tp.Name, j, vp.Partition, pp.Partition)
			}
			var got sluicev1.RecordBatch
			if err := proto.Unmarshal(vp.Batch, &got); err != nil {
				t.Fatalf("%s/%d: batch bytes do not decode: %v", tp.Name, pp.Partition, err)
			}
			if !proto.Equal(&got, pp.Batch) {
				t.Errorf("%s/%d: batch decodes as %v, want %v", tp.Name, pp.Partition, &got, pp.Batch)
			}
			canon, h, err := batch.Canonicalize(bytes.Clone(vp.Batch))
			if err != nil {
				t.Fatalf("%s/%d: Canonicalize: %v", tp.Name, pp.Partition, err)
			}
			if _, err := batch.Verify(canon); err != nil {
				t.Errorf("%s/%d: Verify: %v", tp.Name, pp.Partition, err)
			}
			if h.RecordCount != int32(pp.Batch.RecordCount) || h.BaseTimestamp != pp.Batch.BaseTimestamp {
				t.Errorf("%s/%d: header %+v", tp.Name, pp.Partition, h)
			}
			if pp.Batch.ProducerId > 0 && (h.ProducerID != pp.Batch.ProducerId || h.ProducerEpoch != pp.Batch.ProducerEpoch || h.BaseSequence != pp.Batch.BaseSequence) {
				t.Errorf("%s/%d: producer %d/%d/%d", tp.Name, pp.Partition, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
			}
			compareRecords(t, tp.Name, canon, pp.Batch)
			// The canonical form is still a RecordBatch with the same records.
			var again sluicev1.RecordBatch
			if err := proto.Unmarshal(canon, &again); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&sluicev1.RecordBatch{Records: again.Records}, &sluicev1.RecordBatch{Records: pp.Batch.Records}) {
				t.Errorf("%s/%d: canonical records differ", tp.Name, pp.Partition)
			}
		}
	}
}

// compareRecords checks that ForEachRecord on canonical yields want's records.
func compareRecords(t *testing.T, what string, canonical []byte, want *sluicev1.RecordBatch) {
	t.Helper()
	i := 0
	err := batch.ForEachRecord(canonical, func(r batch.Record) error {
		if i >= len(want.Records) {
			t.Errorf("%s: extra record %d", what, i)
			i++
			return nil
		}
		w := want.Records[i]
		if r.Offset != want.BaseOffset+int64(w.OffsetDelta) || r.Timestamp != want.BaseTimestamp+w.TimestampDelta {
			t.Errorf("%s record %d: offset %d ts %d, want %d %d", what, i, r.Offset, r.Timestamp, want.BaseOffset+int64(w.OffsetDelta), want.BaseTimestamp+w.TimestampDelta)
		}
		if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) {
			t.Errorf("%s record %d: key %q value %q, want %q %q", what, i, r.Key, r.Value, w.Key, w.Value)
		}
		if len(r.Headers) != len(w.Headers) {
			t.Errorf("%s record %d: %d headers, want %d", what, i, len(r.Headers), len(w.Headers))
		} else {
			for j, h := range r.Headers {
				if h.Key != w.Headers[j].Key || !bytes.Equal(h.Value, w.Headers[j].Value) {
					t.Errorf("%s record %d header %d: %q=%q, want %q=%q", what, i, j, h.Key, h.Value, w.Headers[j].Key, w.Headers[j].Value)
				}
			}
		}
		i++
		return nil
	})
	if err != nil {
		t.Errorf("%s: ForEachRecord: %v", what, err)
	}
	if i != len(want.Records) {
		t.Errorf("%s: %d records, want %d", what, i, len(want.Records))
	}
}

func TestWireCompatFetchResponse(t *testing.T) {
	recsA := sampleRecords()
	a := build(t, batch.Producer{ID: 8, Epoch: 1, BaseSequence: 0}, batch.AttrTransactional, recsA)
	batch.SetBaseOffset(a, 100)
	batch.SetPartitionLeaderEpoch(a, 4)
	recsB := []testRecord{{ts: baseTS + 50, key: []byte("b"), value: []byte("bee"), headers: []batch.RecordHeader{{Key: "x", Value: []byte("y")}}}}
	b := build(t, batch.PlainProducer, 0, recsB)
	batch.SetBaseOffset(b, 100+int64(len(recsA)))
	batch.SetPartitionLeaderEpoch(b, 5)
	c := build(t, batch.PlainProducer, 0, sampleRecords()[:2])
	batch.SetBaseOffset(c, 7)

	view := &internalv1.FetchResponseView{Topics: []*internalv1.FetchableTopicResponseView{
		{Name: "orders", Partitions: []*internalv1.PartitionDataView{
			{
				Partition: 2, HighWatermark: 110, LastStableOffset: 104, LogStartOffset: 3,
				AbortedTransactions: []*sluicev1.AbortedTransaction{{ProducerId: 8, FirstOffset: 100}},
				NextFetchOffset:     105,
				CurrentLeader:       &sluicev1.LeaderHint{LeaderId: 1, LeaderEpoch: 5, Address: "broker-1:9092"},
				Batches:             [][]byte{a, b},
			},
			{Partition: 3, ErrorCode: sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, ErrorMessage: "moved", CurrentLeader: &sluicev1.LeaderHint{LeaderId: 2}},
		}},
		{Name: "events", Partitions: []*internalv1.PartitionDataView{{Partition: 0, HighWatermark: 9, NextFetchOffset: 9, Batches: [][]byte{c}}}},
	}}
	wire := marshal(t, view)
	var resp sluicev1.FetchResponse
	if err := proto.Unmarshal(wire, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.ProtoReflect().GetUnknown()) != 0 {
		t.Error("response has unknown fields")
	}
	if len(resp.Topics) != 2 || resp.Topics[0].Name != "orders" || resp.Topics[1].Name != "events" {
		t.Fatalf("topics %v", resp.Topics)
	}
	p := resp.Topics[0].Partitions
	if len(p) != 2 {
		t.Fatalf("%d partitions", len(p))
	}
	p0 := p[0]
	if p0.Partition != 2 || p0.ErrorCode != sluicev1.ErrorCode_NONE || p0.HighWatermark != 110 || p0.LastStableOffset != 104 ||
		p0.LogStartOffset != 3 || p0.NextFetchOffset != 105 {
		t.Errorf("partition fields %v", p0)
	}
	if len(p0.AbortedTransactions) != 1 || p0.AbortedTransactions[0].ProducerId != 8 || p0.AbortedTransactions[0].FirstOffset != 100 {
		t.Errorf("aborted transactions %v", p0.AbortedTransactions)
	}
	if !proto.Equal(p0.CurrentLeader, &sluicev1.LeaderHint{LeaderId: 1, LeaderEpoch: 5, Address: "broker-1:9092"}) {
		t.Errorf("leader %v", p0.CurrentLeader)
	}
	if p[1].Partition != 3 || p[1].ErrorCode != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER || p[1].ErrorMessage != "moved" || p[1].CurrentLeader.GetLeaderId() != 2 || len(p[1].Batches) != 0 {
		t.Errorf("error partition %v", p[1])
	}
	if len(p0.Batches) != 2 {
		t.Fatalf("%d batches", len(p0.Batches))
	}
	checkDecoded(t, "orders/2 batch 0", p0.Batches[0], a, recsA)
	checkDecoded(t, "orders/2 batch 1", p0.Batches[1], b, recsB)
	ev := resp.Topics[1].Partitions
	if len(ev) != 1 || ev[0].HighWatermark != 9 || len(ev[0].Batches) != 1 {
		t.Fatalf("events partitions %v", ev)
	}
	checkDecoded(t, "events/0 batch 0", ev[0].Batches[0], c, sampleRecords()[:2])

	// Re-encoding the public message gives the view's bytes back (the
	// batches are canonical, which is also proto.Marshal's field order
	// when every header field is non-zero).
	var back internalv1.FetchResponseView
	if err := proto.Unmarshal(marshal(t, &resp), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Topics) != 2 || len(back.Topics[0].Partitions[0].Batches) != 2 {
		t.Fatal("round trip lost batches")
	}
	for i, raw := range back.Topics[0].Partitions[0].Batches {
		canon, _, err := batch.Canonicalize(raw)
		if err != nil {
			t.Fatalf("round-tripped batch %d: %v", i, err)
		}
		if want := view.Topics[0].Partitions[0].Batches[i]; !bytes.Equal(canon, want) {
			t.Errorf("round-tripped batch %d canonicalizes to different bytes", i)
		}
	}
}

// checkDecoded checks a RecordBatch decoded by the generated code against
// the canonical batch it came from and the records put in it.
func checkDecoded(t *testing.T, what string, m *sluicev1.RecordBatch, canonical []byte, recs []testRecord) {
	t.Helper()
	h, err := batch.Verify(canonical)
	if err != nil {
		t.Fatal(err)
	}
	if m.BaseOffset != h.BaseOffset || m.PartitionLeaderEpoch != h.PartitionLeaderEpoch || m.Crc != h.CRC ||
		m.Attributes != h.Attributes || m.LastOffsetDelta != h.LastOffsetDelta || m.BaseTimestamp != h.BaseTimestamp ||
		m.MaxTimestamp != h.MaxTimestamp || m.ProducerId != h.ProducerID || m.ProducerEpoch != h.ProducerEpoch ||
		m.BaseSequence != h.BaseSequence || int32(m.RecordCount) != h.RecordCount {
		t.Errorf("%s: decoded header %v, want %+v", what, m, h)
	}
	if len(m.Records) != len(recs) {
		t.Fatalf("%s: %d records, want %d", what, len(m.Records), len(recs))
	}
	maxTS := m.BaseTimestamp
	for i, r := range m.Records {
		w := recs[i]
		if r.OffsetDelta != int32(i) || m.BaseTimestamp+r.TimestampDelta != w.ts || !bytes.Equal(r.Key, w.key) || !bytes.Equal(r.Value, w.value) {
			t.Errorf("%s record %d: %v, want %+v", what, i, r, w)
		}
		maxTS = max(maxTS, w.ts)
		if len(r.Headers) != len(w.headers) {
			t.Errorf("%s record %d: %d headers, want %d", what, i, len(r.Headers), len(w.headers))
			continue
		}
		for j, hd := range r.Headers {
			if hd.Key != w.headers[j].Key || !bytes.Equal(hd.Value, w.headers[j].Value) {
				t.Errorf("%s record %d header %d: %v", what, i, j, hd)
			}
		}
	}
	if m.MaxTimestamp != maxTS {
		t.Errorf("%s: max timestamp %d, want %d", what, m.MaxTimestamp, maxTS)
	}
	compareRecords(t, what, canonical, m)
}

// The Builder writes each record exactly as proto.Marshal would.
func TestBuilderRecordBytesMatchProtoMarshal(t *testing.T) {
	recs := append(sampleRecords(),
		testRecord{ts: baseTS},                         // empty record
		testRecord{ts: baseTS - 1<<40, key: []byte{0}}, // large negative delta
		testRecord{ts: baseTS + 1<<50, value: bytes.Repeat([]byte("q"), 70000), headers: []batch.RecordHeader{{}, {Key: "ü"}}},
	)
	b := build(t, batch.PlainProducer, 0, recs)
	rest := b[batch.HeaderSize:]
	for i, r := range recs {
		if rest[0] != 0x62 {
			t.Fatalf("record %d: entry tag 0x%02x", i, rest[0])
		}
		body, n := protowire.ConsumeBytes(rest[1:])
		if n < 0 {
			t.Fatalf("record %d: bad length", i)
		}
		m := &sluicev1.Record{TimestampDelta: r.ts - baseTS, OffsetDelta: int32(i), Key: r.key, Value: r.value}
		for _, h := range r.headers {
			m.Headers = append(m.Headers, &sluicev1.Header{Key: h.Key, Value: h.Value})
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(body, want) {
			t.Errorf("record %d:\nbuilder       %x\nproto.Marshal %x", i, body, want)
		}
		rest = rest[1+n:]
	}
	if len(rest) != 0 {
		t.Errorf("%d trailing bytes", len(rest))
	}
}
