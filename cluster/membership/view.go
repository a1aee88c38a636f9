package membership

import (
	"cmp"
	"slices"
)

// The view is this package's copy of the alive members, this node
// included. It exists because memberlist's Members returns pointers to
// nodes that memberlist rewrites in place (Addr, Port, Meta) while holding
// its node lock, so reading them afterwards races
// (hashicorp/memberlist#306). The event callbacks run under that lock and
// are the safe place to copy them; they keep the view exactly in step with
// memberlist's alive-or-suspect set: a node enters on join (new, or back
// from dead or left), changes on update and leaves on death or leave.

// member is one node in the view.
type member struct {
	meta Meta
	addr string // gossip host:port
	ok   bool   // meta parsed; a node whose meta did not is not listed
}

// apply records one change, made by the memberlist node named name.
// Called from memberlist's callbacks only, under its node lock; viewMu is
// taken after that lock and never held while calling memberlist.
func (m *Membership) apply(typ EventType, name string, mem member) {
	m.viewMu.Lock()
	defer m.viewMu.Unlock()
	if typ == EventLeave {
		delete(m.view, name)
		return
	}
	m.view[name] = mem
}

// Members returns the alive members, this node included (unless it has
// left), sorted by NodeID. Members whose meta does not parse are skipped.
// Suspect members are still listed: they are alive until declared dead.
// After Shutdown it returns the last view.
func (m *Membership) Members() []Meta {
	m.viewMu.Lock()
	defer m.viewMu.Unlock()
	out := make([]Meta, 0, len(m.view))
	for _, mem := range m.view {
		if mem.ok {
			out = append(out, mem.meta)
		}
	}
	slices.SortFunc(out, func(a, b Meta) int { return cmp.Compare(a.NodeID, b.NodeID) })
	return out
}

// Member returns the Meta of the alive member with the given id, if any.
func (m *Membership) Member(id int32) (Meta, bool) {
	m.viewMu.Lock()
	defer m.viewMu.Unlock()
	mem, found := m.view[nodeName(id)]
	if !found || !mem.ok {
		return Meta{}, false
	}
	return mem.meta, true
}

// memberAddrs returns the gossip addresses of the other members in the
// view.
func (m *Membership) memberAddrs() []string {
	m.viewMu.Lock()
	defer m.viewMu.Unlock()
	var out []string
	for name, mem := range m.view {
		if name != m.name {
			out = append(out, mem.addr)
		}
	}
	slices.Sort(out)
	return out
}
