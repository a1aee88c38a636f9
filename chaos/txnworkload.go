package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
)

// This file is the transactional workload: producers that run
// transactions over every partition of several topics, about one in
// three of them aborted on purpose, with every transaction's outcome in
// the history (ok, failed, unknown — a commit whose answer was lost is
// unknown, never assumed aborted).

// beginTxn records a transaction that has begun and returns its index.
func (r *recorder) beginTxn(t checker.Txn) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txns = append(r.txns, t)
	if r.emit != nil {
		r.emit(memberEvent{E: "begin", I: len(r.txns) - 1, Txn: &t})
	}
	return len(r.txns) - 1
}

// commitInvoked records that transaction i's commit was called at now.
func (r *recorder) commitInvoked(i int, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txns[i].CommitInvoke = now
	if r.emit != nil {
		r.emit(memberEvent{E: "commit", I: i, At: now})
	}
}

// endTxn records transaction i's outcome.
func (r *recorder) endTxn(i int, now time.Time, o checker.TxnOutcome, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &r.txns[i]
	t.Complete, t.Outcome = now, o
	if err != nil {
		t.Err = err.Error()
	}
	if r.emit != nil {
		r.emit(memberEvent{E: "end", I: i, At: now, TxnOutcome: o, Err: t.Err})
	}
}

// fence records that producer instance name was fenced (err). The
// workload runs one instance per transactional id at a time and starts
// the next only after the previous one has given up, so no instance is
// ever fenced by a newer one still running: each fence is either a
// coordinator-side abort (the transaction timed out and the epoch was
// bumped; the client then reports fenced, not abortable) or a coordinator
// answering from a state that is not the id's current one.
func (r *recorder) fence(name string, now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fences = append(r.fences, fmt.Sprintf("%s at %s: %v", name, now.Format("15:04:05.000"), err))
	if r.emit != nil {
		r.emit(memberEvent{E: "fence", Fence: r.fences[len(r.fences)-1]})
	}
}

// watermark records one sample of a partition's offsets.
func (r *recorder) watermark(s checker.Watermark) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watermarks = append(r.watermarks, s)
}

// txnCounts returns how many transactions committed, aborted and are
// unknown so far (open ones count as unknown).
func (r *recorder) txnCounts() (committed, aborted, unknown int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.txns {
		switch {
		case t.Complete.IsZero() || t.Outcome == checker.TxnUnknown:
			unknown++
		case t.Outcome == checker.TxnCommitted:
			committed++
		default:
			aborted++
		}
	}
	return
}

// txnCommitPatience is how long a transactional producer keeps calling
// CommitTransaction (each call bounded by the request timeout's multiple)
// before giving the transaction up as unknown and starting a new
// producer instance, which fences the old one.
const txnCommitPatience = 45 * time.Second

// transact runs transactions as transactional id chaos-txn-N until the
// workload stops producing. Each producer instance is a new name in the
// history (tN.1, tN.2, ...): a fatal error or a commit that stays unknown
// ends the instance, and the next one's InitTransactions fences it and
// aborts whatever it left open.
func (w *workload) transact(n int) {
	id := fmt.Sprintf("chaos-txn-%d", n)
	rng := rand.New(rand.NewPCG(uint64(n), 0x7e4))
	cl, err := w.cfg.newClient(w.addrs, client.WithRequestTimeout(w.cfg.RequestTimeout))
	if err != nil {
		w.log.Error("transactional client", "err", err)
		return
	}
	defer cl.Close()
	var seq int64 // value uniqueness across instances
	for instance := 1; !w.producingStopped(); instance++ {
		name := fmt.Sprintf("t%d.%d", n, instance)
		w.runTxnInstance(cl, id, name, rng, &seq)
	}
}

// producingStopped reports whether stopProducing (or stop) was called.
func (w *workload) producingStopped() bool {
	select {
	case <-w.stopProd:
		return true
	case <-w.ctx.Done():
		return true
	default:
		return false
	}
}

