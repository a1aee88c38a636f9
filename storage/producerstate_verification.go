package storage

import (
	"errors"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Transaction verification (DESIGN §10, TV2; ref §3 "4-8"): a leader
// appends the first batch of a transaction to a partition only once the
// transaction's coordinator has added the partition to the transaction
// (AddPartitionsToTxn), so a transactional batch is never stored where the
// coordinator would not send its marker (an unfinished transaction would
// hold the last stable offset forever). The answer comes back with no lock
// held, so the transaction may have ended meanwhile (the coordinator
// aborted it on timeout, or a new producer fenced it, and its marker was
// written here): the batch would then open a transaction nobody closes.
// Kafka's VerificationGuard (UnifiedLog.maybeStartTransactionVerification,
// ProducerStateManager's VerificationStateEntry) closes that hole, and so
// does this one:
//
//	guard := StartVerification(pid, epoch)   // under the append lock
//	coordinator.AddPartition(...)            // no lock held
//	CheckVerified(batch, guard) -> append    // under the append lock
//
// Any batch or marker of the producer applied by Update in between ends
// the guard (a marker ended a transaction; a batch of a higher epoch is a
// newer producer), and CheckVerified then refuses the batch with
// INVALID_TXN_STATE (Kafka's InvalidTxnStateException "Record was not
// part of an ongoing transaction"), unless the producer's transaction is
// open at the batch's epoch by then (another batch of it was verified and
// appended first: the coordinator knows the partition).

// VerificationGuard is the token of one verification: what
// StartVerification hands out and CheckVerified compares. The zero value
// guards nothing.
type VerificationGuard struct {
	producerID int64
	epoch      int16
	id         uint64 // 0: no verification needed (the transaction was open)
	tv1        bool   // the producer speaks transaction version 1 (ForTV1)
}

// ForTV1 returns g for a producer speaking transaction version 1 (the
// leader verified, not added, the partition: a Kafka Produce v0–v11):
// AppendTxn then applies the TV1 sequence rules (BatchInfo.TV1).
func (g VerificationGuard) ForTV1() VerificationGuard {
	g.tv1 = true
	return g
}

// Needed reports whether the coordinator must be asked before the append:
// false when the producer's transaction was already open here at the
// batch's epoch.
func (g VerificationGuard) Needed() bool { return g.id != 0 }

// verification is a producer's guard in progress.
type verification struct {
	epoch   int16
	id      uint64
	started int64 // ms, for ExpireBefore
	// lowestSeq is the lowest first sequence of the batches verified
	// under this guard (Kafka's VerificationStateEntry.lowestSequence):
	// a TV1 producer unknown here may start at any sequence, but not
	// above a batch of its still being verified (CheckVerified).
	lowestSeq int32
}

// StartVerification begins the verification of a transactional batch of
// producerID at epoch, at nowMs (Kafka UnifiedLog.
// maybeStartTransactionVerification). It refuses early, with
// INVALID_PRODUCER_EPOCH, an epoch below the producer's remembered one
// (the transaction already ended here, or the producer is fenced). When
// the producer has a transaction open here at epoch the guard's Needed is
// false: the batch may be appended without asking the coordinator.
// Otherwise it returns the producer's guard for epoch, a new one unless
// a verification at the same epoch is already in progress (pipelined
// first batches share it). INVALID_RECORD for producerID <= 0 or a
// negative epoch.
func (s *ProducerState) StartVerification(producerID int64, epoch int16, firstSeq int32, nowMs int64) (VerificationGuard, error) {
	if producerID <= 0 || epoch < 0 {
		return VerificationGuard{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "transactional batch has producer %d epoch %d; both must be set", producerID, epoch)
	}
	if e := s.producers[producerID]; e != nil {
		if epoch < e.epoch {
			return VerificationGuard{}, errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "epoch of producer %d is %d, which is smaller than the last seen epoch %d", producerID, epoch, e.epoch)
		}
		if epoch == e.epoch && e.txnFirstOffset >= 0 {
			return VerificationGuard{producerID: producerID, epoch: epoch}, nil
		}
	}
	if v, ok := s.verifying[producerID]; ok && v.epoch == epoch {
		if firstSeq < v.lowestSeq {
			v.lowestSeq = firstSeq
			s.verifying[producerID] = v
		}
		return VerificationGuard{producerID: producerID, epoch: epoch, id: v.id}, nil
	}
	s.guards++
	s.verifying[producerID] = verification{epoch: epoch, id: s.guards, started: nowMs, lowestSeq: firstSeq}
	return VerificationGuard{producerID: producerID, epoch: epoch, id: s.guards}, nil
}

// CheckVerified decides whether transactional batch b, verified with
// guard g (from StartVerification for b's producer and epoch), may be
// appended: yes when the producer's transaction is open here at b's
// epoch (Kafka's hasOngoingTransaction), or when g is still the
// producer's guard, untouched since — for a TV1 batch of a producer
// unknown here, only if no batch at a lower sequence is being verified
// under g (else OUT_OF_ORDER_SEQUENCE_NUMBER, Kafka's lowestSequence
// check); else INVALID_TXN_STATE with
// ErrVerificationEnded as the cause: a marker or a batch of the producer
// was applied while the coordinator was asked. The idempotence rules
// (Check) still apply after it. It changes nothing.
func (s *ProducerState) CheckVerified(b BatchInfo, g VerificationGuard) error {
	e := s.producers[b.ProducerID]
	if e != nil && e.epoch == b.Epoch && e.txnFirstOffset >= 0 {
		return nil
	}
	if g.id != 0 && g.producerID == b.ProducerID && g.epoch == b.Epoch {
		if v, ok := s.verifying[b.ProducerID]; ok && v.id == g.id {
			if b.TV1 && e == nil && b.FirstSeq > v.lowestSeq {
				return outOfOrder("producer %d sent sequence %d while its batch at sequence %d is not yet written here", b.ProducerID, b.FirstSeq, v.lowestSeq)
			}
			return nil
		}
	}
	return errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "producer %d epoch %d has no transaction open here, and a marker or batch of it came while the partition was being added to its transaction: %w", b.ProducerID, b.Epoch, ErrVerificationEnded)
}

// ErrVerificationEnded is the cause of CheckVerified's refusal: the
// verification guard was ended by a batch or marker of the producer. A
// caller may verify again from the start (StartVerification), which then
// judges against the new state.
var ErrVerificationEnded = errors.New("the verification guard ended")

// VerificationsInProgress is the number of producers with a guard.
func (s *ProducerState) VerificationsInProgress() int { return len(s.verifying) }

// expireVerifications forgets guards started at or before cutoff (ms):
// verifications whose batch never came (the coordinator refused, the
// request timed out). Their batch, should it still come, is refused.
func (s *ProducerState) expireVerifications(cutoff int64) {
	for id, v := range s.verifying {
		if v.started <= cutoff {
			delete(s.verifying, id)
		}
	}
}
