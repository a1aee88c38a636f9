package group

import (
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the rest of the classic protocol: SyncGroup, Heartbeat,
// LeaveGroup, the timers (Expire) and the group's record.

// Sync applies one SyncGroup at now. A follower's SyncGroup during
// CompletingRebalance waits (wait true) for the leader's; the leader's
// makes the group's record pending (PendingRecord): once it is written
// (RecordWritten) every waiting SyncGroup is answered through
// TakeAnswers and the group is Stable. In Stable the member's assignment
// is answered at once. Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
// ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS,
// COORDINATOR_NOT_AVAILABLE (Dead).
func (g *ClassicGroup) Sync(now time.Time, req SyncGroupRequest) (SyncGroupResponse, bool, error) {
	if len(g.members) == 0 {
		return SyncGroupResponse{}, false, unknownMember(g.id, req.MemberID)
	}
	if g.state == ClassicDead {
		return SyncGroupResponse{}, false, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "group %s was just deleted; retry", g.id)
	}
	if err := g.validateMember(req.MemberID, req.InstanceID, "sync-group"); err != nil {
		return SyncGroupResponse{}, false, err
	}
	if req.Generation != g.generation {
		return SyncGroupResponse{}, false, illegalGeneration(g.id, req.MemberID, req.Generation, g.generation)
	}
	if inconsistent(req.ProtocolType, g.protocolType) || inconsistent(req.ProtocolName, g.protocolName) {
		return SyncGroupResponse{}, false, errs.New(sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL,
			"group %s uses protocol type %q and protocol %q", g.id, errs.Echo(g.protocolType), errs.Echo(g.protocolName))
	}
	m := g.members[req.MemberID]
	switch g.state {
	case PreparingRebalance:
		return SyncGroupResponse{}, false, rebalanceInProgress(g.id)
	case CompletingRebalance:
		m.awaitingSync = true
		g.removePendingSync(req.MemberID)
		if req.MemberID == g.leader {
			assignment := make(map[string][]byte, len(g.members))
			for id := range g.members {
				assignment[id] = append([]byte(nil), req.Assignments[id]...)
			}
			gen := g.generation
			g.setRecord(g.snapshot(assignment), func(now time.Time, err error) {
				// A rebalance may have begun meanwhile: then nothing.
				if g.state != CompletingRebalance || g.generation != gen {
					return
				}
				if err != nil {
					for _, m := range g.members {
						m.assignment = nil
					}
					g.propagateAssignment(now, err)
					g.maybePrepareRebalanceOrCompleteJoin(now)
					return
				}
				for id, m := range g.members {
					m.assignment = assignment[id]
				}
				g.propagateAssignment(now, nil)
				g.transition(ClassicStable)
			})
		}
		return SyncGroupResponse{}, true, nil
	case ClassicStable:
		g.removePendingSync(req.MemberID)
		return SyncGroupResponse{ProtocolType: g.protocolType, ProtocolName: g.protocolName,
			Assignment: append([]byte(nil), m.assignment...)}, false, nil
	}
	return SyncGroupResponse{}, false, unknownMember(g.id, req.MemberID)
}

// inconsistent: a v5+ protocol type or name that is not the group's.
func inconsistent(req *string, group string) bool {
	return req != nil && *req != group
}

func illegalGeneration(group, memberID string, got, want int32) error {
	return errs.New(sluicev1.ErrorCode_ILLEGAL_GENERATION, "member %s of group %s sent generation %d; the group is at %d",
		errs.Echo(memberID), group, got, want)
}

func (g *ClassicGroup) removePendingSync(memberID string) {
	delete(g.pendingSync, memberID)
	if len(g.pendingSync) == 0 {
		g.syncDeadline = time.Time{}
	}
}

// propagateAssignment answers every waiting SyncGroup: its assignment,
// or err; answered members' sessions restart.
func (g *ClassicGroup) propagateAssignment(now time.Time, err error) {
	for _, id := range g.memberIDs() {
		m := g.members[id]
		resp := SyncGroupResponse{}
		if err == nil {
			resp = SyncGroupResponse{ProtocolType: g.protocolType, ProtocolName: g.protocolName, Assignment: m.assignment}
		}
		if g.answerSync(m, resp, err) {
			g.resetSession(now, m)
		}
	}
}

