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
// from the snapshot the target was computed from.
func (g *Group) metadataChanged(topics map[string]TopicMetadata) bool {
	if len(g.metadata) != len(g.subscribers) {
		return true
	}
	for t := range g.subscribers {
		old, ok := g.metadata[t]
		if !ok || !equalMetadata(old, topics[t]) {
			return true
		}
	}
	return false
}

// bump raises the group epoch and computes the target for it from the
// members and topics: the group's assignor is chosen again and the
// subscribed topics' metadata snapshot refreshed.
func (g *Group) bump(topics map[string]TopicMetadata) {
	g.epoch++
	g.assignor = g.chooseAssignor()
	g.metadata = make(map[string]TopicMetadata, len(g.subscribers))
	for t := range g.subscribers {
		g.metadata[t] = cloneMetadata(topics[t])
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
}

// MetadataChanged recomputes the target when a subscribed topic's
// partition count or racks changed since the target was computed (the
// group epoch bumps). Nothing changes otherwise. Members reconcile on
// their next heartbeats.
func (g *Group) MetadataChanged(now time.Time, topics map[string]TopicMetadata) {
	if g.dead || len(g.members) == 0 {
		return
	}
	if g.metadataChanged(topics) {
		g.bump(topics)
	}
}
