package group

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"sort"
	"time"
)

// This file is what a KIP-848 group persists (decision 72): the records
// that bring the log up to the group's state after a call
// (PendingRecords, RecordsWritten), and the group a new coordinator
// rebuilds from them (Restore). Like the rest of the core it does no
// I/O: the owner appends the records and reports them written.

// MemberUpdate is one member record to write: Record nil is a tombstone
// (the member left or was fenced).
type MemberUpdate struct {
	MemberID string
	Record   *MemberRecord
}

// markDirty notes that id's record may differ from the logged one.
func (g *Group) markDirty(id string) {
	g.dirty[id] = struct{}{}
}

// markAllDirty notes every member (a new target may touch any).
func (g *Group) markAllDirty() {
	for id := range g.members {
		g.dirty[id] = struct{}{}
	}
}

// groupRecord is the group's own record as it stands (TimeMs unset).
func (g *Group) groupRecord() GroupRecord {
	return GroupRecord{Epoch: g.epoch, AssignmentEpoch: g.assignmentEpoch, MetadataHash: g.metadataHash}
}

// memberRecord is m's record as it stands (assignments shared, not
// copied: the caller clones what it keeps).
func (g *Group) memberRecord(m *member) MemberRecord {
	return MemberRecord{
		InstanceID: m.instanceID, RackID: m.rackID, ClientID: m.clientID,
		Topics: m.names, Regex: m.regex, RegexTopics: m.regexTopics, Assignor: m.assignor,
		RebalanceTimeoutMs: m.rebalanceTimeout.Milliseconds(), SessionTimeoutMs: m.sessionTimeout.Milliseconds(),
		Epoch: m.epoch, PreviousEpoch: m.previousEpoch, State: m.state,
		Assigned: m.assigned, Pending: m.pending, Target: g.target[m.id], AssignmentEpochs: m.assignedAt,
	}
}

// equalRecord reports whether two member records hold the same state.
func equalRecord(a, b *MemberRecord) bool {
	return a.InstanceID == b.InstanceID && a.RackID == b.RackID && a.ClientID == b.ClientID &&
		equalStrings(a.Topics, b.Topics) && a.Assignor == b.Assignor &&
		a.Regex == b.Regex && equalStrings(a.RegexTopics, b.RegexTopics) &&
		a.RebalanceTimeoutMs == b.RebalanceTimeoutMs && a.SessionTimeoutMs == b.SessionTimeoutMs &&
		a.Epoch == b.Epoch && a.PreviousEpoch == b.PreviousEpoch && a.State == b.State &&
		a.Assigned.Equal(b.Assigned) && a.Pending.Equal(b.Pending) && a.Target.Equal(b.Target) &&
		a.AssignmentEpochs.Equal(b.AssignmentEpochs)
}

// cloneRecord deep-copies r with normalized assignments (the form that
// is written and compared).
func cloneRecord(r MemberRecord) MemberRecord {
	r.Topics = append([]string{}, r.Topics...)
	if r.RegexTopics != nil {
		r.RegexTopics = append([]string{}, r.RegexTopics...)
	}
	r.Assigned, r.Pending, r.Target = r.Assigned.normalized(), r.Pending.normalized(), r.Target.normalized()
	r.AssignmentEpochs = r.AssignmentEpochs.Clone()
	if r.Assigned == nil {
		r.Assigned = Assignment{}
	}
	if r.Pending == nil {
		r.Pending = Assignment{}
	}
	if r.Target == nil {
		r.Target = Assignment{}
	}
	return r
}

// PendingRecords returns what the log lacks of the group's state: its
// group record (nil when the logged one is current) and the records of
// the members whose state changed since they were last written
// (tombstones for members gone), sorted by member id. The records are
// the caller's. A call that changes nothing that is persisted (a plain
// heartbeat) leaves both empty. The owner appends them in one batch
// before it answers the call that caused them, then reports
// RecordsWritten; if the append fails it drops the group and rebuilds it
// from the log (Restore), as for a group epoch.
func (g *Group) PendingRecords() (*GroupRecord, []MemberUpdate) {
	var grec *GroupRecord
	if cur := g.groupRecord(); cur != g.logged {
		grec = &cur
	}
	var ups []MemberUpdate
	for id := range g.dirty {
		logged, wasLogged := g.loggedMembers[id]
		m, ok := g.members[id]
		switch {
		case !ok && wasLogged:
			ups = append(ups, MemberUpdate{MemberID: id})
		case !ok:
			delete(g.dirty, id) // joined and gone between two writes
		default:
			rec := g.memberRecord(m)
			if wasLogged && equalRecord(&rec, &logged) {
				delete(g.dirty, id)
				continue
			}
			c := cloneRecord(rec)
			ups = append(ups, MemberUpdate{MemberID: id, Record: &c})
		}
	}
	sort.Slice(ups, func(i, j int) bool { return ups[i].MemberID < ups[j].MemberID })
	return grec, ups
}

// RecordsWritten reports that the records PendingRecords returned are
// committed: the group compares later states with them.
func (g *Group) RecordsWritten(grec *GroupRecord, ups []MemberUpdate) {
	if grec != nil {
		r := *grec
		r.TimeMs = 0
		g.logged = r
	}
	for _, u := range ups {
		if u.Record == nil {
			delete(g.loggedMembers, u.MemberID)
		} else {
			g.loggedMembers[u.MemberID] = cloneRecord(*u.Record)
		}
		delete(g.dirty, u.MemberID)
	}
}

