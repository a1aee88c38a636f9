package cluster

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// CommitWaiter receives the outcome of an acks=all wait (AwaitCommit).
type CommitWaiter interface {
	// Committed is called once per AwaitCommit, with the outcome. It may
	// be called before AwaitCommit returns, on any goroutine, and possibly
	// with the partition's roleMu held (by a follower's fetch, an append or
	// a leadership change, which end many waits at once): it must not
	// block, and must not call back into the Replica or its
	// ReplicaManager. Hand the outcome to a goroutine of your own (a
	// buffered channel that cannot be full) and do the rest there.
	Committed(err error)
}

// commitWait is one acks=all wait for a batch of p (AwaitCommit): it sits
// in p.commitWaits until the code that moves the high watermark completes
// it, leadership ends, its deadline passes or its context ends, whichever
// comes first. queued, guarded by roleMu, says whether it is still to
// end; whoever clears it calls waiter.Committed.
type commitWait struct {
	last     int64
	epoch    int32 // the leader epoch the batch was appended in (NoLeaderEpoch: any)
	deadline time.Time
	waiter   CommitWaiter

	// guarded by p.roleMu
	queued  bool
	stopCtx func() bool // stops the context.AfterFunc; nil without one
}

// AwaitCommit arranges for w.Committed to be called, once, with the
// outcome of an acks=all produce's wait for the batch ending at
// lastOffset, appended in leaderEpoch (AppendResult.LeaderEpoch;
// NoLeaderEpoch: any epoch). The outcomes are WaitCommitted's:
//   - nil: the batch is below the high watermark (replicated to the ISR);
//   - NOT_ENOUGH_REPLICAS_AFTER_APPEND: committed, but the ISR is smaller
//     than min.insync.replicas (replication.Tracker.AcksAllResult);
//   - NOT_LEADER_OR_FOLLOWER wrapping ErrCommitUnknown: this broker does
//     not lead p at leaderEpoch, or stops leading it (or leads it at a new
//     epoch: the batch's offsets may have been truncated and reused)
//     before the batch is committed;
//   - REQUEST_TIMED_OUT wrapping ErrCommitUnknown: deadline passed, or ctx
//     ended, first.
//
// Unlike WaitCommitted nothing blocks and no goroutine waits: the waits
// are kept in offset order and completed by whoever moves the high
// watermark (a follower's fetch, the leader's own append when it is the
// whole ISR, an ISR change), all the waits it passes at once, in offset
// order. One timer per partition ends the waits whose deadline passed,
// and a context.AfterFunc the wait whose ctx ends.
func (p *Replica) AwaitCommit(ctx context.Context, lastOffset int64, leaderEpoch int32, deadline time.Time, w CommitWaiter) {
	p.roleMu.Lock()
	t := p.tracker
	if t == nil || (leaderEpoch >= 0 && t.LeaderEpoch() != leaderEpoch) {
		p.roleMu.Unlock()
		w.Committed(p.leadershipLostError(lastOffset))
		return
	}
	if ok, err := t.AcksAllResult(lastOffset); ok {
		p.roleMu.Unlock()
		w.Committed(err)
		return
	}
	if ctx.Err() != nil {
		p.roleMu.Unlock()
		w.Committed(p.commitTimeoutError(lastOffset))
		return
	}
	cw := &commitWait{last: lastOffset, epoch: leaderEpoch, deadline: deadline, waiter: w, queued: true}
	// Usually the newest batch: search from the end.
	i := len(p.commitWaits)
	for i > 0 && p.commitWaits[i-1].last > lastOffset {
		i--
	}
	p.commitWaits = slices.Insert(p.commitWaits, i, cw)
	if p.waitTimerAt.IsZero() || deadline.Before(p.waitTimerAt) {
		p.armWaitTimerLocked(deadline)
	}
	if ctx.Done() != nil {
		// May run at once (ctx ending meanwhile); it then waits for
		// roleMu, which is released only once cw is complete.
		cw.stopCtx = context.AfterFunc(ctx, func() { p.cancelWait(cw) })
	}
	p.roleMu.Unlock()
}

