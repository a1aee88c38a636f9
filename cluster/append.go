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

// AppendResult describes an appended batch.
type AppendResult struct {
	BaseOffset   int64
	LastOffset   int64
	MaxTimestamp int64
	// Duplicate: the batch was a producer's retry of a batch already in
	// the log (same producer id, epoch and sequences); nothing was written
	// and the offsets are the original's.
	Duplicate bool
}

// Append validates a batch as a producer sent it and appends it to the
// partition. Nothing is written unless every check passes. Errors are
// *errs.Error with the code to return for the partition.
func (m *ReplicaManager) Append(topic string, partition int32, raw []byte, now time.Time) (AppendResult, error) {
	return m.AppendWithAcks(topic, partition, raw, now, false)
}

// AppendWithAcks is Append; with acksAll it first refuses
// (NOT_ENOUGH_REPLICAS) when the ISR is smaller than min.insync.replicas.
// The caller then waits with Replica.WaitCommitted.
func (m *ReplicaManager) AppendWithAcks(topic string, partition int32, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	p, err := m.Replica(topic, partition)
	if err != nil {
		return AppendResult{}, err
	}
	return m.AppendTo(p, raw, now, acksAll)
}

// AppendTo is AppendWithAcks on a partition the caller already looked up.
func (m *ReplicaManager) AppendTo(p *Replica, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	leader, epoch := p.Leadership()
	if leader != m.cfg.NodeID {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d is not the leader of %s (leader %d, epoch %d)", m.cfg.NodeID, p, leader, epoch)
	}
	if max := p.Config().Storage.MaxMessageBytes; len(raw) > int(max) {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d of topic %q", len(raw), max, p.Topic)
	}
	b, h, err := batch.Canonicalize(raw)
	if err != nil {
		return AppendResult{}, err
	}
	switch {
	case h.IsControl():
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producers cannot write control batches")
	case h.IsTransactional():
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "transactional batches are not supported yet")
	}
	if acksAll {
		if err := p.checkAcksAll(); err != nil {
			return AppendResult{}, err
		}
	}
	sr, err := p.log.Append(b, epoch, now)
	res := AppendResult(sr)
	if err == nil {
		p.leaderAppended(res.LastOffset+1, now)
	}
	return res, m.appendError(p, err)
}

// appendError maps a storage append error to the partition's error code.
func (m *ReplicaManager) appendError(p *Replica, err error) error {
	if errors.Is(err, storage.ErrClosed) {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s is no longer hosted by node %d", p, m.cfg.NodeID)
	}
	if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
		return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "append to %s: %w", p, err)
	}
	return err
}

// leaderAppended records the leader's new log end offset.
func (p *Replica) leaderAppended(leo int64, now time.Time) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker != nil && p.tracker.LeaderAppended(leo, now) {
		p.publishHWLocked()
	}
}

// checkAcksAll refuses an acks=all produce before append when the ISR is
// smaller than min.insync.replicas.
func (p *Replica) checkAcksAll() error {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker == nil {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s has no leader here", p)
	}
	if !p.tracker.EnoughReplicas() {
		return errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, "%s has %d in-sync replicas %v, fewer than min.insync.replicas %d",
			p, p.tracker.InSyncCount(), p.tracker.ISR(), p.Config().MinInsyncReplicas)
	}
	return nil
}

// WaitCommitted blocks until the batch ending at lastOffset is below the
// high watermark (replicated to the ISR), ctx ends (REQUEST_TIMED_OUT:
// the batch is in the leader's log and may or may not become committed),
// or leadership is lost (NOT_LEADER_OR_FOLLOWER, same uncertainty).
func (p *Replica) WaitCommitted(ctx context.Context, lastOffset int64) error {
	for {
		p.roleMu.Lock()
		if p.tracker == nil {
			p.roleMu.Unlock()
			return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership of %s was lost before offset %d was replicated; it may or may not be committed", p, lastOffset)
		}
		done, err := p.tracker.AcksAllResult(lastOffset)
		ch := p.hwCh
		p.roleMu.Unlock()
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "offset %d of %s was appended but not replicated to the in-sync replicas in time; it may or may not be committed", lastOffset, p)
		}
	}
}