// runTxnInstance runs one producer instance until it fails for good or
// producing stops.
func (w *workload) runTxnInstance(cl *client.Client, id, name string, rng *rand.Rand, seq *int64) {
	p, err := cl.NewProducer(client.WithTransactionalID(id), client.WithTransactionTimeout(w.cfg.TxnTimeout),
		client.WithDeliveryTimeout(w.cfg.DeliveryTimeout), client.WithLinger(time.Millisecond))
	if err != nil {
		w.log.Error("transactional producer", "producer", name, "err", err)
		w.pace(time.Second)
		return
	}
	defer p.Close()
	for {
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		err := p.InitTransactions(ctx)
		cancel()
		if err == nil {
			break
		}
		if w.producingStopped() {
			return
		}
		var fatal *client.TransactionFatalError
		if errors.As(err, &fatal) {
			w.log.Warn("init transactions", "producer", name, "err", err)
			if errors.Is(err, client.ErrProducerFenced) {
				w.rec.fence(name, time.Now(), err)
			}
			return
		}
		// ctx ended: the same call again.
	}
	wseq := int64(0) // Seq within this instance
	every := time.Second / time.Duration(max(w.cfg.TxnRate, 1))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for k := 0; ; k++ {
		select {
		case <-w.stopProd:
			return
		case <-w.ctx.Done():
			return
		case <-tick.C:
		}
		if !w.oneTxn(p, id, name, fmt.Sprintf("%s/%d", name, k), rng, seq, &wseq) {
			return
		}
	}
}

// oneTxn runs one transaction of transactional id tid: 2 to 5 records
// over random partitions of every topic, then an abort (one in three) or
// a commit. It returns false when the producer instance cannot go on. It
// tells w.phases when the transaction reaches each TxnPhase.
func (w *workload) oneTxn(p *client.Producer, tid, name, txnID string, rng *rand.Rand, seq, wseq *int64) bool {
	if err := p.BeginTransaction(); err != nil {
		w.log.Warn("begin transaction", "producer", name, "err", err)
		return false
	}
	ti := w.rec.beginTxn(checker.Txn{ID: txnID, Producer: name, Begin: time.Now()})
	// The records' logs are drawn before the first is sent: a record's
	// callback fires the Ongoing event with parts, so parts is complete
	// and never written again once any record is on its way.
	logs := make([]int32, 2+rng.IntN(4))
	var parts []int32
	for k := range logs {
		logs[k] = rng.Int32N(w.cfg.txnLogs())
		if !slices.Contains(parts, logs[k]) {
			parts = append(parts, logs[k])
		}
	}
	parts = slices.Clip(parts)
	phase := func(ph TxnPhase, committed bool) {
		w.phases.fire(PhaseEvent{Phase: ph, TransactionalID: tid, Txn: txnID, Committed: committed, Partitions: parts})
	}
	var acked atomic.Bool
	for _, log := range logs {
		topic, part := w.cfg.topicPartition(log)
		key := fmt.Sprintf("k%03d", *seq%int64(w.cfg.Keys))
		value := fmt.Sprintf("%s/%s/%d", name, key, *seq)
		i := w.rec.invoke(checker.Write{Producer: name, Partition: log, Seq: *wseq, Key: key, Value: value, Invoke: time.Now(), Txn: txnID})
		*seq++
		*wseq++
		p.Send(w.ctx, client.Record{Topic: topic, Partition: part, Key: []byte(key), Value: []byte(value)},
			func(md client.RecordMetadata, err error) {
				w.rec.complete(i, time.Now(), md, err)
				if err == nil && acked.CompareAndSwap(false, true) {
					phase(PhaseOngoing, false)
				}
			})
	}
	if rng.IntN(3) == 0 {
		if rng.IntN(2) == 0 {
			// Half the planned aborts wait for their records' acks first, so
			// that aborted data sits in the log for read_committed readers
			// to wrongly see; the others drop records not yet sent.
			ctx, cancel := context.WithTimeout(w.ctx, 4*w.cfg.RequestTimeout)
			_ = p.Flush(ctx) // a record that fails only makes the abort more needed
			cancel()
		}
		phase(PhasePrepare, false)
		ok := w.abortTxn(p, name, ti, nil)
		if ok {
			phase(PhaseMarkers, false)
		}
		return ok
	}
	if w.phases.waiting(PhasePrepare) {
		// A fault waits to kill the coordinator as EndTxn is sent: flush
		// first, so that what it hits is EndTxn and not the records.
		ctx, cancel := context.WithTimeout(w.ctx, 4*w.cfg.RequestTimeout)
		_ = p.Flush(ctx) // a failed record shows in the commit
		cancel()
	}
	phase(PhasePrepare, true)
	switch err := w.commitTxn(p, name, ti); {
	case err == nil:
		phase(PhaseMarkers, true)
		return true
	case errors.As(err, new(*client.TransactionAbortableError)):
		// Not committed, and never will be: abort and go on.
		return w.abortTxn(p, name, ti, err)
	default:
		return false // unknown; a new instance fences this one
	}
}

