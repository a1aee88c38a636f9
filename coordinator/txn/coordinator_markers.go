package txn

import (
	"context"
	"errors"
	"slices"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// startMarkersLocked starts the marker round of w, a Prepare* just
// applied (or found by a load) in ps: Kafka's TransactionMarkerChannelManager
// for one transaction. c.mu must be held.
func (c *Coordinator) startMarkersLocked(ps *statePartition, w Metadata) {
	c.goroutines.Go(func() { c.sendMarkers(ps, w) })
}

// sendMarkers writes w's markers until every partition has answered done
// or gone, then completes the transaction (writes Complete*). A round is
// retried after a growing backoff for the partitions that failed. It
// stops, leaving the Prepare* for the partition's next leader, when this
// node no longer leads ps (resigned, new epoch, closed) or a partition
// says the coordinator or producer epoch is stale. An empty transaction
// (no partitions) completes at once.
func (c *Coordinator) sendMarkers(ps *statePartition, w Metadata) {
	pending := slices.Clone(w.Partitions)
	backoff := c.cfg.MarkerRetryBackoff
	for len(pending) > 0 {
		if ps.Ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ps.Ctx, c.cfg.MarkerRoundTimeout)
		out := c.markers.WriteMarkers(rctx, Markers{
			TransactionalID:  w.TransactionalID,
			ProducerID:       w.ProducerID,
			ProducerEpoch:    w.ProducerEpoch,
			CoordinatorEpoch: ps.Epoch,
			Commit:           w.Commit(),
			Partitions:       slices.Clone(pending),
			ClientVersion:    w.ClientVersion,
		})
		cancel()
		var retry []TopicPartition
		for _, tp := range pending {
			err, answered := out[tp]
			switch {
			case answered && err == nil:
				// Written.
			case errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:
				// The partition is gone (topic deleted): no marker owed.
			case errs.Code(err) == sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED,
				errs.Code(err) == sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH:
				// A newer coordinator or producer epoch wrote there: this
				// view is stale; the partition's current leader finishes.
				return
			default:
				retry = append(retry, tp)
			}
		}
		pending = retry
		if len(pending) > 0 {
			if !runtime.Sleep(ps.Ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.cfg.MarkerRetryBackoffMax)
		}
	}
	c.complete(ps, w)
}

// complete writes the Complete* of w once its markers are written,
// through the same slot and write-then-apply path as a request — with the
// next transaction's Ongoing in the same batch when its partition
// leaders' adds are waiting (addJoins.nextAdds). A request
// may hold the slot for a moment (it answers CONCURRENT_TRANSACTIONS
// while the id is in Prepare*), so a busy slot or a failed append is
// retried after a backoff while this node leads ps.
func (c *Coordinator) complete(ps *statePartition, w Metadata) {
	id := w.TransactionalID
	backoff := c.cfg.MarkerRetryBackoff
	// alone: a write with the next adds failed; the Complete* is retried
	// by itself, so the adds' own fault (a record too large, say) cannot
	// hold up the completion — they are then written, or refused, apart.
	alone := false
	for {
		cur, ok, busy := c.acquireIn(ps, id)
		if !ok {
			return
		}
		if !busy {
			now := c.now()
			r := Complete(cur, w.ProducerID, w.ProducerEpoch, now)
			if r.Write == nil {
				// Stale round (the id moved on): nothing to complete.
				c.release(ps, id)
				return
			}
			ws := []Metadata{*r.Write}
			// The next transaction's adds waiting for this one are
			// written with it (addJoins.nextAdds).
			if req, ok := c.adds.nextAdds(*r.Write); ok && !alone {
				if next := AddPartitions(r.Write, req, now); next.Err == nil && next.Write != nil {
					ws = append(ws, *next.Write)
				}
			}
			err := c.persist(ps.Ctx, ps, id, ws...)
			if err == nil || errs.Code(err) == sluicev1.ErrorCode_NOT_COORDINATOR ||
				errors.Is(err, cluster.ErrCommitUnknown) {
				// Done, no longer led, or the resolver of an uncertain
				// append owns the slot and applies the record.
				return
			}
			alone = alone || len(ws) > 1
		}
		if !runtime.Sleep(ps.Ctx, backoff) {
			return
		}
		backoff = min(2*backoff, c.cfg.MarkerRetryBackoffMax)
	}
}

// acquireIn takes id's slot in ps itself (not by routing: a marker round
// belongs to one leader epoch). ok is false when ps is no longer led;
// busy when the slot is taken. On success it returns a copy of id's
// Metadata (nil: unknown).
func (c *Coordinator) acquireIn(ps *statePartition, id string) (m *Metadata, ok, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.rt.OwnsLocked(ps) {
		return nil, false, false
	}
	if !ps.TryAcquire(id) {
		return nil, true, true
	}
	if cur := ps.txns[id]; cur != nil {
		cp := cur.Clone()
		m = &cp
	}
	return m, true, false
}
