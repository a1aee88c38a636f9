package txn

import (
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A whole TV1 transaction through the coordinator (decision 69): the
// client's AddPartitionsToTxn and AddOffsetsToTxn add (the latter a
// __consumer_offsets partition), the partition leaders' verify-only
// requests pass for those partitions and refuse another, EndTxn answers
// the same epoch, and the markers carry that epoch and TV1 — for a commit
// and then an abort at one epoch. A retried EndTxn after Complete answers
// as Kafka's TV1 does, writing nothing.
func TestTV1CommitAndAbortThroughTheCoordinator(t *testing.T) {
	e := newTxnEnv(t)
	c := e.coordinator(nil)
	e.lead(c, 0, 7)
	const id = "tv1"
	tp := TopicPartition{Topic: "orders", Partition: 3}
	offsets := TopicPartition{Topic: "__consumer_offsets", Partition: 17}
	other := TopicPartition{Topic: "orders", Partition: 4}

	pe := must[ProducerIDAndEpoch](t, "InitProducerID")(initPID(c, id, 60000))
	add := func(verify bool, tps ...TopicPartition) error {
		return c.AddPartitions(bg, AddPartitionsRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch,
			Partitions: tps, ClientVersion: TV1, VerifyOnly: verify})
	}
	end := func(commit bool) (ProducerIDAndEpoch, error) {
		return c.EndTxn(bg, EndTxnRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, Commit: commit, ClientVersion: TV1})
	}
	for i, commit := range []bool{true, false} {
		e.clock.Advance(10 * time.Millisecond)
		wantErrCode(t, "produce before AddPartitionsToTxn", add(true, tp), sluicev1.ErrorCode_INVALID_TXN_STATE)
		if err := add(false, tp); err != nil {
			t.Fatalf("txn %d: AddPartitionsToTxn: %v", i, err)
		}
		if err := add(false, offsets); err != nil {
			t.Fatalf("txn %d: AddOffsetsToTxn: %v", i, err)
		}
		records := len(e.log.records(t, 0))
		if err := add(true, tp); err != nil {
			t.Fatalf("txn %d: the leader's verification: %v", i, err)
		}
		if err := add(true, offsets); err != nil {
			t.Fatalf("txn %d: the group coordinator's verification: %v", i, err)
		}
		wantErrCode(t, "verify a partition not added", add(true, other), sluicev1.ErrorCode_INVALID_TXN_STATE)
		if got := len(e.log.records(t, 0)); got != records {
			t.Fatalf("txn %d: verifications wrote %d records", i, got-records)
		}
		next := must[ProducerIDAndEpoch](t, "EndTxn")(end(commit))
		if next != pe {
			t.Fatalf("txn %d: EndTxn answered %+v, want the same %+v (TV1)", i, next, pe)
		}
		want := CompleteAbort
		if commit {
			want = CompleteCommit
		}
		m := waitState(t, c, id, want)
		if m.ProducerEpoch != pe.ProducerEpoch || m.ClientVersion != TV1 {
			t.Fatalf("txn %d: completed at %+v", i, m)
		}
		records = len(e.log.records(t, 0))
		if got := must[ProducerIDAndEpoch](t, "EndTxn retried")(end(commit)); got != pe {
			t.Fatalf("txn %d: retried EndTxn answered %+v", i, got)
		}
		_, err := end(!commit)
		wantErrCode(t, "EndTxn with the opposite outcome", err, sluicev1.ErrorCode_INVALID_TXN_STATE)
		if got := len(e.log.records(t, 0)); got != records {
			t.Fatalf("txn %d: retried EndTxns wrote %d records", i, got-records)
		}
	}
	rounds := e.markers.calls()
	if len(rounds) != 2 {
		t.Fatalf("%d marker rounds, want 2", len(rounds))
	}
	for i, r := range rounds {
		if r.ProducerID != pe.ProducerID || r.ProducerEpoch != pe.ProducerEpoch || r.ClientVersion != TV1 ||
			r.Commit != (i == 0) || len(r.Partitions) != 2 || r.CoordinatorEpoch != 7 {
			t.Errorf("marker round %d: %+v, want producer %d epoch %d TV1 to both partitions", i, r, pe.ProducerID, pe.ProducerEpoch)
		}
	}
}