// Heartbeat applies one classic Heartbeat at now: it restarts the
// member's session. Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
// ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the join phase: join again;
// the session restarts too), COORDINATOR_NOT_AVAILABLE (Dead).
func (g *ClassicGroup) Heartbeat(now time.Time, memberID, instanceID string, generation int32) error {
	if g.state == ClassicDead {
		return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "group %s was just deleted; retry", g.id)
	}
	if err := g.validateMember(memberID, instanceID, "heartbeat"); err != nil {
		return err
	}
	if generation != g.generation {
		return illegalGeneration(g.id, memberID, generation, g.generation)
	}
	m := g.members[memberID]
	switch g.state {
	case PreparingRebalance:
		g.resetSession(now, m)
		return rebalanceInProgress(g.id)
	case CompletingRebalance, ClassicStable:
		g.resetSession(now, m)
		return nil
	}
	return unknownMember(g.id, memberID)
}

// Leave applies one LeaveGroup (v3+: a batch) at now: each member, named
// by member id (a pending KIP-394 id too) and/or instance id (an
// administrator removing a static member gives MemberID ""), gets its
// own error (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID) in errs, in order.
// If any left, a rebalance starts (or the join phase may complete). The
// error is COORDINATOR_NOT_AVAILABLE for a Dead group.
func (g *ClassicGroup) Leave(now time.Time, members []LeaveMember) ([]error, error) {
	if g.state == ClassicDead {
		return nil, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "group %s was just deleted; retry", g.id)
	}
	out := make([]error, len(members))
	left := false
	for i, lm := range members {
		switch {
		case lm.MemberID == "":
			id, ok := g.static[lm.InstanceID]
			if lm.InstanceID == "" || !ok {
				out[i] = unknownMember(g.id, "")
				continue
			}
			g.remove(id)
		case g.isPending(lm.MemberID):
			delete(g.pending, lm.MemberID)
		default:
			if err := g.validateMember(lm.MemberID, lm.InstanceID, "leave-group"); err != nil {
				out[i] = err
				continue
			}
			g.remove(lm.MemberID)
		}
		left = true
	}
	if left {
		switch g.state {
		case ClassicStable, CompletingRebalance:
			g.maybePrepareRebalanceOrCompleteJoin(now)
		case PreparingRebalance:
			g.maybeCompleteJoinPhase(now)
		}
	}
	return out, nil
}

func (g *ClassicGroup) isPending(memberID string) bool {
	_, ok := g.pending[memberID]
	return ok
}