// commitTxn commits transaction ti of producer p (instance name), calling
// CommitTransaction again while it times out, for txnCommitPatience. It
// records the outcome and returns nil once committed; an abortable error
// (*client.TransactionAbortableError: nothing recorded yet, the caller
// aborts); or any other error, with the transaction recorded unknown (and
// the producer as fenced if it was).
func (w *workload) commitTxn(p *client.Producer, name string, ti int) error {
	w.rec.commitInvoked(ti, time.Now())
	deadline := time.Now().Add(txnCommitPatience)
	for {
		ctx, cancel := context.WithTimeout(w.ctx, 4*w.cfg.RequestTimeout)
		err := p.CommitTransaction(ctx)
		cancel()
		var abortable *client.TransactionAbortableError
		switch {
		case err == nil:
			w.rec.endTxn(ti, time.Now(), checker.TxnCommitted, nil)
			return nil
		case errors.As(err, &abortable):
			return err
		case errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil && time.Now().Before(deadline):
			continue // the commit must be called again
		default:
			// Fatal, or no answer within the patience: the outcome is
			// unknown.
			w.rec.endTxn(ti, time.Now(), checker.TxnUnknown, err)
			w.log.Warn("commit outcome unknown", "producer", name, "err", err)
			if errors.Is(err, client.ErrProducerFenced) {
				w.rec.fence(name, time.Now(), err)
			}
			return err
		}
	}
}

// abortTxn aborts transaction ti (cause: why, nil for a planned abort). A
// transaction whose commit failed as abortable is aborted whether or not
// the abort's answer comes: it cannot commit any more.
func (w *workload) abortTxn(p *client.Producer, name string, ti int, cause error) bool {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(w.ctx, 4*w.cfg.RequestTimeout)
		err := p.AbortTransaction(ctx)
		cancel()
		if err == nil {
			w.rec.endTxn(ti, time.Now(), checker.TxnAborted, cause)
			return true
		}
		if errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil && attempt < 10 {
			continue
		}
		// The commit was never invoked, or failed as abortable: the
		// transaction is aborted (by the next instance's fencing, or on its
		// timeout) even without the answer.
		w.rec.endTxn(ti, time.Now(), checker.TxnAborted, errors.Join(cause, err))
		w.log.Warn("abort", "producer", name, "err", err)
		if errors.Is(err, client.ErrProducerFenced) {
			w.rec.fence(name, time.Now(), err)
		}
		return false
	}
}

// pace waits d or until the workload stops.
func (w *workload) pace(d time.Duration) {
	select {
	case <-time.After(d):
	case <-w.ctx.Done():
	}
}
