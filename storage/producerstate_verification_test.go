package storage

import (
	"errors"
	"testing"
	"time"
)

// Tests of the verification guard (producerstate_verification.go) and the
// coordinator-epoch fence, on the pure state.

func txnInfo(pid int64, epoch int16, seq int32) BatchInfo {
	return BatchInfo{ProducerID: pid, Epoch: epoch, FirstSeq: seq, LastSeq: seq, IsTransactional: true}
}

// Rule (Kafka VerificationGuard): a guard taken before the coordinator is
// asked still admits the batch when nothing of the producer was applied
// meanwhile.
func TestVerificationGuardAdmitsUntouchedProducer(t *testing.T) {
	s := NewProducerState(0)
	g, err := s.StartVerification(7, 0, 0, 1000)
	if err != nil || !g.Needed() {
		t.Fatalf("first batch of a new producer: %+v %v; want a guard", g, err)
	}
	if err := s.CheckVerified(txnInfo(7, 0, 0), g); err != nil {
		t.Fatalf("untouched guard refused: %v", err)
	}
	// Pipelined first batches of the same epoch share the guard.
	if g2, _ := s.StartVerification(7, 0, 0, 1001); g2 != g {
		t.Fatalf("second verification at the same epoch got %+v, want the shared %+v", g2, g)
	}
	s.Update(txnInfo(7, 0, 0), 0, 0, 1000)
	// The transaction is open now: no verification needed, and the
	// holder of the old guard may append (the coordinator knows).
	if g3, err := s.StartVerification(7, 0, 0, 1002); err != nil || g3.Needed() {
		t.Fatalf("producer with an open transaction: %+v %v; want no verification", g3, err)
	}
	if err := s.CheckVerified(txnInfo(7, 0, 1), g); err != nil {
		t.Fatalf("batch of an open transaction refused: %v", err)
	}
}

// Rule (DESIGN §10, KIP-890 verification guard): a marker of the producer
// applied while the coordinator is asked ends the guard; the batch is then
// refused with INVALID_TXN_STATE (Kafka's "Record was not part of an
// ongoing transaction"), before the epoch check that would also refuse it.
func TestVerificationGuardEndedByMarker(t *testing.T) {
	s := NewProducerState(0)
	g, _ := s.StartVerification(7, 0, 0, 1000)
	s.Update(BatchInfo{ProducerID: 7, Epoch: 1, FirstSeq: NoSequence, LastSeq: NoSequence, IsTransactional: true, IsControl: true, CoordinatorEpoch: 0}, 0, 0, 1000)
	err := s.CheckVerified(txnInfo(7, 0, 0), g)
	if code(err) != "INVALID_TXN_STATE" || !errors.Is(err, ErrVerificationEnded) {
		t.Fatalf("batch after a crossing marker: %v; want INVALID_TXN_STATE (ErrVerificationEnded)", err)
	}
	// Verifying again is refused early: the epoch is now below the
	// producer's.
	if _, err := s.StartVerification(7, 0, 0, 1001); code(err) != "INVALID_PRODUCER_EPOCH" {
		t.Fatalf("new verification at the ended epoch: %v; want INVALID_PRODUCER_EPOCH", err)
	}
}

// Rule: a batch of a higher epoch (a newer producer of the same id) ends
// the guard of the older one.
func TestVerificationGuardEndedByHigherEpoch(t *testing.T) {
	s := NewProducerState(0)
	old, _ := s.StartVerification(7, 2, 0, 1000)
	newer, _ := s.StartVerification(7, 3, 0, 1000)
	if old == newer {
		t.Fatal("a verification at a new epoch reused the old guard")
	}
	s.Update(txnInfo(7, 3, 0), 0, 0, 1000)
	if err := s.CheckVerified(txnInfo(7, 2, 0), old); code(err) != "INVALID_TXN_STATE" {
		t.Fatalf("old epoch's batch after the newer producer wrote: %v; want INVALID_TXN_STATE", err)
	}
	if err := s.CheckVerified(txnInfo(7, 3, 1), newer); err != nil {
		t.Fatalf("newer producer's batch: %v", err)
	}
	// A guard for another producer, or the zero guard, admits nothing.
	if err := s.CheckVerified(txnInfo(8, 0, 0), VerificationGuard{}); code(err) != "INVALID_TXN_STATE" {
		t.Fatalf("unverified batch: %v; want INVALID_TXN_STATE", err)
	}
}