// Forget marks ids as not known to be in the log (their last write's
// outcome is unknown), so that the next PendingRecords writes their
// records again, or tombstones for those that are not members.
func (g *Group) Forget(ids []string) {
	for _, id := range ids {
		// Epoch -1 is never a member's: the record differs from any.
		g.loggedMembers[id] = MemberRecord{Epoch: LeaveEpoch}
		g.dirty[id] = struct{}{}
	}
}

// Restore rebuilds a KIP-848 group from its log: rec is its group record
// and members its member records by member id. The members keep their
// ids, epochs, assignments, partitions pending revocation and reconciliation
// states; their sessions start at now, and a member in
// UnrevokedPartitions gets its rebalance timeout from now (Kafka's
// onLoaded). If the subscribed topics' metadata in topics is still what
// the target was computed from (rec.MetadataHash), the target stands;
// otherwise the next Heartbeat or MetadataChanged computes a new one. A
// partition the records give two members (a log the coordinator never
// writes) stays with the first by member id.
func Restore(now time.Time, id string, cfg Config, rec GroupRecord, members map[string]MemberRecord, topics map[string]TopicMetadata) *Group {
	g := New(id, cfg)
	ids := make([]string, 0, len(members))
	for mid := range members {
		ids = append(ids, mid)
	}
	sort.Strings(ids)
	for _, mid := range ids {
		r := cloneRecord(members[mid])
		m := &member{
			id: mid, instanceID: r.InstanceID, rackID: r.RackID, clientID: r.ClientID,
			names: sortedUnique(r.Topics), regexTopics: sortedUnique(r.RegexTopics), assignor: r.Assignor,
			epoch: r.Epoch, previousEpoch: r.PreviousEpoch, state: r.State,
			sessionTimeout:   durationOr(r.SessionTimeoutMs, g.cfg.SessionTimeout),
			rebalanceTimeout: durationOr(r.RebalanceTimeoutMs, g.cfg.RebalanceTimeout),
		}
		m.sessionDeadline = now.Add(m.sessionTimeout)
		if m.state == MemberUnrevokedPartitions {
			m.revokeDeadline = now.Add(m.rebalanceTimeout)
		}
		// The regex's topics as they were resolved, filtered by the
		// member's caller (decision 73): they stand until the member's
		// next heartbeat brings its filter again; a metadata change
		// before then only removes the topics that no longer match.
		g.setRegex(m, r.Regex, nil, topics)
		g.filterRegex(now, m)
		m.topics = m.names
		if len(m.regexTopics) > 0 {
			m.topics = sortedUnique(append(append([]string(nil), m.names...), m.regexTopics...))
		}
		g.addMember(m)
		if len(r.Target) > 0 {
			g.target[mid] = r.Target
		}
		g.setOwnership(m, g.unowned(r.Assigned), g.unowned(r.Pending))
		m.restore(r.AssignmentEpochs)
		g.loggedMembers[mid] = r
		if !m.assigned.Equal(r.Assigned) || !m.pending.Equal(r.Pending) {
			g.markDirty(mid) // a conflict was dropped: write the truth
		}
	}
	g.epoch = rec.Epoch
	g.assignmentEpoch = rec.AssignmentEpoch
	if g.assignmentEpoch == 0 || len(g.members) == 0 {
		g.assignmentEpoch = g.epoch
	}
	g.assignor = g.chooseAssignor()
	g.metadataHash = rec.MetadataHash
	snapshot := make(map[string]TopicMetadata, len(g.subscribers))
	for t := range g.subscribers {
		snapshot[t] = cloneMetadata(topics[t])
	}
	if rec.MetadataHash != 0 && hashMetadata(snapshot) == rec.MetadataHash {
		g.metadata = snapshot
		for t := range g.subscribers {
			g.seenRacks[t] = topics[t].Racks
		}
	}
	g.logged = GroupRecord{Epoch: rec.Epoch, AssignmentEpoch: rec.AssignmentEpoch, MetadataHash: rec.MetadataHash}
	if len(g.members) == 0 || rec.AssignmentEpoch == 0 {
		g.logged.AssignmentEpoch = g.assignmentEpoch
	}
	return g
}

// unowned returns the partitions of a that no member holds yet.
func (g *Group) unowned(a Assignment) Assignment {
	var tps []topicPartition
	for t, ps := range a {
		for _, p := range ps {
			if g.ownerOf(t, p) == "" {
				tps = append(tps, topicPartition{t, p})
			}
		}
	}
	return fromPartitions(tps)
}

// durationOr is ms milliseconds, or def when ms is not positive.
func durationOr(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// hashMetadata is the FNV-1a hash of topics' partition counts and racks,
// by topic name: what the group record keeps of the metadata its target
// was computed from (never 0, which means unknown).
func hashMetadata(topics map[string]TopicMetadata) uint64 {
	names := make([]string, 0, len(topics))
	for t := range topics {
		names = append(names, t)
	}
	slices.Sort(names)
	h := fnv.New64a()
	var b [4]byte
	str := func(s string) {
		binary.BigEndian.PutUint32(b[:], uint32(len(s)))
		h.Write(b[:])
		h.Write([]byte(s))
	}
	for _, t := range names {
		m := topics[t]
		str(t)
		binary.BigEndian.PutUint32(b[:], uint32(m.Partitions))
		h.Write(b[:])
		binary.BigEndian.PutUint32(b[:], uint32(len(m.Racks)))
		h.Write(b[:])
		for _, racks := range m.Racks {
			binary.BigEndian.PutUint32(b[:], uint32(len(racks)))
			h.Write(b[:])
			for _, r := range racks {
				str(r)
			}
		}
	}
	if s := h.Sum64(); s != 0 {
		return s
	}
	return 1
}
