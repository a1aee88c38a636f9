package txn

// timeoutScan names each shard's timer of its timeout scan.
const timeoutScan = "timeout scan"

// maxTimeoutWorkers bounds the transitions one shard's scan runs at once;
// the ids past it are left for the next scan.
const maxTimeoutWorkers = 32

// scheduleScan arranges ps's next timeout scan in AbortTimedOutInterval
// (Kafka's abortTimedOutTransactions and removeExpiredTransactionalIds
// run on that period): each led partition scans on its own timer, so a
// slow partition never delays another's.
func (c *Coordinator) scheduleScan(ps *statePartition) {
	c.rt.Schedule(ps, timeoutScan, c.now().Add(c.cfg.AbortTimedOutInterval), func() {
		c.scanPartition(ps)
		c.scheduleScan(ps)
	})
}

// scanPartition aborts every open transaction of ps past its timeout
// (AbortTimedOut: PrepareAbort with the epoch bumped, so its producer
// is fenced, then markers and CompleteAbort) and removes every id idle
// for IDExpiration (Expire: a tombstone), through the same slot and
// write-then-apply path as requests. Each id's transition runs on its own
// goroutine (at most maxTimeoutWorkers at once), so one slow write delays
// only its id. An id whose slot is taken is left for the next scan, as is
// one whose write fails.
func (c *Coordinator) scanPartition(ps *statePartition) {
	now := c.now()
	var due []string
	c.mu.Lock()
	if !c.rt.OwnsLocked(ps) || !ps.Serving() {
		c.mu.Unlock()
		return
	}
	for id, m := range ps.txns {
		if TimedOut(*m, now) || Expire(*m, now, c.cfg.IDExpiration).Write != nil {
			due = append(due, id)
		}
	}
	c.mu.Unlock()

	for _, id := range due {
		if ps.timeoutWorkers.Load() >= maxTimeoutWorkers {
			return
		}
		cur, ok, busy := c.acquireIn(ps, id)
		if !ok {
			return
		}
		if busy {
			continue
		}
		if cur == nil {
			c.release(ps, id)
			continue
		}
		m := *cur
		ps.timeoutWorkers.Add(1)
		c.mu.Lock()
		started := c.rt.GoLocked(func() {
			defer ps.timeoutWorkers.Add(-1)
			r, err := c.decide(ps.Ctx, func(newPID int64) Result { return AbortTimedOut(m, now, newPID) })
			if err == nil && r.Write == nil {
				r = Expire(m, now, c.cfg.IDExpiration)
			}
			if err != nil {
				c.release(ps, id)
				return
			}
			_ = c.transition(ps.Ctx, ps, id, r) // a failure is retried at the next scan
		})
		c.mu.Unlock()
		if !started {
			ps.timeoutWorkers.Add(-1)
			c.release(ps, id)
			return
		}
	}
}
