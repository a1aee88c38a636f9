package runtime

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Per-key serialization and timers of a shard (Kafka's CoordinatorRuntime
// orders the events of one key; its CoordinatorTimer schedules them).
//
// A key (a transactional id, a group) has at most one holder at a time:
// the request or timer working on it. The holder reads the shard's state,
// decides, appends with no lock held, waits for the commit, applies and
// answers, then releases the key; the next request for the same key
// waits its turn (Acquire) or is refused (TryAcquire: the transaction
// coordinator's CONCURRENT_TRANSACTIONS). Other keys of the shard, and
// the shard's other work, never wait for it: a slow write to one group
// delays only that group.

// A Partition's key table maps each held key to its waiters: the Acquire
// calls waiting for it, in arrival order (Release hands the key to the
// first by closing its channel). A held key without waiters maps to nil,
// so an uncontended key costs no allocation. Guarded by Partition.mu.

// TryAcquire takes key if nobody holds it, and reports whether it did.
func (p *Partition) TryAcquire(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, held := p.keys[key]; held {
		return false
	}
	p.keys[key] = nil
	return true
}

// Acquire takes key, waiting (in arrival order) for the requests that
// hold or wait for it. It fails with NOT_COORDINATOR when the partition
// stops being led meanwhile and COORDINATOR_NOT_AVAILABLE when ctx ends
// first; the key is then not held. On success the caller must Release.
func (p *Partition) Acquire(ctx context.Context, key string) error {
	p.mu.Lock()
	waiters, held := p.keys[key]
	if !held {
		p.keys[key] = nil
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	p.keys[key] = append(waiters, ch)
	p.mu.Unlock()
	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "gave up waiting for the earlier requests of %q: %w", errs.Echo(key), ctx.Err())
	case <-p.Ctx.Done():
		err = errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating %q (%s partition %d)", errs.Echo(key), p.TP.Topic, p.TP.Partition)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-ch:
		// Handed over just as we gave up: pass it on.
		p.releaseLocked(key)
		return err
	default:
	}
	if waiters, held := p.keys[key]; held {
		for i, w := range waiters {
			if w == ch {
				p.keys[key] = append(waiters[:i], waiters[i+1:]...)
				break
			}
		}
	}
	return err
}

// Release frees key: its first waiter, if any, holds it next.
func (p *Partition) Release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(key)
}

func (p *Partition) releaseLocked(key string) {
	waiters, held := p.keys[key]
	if !held {
		panic("coordinator/runtime: Release of a key not held: " + key)
	}
	if len(waiters) == 0 {
		delete(p.keys, key)
		return
	}
	p.keys[key] = waiters[1:]
	close(waiters[0])
}

// Busy reports whether key is held.
func (p *Partition) Busy(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, held := p.keys[key]
	return held
}

// QueueDepth is the number of requests and timers that hold or wait for
// a key of the partition, for metrics.
func (p *Partition) QueueDepth() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, waiters := range p.keys {
		n += 1 + len(waiters)
	}
	return n
}

// Schedule arranges for fn to run on the coordinator's goroutine group at
// time at (at once when it has passed), unless s stops being led first.
// A shard has at most one timer per name: Schedule replaces the timer of
// the same name (reusing it: a group's timer moves at every heartbeat),
// CancelTimer drops it. fn runs with no lock and no key held; it takes
// what it needs (Acquire) and may Schedule again.
//
// fn may run early — a timer replaced just as it fired runs the new fn
// once at the old time — or late, and the delay is measured on
// Config.Now while the timer runs on the system clock: fn checks its own
// deadline and schedules itself again when it is not due.
func (r *Runtime[S]) Schedule(s S, name string, at time.Time, fn func()) {
	p := s.Base()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Ctx.Err() != nil {
		return
	}
	d := max(at.Sub(r.cfg.Now()), 0)
	if e := p.timers[name]; e != nil {
		e.fn = fn
		e.t.Reset(d)
		return
	}
	e := &timerEntry{fn: fn}
	e.t = time.AfterFunc(d, func() { r.fire(s, name, e) })
	p.timers[name] = e
}

// timerEntry is one named timer of a Partition (guarded by its mu).
type timerEntry struct {
	t  *time.Timer
	fn func()
}

// fire runs e's function unless e was cancelled or s is no longer led.
func (r *Runtime[S]) fire(s S, name string, e *timerEntry) {
	p := s.Base()
	p.mu.Lock()
	current := p.timers[name] == e
	fn := e.fn
	if current {
		delete(p.timers, name)
	}
	p.mu.Unlock()
	if !current {
		return // cancelled, or replaced after a cancel
	}
	r.cfg.Mu.Lock()
	if r.OwnsLocked(s) {
		r.GoLocked(fn)
	}
	r.cfg.Mu.Unlock()
}

// CancelTimer drops s's timer of that name, if any.
func (r *Runtime[S]) CancelTimer(s S, name string) {
	p := s.Base()
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.timers[name]; e != nil {
		e.t.Stop()
		delete(p.timers, name)
	}
}

// Timers is the number of timers s has scheduled, for tests and metrics.
func (r *Runtime[S]) Timers(s S) int {
	p := s.Base()
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.timers)
}

// stop ends p: its context, and its timers (a timer firing meanwhile
// finds the partition no longer owned).
func (p *Partition) stop() {
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, e := range p.timers {
		e.t.Stop()
		delete(p.timers, name)
	}
}
