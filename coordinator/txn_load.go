package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/batch"
)

var _ cluster.LeadershipListener = (*TransactionCoordinator)(nil)

// BecameLeader implements cluster.LeadershipListener for
// __transaction_state (other topics are ignored): the partition's ids
// answer COORDINATOR_LOAD_IN_PROGRESS while it is loaded from the log on
// the coordinator's own goroutine (txn.Replay); then it serves, with
// leaderEpoch as the coordinator epoch, and every id found in
// PrepareCommit/PrepareAbort has its markers resent and is completed.
// (PrepareEpochFence is never written, so a load never finds it: the
// fence's PrepareAbort is resumed like any other.) It returns at once.
func (c *TransactionCoordinator) BecameLeader(tp cluster.TopicPartition, leaderEpoch int32) {
	if tp.Topic != txn.StateTopic {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if old := c.partitions[tp.Partition]; old != nil {
		// The listener contract sends Resigned first; be safe anyway.
		old.cancel()
	}
	ctx, cancel := context.WithCancel(c.ctx)
	ps := &statePartition{
		tp:       tp,
		epoch:    leaderEpoch,
		ctx:      ctx,
		cancel:   cancel,
		loading:  true,
		loadedAt: c.now(),
		txns:     make(map[string]*txn.Metadata),
		inFlight: make(map[string]bool),
		changed:  make(chan struct{}),
	}
	c.partitions[tp.Partition] = ps
	c.goroutines.Go(func() { c.load(ps) })
}

// Resigned implements cluster.LeadershipListener: the partition's state
// at leaderEpoch is dropped (a load in progress is abandoned, marker
// rounds stop) and its ids answer NOT_COORDINATOR. A Resigned for another
// epoch than the one loaded is ignored.
func (c *TransactionCoordinator) Resigned(tp cluster.TopicPartition, leaderEpoch int32) {
	if tp.Topic != txn.StateTopic {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps := c.partitions[tp.Partition]; ps != nil && ps.epoch == leaderEpoch {
		ps.cancel()
		delete(c.partitions, tp.Partition)
	}
}

// load reads ps's partition from its start into a fresh map and, if ps
// is still led when done, publishes it and resumes the Prepare* ids.
// Read errors are retried with a backoff while ps is led.
//
// A corrupt record (txn.ErrCorruptRecord: not one a coordinator wrote) is
// skipped and reported (log and SkippedRecords; issue 29) and the load
// goes on: stopping would leave every transactional id of the partition
// without a coordinator for good. A record of a newer version
// (txn.ErrNewerRecordVersion: a newer Sluice led the partition) still
// stops the load for good (loadErr: the partition answers
// COORDINATOR_NOT_AVAILABLE): it is the id's latest state, and skipping
// it would resume an older one — a PrepareCommit forgotten, its
// transaction aborted after some of its partitions committed. The fix
// there is to run the newer version, not to guess.
func (c *TransactionCoordinator) load(ps *statePartition) {
	txns := make(map[string]*txn.Metadata)
	offset := int64(0)
	backoff := c.cfg.MarkerRetryBackoff
	for {
		rd, err := c.log.ReadForLoad(ps.ctx, ps.tp, ps.epoch, offset, defaultLoadReadBytes)
		if ps.ctx.Err() != nil {
			return // resigned, new epoch or closed: abandoned
		}
		if err != nil {
			if !sleepCtx(ps.ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.cfg.MarkerRetryBackoffMax)
			continue
		}
		backoff = c.cfg.MarkerRetryBackoff
		for _, b := range rd.Batches {
			err := replayBatch(txns, b, func(offset int64, err error) {
				c.skipped.report(c.logger, ps.tp, ps.epoch, offset, err)
			})
			if err != nil {
				c.mu.Lock()
				if c.ownsLocked(ps) {
					ps.loadErr = fmt.Errorf("offset %d: %w", offset, err)
				}
				c.mu.Unlock()
				return
			}
		}
		if rd.NextOffset >= rd.EndOffset {
			break
		}
		if rd.NextOffset <= offset {
			// No progress below the end: try again later rather than
			// serve a partial state.
			if !sleepCtx(ps.ctx, backoff) {
				return
			}
			continue
		}
		offset = rd.NextOffset
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ownsLocked(ps) {
		return
	}
	ps.txns = txns
	ps.loading = false
	ps.loadTime = max(c.now().Sub(ps.loadedAt), 0)
	for _, m := range txns {
		if m.PendingMarkers() {
			c.startMarkersLocked(ps, *m)
		}
	}
}

// replayBatch folds one __transaction_state batch into txns. Control
// batches (none are written to this topic) are skipped. A corrupt record
// is left out and passed to skip with its offset; any other error (a
// record of a newer version, a batch that is not canonical) is returned.
func replayBatch(txns map[string]*txn.Metadata, b []byte, skip func(offset int64, err error)) error {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return err
	}
	if h.IsControl() {
		return nil
	}
	return batch.ForEachRecord(b, func(r batch.Record) error {
		err := txn.Replay(txns, r.Key, r.Value)
		switch {
		case err == nil:
		case errors.Is(err, txn.ErrCorruptRecord):
			skip(r.Offset, err)
		default:
			return errors.Join(fmt.Errorf("record at offset %d", r.Offset), err)
		}
		return nil
	})
}

// SkippedRecords is the number of __transaction_state records the loads
// of this node have skipped as corrupt (a record skipped by several
// loads counts each time), for metrics.
func (c *TransactionCoordinator) SkippedRecords() int64 { return c.skipped.count() }
