package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// The partition side of transactions (DESIGN §10, transaction version 2):
// a leader appends a transaction's batches only once their partition is in
// the transaction at its coordinator (TxnVerifier), and writes the
// coordinators' markers (WriteTxnMarker).

// TxnVerifier adds a partition to an open transaction at the
// transaction's coordinator (internal AddPartitionsToTxn), or for a TV1
// producer verifies that it is in. The node implements it (the
// coordinator may be this broker or another); cluster calls it, with no
// lock held, before appending the first batch of a transaction to a
// partition.
type TxnVerifier interface {
	// AddPartition returns nil once tp is durably in the open
	// transaction of transactionalID at (producerID, producerEpoch). With
	// verifyOnly (a TV1 producer, which added tp itself) nothing is added:
	// nil only if tp already is in that transaction, else
	// INVALID_TXN_STATE.
	// Errors are *errs.Error with the coordinator's code
	// (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
	// INVALID_PRODUCER_ID_MAPPING, ...) or a retriable one
	// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
	// COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS,
	// REQUEST_TIMED_OUT) when ctx ended before a definite answer.
	AddPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, tp TopicPartition, verifyOnly bool) error
}

// TxnProduce is one transactional batch a producer sends to a partition
// leader: what AppendTxn needs besides the partition.
type TxnProduce struct {
	// TransactionalID is the produce request's transactional id.
	TransactionalID string
	// Batch is the transactional data batch (AppendTxnTo's raw).
	Batch []byte
	// Now is the request's time.
	Now time.Time
	// AcksAll: the request has acks=all.
	AcksAll bool
	// VerifyOnly: the producer speaks transaction version 1 — it added the
	// partition to its transaction itself (AddPartitionsToTxn), and the
	// leader only verifies at the coordinator that the partition is in it
	// (KIP-890 part 1). The zero value is TV2: the leader adds the
	// partition (the gRPC door, Kafka Produce v12+ of a TV2 producer).
	// The Kafka door sets it for Produce v0–v11.
	VerifyOnly bool
}

// TxnMarker is one transaction marker to write to a partition.
type TxnMarker struct {
	ProducerID    int64
	ProducerEpoch int16
	// CoordinatorEpoch is the __transaction_state leader epoch of the
	// coordinator writing it.
	CoordinatorEpoch int32
	// Commit: a COMMIT marker; else ABORT.
	Commit bool
	// Version is the ended transaction's transaction version, which picks
	// the marker's epoch rule (storage.ProducerState.CheckMarker): the zero
	// value is TV2 (epoch above the producer's), storage.MarkerTV1 allows
	// the producer's own epoch.
	Version storage.MarkerVersion
}

// txnVerifierBox holds a TxnVerifier in an atomic pointer.
type txnVerifierBox struct{ v TxnVerifier }

// SetTxnVerifier sets the verifier AppendTxnTo uses (nil: none). Call it
// before the broker serves produce requests; it is safe to call at any
// time, and a call in progress keeps the verifier it started with.
func (m *ReplicaManager) SetTxnVerifier(v TxnVerifier) {
	if v == nil {
		m.txnVerifier.Store(nil)
		return
	}
	m.txnVerifier.Store(&txnVerifierBox{v: v})
}

// Backoff between AddPartition calls that answered a retriable code: from
// txnVerifyBackoffMin, doubling, at most txnVerifyBackoffMax.
// CONCURRENT_TRANSACTIONS is the common one: right after a commit the
// producer's next transaction starts while the coordinator still writes
// the previous one's markers.
const (
	txnVerifyBackoffMin = 5 * time.Millisecond
	txnVerifyBackoffMax = 100 * time.Millisecond
)

// maxTxnReverifications bounds how often AppendTxnTo verifies again after
// a marker that closed the producer's previous transaction ended its
// guard (see AppendTxnTo).
const maxTxnReverifications = 3

// retriableVerification reports the coordinator answers AppendTxnTo
// retries: the coordinator moved, is loading or busy with the id.
func retriableVerification(code sluicev1.ErrorCode) bool {
	switch code {
	case sluicev1.ErrorCode_NOT_COORDINATOR, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
		sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS:
		return true
	}
	return false
}

