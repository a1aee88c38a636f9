package group

import (
	"sort"
	"time"
)

// chooseAssignor returns the assignor most members ask for (departed
// static members count: they are members until their session ends); ties
// go to the default, then to the smallest name; no votes: the default.
func (g *Group) chooseAssignor() string {
	votes := map[string]int{}
	for _, m := range g.members {
		if m.assignor != "" {
			votes[m.assignor]++
		}
	}
	names := make([]string, 0, len(votes))
	for name := range votes {
		names = append(names, name)
	}
	sort.Strings(names)
	best, bestVotes := g.cfg.DefaultAssignor, votes[g.cfg.DefaultAssignor]
	for _, name := range names {
		if votes[name] > bestVotes {
			best, bestVotes = name, votes[name]
		}
	}
	return best
}

// metadataChanged reports whether a subscribed topic's metadata differs
// from the snapshot the target was computed from. With quick, a topic
// whose Racks is the very slice (same array, same length) that last
// compared equal is not compared again: Heartbeat's fast path, so that a
// caller passing the same immutable metadata on every heartbeat pays
// O(subscribed topics), not O(partitions × replicas).
func (g *Group) metadataChanged(topics map[string]TopicMetadata, quick bool) bool {
	if len(g.metadata) != len(g.subscribers) {
		return true
	}
	for t := range g.subscribers {
		old, ok := g.metadata[t]
		if !ok {
			return true
		}
		cur := topics[t]
		if quick && cur.Partitions == old.Partitions && sameSlice(cur.Racks, g.seenRacks[t]) {
			continue
		}
		if !equalMetadata(old, cur) {
			return true
		}
		g.seenRacks[t] = cur.Racks
	}
	return false
}

// sameSlice reports whether a and b are the same slice (not merely equal).
func sameSlice(a, b [][]string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// bump raises the group epoch and computes the target for it from the
// members and topics: the group's assignor is chosen again and the
// subscribed topics' metadata snapshot refreshed.
func (g *Group) bump(topics map[string]TopicMetadata) {
	g.epoch++
	g.computeTarget(topics)
}

// computeTarget computes the target assignment for the current group
// epoch.
func (g *Group) computeTarget(topics map[string]TopicMetadata) {
	g.assignor = g.chooseAssignor()
	g.metadata = make(map[string]TopicMetadata, len(g.subscribers))
	g.seenRacks = make(map[string][][]string, len(g.subscribers))
	for t := range g.subscribers {
		g.metadata[t] = cloneMetadata(topics[t])
		g.seenRacks[t] = topics[t].Racks
	}
	ids := g.memberIDs()
	subs := make([]MemberSubscription, len(ids))
	for i, id := range ids {
		m := g.members[id]
		subs[i] = MemberSubscription{MemberID: id, InstanceID: m.instanceID, RackID: m.rackID, Topics: m.topics, Current: g.target[id]}
	}
	a, _ := AssignorByName(g.assignor)
	g.target = a.Assign(subs, g.metadata)
	g.assignmentEpoch = g.epoch
	g.metadataHash = hashMetadata(g.metadata)
	g.markAllDirty() // any member's share of the target may have changed
}

// MetadataChanged recomputes the target when a subscribed topic's
// partition count or racks changed since the target was computed, or
// when the topics a member's regex resolves to changed (a topic created
// or deleted; regex.go): the group epoch bumps. Nothing changes
// otherwise. Members reconcile on
// their next heartbeats. It compares every partition's racks; Heartbeat
// skips that comparison for a Racks slice it has seen equal before, so a
// caller that changes racks in place (rather than passing new slices)
// must call MetadataChanged.
func (g *Group) MetadataChanged(now time.Time, topics map[string]TopicMetadata) {
	if g.dead || len(g.members) == 0 {
		return
	}
	resolved := g.refreshRegexes(now, topics, true)
	switch {
	case resolved || g.metadataChanged(topics, false):
		g.bump(topics)
	case g.epoch > g.assignmentEpoch:
		g.computeTarget(topics)
	}
}
