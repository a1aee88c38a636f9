package cluster

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// commitWait is one acks=all produce's wait for a batch of p (AwaitCommit):
// it sits in p.commitWaits until the code that moves the high watermark
// completes it, leadership ends, its timeout passes or its context ends,
// whichever comes first. done runs once: queued, guarded by roleMu, says
// whether it is still to run.
type commitWait struct {
	last  int64
	epoch int32 // the leader epoch the batch was appended in (NoLeaderEpoch: any)
	done  func(error)

	// guarded by p.roleMu
	queued  bool
	timer   *time.Timer
	stopCtx func() bool // stops the context.AfterFunc; nil without one
}

// AwaitCommit arranges for done to be called, once, with the outcome of
// an acks=all produce's wait for the batch ending at lastOffset, appended
// in leaderEpoch (AppendResult.LeaderEpoch; NoLeaderEpoch: any epoch).
// The outcomes are WaitCommitted's:
//   - nil: the batch is below the high watermark (replicated to the ISR);
//   - NOT_ENOUGH_REPLICAS_AFTER_APPEND: committed, but the ISR is smaller
//     than min.insync.replicas (replication.Tracker.AcksAllResult);
//   - NOT_LEADER_OR_FOLLOWER wrapping ErrCommitUnknown: this broker does
//     not lead p at leaderEpoch, or stops leading it (or leads it at a new
//     epoch: the batch's offsets may have been truncated and reused)
//     before the batch is committed;
//   - REQUEST_TIMED_OUT wrapping ErrCommitUnknown: timeout passed, or ctx
//     ended, first.
//
// Unlike WaitCommitted nothing blocks and no goroutine waits: the waits
// are kept in offset order and completed by whoever moves the high
// watermark (a follower's fetch, the leader's own append when it is the
// whole ISR, an ISR change), all the waits it passes at once, in offset
// order; a timer (and context.AfterFunc) per wait ends it early.
//
// done may be called before AwaitCommit returns, on any goroutine, and
// possibly with p's roleMu held (by a follower's fetch, an append or a
// leadership change): it must not block, and must not call back into p or
// its ReplicaManager. Hand the outcome to a goroutine of your own (a
// buffered channel that cannot be full, a closed channel) and do the rest
// there.
func (p *Replica) AwaitCommit(ctx context.Context, lastOffset int64, leaderEpoch int32, timeout time.Duration, done func(error)) {
	p.roleMu.Lock()
	t := p.tracker
	if t == nil || (leaderEpoch >= 0 && t.LeaderEpoch() != leaderEpoch) {
		p.roleMu.Unlock()
		done(p.leadershipLostError(lastOffset))
		return
	}
	if ok, err := t.AcksAllResult(lastOffset); ok {
		p.roleMu.Unlock()
		done(err)
		return
	}
	if ctx.Err() != nil {
		p.roleMu.Unlock()
		done(p.commitTimeoutError(lastOffset))
		return
	}
	w := &commitWait{last: lastOffset, epoch: leaderEpoch, done: done, queued: true}
	// Usually the newest batch: search from the end.
	i := len(p.commitWaits)
	for i > 0 && p.commitWaits[i-1].last > lastOffset {
		i--
	}
	p.commitWaits = slices.Insert(p.commitWaits, i, w)
	// Both may fire at once (an expired ctx, a zero timeout); expire then
	// waits for roleMu, which we release only once w is complete.
	w.timer = time.AfterFunc(timeout, func() { p.expireWait(w) })
	if ctx.Done() != nil {
		w.stopCtx = context.AfterFunc(ctx, func() { p.expireWait(w) })
	}
	p.roleMu.Unlock()
}

// expireWait ends w with REQUEST_TIMED_OUT if it still waits: its timer
// fired or its context ended. It runs on a goroutine of its own (the
// timer's or the context's), so done is called without roleMu.
func (p *Replica) expireWait(w *commitWait) {
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
	w.done(p.commitTimeoutError(w.last))
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
			w.done(p.leadershipLostError(w.last))
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
			w.done(p.leadershipLostError(w.last))
			continue
		}
		ok, err := t.AcksAllResult(w.last)
		if !ok {
			n += copy(ws[n:], ws[i:])
			break
		}
		p.stopWaitLocked(w)
		w.done(err)
	}
	clear(ws[n:])
	p.commitWaits = ws[:n]
}

// stopWaitLocked marks w done and stops its timer and context hook. The
// caller holds roleMu and then calls w.done.
func (p *Replica) stopWaitLocked(w *commitWait) {
	w.queued = false
	w.timer.Stop()
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
