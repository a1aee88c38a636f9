package api_test

import (
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// idemBatch is a batch of n records from producer id/epoch with first
// sequence seq.
func idemBatch(id int64, epoch, seq int32, n int) []byte {
	var b batch.Builder
	b.Reset(1000)
	for i := 0; i < n; i++ {
		b.Add(1000, nil, []byte(fmt.Sprintf("p%d-s%d", id, int(seq)+i)), nil)
	}
	return b.Finish(batch.Producer{ID: id, Epoch: epoch, BaseSequence: seq}, 0)
}

func initProducerID(t *testing.T, tn *testNode) (int64, int32) {
	t.Helper()
	resp, err := sluicev1.NewTransactionsClient(tn.conn).InitProducerId(ctx(t), &sluicev1.InitProducerIdRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v %s", resp.ErrorCode, resp.ErrorMessage)
	}
	return resp.ProducerId, resp.ProducerEpoch
}

func TestInitProducerID(t *testing.T) {
	tn := startNode(t, t.TempDir())
	seen := map[int64]bool{}
	for i := 0; i < 50; i++ {
		id, epoch := initProducerID(t, tn)
		if id < 1000 || epoch != 0 || seen[id] {
			t.Fatalf("InitProducerId #%d = %d/%d (seen before: %v)", i, id, epoch, seen[id])
		}
		seen[id] = true
	}
	// With a transactional id the transaction coordinator answers:
	// transactions_test.go.
}

// TestIdempotentSequenceRules replays Kafka's behaviour against a real
// broker: duplicates return the original offset, gaps are refused, and a
// batch that fell out of the 5-batch window is out of order.
func TestIdempotentSequenceRules(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	id, epoch := initProducerID(t, tn)
	steps := []struct {
		seq, n int32
		code   sluicev1.ErrorCode
		offset int64
	}{
		{0, 3, sluicev1.ErrorCode_NONE, 0},
		{0, 3, sluicev1.ErrorCode_NONE, 0}, // duplicate: original offset, nothing written
		{5, 3, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER, -1},
		{3, 3, sluicev1.ErrorCode_NONE, 3},
		{6, 3, sluicev1.ErrorCode_NONE, 6},
		{9, 3, sluicev1.ErrorCode_NONE, 9},
		{12, 3, sluicev1.ErrorCode_NONE, 12},
		{15, 3, sluicev1.ErrorCode_NONE, 15},
		{0, 3, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER, -1}, // fell out of the window
	}
	for i, s := range steps {
		r := tn.produceRaw("t", 0, idemBatch(id, epoch, s.seq, int(s.n)))
		if r.ErrorCode != s.code || r.BaseOffset != s.offset {
			t.Fatalf("step %d (seq %d): %v %s offset %d; want %v offset %d", i, s.seq, r.ErrorCode, r.ErrorMessage, r.BaseOffset, s.code, s.offset)
		}
	}
	part, err := tn.node.Replicas().Replica("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if end := part.LogEndOffset(); end != 18 {
		t.Fatalf("log end %d, want 18", end)
	}
	res, err := part.Read(0, 1<<20, 18)
	if err != nil || len(res.Batches) != 6 {
		t.Fatalf("log holds %d batches (%v), want 6", len(res.Batches), err)
	}
	// A lower epoch is fenced; a higher epoch must start at sequence 0.
	if r := tn.produceRaw("t", 0, idemBatch(id, epoch+1, 3, 1)); r.ErrorCode != sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER {
		t.Errorf("new epoch at seq 3: %v", r)
	}
	if r := tn.produceRaw("t", 0, idemBatch(id, epoch+1, 0, 1)); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 18 {
		t.Errorf("new epoch at seq 0: %v", r)
	}
	if r := tn.produceRaw("t", 0, idemBatch(id, epoch, 18, 1)); r.ErrorCode != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
		t.Errorf("old epoch after a bump: %v", r)
	}
}

// TestIdempotenceSurvivesCrash: producer state is rebuilt after a crash, so
// a retried batch is still recognised.
func TestIdempotenceSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	tn := startNode(t, dir)
	tn.createTopic("t", 1, nil)
	id, epoch := initProducerID(t, tn)
	for seq := int32(0); seq < 12; seq += 3 {
		if r := tn.produceRaw("t", 0, idemBatch(id, epoch, seq, 3)); r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatal(r)
		}
	}
	tn.conn.Close()
	tn.node.Abort() // like kill -9: no clean shutdown, no snapshot at close
	tn2 := startNode(t, dir)
	if r := tn2.produceRaw("t", 0, idemBatch(id, epoch, 9, 3)); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 9 {
		t.Fatalf("retry after the crash: %v, want the original offset 9", r)
	}
	if r := tn2.produceRaw("t", 0, idemBatch(id, epoch, 12, 3)); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != 12 {
		t.Fatalf("next batch after the crash: %v", r)
	}
	if r := tn2.produceRaw("t", 0, idemBatch(id, epoch, 20, 1)); r.ErrorCode != sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER {
		t.Fatalf("gap after the crash: %v", r)
	}
}
