package txn

import (
	"fmt"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Sluice's first producer id is 1000 (decision 4); the vectors' Kafka
// started at 0. Ids shift, epochs and states do not.
const vectorPIDShift = 1000

// checkStateLog compares the records written with a vector's
// transaction_state_log ([state, epoch] per record): same states, same
// epochs, the partition in the transaction exactly while one is open or
// ending, and one producer id throughout.
func checkStateLog(t *testing.T, got []Metadata, want [][2]any, tp TopicPartition, pid int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records written, the vector has %d:\n%s", len(got), len(want), stateLog(got))
	}
	for i, m := range got {
		state, epoch := want[i][0].(string), int16(want[i][1].(float64))
		if m.State.String() != state || m.ProducerEpoch != epoch {
			t.Errorf("record %d: [%v %d], vector [%s %d]", i, m.State, m.ProducerEpoch, state, epoch)
		}
		open := m.State == Ongoing || m.State.IsPrepare()
		if open != (len(m.Partitions) == 1 && m.Partitions[0] == tp) || (!open && len(m.Partitions) != 0) {
			t.Errorf("record %d (%v): partitions %v", i, m.State, m.Partitions)
		}
		if m.ProducerID != pid {
			t.Errorf("record %d: producer id %d, want %d", i, m.ProducerID, pid)
		}
	}
}

func stateLog(ms []Metadata) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%v %d] ", m.State, m.ProducerEpoch)
	}
	return b.String()
}

// traceGolden pins the exact records a scenario wrote, as a
// kafka-dump-log --transaction-log-decoder would show them.
func traceGolden(t *testing.T, name string, ms []Metadata) {
	t.Helper()
	var b strings.Builder
	for _, m := range ms {
		key, value, err := EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(string(key) + "\t" + string(value) + "\n")
	}
	golden(t, name, []byte(b.String()))
}

// The vectors' commit_abort_commit: transaction A commits, B aborts, C
// commits, one producer (u12-txn) on one partition.
func TestVectorCommitAbortCommit(t *testing.T) {
	vec := loadKafkaExamples(t).CommitAbortCommit
	const id = "u12-txn"
	tp := TopicPartition{Topic: "u12-txn", Partition: 0}
	c := newFakeCoordinator(t, vec.InitProducerID.ProducerID+vectorPIDShift)
	pid := vec.InitProducerID.ProducerID + vectorPIDShift

	wantAnswer(t, "initTransactions", c.initPID(id, 0, 0), pid, vec.InitProducerID.Epoch)
	epoch := vec.InitProducerID.Epoch
	for _, commit := range []bool{true, false, true} {
		c.tick(10 * time.Millisecond)
		wantAnswer(t, "first send", c.add(id, pid, epoch, tp), pid, epoch)
		c.tick(time.Millisecond)
		wantAnswer(t, "second send, same partition", c.add(id, pid, epoch, tp), pid, epoch)
		c.tick(10 * time.Millisecond)
		r := c.end(id, pid, epoch, commit)
		wantAnswer(t, "EndTxn", r, pid, epoch+1)
		epoch = r.ProducerEpoch
		c.tick(5 * time.Millisecond)
		c.complete(id)
	}
	checkStateLog(t, c.log, vec.TransactionStateLog, tp, pid)
	traceGolden(t, "trace-commit_abort_commit.golden", c.log)

	d := vec.FinalDescribe
	m := c.txns[id]
	if m.ProducerID != d.ProducerID+vectorPIDShift || m.ProducerEpoch != d.ProducerEpoch || m.State.String() != d.State || len(m.Partitions) != len(d.Partitions) {
		t.Errorf("final state %+v, vector describes %+v", m, d)
	}
}

// The vectors' fencing: p1 leaves a transaction open, p2 initialises with
// the same transactional id (u12-fence), p1 is fenced, p2 commits.
func TestVectorFencing(t *testing.T) {
	vec := loadKafkaExamples(t).Fencing
	const id = "u12-fence"
	tp := TopicPartition{Topic: "u12-fence", Partition: 0}
	pid := int64(vectorPIDShift)
	c := newFakeCoordinator(t, pid)

	wantAnswer(t, "p1 initTransactions", c.initPID(id, 0, 0), pid, 0)
	c.tick(time.Millisecond)
	wantAnswer(t, "p1 sends z1", c.add(id, pid, 0, tp), pid, 0)
	c.tick(time.Millisecond)
	r := c.initPID(id, 0, 0)
	wantCode(t, "p2 initTransactions", r, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	if !r.SendMarkers || r.Write.ProducerEpoch != 1 {
		t.Fatalf("the fence must abort with an ABORT marker at epoch 1: %+v", r.Write)
	}
	c.tick(time.Millisecond)
	c.complete(id)
	c.tick(100 * time.Millisecond)
	wantAnswer(t, "p2 retries", c.initPID(id, 0, 0), pid, 2)

	// p1's z2 and commit: the partition leader's AddPartitionsToTxn and
	// p1's EndTxn are refused, nothing is written. (The leader answers
	// its producer INVALID_PRODUCER_EPOCH, as in the vector.)
	n := len(c.log)
	wantCode(t, "p1 sends z2", c.add(id, pid, 0, tp), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantCode(t, "p1 commits", c.end(id, pid, 0, true), sluicev1.ErrorCode_PRODUCER_FENCED)
	if len(c.log) != n {
		t.Fatalf("the fenced producer wrote %s", stateLog(c.log[n:]))
	}

	c.tick(time.Millisecond)
	wantAnswer(t, "p2 sends y1", c.add(id, pid, 2, tp), pid, 2)
	c.tick(time.Millisecond)
	wantAnswer(t, "p2 commits", c.end(id, pid, 2, true), pid, 3)
	c.complete(id)
	checkStateLog(t, c.log, vec.TransactionStateLog, tp, pid)
	traceGolden(t, "trace-fencing.golden", c.log)
}
