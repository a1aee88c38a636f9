package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ReplicaStateLog is the runtime.Log of a broker, its replica manager:
// the log both coordinators (txn.Coordinator, group.Coordinator) load and
// append their internal topics through. It adds nothing to cluster's
// rules; it only shapes the read for loading.
type ReplicaStateLog struct {
	Replicas *cluster.ReplicaManager
}

var _ runtime.Log = ReplicaStateLog{}

// AppendCommitted is cluster.ReplicaManager.AppendCommitted.
func (l ReplicaStateLog) AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (cluster.AppendResult, error) {
	return l.Replicas.AppendCommitted(ctx, tp, raw, leaderEpoch, now)
}

// WaitCommitted implements runtime.Log.WaitCommitted with
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

// ReadForLoad implements runtime.Log.ReadForLoad with cluster.Replica.Read.
func (l ReplicaStateLog) ReadForLoad(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, offset int64, maxBytes int) (runtime.LogRead, error) {
	p, err := l.leading(tp, leaderEpoch)
	if err != nil {
		return runtime.LogRead{}, err
	}
	end := p.LogEndOffset()
	if p.HighWatermark() < end {
		if err := p.WaitCommitted(ctx, end-1, leaderEpoch); err != nil && errs.Code(err) != sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND {
			return runtime.LogRead{}, err
		}
	}
	if start := p.LogStartOffset(); offset < start {
		offset = start
	}
	if offset >= end {
		return runtime.LogRead{NextOffset: offset, EndOffset: end}, nil
	}
	res, err := p.Read(offset, maxBytes, end)
	if err != nil {
		return runtime.LogRead{}, err
	}
	return runtime.LogRead{Batches: res.Batches, NextOffset: res.NextOffset, EndOffset: end}, nil
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