// armWaitTimerLocked sets the partition's wait timer to fire at deadline.
// The caller holds roleMu. The timer is not stopped when the waits end
// otherwise: a firing with nothing due rearms it for the earliest
// deadline left, if any (with one timeout for all requests, about once
// per timeout).
func (p *Replica) armWaitTimerLocked(deadline time.Time) {
	p.waitTimerAt = deadline
	if p.waitTimer == nil {
		p.waitTimer = time.AfterFunc(time.Until(deadline), p.expireWaits)
		return
	}
	p.waitTimer.Reset(time.Until(deadline))
}

// expireWaits ends with REQUEST_TIMED_OUT the waits whose deadline has
// passed, and rearms the timer for the earliest one left. It runs on the
// timer's goroutine and calls Committed without roleMu.
func (p *Replica) expireWaits() {
	now := time.Now()
	var expired []*commitWait
	p.roleMu.Lock()
	p.waitTimerAt = time.Time{}
	var next time.Time
	ws := p.commitWaits
	n := 0
	for _, w := range ws {
		if !w.deadline.After(now) {
			p.stopWaitLocked(w)
			expired = append(expired, w)
			continue
		}
		if next.IsZero() || w.deadline.Before(next) {
			next = w.deadline
		}
		ws[n] = w
		n++
	}
	clear(ws[n:])
	p.commitWaits = ws[:n]
	if !next.IsZero() {
		p.armWaitTimerLocked(next)
	}
	p.roleMu.Unlock()
	for _, w := range expired {
		w.waiter.Committed(p.commitTimeoutError(w.last))
	}
}

// cancelWait ends w with REQUEST_TIMED_OUT if it still waits: its context
// ended. It runs on the context's AfterFunc goroutine and calls Committed
// without roleMu.
func (p *Replica) cancelWait(w *commitWait) {
	p.roleMu.Lock()
	if !w.queued {
		p.roleMu.Unlock()
		return
	}
	if i := slices.Index(p.commitWaits, w); i >= 0 {
		p.commitWaits = slices.Delete(p.commitWaits, i, i+1)
	}
	p.stopWaitLocked(w)
	p.roleMu.Unlock()
	w.waiter.Committed(p.commitTimeoutError(w.last))
}

// completeWaitsLocked ends the waits the current state decides: all of
// them when leadership is gone, those of another leader epoch, and those
// the high watermark has passed — a prefix of the list, since the list is
// in offset order and AcksAllResult is done for every offset below the
// HW. Called by publishHWLocked, under roleMu.
func (p *Replica) completeWaitsLocked() {
	ws := p.commitWaits
	if len(ws) == 0 {
		return
	}
	t := p.tracker
	if t == nil {
		for _, w := range ws {
			p.stopWaitLocked(w)
			w.waiter.Committed(p.leadershipLostError(w.last))
		}
		clear(ws)
		p.commitWaits = ws[:0]
		return
	}
	epoch := t.LeaderEpoch()
	n := 0 // waits kept, moved to the front
	for i, w := range ws {
		if w.epoch >= 0 && w.epoch != epoch {
			// Not expected (a new tracker comes after dropTrackerLocked,
			// which fails every wait), but a batch of another epoch must
			// never be answered by this epoch's HW.
			p.stopWaitLocked(w)
			w.waiter.Committed(p.leadershipLostError(w.last))
			continue
		}
		ok, err := t.AcksAllResult(w.last)
		if !ok {
			n += copy(ws[n:], ws[i:])
			break
		}
		p.stopWaitLocked(w)
		w.waiter.Committed(err)
	}
	clear(ws[n:])
	p.commitWaits = ws[:n]
}

// stopWaitLocked marks w ended and stops its context hook. The caller
// holds roleMu, has taken w out of the list or is about to, and then calls
// w.waiter.Committed.
func (p *Replica) stopWaitLocked(w *commitWait) {
	w.queued = false
	if w.stopCtx != nil {
		w.stopCtx()
	}
}

// CommitWaits is the number of acks=all waits registered with AwaitCommit
// that have not ended yet (for tests and metrics).
func (p *Replica) CommitWaits() int {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	return len(p.commitWaits)
}

func (p *Replica) leadershipLostError(lastOffset int64) error {
	return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership of %s was lost before offset %d was replicated; %w", p, lastOffset, ErrCommitUnknown)
}

func (p *Replica) commitTimeoutError(lastOffset int64) error {
	return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "offset %d of %s was appended but not replicated to the in-sync replicas in time; %w", lastOffset, p, ErrCommitUnknown)
}
