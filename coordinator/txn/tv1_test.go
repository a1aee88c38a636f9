package txn

import (
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The TV1 side of the core (decision 69): a client that adds its own
// partitions and keeps one epoch across transactions, beside TV2.

func (c *fakeCoordinator) addV1(id string, pid int64, epoch int16, tps ...TopicPartition) Result {
	return c.run(func(int64) Result {
		return AddPartitions(c.txns[id], AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, ClientVersion: TV1, Partitions: tps}, c.now)
	})
}

func (c *fakeCoordinator) verify(id string, pid int64, epoch int16, tps ...TopicPartition) Result {
	return c.run(func(int64) Result {
		return AddPartitions(c.txns[id], AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, VerifyOnly: true, Partitions: tps}, c.now)
	})
}

func (c *fakeCoordinator) endV1(id string, pid int64, epoch int16, commit bool) Result {
	return c.run(func(n int64) Result {
		return EndTxn(c.txns[id], EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, NewProducerID: n, ClientVersion: TV1}, c.now)
	})
}

// wantNothingWritten fails if c wrote a record since n records.
func wantNothingWritten(t *testing.T, c *fakeCoordinator, n int, what string) {
	t.Helper()
	if len(c.log) != n {
		t.Fatalf("%s wrote %s", what, stateLog(c.log[n:]))
	}
}

