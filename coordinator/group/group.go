package group

import (
	"container/heap"
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Group is one consumer group's membership state. It is not safe for
// concurrent use: its owner serialises calls.
type Group struct {
	id  string
	cfg Config

	epoch           int32 // group epoch
	assignmentEpoch int32 // epoch of target
	assignor        string
	dead            bool

	members map[string]*member
	// static: instance id -> member id holding it (live or departed).
	static map[string]string
	// target: member id -> target assignment at assignmentEpoch.
	target map[string]Assignment
	// owners: topic -> partition -> member id that holds it (assigned or
	// pending revocation). Invariant: a partition has at most one owner.
	owners map[string]map[int32]string
	// subscribers: topic -> number of members subscribed.
	subscribers map[string]int
	// regexes: the members' distinct regexes, compiled and resolved
	// (regex.go).
	regexes map[string]*groupRegex
	// metadata: the subscribed topics' metadata the target was computed
	// from (deep copies).
	metadata map[string]TopicMetadata
	// seenRacks: topic -> the caller's Racks slice last found equal to
	// metadata's (identity fast path of metadataChanged).
	seenRacks map[string][][]string
	// metadataHash: hashMetadata(metadata), 0 before a target.
	metadataHash uint64
	deadlines    deadlineHeap

	// What the log holds (persist.go, decision 72): the group record and
	// member records last reported written, and the members whose state
	// may have changed since.
	logged        GroupRecord
	loggedMembers map[string]MemberRecord
	dirty         map[string]struct{}
}

// New returns an empty group with id and cfg (defaults applied).
func New(id string, cfg Config) *Group {
	cfg = cfg.WithDefaults()
	return &Group{
		id:            id,
		cfg:           cfg,
		assignor:      cfg.DefaultAssignor,
		members:       map[string]*member{},
		static:        map[string]string{},
		target:        map[string]Assignment{},
		owners:        map[string]map[int32]string{},
		subscribers:   map[string]int{},
		regexes:       map[string]*groupRegex{},
		metadata:      map[string]TopicMetadata{},
		seenRacks:     map[string][][]string{},
		loggedMembers: map[string]MemberRecord{},
		dirty:         map[string]struct{}{},
	}
}

// ID returns the group id.
func (g *Group) ID() string { return g.id }

// Epoch returns the group epoch.
func (g *Group) Epoch() int32 { return g.epoch }

// AssignmentEpoch returns the epoch of the target assignment. Every method
// but RestoreEpoch returns with it equal to Epoch (the target is computed
// synchronously).
func (g *Group) AssignmentEpoch() int32 { return g.assignmentEpoch }

// Assignor returns the name of the group's assignor: the one most members
// ask for, ties going to Config.DefaultAssignor, then to the smallest name.
func (g *Group) Assignor() string { return g.assignor }

// RestoreEpoch sets the group epoch when a coordinator loads the group from
// its log (before any member joins), so that later bumps go above every
// epoch handed out before. It never lowers the epoch. The target of the
// memberless group is empty, so the assignment epoch follows. Called on a
// group with members, it leaves the group Assigning until the next
// Heartbeat, Expire or MetadataChanged computes the target for the epoch.
func (g *Group) RestoreEpoch(epoch int32) {
	if epoch > g.epoch {
		g.epoch = epoch
	}
	if len(g.members) == 0 && g.epoch > g.assignmentEpoch {
		g.assignmentEpoch = g.epoch
	}
}

// State returns the group's state.
func (g *Group) State() State {
	switch {
	case g.dead:
		return Dead
	case len(g.members) == 0:
		return Empty
	case g.epoch > g.assignmentEpoch:
		return Assigning
	}
	for id, m := range g.members {
		if m.departed() {
			// A static member away for now cannot reconcile; the group is
			// still Stable while nobody waits for it (its target is what
			// it holds). Kafka counts it as Reconciling regardless.
			if !m.assigned.Equal(g.target[id]) {
				return Reconciling
			}
			continue
		}
		if !m.reconciledTo(g.assignmentEpoch) {
			return Reconciling
		}
	}
	return Stable
}

// Size returns the number of members, not counting departed static
// members (which still hold their partitions until their session ends).
func (g *Group) Size() int {
	n := 0
	for _, m := range g.members {
		if !m.departed() {
			n++
		}
	}
	return n
}

// Delete marks a group with no members Dead (DeleteGroups); NON_EMPTY_GROUP
// while it has members, departed static members included. A Dead group
// answers every Heartbeat GROUP_ID_NOT_FOUND; its owner drops it and
// starts a New group at the next join.
func (g *Group) Delete() error {
	if len(g.members) > 0 {
		noun := "members"
		if len(g.members) == 1 {
			noun = "member"
		}
		return errs.New(sluicev1.ErrorCode_NON_EMPTY_GROUP, "group %s has %d %s", g.id, len(g.members), noun)
	}
	g.dead = true
	return nil
}

// memberIDs returns every member id, sorted.
func (g *Group) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// setOwnership replaces m's assigned and pending partitions, keeping the
// owners index in step. It panics if a partition would get two owners:
// that is the invariant revoke-before-assign exists for.
func (g *Group) setOwnership(m *member, assigned, pending Assignment) {
	at := m.assignedAt // what m keeps keeps its stamp
	g.dropOwnership(m)
	m.assignedAt = at
	for _, a := range []Assignment{assigned, pending} {
		for t, ps := range a {
			o := g.owners[t]
			if o == nil {
				o = map[int32]string{}
				g.owners[t] = o
			}
			for _, p := range ps {
				if prev, ok := o[p]; ok && prev != m.id {
					panic("group: partition " + t + " given to " + m.id + " while " + prev + " holds it")
				}
				o[p] = m.id
			}
		}
	}
	m.assigned, m.pending = assigned, pending
	m.restamp()
}

// dropOwnership frees every partition m holds (and forgets their
// assignment epochs).
func (g *Group) dropOwnership(m *member) {
	for _, a := range []Assignment{m.assigned, m.pending} {
		for t, ps := range a {
			o := g.owners[t]
			for _, p := range ps {
				if o[p] == m.id {
					delete(o, p)
				}
			}
			if len(o) == 0 {
				delete(g.owners, t)
			}
		}
	}
	m.assigned, m.pending, m.assignedAt = nil, nil, nil
}

// ownerOf returns the member holding topic/partition ("" if free).
func (g *Group) ownerOf(topic string, partition int32) string {
	return g.owners[topic][partition]
}

// subscribe adjusts the subscriber counts from old topics to new.
func (g *Group) subscribe(old, new []string) {
	for _, t := range old {
		if g.subscribers[t]--; g.subscribers[t] <= 0 {
			delete(g.subscribers, t)
		}
	}
	for _, t := range new {
		g.subscribers[t]++
	}
}

// addMember inserts m (already filled in) into the group's indexes.
func (g *Group) addMember(m *member) {
	g.members[m.id] = m
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	g.subscribe(nil, m.topics)
	heap.Push(&g.deadlines, m)
}

// removeMember takes m out of the group and frees its partitions. The
// caller bumps the epoch.
func (g *Group) removeMember(m *member) {
	g.markDirty(m.id)
	g.dropOwnership(m)
	g.subscribe(m.topics, nil)
	g.dropRegex(m)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	delete(g.target, m.id)
	delete(g.members, m.id)
	if m.heapIndex >= 0 && m.heapIndex < len(g.deadlines) && g.deadlines[m.heapIndex] == m {
		heap.Remove(&g.deadlines, m.heapIndex)
	}
}

// touch re-sorts m in the deadline heap after its deadlines changed.
func (g *Group) touch(m *member) {
	heap.Fix(&g.deadlines, m.heapIndex)
}

// NextDeadline is the earliest time Expire may fence someone (zero if
// nobody can be fenced).
func (g *Group) NextDeadline() time.Time {
	if len(g.deadlines) == 0 {
		return time.Time{}
	}
	return g.deadlines[0].deadline()
}
