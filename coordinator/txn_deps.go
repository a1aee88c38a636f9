package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The transaction coordinator's dependencies (STYLE §3): small interfaces
// owned here, so its tests use fakes and the node wires the real ones
// (ReplicaStateLog over cluster.ReplicaManager, ProducerIDManager, a
// WriteTxnMarkers sender).

// StateLog is a coordinator's access to the partitions of its internal
// topic that it leads (__transaction_state, __consumer_offsets): the
// runtime's Log, whose comment has the contract.
type StateLog = runtime.Log

// StateLogRead is one read of StateLog.ReadForLoad (runtime.LogRead).
type StateLogRead = runtime.LogRead

// ProducerIDSource hands out producer ids: ProducerIDManager.Next's
// contract (an id never returned before; COORDINATOR_LOAD_IN_PROGRESS
// when none is at hand before ctx ends; COORDINATOR_NOT_AVAILABLE after
// Close). Safe for concurrent use.
type ProducerIDSource interface {
	Next(ctx context.Context) (int64, error)
}

// TxnMarkers is one round of transaction markers for one transaction:
// a COMMIT (Commit) or ABORT marker written for ProducerID at
// ProducerEpoch with CoordinatorEpoch (the __transaction_state leader
// epoch of the coordinator sending it) to each of Partitions.
type TxnMarkers struct {
	TransactionalID  string
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Commit           bool
	Partitions       []txn.TopicPartition
}

// MarkerWriter writes transaction markers to the leaders of their
// partitions (the wiring step: the internal WriteTxnMarkers RPC, batched
// per broker, each leader appending batch.MarkerBatch with
// AppendCommitted).
//
// WriteMarkers returns one outcome per partition of m.Partitions (a map
// keyed by partition; a partition missing from it counts as retriable).
// A nil error means the marker is committed in that partition. Errors
// are *errs.Error; the coordinator reads their codes as follows:
//   - UNKNOWN_TOPIC_OR_PARTITION: the partition no longer exists (its
//     topic was deleted) — the writer must answer it only then, never for
//     "leader unknown"; the partition is dropped from the round, as Kafka
//     drops markers of deleted topics;
//   - TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH: a newer
//     coordinator or producer epoch wrote there; this coordinator's view
//     is stale and it stops the round without completing (the
//     partition's next leader resends);
//   - anything else (NOT_LEADER_OR_FOLLOWER, timeouts, an unreachable
//     broker, ...): retried after a backoff.
//
// It must honour ctx, may be called concurrently for different
// transactions, and must not modify m.
type MarkerWriter interface {
	WriteMarkers(ctx context.Context, m TxnMarkers) map[txn.TopicPartition]error
}

// ReplicaStateLog is the StateLog of a broker: its replica manager. It
// adds nothing to cluster's rules; it only shapes the read for loading.
type ReplicaStateLog struct {
	Replicas *cluster.ReplicaManager
}

var _ StateLog = ReplicaStateLog{}

// AppendCommitted is cluster.ReplicaManager.AppendCommitted.
func (l ReplicaStateLog) AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (cluster.AppendResult, error) {
	return l.Replicas.AppendCommitted(ctx, tp, raw, leaderEpoch, now)
}

// WaitCommitted implements StateLog.WaitCommitted with
// cluster.Replica.WaitCommitted in leaderEpoch: a new epoch, even of this
// node, ends the wait (the offsets may have been truncated and reused).
func (l ReplicaStateLog) WaitCommitted(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, lastOffset int64) error {
	p, err := l.leading(tp, leaderEpoch)
	if err != nil {
		// Keep both causes: why the wait could not go on, and that the
		// append's outcome is unknown.
		e := errs.New(errs.Code(err), "%s; %w", errs.Message(err), cluster.ErrCommitUnknown)
		e.Cause = errors.Join(err, cluster.ErrCommitUnknown)
		return e
	}
	return p.WaitCommitted(ctx, lastOffset, leaderEpoch)
}

// ReadForLoad implements StateLog.ReadForLoad with cluster.Replica.Read.
func (l ReplicaStateLog) ReadForLoad(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, offset int64, maxBytes int) (StateLogRead, error) {
	p, err := l.leading(tp, leaderEpoch)
	if err != nil {
		return StateLogRead{}, err
	}
	end := p.LogEndOffset()
	if p.HighWatermark() < end {
		if err := p.WaitCommitted(ctx, end-1, leaderEpoch); err != nil && errs.Code(err) != sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND {
			return StateLogRead{}, err
		}
	}
	if start := p.LogStartOffset(); offset < start {
		offset = start
	}
	if offset >= end {
		return StateLogRead{NextOffset: offset, EndOffset: end}, nil
	}
	res, err := p.Read(offset, maxBytes, end)
	if err != nil {
		return StateLogRead{}, err
	}
	return StateLogRead{Batches: res.Batches, NextOffset: res.NextOffset, EndOffset: end}, nil
}

func (l ReplicaStateLog) leading(tp cluster.TopicPartition, leaderEpoch int32) (*cluster.Replica, error) {
	p, err := l.Replicas.Replica(tp.Topic, tp.Partition)
	if err != nil {
		return nil, err
	}
	if !p.IsLeader(leaderEpoch) {
		return nil, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this node does not lead %v at leader epoch %d", tp, leaderEpoch)
	}
	return p, nil
}
