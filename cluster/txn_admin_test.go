package cluster

import (
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// KIP-664 abort (decision 35): an operator's ABORT marker closes only an
// open transaction at the epoch given, carries that epoch + 1 (TV2), and
// passes the coordinator-epoch fence; a refusal writes nothing.
func TestAbortTransactionClosesOnlyTheOpenTransaction(t *testing.T) {
	r, p := txnRig(t, &fakeVerifier{})
	tp := TopicPartition{Topic: "s", Partition: 0}
	const pid = 91
	// Producer pid: a first transaction committed by coordinator epoch 5,
	// then a second open at epoch 1 (from offset 2).
	if _, err := r.appendTxn(t, p, "t", pid, 0, 0, "x"); err != nil {
		t.Fatal(err)
	}
	if err := r.m.WriteTxnMarker(testCtx(t), tp, TxnMarker{ProducerID: pid, ProducerEpoch: 1, CoordinatorEpoch: 5, Commit: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.appendTxn(t, p, "t", pid, 1, 0, "y"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tp   TopicPartition
		a    HangingAbort
		want sluicev1.ErrorCode
	}{
		{"unknown producer", tp, HangingAbort{ProducerID: 7, ProducerEpoch: 0, CoordinatorEpoch: 5}, sluicev1.ErrorCode_INVALID_TXN_STATE},
		{"stale epoch", tp, HangingAbort{ProducerID: pid, ProducerEpoch: 0, CoordinatorEpoch: 5}, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH},
		{"old coordinator epoch", tp, HangingAbort{ProducerID: pid, ProducerEpoch: 1, CoordinatorEpoch: 4}, sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED},
		{"not hosted", TopicPartition{Topic: "nope", Partition: 0}, HangingAbort{ProducerID: pid, ProducerEpoch: 1, CoordinatorEpoch: 5}, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
	} {
		end := p.LogEndOffset()
		_, err := r.m.AbortTransaction(testCtx(t), tc.tp, tc.a)
		wantCode(t, tc.name, err, tc.want)
		if p.LogEndOffset() != end || p.OpenTransactions() != 1 {
			t.Fatalf("%s: refused abort changed the log: end %d (want %d), %d open", tc.name, p.LogEndOffset(), end, p.OpenTransactions())
		}
	}
	off, err := r.m.AbortTransaction(testCtx(t), tp, HangingAbort{ProducerID: pid, ProducerEpoch: 1, CoordinatorEpoch: 5})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := p.log.Producer(pid)
	if off != 3 || e.Epoch != 2 || e.TxnFirstOffset != -1 || p.OpenTransactions() != 0 {
		t.Fatalf("after abort: marker at %d (want 3), producer %+v; want epoch 2, nothing open", off, e)
	}
	if ab := p.log.AbortedTransactions(0, p.LogEndOffset()); len(ab) != 1 || ab[0].FirstOffset != 2 {
		t.Fatalf("aborted transactions = %+v; want the one from offset 2", ab)
	}
	// Nothing open any more: a second abort is refused.
	_, err = r.m.AbortTransaction(testCtx(t), tp, HangingAbort{ProducerID: pid, ProducerEpoch: 2, CoordinatorEpoch: 5})
	wantCode(t, "nothing open", err, sluicev1.ErrorCode_INVALID_TXN_STATE)
}

// A transaction is late once it has been open longer than the maximum
// transaction timeout, measured from the append of its first batch here.
func TestLateTransactionsAreThoseOpenLongerThanTheMaxTimeout(t *testing.T) {
	r, p := txnRig(t, &fakeVerifier{})
	if _, err := r.appendTxn(t, p, "t", 92, 0, 0, "x"); err != nil {
		t.Fatal(err)
	}
	e, _ := p.log.Producer(92)
	start := time.UnixMilli(e.TxnStartTime)
	if lts := r.m.LateTransactions(start.Add(DefaultTransactionMaxTimeout)); len(lts) != 0 {
		t.Errorf("late at exactly the max timeout: %+v; want none", lts)
	}
	lts := r.m.LogLateTransactions(start.Add(DefaultTransactionMaxTimeout + time.Second))
	if len(lts) != 1 || lts[0].ProducerID != 92 || lts[0].StartOffset != 0 || !lts[0].Leader || lts[0].OpenFor != DefaultTransactionMaxTimeout+time.Second {
		t.Errorf("late transactions = %+v; want producer 92 from 0, led here, open 15m1s", lts)
	}
}
