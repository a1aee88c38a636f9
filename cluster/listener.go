package cluster

import (
	"slices"
	"sync"

	"github.com/sluice-io/sluice/internal/goroutine"
)

// LeadershipListener is told when this node starts and stops leading a
// partition of the topic it was registered for
// (ReplicaManager.RegisterLeadershipListener). A coordinator implements it
// to load its state when it becomes leader of one of its topic's
// partitions (__transaction_state, __consumer_offsets) and to drop that
// state when it resigns (DESIGN §3, §10). cluster owns the interface;
// cluster never imports the coordinator.
//
// Contract:
//   - Both methods are called on the replica manager's one delivery
//     goroutine, never concurrently with each other, and never with a
//     replica manager lock held: the event is queued while the partition's
//     role lock is held and delivered after it is released.
//   - Events of one partition arrive in the order the leadership changed:
//     BecameLeader(tp, e) is followed by Resigned(tp, e) before any
//     BecameLeader(tp, e') with e' > e. A new leader epoch while this node
//     stays leader is Resigned(tp, e) then BecameLeader(tp, e').
//   - Resigned is sent when leadership moves to another broker, the
//     partition goes offline, the replica is removed from this node
//     (topic deleted, replica moved), and for every partition led when
//     the replica manager closes.
//   - An event says what was true when it was queued; by delivery the
//     partition may have changed again (a later event is then queued).
//     Calls that depend on the epoch (AppendCommitted) take it and fail
//     when it is no longer current.
//   - A listener may call back into the ReplicaManager (AppendCommitted,
//     Replica, Fetch, ...) but not Close or RegisterLeadershipListener,
//     which wait for the delivery goroutine. It may block, but while it
//     does no other event is delivered to any listener: long work (loading
//     a coordinator's partition) belongs on the listener's own goroutine.
type LeadershipListener interface {
	// BecameLeader: this node leads tp at leaderEpoch.
	BecameLeader(tp TopicPartition, leaderEpoch int32)
	// Resigned: this node no longer leads tp at leaderEpoch.
	Resigned(tp TopicPartition, leaderEpoch int32)
}

// RegisterLeadershipListener registers l for the partitions of topic and
// returns the function that unregisters it. l first hears BecameLeader
// for every partition of topic this node leads now, then every change.
// After unregister returns no new event is queued for l; events queued
// before may still be delivered. Registering after Close does nothing.
func (m *ReplicaManager) RegisterLeadershipListener(topic string, l LeadershipListener) (unregister func()) {
	// Leadership changes only under applyMu (Apply, Close): holding it,
	// the replay below and the registration see the same state, so l
	// misses no change and hears none twice.
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	if !m.events.register(topic, l) {
		return func() {}
	}
	for _, p := range m.allReplicas() {
		if p.Topic != topic {
			continue
		}
		p.roleMu.Lock()
		if p.tracker != nil {
			m.events.queue(leadershipEvent{l: l, tp: p.TopicPartition, leaderEpoch: p.tracker.LeaderEpoch(), leader: true})
		}
		p.roleMu.Unlock()
	}
	return func() { m.events.unregister(topic, l) }
}

// leadershipEvent is one call to make on a listener.
type leadershipEvent struct {
	l           LeadershipListener
	tp          TopicPartition
	leaderEpoch int32
	leader      bool // BecameLeader; else Resigned
}

// leadershipEvents queues leadership changes and delivers them to the
// listeners on one goroutine, in queue order. The queue is unbounded: it
// grows only with leadership changes, a handful per partition per
// election.
type leadershipEvents struct {
	mu        sync.Mutex // guards the following
	listeners map[string][]LeadershipListener
	pending   []leadershipEvent
	started   bool // the delivery goroutine runs
	closed    bool // no more events; the goroutine ends once pending is empty
	wake      chan struct{}

	// g holds the delivery goroutine, started by the first register.
	g goroutine.Group
}

func newLeadershipEvents() *leadershipEvents {
	return &leadershipEvents{listeners: map[string][]LeadershipListener{}, wake: make(chan struct{}, 1)}
}

// register adds l for topic and starts the delivery goroutine if it does
// not run yet. It reports false (and adds nothing) once closed.
func (e *leadershipEvents) register(topic string, l LeadershipListener) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.listeners[topic] = append(e.listeners[topic], l)
	if !e.started {
		e.started = true
		e.g.Go(e.deliver)
	}
	return true
}

func (e *leadershipEvents) unregister(topic string, l LeadershipListener) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ls := e.listeners[topic]
	if i := slices.Index(ls, l); i >= 0 {
		e.listeners[topic] = slices.Delete(slices.Clone(ls), i, i+1)
	}
}

// changed queues the change for every listener of tp's topic. The caller
// holds tp's roleMu, so a partition's changes are queued in order.
func (e *leadershipEvents) changed(tp TopicPartition, leaderEpoch int32, leader bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.listeners[tp.Topic] {
		e.queueLocked(leadershipEvent{l: l, tp: tp, leaderEpoch: leaderEpoch, leader: leader})
	}
}

func (e *leadershipEvents) queue(ev leadershipEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queueLocked(ev)
}

func (e *leadershipEvents) queueLocked(ev leadershipEvent) {
	if e.closed {
		return
	}
	e.pending = append(e.pending, ev)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// closeAndWait stops queueing and waits until the delivery goroutine has
// delivered what is pending and ended.
func (e *leadershipEvents) closeAndWait() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	e.g.Wait()
}

// deliver is the delivery goroutine: it calls the listeners, holding no
// lock, until closed and drained.
func (e *leadershipEvents) deliver() {
	for {
		e.mu.Lock()
		batch, closed := e.pending, e.closed
		e.pending = nil
		e.mu.Unlock()
		for _, ev := range batch {
			if ev.leader {
				ev.l.BecameLeader(ev.tp, ev.leaderEpoch)
			} else {
				ev.l.Resigned(ev.tp, ev.leaderEpoch)
			}
		}
		if len(batch) > 0 {
			continue
		}
		if closed {
			return
		}
		<-e.wake
	}
}
