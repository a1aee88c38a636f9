package api_test

import (
	"fmt"
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// simpleBatch is a simple-produce batch (decision 43) as a client in any
// language fills it from the .proto alone: no record_count,
// last_offset_delta, crc or offset deltas.
func simpleBatch(producerID int64, epoch, seq int32, values ...string) *sluicev1.RecordBatch {
	b := &sluicev1.RecordBatch{BaseTimestamp: 5000, ProducerId: producerID, ProducerEpoch: epoch, BaseSequence: seq}
	for i, v := range values {
		b.Records = append(b.Records, &sluicev1.Record{TimestampDelta: int64(i), Key: []byte("k"), Value: []byte(v)})
	}
	return b
}

func (tn *testNode) produceMessage(topic string, b *sluicev1.RecordBatch) *sluicev1.PartitionProduceResponse {
	tn.t.Helper()
	resp, err := tn.log.Produce(ctx(tn.t), &sluicev1.ProduceRequest{Topics: []*sluicev1.TopicProduceData{{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: b}}}}})
	if err != nil {
		tn.t.Fatal(err)
	}
	return resp.Topics[0].Partitions[0]
}

// Simple produce end to end: the broker fills the bookkeeping, the
// producer's sequences count the records it filled in (so a retried simple
// batch is recognised as a duplicate and answered with its original
// offset), and a fetch returns ordinary canonical batches.
func TestSimpleProduceRoundTrip(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("simple", 1, nil)
	id, epoch := initProducerID(t, tn)

	if r := tn.produceMessage("simple", simpleBatch(id, epoch, 0, "a", "b", "c")); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 0 {
		t.Fatalf("first simple batch: %v", r)
	}
	if r := tn.produceMessage("simple", simpleBatch(id, epoch, 0, "a", "b", "c")); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 0 {
		t.Fatalf("retried simple batch: %v, want NONE at its original offset 0", r)
	}
	if r := tn.produceMessage("simple", simpleBatch(id, epoch, 3, "d", "e")); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 3 {
		t.Fatalf("next simple batch (sequence 3): %v", r)
	}
	if r := tn.produceMessage("simple", simpleBatch(-1, 0, 0, "plain")); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 5 {
		t.Fatalf("simple batch of a plain producer: %v", r)
	}
	half := simpleBatch(id, epoch, 6, "x", "y")
	half.Records[1].OffsetDelta = 1 // deltas filled, count not: refused, not guessed
	if r := tn.produceMessage("simple", half); r.ErrorCode != sluicev1.ErrorCode_INVALID_RECORD {
		t.Fatalf("half-filled batch: %v, want INVALID_RECORD", r)
	}

	pd := tn.fetch("simple", 0, 0, 0)
	if got, want := fmt.Sprint(values(pd, 0)), "[a b c d e plain]"; got != want {
		t.Fatalf("fetched %s, want %s", got, want)
	}
	for _, b := range pd.Batches {
		if b.Crc == 0 || b.RecordCount != uint32(len(b.Records)) || b.LastOffsetDelta != int32(len(b.Records)-1) {
			t.Errorf("fetched batch at %d: crc %08x, record_count %d, last_offset_delta %d for %d records", b.BaseOffset, b.Crc, b.RecordCount, b.LastOffsetDelta, len(b.Records))
		}
		for i, r := range b.Records {
			if r.OffsetDelta != int32(i) || r.TimestampDelta != int64(i) {
				t.Errorf("batch at %d record %d: offset_delta %d, timestamp_delta %d", b.BaseOffset, i, r.OffsetDelta, r.TimestampDelta)
			}
		}
	}
}