// Guards of verifications whose batch never came expire with the
// producers (ExpireBefore).
func TestVerificationGuardsExpire(t *testing.T) {
	s := NewProducerState(0)
	g, _ := s.StartVerification(7, 0, 0, 1000)
	if n := s.VerificationsInProgress(); n != 1 {
		t.Fatalf("%d guards, want 1", n)
	}
	s.ExpireBefore(time.UnixMilli(1000).Add(DefaultProducerIDExpiration), DefaultProducerIDExpiration)
	if n := s.VerificationsInProgress(); n != 0 {
		t.Fatalf("%d guards after expiration, want 0", n)
	}
	if err := s.CheckVerified(txnInfo(7, 0, 0), g); code(err) != "INVALID_TXN_STATE" {
		t.Fatalf("batch of an expired guard: %v", err)
	}
}

// Rule (Kafka ProducerAppendInfo.checkCoordinatorEpoch; DESIGN §10): a
// marker from a coordinator epoch below the producer's last marker's is
// TRANSACTION_COORDINATOR_FENCED; equal and higher pass; a producer with
// no marker yet takes any.
func TestCoordinatorEpochFence(t *testing.T) {
	l := newProducerLog(0)
	if err := l.s.CheckCoordinatorEpoch(5, 0); err != nil {
		t.Fatalf("unknown producer: %v", err)
	}
	l.apply(t, []step{txnData(5, 0, 0, 1), markerFrom(5, 1, 4)})
	if p, _ := l.s.Producer(5); p.CoordinatorEpoch != 4 {
		t.Fatalf("coordinator epoch %d after the marker, want 4", p.CoordinatorEpoch)
	}
	if err := l.s.CheckCoordinatorEpoch(5, 3); code(err) != "TRANSACTION_COORDINATOR_FENCED" {
		t.Fatalf("older coordinator: %v; want TRANSACTION_COORDINATOR_FENCED", err)
	}
	for _, ce := range []int32{4, 5} {
		if err := l.s.CheckCoordinatorEpoch(5, ce); err != nil {
			t.Fatalf("coordinator epoch %d: %v", ce, err)
		}
	}
	// A marker read from its header only leaves the epoch alone.
	l.apply(t, []step{txnData(5, 1, 0, 1), marker(5, 2)})
	if p, _ := l.s.Producer(5); p.CoordinatorEpoch != 4 {
		t.Fatalf("coordinator epoch %d after a header-only marker, want 4", p.CoordinatorEpoch)
	}
}

// The oldest open transaction's start is its first batch's append time
// (the batch timestamp when the append time is unknown, as in a replay).
func TestOldestTxnStart(t *testing.T) {
	s := NewProducerState(0)
	if _, ok := s.OldestTxnStart(); ok {
		t.Fatal("empty state has an open transaction")
	}
	b := txnInfo(1, 0, 0)
	b.AppendTime = 5000
	s.Update(b, 0, 0, 10)
	s.Update(txnInfo(2, 0, 0), 1, 1, 4000) // replayed: batch timestamp
	b = txnInfo(1, 0, 1)
	b.AppendTime = 9000
	s.Update(b, 2, 2, 20) // same transaction: start unchanged
	if got, ok := s.OldestTxnStart(); !ok || got != 4000 {
		t.Fatalf("oldest start %d %v, want 4000", got, ok)
	}
	s.Update(BatchInfo{ProducerID: 2, Epoch: 1, FirstSeq: NoSequence, LastSeq: NoSequence, IsTransactional: true, IsControl: true}, 3, 3, 30)
	if got, ok := s.OldestTxnStart(); !ok || got != 5000 {
		t.Fatalf("oldest start after producer 2's marker %d %v, want 5000", got, ok)
	}
	if p, _ := s.Producer(2); p.TxnStartTime != -1 {
		t.Fatalf("ended transaction keeps start %d", p.TxnStartTime)
	}
}
