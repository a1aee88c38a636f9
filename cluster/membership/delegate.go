package membership

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// conflictLogInterval limits the Error log of one node id conflict (same
// name, same two addresses) to once per interval; repeats go to Debug.
const conflictLogInterval = time.Minute

// maxConflictsTracked bounds the memory of logged conflicts.
const maxConflictsTracked = 1024

// delegate adapts a Membership to memberlist's callback interfaces
// (Delegate, EventDelegate, ConflictDelegate, MergeDelegate). Memberlist
// calls the event and conflict methods while holding its node lock, so they
// only copy, queue and log, never block and never call back into
// memberlist.
type delegate struct {
	m *Membership
}

var (
	_ memberlist.Delegate         = delegate{}
	_ memberlist.EventDelegate    = delegate{}
	_ memberlist.ConflictDelegate = delegate{}
	_ memberlist.MergeDelegate    = delegate{}
)

// NodeMeta returns the local node's encoded Meta. Its size was checked
// against memberlist.MetaMaxSize when it was set.
func (d delegate) NodeMeta(limit int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	return d.m.meta
}

// NotifyMsg ignores user messages: Sluice sends none over gossip.
func (delegate) NotifyMsg([]byte) {}

// GetBroadcasts has no user broadcasts to add.
func (delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState has no user state to exchange on push/pull.
func (delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores the (empty) remote user state.
func (delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin records the node in the view and queues an EventJoin.
func (d delegate) NotifyJoin(n *memberlist.Node) { d.observe(EventJoin, n) }

// NotifyLeave drops the node from the view and queues an EventLeave.
func (d delegate) NotifyLeave(n *memberlist.Node) { d.observe(EventLeave, n) }

// NotifyUpdate records the node's new meta and queues an EventUpdate.
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.observe(EventUpdate, n) }

// observe applies one change to the view and hands it to eventLoop without
// blocking. Memberlist holds its node lock here, the only time n's fields
// are safe to read (see view.go). Changes of this node itself update the
// view but are not delivered as events.
func (d delegate) observe(typ EventType, n *memberlist.Node) {
	m := d.m
	addr := n.Address()
	meta, err := decodeMeta(n.Name, n.Meta)
	m.apply(typ, n.Name, member{meta: meta, addr: addr, ok: err == nil})
	if n.Name == m.name {
		if typ == EventJoin {
			m.advertise.Store(&addr)
		}
		return
	}
	if m.cfg.OnEvent == nil || m.stopped.Load() {
		return
	}
	ev := nodeEvent{Event: Event{Type: typ, Meta: meta, Addr: addr}, name: n.Name, err: err}
	select {
	case m.events <- ev:
	default:
		m.log.Warn("membership: event queue full, dropping event",
			"event", typ.String(), "node", n.Name, "addr", addr, "capacity", cap(m.events))
	}
}

// NotifyConflict is called when a node claims a name (hence a node id) that
// another address already holds. Either two live nodes share an id, which
// is a configuration error, or a node restarted on a new address before the
// others declared its old one dead; memberlist cannot tell, so both are
// logged at Error (once per conflictLogInterval per pair of addresses).
// When this node is the one claiming, the join loop retries until its new
// address is taken.
func (d delegate) NotifyConflict(existing, other *memberlist.Node) {
	m := d.m
	if existing.Name == m.name {
		m.rejoin.Store(true)
	}
	key := existing.Name + " " + existing.Address() + " " + other.Address()
	now := time.Now()
	m.conflictMu.Lock()
	last, seen := m.conflicts[key]
	loud := !seen || now.Sub(last) >= conflictLogInterval
	if loud {
		if len(m.conflicts) >= maxConflictsTracked {
			clear(m.conflicts) // forgets only which repeats to keep quiet
		}
		m.conflicts[key] = now
	}
	m.conflictMu.Unlock()
	log := m.log.Debug
	if loud {
		log = m.log.Error
	}
	log("membership: node id conflict: two addresses claim the same node; "+
		"either two nodes share a node id or a node restarted on a new address before its old one was declared dead",
		"node", existing.Name, "known_addr", existing.Address(), "other_addr", other.Address())
}

// NotifyMerge is called with a peer's member list when this node joins
// through it. If the peer still lists this node's name at another address
// (this node restarted on a new one and the peer has not taken it yet), the
// join loop is told to push again. The merge itself always proceeds.
func (d delegate) NotifyMerge(peers []*memberlist.Node) error {
	m := d.m
	adv := m.advertise.Load()
	if adv == nil {
		return nil
	}
	for _, p := range peers {
		if p.Name == m.name && p.Address() != *adv {
			m.rejoin.Store(true)
		}
	}
	return nil
}
