package coordinator

import (
	"time"

	"github.com/sluice-io/sluice/coordinator/txn"
)

// timeoutLoop runs scanTimeouts every AbortTimedOutInterval until Close
// (Kafka's abortTimedOutTransactions and removeExpiredTransactionalIds).
func (c *TransactionCoordinator) timeoutLoop() {
	t := time.NewTicker(c.cfg.AbortTimedOutInterval)
	defer t.Stop()
	for {
		select {
		case <-c.rt.Context().Done():
			return
		case <-t.C:
			c.scanTimeouts()
		}
	}
}

// scanTimeouts aborts every open transaction past its timeout
// (txn.AbortTimedOut: PrepareAbort with the epoch bumped, so its producer
// is fenced, then markers and CompleteAbort) and removes every id idle
// for IDExpiration (txn.Expire: a tombstone), in every loaded partition,
// through the same slot and write-then-apply path as requests. An id
// with a transition in flight is left for the next scan, as is one whose
// write fails.
func (c *TransactionCoordinator) scanTimeouts() {
	type candidate struct {
		ps *statePartition
		id string
	}
	now := c.now()
	var due []candidate
	c.mu.Lock()
	for _, ps := range c.rt.PartitionsLocked() {
		if ps.Loading() || ps.LoadErr() != nil {
			continue
		}
		for id, m := range ps.txns {
			if ps.inFlight[id] {
				continue
			}
			if txn.TimedOut(*m, now) || txn.Expire(*m, now, c.cfg.IDExpiration).Write != nil {
				due = append(due, candidate{ps, id})
			}
		}
	}
	c.mu.Unlock()

	for _, d := range due {
		if c.rt.Context().Err() != nil {
			return
		}
		cur, ok, busy := c.acquireIn(d.ps, d.id)
		if !ok || busy {
			continue
		}
		if cur == nil {
			c.release(d.ps, d.id)
			continue
		}
		m := *cur
		r, err := c.decide(d.ps.Ctx, func(newPID int64) txn.Result { return txn.AbortTimedOut(m, now, newPID) })
		if err == nil && r.Write == nil {
			r = txn.Expire(m, now, c.cfg.IDExpiration)
		}
		if err != nil {
			c.release(d.ps, d.id)
			continue
		}
		_ = c.transition(d.ps.Ctx, d.ps, d.id, r) // a failure is retried at the next scan
	}
}
