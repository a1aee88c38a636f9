package cluster

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The partition side of transactions (DESIGN §10, transaction version 2):
// a leader appends a transaction's batches only once their partition is in
// the transaction at its coordinator (TxnVerifier), and writes the
// coordinators' markers (WriteTxnMarker).

// TxnVerifier adds a partition to an open transaction at the
// transaction's coordinator (internal AddPartitionsToTxn). The node
// implements it (the coordinator may be this broker or another); cluster
// calls it, with no lock held, before appending the first batch of a
// transaction to a partition.
type TxnVerifier interface {
	// AddPartition returns nil once tp is durably in the open
	// transaction of transactionalID at (producerID, producerEpoch).
	// Errors are *errs.Error with the coordinator's code
	// (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
	// INVALID_PRODUCER_ID_MAPPING, ...) or a retriable one
	// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
	// COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS,
	// REQUEST_TIMED_OUT) when ctx ended before a definite answer.
	AddPartition(ctx context.Context, transactionalID string, producerID int64, producerEpoch int16, tp TopicPartition) error
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
}

// SetTxnVerifier sets the verifier AppendTxnTo uses. Call it before the
// broker serves produce requests.
func (m *ReplicaManager) SetTxnVerifier(v TxnVerifier) {
	_ = v
}

// AppendTxnTo is AppendTo for a transactional producer's batch:
// transactionalID is the produce request's. Not built yet.
func (m *ReplicaManager) AppendTxnTo(ctx context.Context, p *Replica, transactionalID string, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "transactional produce is not supported yet")
}

// WriteTxnMarker appends marker mk to tp as its leader (at its current
// leader epoch) and waits until it is committed, with AppendCommitted's
// outcomes. (The coordinator-epoch fence is not built yet.)
func (m *ReplicaManager) WriteTxnMarker(ctx context.Context, tp TopicPartition, mk TxnMarker) error {
	t := batch.ControlAbort
	if mk.Commit {
		t = batch.ControlCommit
	}
	now := time.Now()
	raw := batch.MarkerBatch(batch.Producer{ID: mk.ProducerID, Epoch: int32(mk.ProducerEpoch)}, t, mk.CoordinatorEpoch, now.UnixMilli())
	_, err := m.AppendCommitted(ctx, tp, raw, NoLeaderEpoch, now)
	return err
}