// Expire runs every timer due by now (a deadline equal to now is due), in
// deadline order: the join phase's end (and the initial delay's
// extensions), the sync phase's end (members that did not sync are
// removed and a rebalance starts), pending KIP-394 ids, and sessions (a
// member that neither heartbeats nor waits for the group is removed and
// a rebalance starts). It returns the member ids removed for their
// session or sync timeout, sorted.
func (g *ClassicGroup) Expire(now time.Time) []string {
	var removed []string
	for {
		d, kind, id := g.earliest()
		if d.IsZero() || d.After(now) {
			break
		}
		switch kind {
		case timerJoin:
			g.joinDeadline = time.Time{}
			if g.initial && g.newMemberAdded && g.remaining > 0 {
				// Kafka's tryCompleteInitialRebalanceElseSchedule.
				g.newMemberAdded = false
				delay := min(max(g.cfg.InitialRebalanceDelay, 0), g.remaining)
				g.remaining = max(g.remaining-g.initialDelay, 0)
				g.initialDelay = delay
				g.joinDeadline = now.Add(delay)
				continue
			}
			g.completeJoin(now)
		case timerSync:
			g.syncDeadline = time.Time{}
			if (g.state == CompletingRebalance || g.state == ClassicStable) && len(g.pendingSync) > 0 {
				ids := make([]string, 0, len(g.pendingSync))
				for id := range g.pendingSync {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				for _, id := range ids {
					g.remove(id)
				}
				removed = append(removed, ids...)
				g.prepareRebalance(now)
			}
		case timerPending:
			delete(g.pending, id)
			if g.state == PreparingRebalance && g.hasAllMembersJoined() {
				g.completeJoin(now)
			}
		case timerSession:
			m := g.members[id]
			if m.hasSatisfiedHeartbeat() {
				m.deadline = time.Time{} // restarted when the group answers it
				continue
			}
			removed = append(removed, id)
			g.remove(id)
			switch g.state {
			case ClassicStable, CompletingRebalance:
				g.maybePrepareRebalanceOrCompleteJoin(now)
			case PreparingRebalance:
				if g.hasAllMembersJoined() {
					g.completeJoin(now)
				}
			}
		}
	}
	sort.Strings(removed)
	return removed
}

// setRecord makes rec the record to write; written (if any) runs when
// RecordWritten reports the outcome.
func (g *ClassicGroup) setRecord(rec ClassicGroupRecord, written func(now time.Time, err error)) {
	g.record = &rec
	if written != nil {
		g.written = append(g.written, written)
	}
}

// PendingRecord returns the group's record the caller must write to the
// log (then call RecordWritten) before delivering TakeAnswers; false when
// there is none.
func (g *ClassicGroup) PendingRecord() (ClassicGroupRecord, bool) {
	if g.record == nil {
		return ClassicGroupRecord{}, false
	}
	return *g.record, true
}

// RecordWritten reports the outcome of writing PendingRecord: nil when
// it is committed. Then the leader's assignment is handed out (the group
// is Stable) or a static member's new id is answered; on an error the
// waiting requests get err (the caller maps the append's error to the
// protocol's) and a rebalance starts, or the static member keeps its old
// id. A failed Empty record changes nothing (the generation it carried
// had no members).
func (g *ClassicGroup) RecordWritten(now time.Time, err error) {
	fs := g.written
	g.record, g.written = nil, nil
	for _, f := range fs {
		f(now, err)
	}
}

// snapshot is the group's record with assignment (nil: the members'
// current ones).
func (g *ClassicGroup) snapshot(assignment map[string][]byte) ClassicGroupRecord {
	rec := ClassicGroupRecord{ProtocolType: g.protocolType, Generation: g.generation, Protocol: g.protocolName, Leader: g.leader}
	if len(g.members) == 0 {
		rec.Leader = ""
	}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		a := m.assignment
		if assignment != nil {
			a = assignment[id]
		}
		rec.Members = append(rec.Members, ClassicMemberRecord{MemberID: id, InstanceID: m.instanceID, ClientID: m.clientID,
			ClientHost: m.clientHost, RebalanceTimeoutMs: m.rebalanceTimeout.Milliseconds(), SessionTimeoutMs: m.sessionTimeout.Milliseconds(),
			Subscription: m.metadata(g.protocolName), Assignment: a})
	}
	return rec
}

// RestoreClassic rebuilds a classic group from its record when a
// coordinator loads it: Stable at the record's generation with its
// members (each supporting only the chosen protocol, as Kafka's record
// keeps), or Empty. The members' sessions start at now.
func RestoreClassic(now time.Time, id string, rec ClassicGroupRecord, cfg ClassicConfig) *ClassicGroup {
	g := NewClassic(id, rec.Generation, cfg)
	g.protocolType, g.protocolName = rec.ProtocolType, rec.Protocol
	for _, mr := range rec.Members {
		m := &classicMember{id: mr.MemberID, instanceID: mr.InstanceID, clientID: mr.ClientID, clientHost: mr.ClientHost,
			protocolType: rec.ProtocolType, protocols: []ClassicProtocol{{Name: rec.Protocol, Metadata: mr.Subscription}},
			sessionTimeout: time.Duration(mr.SessionTimeoutMs) * time.Millisecond, rebalanceTimeout: time.Duration(mr.RebalanceTimeoutMs) * time.Millisecond,
			assignment: mr.Assignment}
		g.members[m.id] = m
		if m.instanceID != "" {
			g.static[m.instanceID] = m.id
		}
		g.resetSession(now, m)
	}
	if len(g.members) > 0 {
		g.leader = rec.Leader
		if g.members[g.leader] == nil {
			g.leader = g.memberIDs()[0]
		}
		g.state = ClassicStable
	}
	return g
}