// AppendTxnTo is AppendTo for a transactional producer's batch:
// transactionalID is the produce request's (DESIGN §10, TV2, decision 33
// of docs/design.md).
//
// Input: transactionalID must be non-empty (else INVALID_REQUEST); raw
// must be a transactional data batch of a producer id > 0 with an epoch
// in [0, MaxInt16] and a base sequence >= 0 (a control batch, a
// non-transactional batch or a bad producer field: INVALID_RECORD).
// Nothing is stored on any error but the acks=all ones AppendTo has.
//
// If the producer's transaction is already open here at the batch's
// epoch the batch is appended at once (the idempotence rules apply:
// duplicates, sequences, epochs). Otherwise the partition is first added
// to the transaction at its coordinator: a verification guard is taken
// from the log's producer state (storage.Log.StartTxnVerification; an
// epoch below the producer's is INVALID_PRODUCER_EPOCH at once), the
// TxnVerifier's AddPartition is called with no lock held, and the batch
// is appended only if the guard still holds (storage.Log.AppendTxn). If a
// marker of the producer or a batch of a newer epoch was written
// meanwhile the transaction may have ended: INVALID_TXN_STATE (Kafka's
// answer, InvalidTxnStateException), nothing stored — except that a
// marker at the batch's own epoch closed the producer's previous
// transaction, not this one (TV2 markers carry data epoch + 1), so the
// verification is simply done again, at most maxTxnReverifications times.
//
// Coordinator answers: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS are retried
// with a backoff (5 ms doubling to 100 ms) until ctx ends, then the last
// of them is returned; PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH
// (Kafka's mapping for produce: the producer aborts and learns it was
// fenced at EndTxn); anything else is returned as is. With no verifier
// set (SetTxnVerifier) the answer is INVALID_TXN_STATE, not retriable.
//
// The rest is AppendTo's: INVALID_TOPIC_EXCEPTION (an internal topic,
// refused first), NOT_LEADER_OR_FOLLOWER (checked before the
// verification and again before the append), MESSAGE_TOO_LARGE,
// CORRUPT_RECORD, and with acksAll NOT_ENOUGH_REPLICAS; the caller then
// waits with Replica.WaitCommitted or AwaitCommit. Safe for concurrent
// use; calls for different partitions may run in parallel (api does so
// for one request).
//
// AppendTxnTo is for a TV2 producer (the partition is added to the
// transaction); AppendTxn with TxnProduce.VerifyOnly serves a TV1 one.
func (m *ReplicaManager) AppendTxnTo(ctx context.Context, p *Replica, transactionalID string, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	return m.AppendTxn(ctx, p, TxnProduce{TransactionalID: transactionalID, Batch: raw, Now: now, AcksAll: acksAll})
}

// AppendTxn is AppendTxnTo for either transaction version: with
// req.VerifyOnly (a TV1 producer, Kafka Produce v0–v11) the coordinator is
// asked only to verify that the partition is in the producer's open
// transaction — INVALID_TXN_STATE if the producer did not add it with
// AddPartitionsToTxn — instead of adding it. Everything else is
// AppendTxnTo's.
func (m *ReplicaManager) AppendTxn(ctx context.Context, p *Replica, req TxnProduce) (AppendResult, error) {
	if err := CheckProducerTopic(p.Topic); err != nil {
		return AppendResult{}, err
	}
	return m.appendTxnTo(ctx, p, req.TransactionalID, req.Batch, req.Now, req.AcksAll, req.VerifyOnly)
}

// appendTxnTo is AppendTxn for any topic: AppendCoordinatorTxn writes
// the group coordinator's transactional offsets to __consumer_offsets
// through it.
func (m *ReplicaManager) appendTxnTo(ctx context.Context, p *Replica, transactionalID string, raw []byte, now time.Time, acksAll, verifyOnly bool) (res AppendResult, err error) {
	var verifying time.Duration
	defer func() { res.Verifying = verifying }() // on every return, errors too
	if transactionalID == "" {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "a transactional produce needs a transactional id")
	}
	if err := m.checkLeader(p); err != nil {
		return AppendResult{}, err
	}
	b, h, err := producerBatch(p, raw, now)
	if err != nil {
		return AppendResult{}, err
	}
	switch {
	case !h.IsTransactional():
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "a produce request with transactional_id %q carries only transactional batches; this one is not", errs.Echo(transactionalID))
	case h.ProducerID <= 0:
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "a transactional batch needs a producer id, got %d", h.ProducerID)
	}
	info, err := storage.BatchInfoFromHeader(h)
	if err != nil {
		return AppendResult{}, err
	}
	box := m.txnVerifier.Load()
	if box == nil {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "node %d cannot verify transactions (no transaction verifier): transactional produce is not available", m.cfg.NodeID)
	}
	if acksAll {
		if err := p.checkAcksAll(); err != nil {
			return AppendResult{}, err
		}
	}
	tp := p.TopicPartition
	for reverified := 0; ; reverified++ {
		guard, err := p.log.StartTxnVerification(info.ProducerID, info.Epoch, info.FirstSeq, now)
		if err != nil {
			return AppendResult{}, m.appendError(p, err)
		}
		if verifyOnly {
			guard = guard.ForTV1() // TV1's sequence rules (storage.BatchInfo.TV1)
		}
		if guard.Needed() {
			start := time.Now()
			err := verifyWithRetries(ctx, box.v, transactionalID, info.ProducerID, info.Epoch, tp, verifyOnly)
			verifying += time.Since(start)
			if err != nil {
				return AppendResult{}, err
			}
		}
		// Leadership may have moved while the coordinator was asked.
		if err := m.checkLeader(p); err != nil {
			return AppendResult{}, err
		}
		if acksAll {
			if err := p.checkAcksAll(); err != nil {
				return AppendResult{}, err
			}
		}
		epoch := p.LeaderEpoch()
		sr, err := p.log.AppendTxn(b, epoch, guard, now)
		if err == nil {
			res := appendResult(sr, epoch, p.Config().LogAppendTime)
			p.leaderAppended(res.LastOffset+1, now)
			return res, nil
		}
		if errors.Is(err, storage.ErrVerificationEnded) && reverified < maxTxnReverifications {
			// A marker at the batch's own epoch closed the previous
			// transaction (TV2: marker epoch = data epoch + 1; TV1: the
			// previous transaction's marker, at the same epoch, came
			// late): this one may still be fine; ask again. Anything else (a higher
			// epoch) is refused at once by StartTxnVerification.
			if e, ok := p.log.Producer(info.ProducerID); ok && e.Epoch == info.Epoch && e.TxnFirstOffset < 0 {
				continue
			}
		}
		return AppendResult{}, m.appendError(p, err)
	}
}