// TV1 commit, abort, commit at one epoch: AddPartitionsToTxn from the
// client opens each transaction, the partition leader's verification
// changes nothing, EndTxn prepares and completes at the same epoch and
// answers it, and the producer goes on at that epoch.
func TestTV1CommitAbortCommitAtOneEpoch(t *testing.T) {
	const id = "tv1-txn"
	pid := int64(1000)
	c := newFakeCoordinator(t, pid)
	wantAnswer(t, "initTransactions", c.initPID(id, 0, 0), pid, 0)
	for i, commit := range []bool{true, false, true} {
		c.tick(10 * time.Millisecond)
		n := len(c.log)
		wantCode(t, "produce before AddPartitionsToTxn", c.verify(id, pid, 0, tp0), sluicev1.ErrorCode_INVALID_TXN_STATE)
		wantNothingWritten(t, c, n, "a refused verification")
		wantAnswer(t, "AddPartitionsToTxn", c.addV1(id, pid, 0, tp0), pid, 0)
		if m := c.txns[id]; m.State != Ongoing || m.ClientVersion != TV1 || m.ProducerEpoch != 0 {
			t.Fatalf("transaction %d: %+v", i, m)
		}
		n = len(c.log)
		wantAnswer(t, "produce verified", c.verify(id, pid, 0, tp0), pid, 0)
		wantAnswer(t, "AddPartitionsToTxn again", c.addV1(id, pid, 0, tp0), pid, 0)
		wantNothingWritten(t, c, n, "a verification or a repeated add")
		r := c.endV1(id, pid, 0, commit)
		wantAnswer(t, "EndTxn", r, pid, 0)
		if !r.SendMarkers || r.Write.ProducerEpoch != 0 || r.Write.ClientVersion != TV1 {
			t.Fatalf("EndTxn must prepare at the same epoch, markers owed: %+v", r.Write)
		}
		wantCode(t, "EndTxn while the markers are written", c.endV1(id, pid, 0, commit), sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
		c.complete(id)
		if m := c.txns[id]; m.ProducerEpoch != 0 || len(m.Partitions) != 0 {
			t.Fatalf("complete moved the epoch or kept partitions: %+v", m)
		}
		// The TV1 retry of EndTxn after Complete: same outcome NONE, the
		// opposite INVALID_TXN_STATE; nothing written.
		n = len(c.log)
		wantAnswer(t, "EndTxn retried", c.endV1(id, pid, 0, commit), pid, 0)
		wantCode(t, "EndTxn with the opposite outcome", c.endV1(id, pid, 0, !commit), sluicev1.ErrorCode_INVALID_TXN_STATE)
		wantCode(t, "produce after the end", c.verify(id, pid, 0, tp0), sluicev1.ErrorCode_INVALID_TXN_STATE)
		wantNothingWritten(t, c, n, "a retried EndTxn")
	}
	for _, m := range c.log {
		if m.ProducerEpoch != 0 {
			t.Errorf("%v written at epoch %d, a TV1 transaction stays at 0", m.State, m.ProducerEpoch)
		}
	}
	traceGolden(t, "trace-tv1-commit_abort_commit.golden", c.log)
}

// The TV1 error cases, each writing nothing: an EndTxn with a stale
// epoch, an EndTxn with no transaction open, an EndTxn from another
// producer id, verification of a partition not in the transaction, and
// verification at a stale epoch or another producer id.
func TestTV1Refusals(t *testing.T) {
	const id = "tv1-refusals"
	pid := int64(1000)
	c := newFakeCoordinator(t, pid)
	wantAnswer(t, "init", c.initPID(id, 0, 0), pid, 0)
	wantAnswer(t, "init again", c.initPID(id, 0, 0), pid, 1)
	n := len(c.log)
	wantCode(t, "EndTxn with nothing open", c.endV1(id, pid, 1, true), sluicev1.ErrorCode_INVALID_TXN_STATE)
	wantNothingWritten(t, c, n, "EndTxn with nothing open")
	wantAnswer(t, "AddPartitionsToTxn", c.addV1(id, pid, 1, tp0), pid, 1)
	n = len(c.log)
	for _, tc := range []struct {
		what string
		r    Result
		want sluicev1.ErrorCode
	}{
		{"EndTxn at a stale epoch", c.endV1(id, pid, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED},
		{"EndTxn at a newer epoch", c.endV1(id, pid, 2, true), sluicev1.ErrorCode_NOT_COORDINATOR},
		{"EndTxn of another producer id", c.endV1(id, pid+1, 1, true), sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING},
		{"AddPartitionsToTxn at a stale epoch", c.addV1(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED},
		{"verify a partition not in the transaction", c.verify(id, pid, 1, tp0, TopicPartition{Topic: "t", Partition: 1}), sluicev1.ErrorCode_INVALID_TXN_STATE},
		{"verify at a stale epoch", c.verify(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED},
		{"verify another producer id", c.verify(id, pid+1, 1, tp0), sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING},
		{"verify an unknown id", c.verify("nobody", pid, 1, tp0), sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING},
	} {
		wantCode(t, tc.what, tc.r, tc.want)
		wantNothingWritten(t, c, n, tc.what)
	}
	// AddOffsetsToTxn is AddPartitions with the group's
	// __consumer_offsets partition: nothing special about the topic.
	off := TopicPartition{Topic: "__consumer_offsets", Partition: 17}
	wantAnswer(t, "AddOffsetsToTxn", c.addV1(id, pid, 1, off), pid, 1)
	wantAnswer(t, "TxnOffsetCommit verified", c.verify(id, pid, 1, off), pid, 1)
	if m := c.txns[id]; len(m.Partitions) != 2 {
		t.Fatalf("partitions %v", m.Partitions)
	}
}

// A TV2 client fences a TV1 one: its InitProducerId aborts the open TV1
// transaction at the data's epoch + 1 (the markers pass TV1's rule, and
// fence the old producer at every partition), keeping the aborted
// transaction's version for its markers; the TV1 producer's EndTxn, its
// AddPartitionsToTxn and its leaders' verifications are refused with
// Kafka's codes and write nothing; the TV2 producer then commits with
// its epoch bump.
func TestTV2FencesTV1(t *testing.T) {
	const id = "mixed"
	pid := int64(1000)
	c := newFakeCoordinator(t, pid)
	wantAnswer(t, "TV1 init", c.initPID(id, 0, 0), pid, 0)
	wantAnswer(t, "TV1 AddPartitionsToTxn", c.addV1(id, pid, 0, tp0), pid, 0)
	r := c.initPID(id, 0, 0)
	wantCode(t, "TV2 init", r, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if w := r.Write; w == nil || w.State != PrepareAbort || w.ProducerEpoch != 1 || w.ClientVersion != TV1 || !r.SendMarkers {
		t.Fatalf("the fence must abort the TV1 transaction at epoch 1 with TV1 markers: %+v", r.Write)
	}
	c.complete(id)
	wantAnswer(t, "TV2 init retried", c.initPID(id, 0, 0), pid, 2)
	n := len(c.log)
	wantCode(t, "TV1 commit", c.endV1(id, pid, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "TV1 AddPartitionsToTxn", c.addV1(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "TV1 produce verified", c.verify(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantNothingWritten(t, c, n, "the fenced TV1 producer")
	wantAnswer(t, "TV2 produce", c.add(id, pid, 2, tp0), pid, 2)
	wantAnswer(t, "TV2 commit", c.end(id, pid, 2, true), pid, 3)
	c.complete(id)
	traceGolden(t, "trace-tv2-fences-tv1.golden", c.log)
}

// A TV1 client fences a TV2 one, and a TV2 producer whose epoch is just
// below a completed TV1 transaction's is fenced, not taken for a retry of
// its own commit (the TV2 retry rule reads the stored transaction's
// version, as Kafka's endTxnEpochBumped).
func TestTV1FencesTV2(t *testing.T) {
	const id = "mixed"
	pid := int64(1000)
	c := newFakeCoordinator(t, pid)
	wantAnswer(t, "TV2 init", c.initPID(id, 0, 0), pid, 0)
	wantAnswer(t, "TV2 produce", c.add(id, pid, 0, tp0), pid, 0)
	r := c.initPID(id, 0, 0)
	wantCode(t, "TV1 init", r, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if w := r.Write; w == nil || w.State != PrepareAbort || w.ProducerEpoch != 1 || w.ClientVersion != TV2 {
		t.Fatalf("the fence must abort the TV2 transaction at epoch 1 with TV2 markers: %+v", r.Write)
	}
	c.complete(id)
	wantAnswer(t, "TV1 init retried", c.initPID(id, 0, 0), pid, 2)
	n := len(c.log)
	wantCode(t, "TV2 commit", c.end(id, pid, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "TV2 produce", c.add(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantNothingWritten(t, c, n, "the fenced TV2 producer")

	wantAnswer(t, "TV1 AddPartitionsToTxn", c.addV1(id, pid, 2, tp0), pid, 2)
	wantAnswer(t, "TV1 commit", c.endV1(id, pid, 2, true), pid, 2)
	c.complete(id)
	// A TV2 producer at epoch 1 (one below) is no retry of a TV2 commit.
	n = len(c.log)
	wantCode(t, "TV2 commit one epoch below a TV1 commit", c.end(id, pid, 1, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantNothingWritten(t, c, n, "the stale TV2 commit")
	traceGolden(t, "trace-tv1-fences-tv2.golden", c.log)
}

// Kafka aborts a timed-out transaction with an epoch bump for both
// versions, so the producer is fenced; the TV1 abort keeps its version
// and its markers carry epoch + 1, which TV1's marker rule accepts.
func TestTV1TimeoutAbortBumpsTheEpoch(t *testing.T) {
	const id = "tv1-timeout"
	pid := int64(1000)
	c := newFakeCoordinator(t, pid)
	wantAnswer(t, "init", c.initPID(id, 0, 0), pid, 0)
	wantAnswer(t, "AddPartitionsToTxn", c.addV1(id, pid, 0, tp0), pid, 0)
	c.tick(61 * time.Second)
	r := c.abortTimedOut(id)
	if w := r.Write; w == nil || w.State != PrepareAbort || w.ProducerEpoch != 1 || w.ClientVersion != TV1 || !r.SendMarkers {
		t.Fatalf("timeout abort: %+v", r.Write)
	}
	c.complete(id)
	n := len(c.log)
	wantCode(t, "the producer's commit", c.endV1(id, pid, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "the producer's next AddPartitionsToTxn", c.addV1(id, pid, 0, tp0), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantNothingWritten(t, c, n, "the timed-out producer")
}