// checkLeader refuses (NOT_LEADER_OR_FOLLOWER) a produce to a partition
// this node does not lead.
func (m *ReplicaManager) checkLeader(p *Replica) error {
	if leader, epoch := p.Leadership(); leader != m.cfg.NodeID {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d is not the leader of %s (leader %d, epoch %d)", m.cfg.NodeID, p, leader, epoch)
	}
	return nil
}

// verifyWithRetries calls v.AddPartition until it answers something other
// than a retriable coordinator code, or ctx ends (then the last retriable
// answer is returned). PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH.
func verifyWithRetries(ctx context.Context, v TxnVerifier, transactionalID string, producerID int64, epoch int16, tp TopicPartition, verifyOnly bool) error {
	backoff := txnVerifyBackoffMin
	for {
		err := v.AddPartition(ctx, transactionalID, producerID, epoch, tp, verifyOnly)
		code := errs.Code(err)
		switch {
		case err == nil:
			return nil
		case code == sluicev1.ErrorCode_PRODUCER_FENCED:
			return errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "producer %d epoch %d of transactional id %q is fenced: %s", producerID, epoch, errs.Echo(transactionalID), errs.Message(err))
		case !retriableVerification(code):
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, txnVerifyBackoffMax)
	}
}

// WriteTxnMarker appends marker mk to tp as its leader (at its current
// leader epoch) and waits until it is committed: a coordinator's
// WriteTxnMarkers for one partition (DESIGN §10). The marker passes the
// marker rules of its version (storage.Log.AppendMarker): TV2, a producer
// epoch not above the producer's here is INVALID_PRODUCER_EPOCH — except a
// retry of the marker that ended the transaction (same epoch, nothing
// open: accepted, KAFKA-19999, and it ends nothing again); TV1, only an
// epoch below the producer's is — and a coordinator epoch below
// that of the producer's last marker is TRANSACTION_COORDINATOR_FENCED;
// nothing is written then. Not hosted here, or not the leader:
// NOT_LEADER_OR_FOLLOWER (the caller tells UNKNOWN_TOPIC_OR_PARTITION
// from its metadata). The other outcomes are AppendCommitted's: nil once
// committed; NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR with nothing
// written; REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER wrapping
// ErrCommitUnknown when the marker was appended but the wait ended (the
// coordinator retries; the retry is accepted as above);
// NOT_ENOUGH_REPLICAS_AFTER_APPEND when committed with a shrunk ISR.
// Safe for concurrent use.
func (m *ReplicaManager) WriteTxnMarker(ctx context.Context, tp TopicPartition, mk TxnMarker) error {
	t := batch.ControlAbort
	if mk.Commit {
		t = batch.ControlCommit
	}
	now := time.Now()
	raw := batch.MarkerBatch(batch.Producer{ID: mk.ProducerID, Epoch: int32(mk.ProducerEpoch)}, t, mk.CoordinatorEpoch, now.UnixMilli())
	res, err := m.appendCommitted(ctx, tp, raw, NoLeaderEpoch, mk.Version, now)
	if err == nil || errs.Code(err) == sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND {
		m.markerCommitted(tp, mk.ProducerID, mk.Commit, res.BaseOffset)
	}
	if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d does not host %s: %s", m.cfg.NodeID, tp, errs.Message(err))
	}
	return err
}

// OldestOpenTransactionStart is when the oldest transaction open on this
// replica started: the append time of its first batch here (leader or
// follower; after a restart, the time kept in the producer-state snapshot
// or that batch's timestamp). false when no transaction is open. For the
// oldest-open-transaction-age metric.
func (p *Replica) OldestOpenTransactionStart() (time.Time, bool) {
	return p.log.OldestOpenTransactionStart()
}
