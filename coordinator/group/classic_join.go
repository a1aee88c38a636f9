package group

import (
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the join phase of the classic protocol (Kafka's
// GroupMetadataManager.classicGroupJoin* and the rebalance it drives).

// Join applies one JoinGroup at now. It answers at once (wait false: the
// response, or an error with the response's MemberID set where Kafka
// sets it — MEMBER_ID_REQUIRED carries the new id), or the member now
// waits for the join phase to complete (wait true): its answer comes
// later from TakeAnswers under resp.MemberID (possibly already after this
// call). Errors are *errs.Error: INVALID_SESSION_TIMEOUT,
// COORDINATOR_NOT_AVAILABLE (Dead), GROUP_MAX_SIZE_REACHED,
// INCONSISTENT_GROUP_PROTOCOL, MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID, INVALID_REQUEST.
func (g *ClassicGroup) Join(now time.Time, req JoinGroupRequest) (resp JoinGroupResponse, wait bool, err error) {
	resp.MemberID = req.MemberID
	if req.SessionTimeout < g.cfg.MinSessionTimeout || req.SessionTimeout > g.cfg.MaxSessionTimeout {
		return resp, false, errs.New(sluicev1.ErrorCode_INVALID_SESSION_TIMEOUT,
			"session timeout %v is outside the bounds [%v, %v] (group.min.session.timeout.ms, group.max.session.timeout.ms)",
			req.SessionTimeout, g.cfg.MinSessionTimeout, g.cfg.MaxSessionTimeout)
	}
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout // JoinGroup v0
	}
	if g.state == ClassicDead {
		return resp, false, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "group %s was just deleted; retry", g.id)
	}
	if !g.acceptJoining(req.MemberID) {
		g.remove(req.MemberID)
		return JoinGroupResponse{}, false, errs.New(sluicev1.ErrorCode_GROUP_MAX_SIZE_REACHED,
			"group %s has reached its maximum size of %d members (group.max.size)", g.id, g.cfg.MaxSize)
	}
	if !g.supportsProtocols(req.ProtocolType, req.Protocols) {
		return resp, false, errs.New(sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL,
			"the protocols of member %s (type %q) are not supported by group %s (type %q)",
			errs.Echo(req.MemberID), errs.Echo(req.ProtocolType), g.id, errs.Echo(g.protocolType))
	}
	if req.MemberID == "" {
		return g.joinNewMember(now, req)
	}
	return g.joinExistingMember(now, req)
}

// acceptJoining is Kafka's acceptJoiningMember (group.max.size).
func (g *ClassicGroup) acceptJoining(memberID string) bool {
	if g.cfg.MaxSize <= 0 {
		return true
	}
	m := g.members[memberID]
	switch g.state {
	case PreparingRebalance:
		// The count of awaiting members, not the size: the group may be
		// above a lowered maximum, and the last rejoining members are the
		// ones left out.
		return (m != nil && m.awaitingJoin) || g.numAwaitingJoin() < g.cfg.MaxSize
	case CompletingRebalance, ClassicStable:
		return m != nil || len(g.members) < g.cfg.MaxSize
	}
	return true
}

func (g *ClassicGroup) joinNewMember(now time.Time, req JoinGroupRequest) (JoinGroupResponse, bool, error) {
	prefix := req.ClientID
	if req.InstanceID != "" {
		prefix = req.InstanceID
	}
	id := prefix + "-" + g.cfg.NewMemberID()
	switch {
	case req.InstanceID != "":
		if old, ok := g.static[req.InstanceID]; ok {
			return g.replaceStaticMember(now, req, old, id)
		}
		return g.addMember(now, req, id)
	case req.RequireKnownMemberID:
		// KIP-394: the id is remembered until the member joins with it or
		// its session timeout passes.
		g.pending[id] = now.Add(req.SessionTimeout)
		return JoinGroupResponse{MemberID: id}, false, errs.New(sluicev1.ErrorCode_MEMBER_ID_REQUIRED,
			"join group %s again with member id %s", g.id, id)
	}
	return g.addMember(now, req, id)
}

func (g *ClassicGroup) joinExistingMember(now time.Time, req JoinGroupRequest) (JoinGroupResponse, bool, error) {
	id := req.MemberID
	if _, ok := g.pending[id]; ok {
		if req.InstanceID != "" {
			return JoinGroupResponse{MemberID: id}, false, errs.New(sluicev1.ErrorCode_INVALID_REQUEST,
				"member id %s was handed out to a dynamic member; it cannot join with instance id %s", errs.Echo(id), errs.Echo(req.InstanceID))
		}
		return g.addMember(now, req, id)
	}
	if err := g.validateMember(id, req.InstanceID, "join-group"); err != nil {
		return JoinGroupResponse{MemberID: id}, false, err
	}
	m := g.members[id]
	switch g.state {
	case PreparingRebalance:
		return g.updateMemberThenRebalance(now, m, req)
	case CompletingRebalance:
		if m.matches(req.Protocols) {
			// The member lost the join answer: the current generation again.
			return g.joinResponse(m), false, nil
		}
		return g.updateMemberThenRebalance(now, m, req)
	case ClassicStable:
		// The leader's JoinGroup forces a rebalance (a topic change its
		// assignor must see); a follower's only with new metadata.
		if g.leader == id || !m.matches(req.Protocols) {
			return g.updateMemberThenRebalance(now, m, req)
		}
		resp := g.joinResponse(m)
		resp.Members = nil
		return resp, false, nil
	}
	return JoinGroupResponse{MemberID: id}, false, unknownMember(g.id, id)
}

// joinResponse is the current generation's answer to m (the leader gets
// every member's metadata).
func (g *ClassicGroup) joinResponse(m *classicMember) JoinGroupResponse {
	resp := JoinGroupResponse{Generation: g.generation, ProtocolType: g.protocolType, ProtocolName: g.protocolName,
		Leader: g.leader, MemberID: m.id}
	if m.id == g.leader {
		resp.Members = g.currentMembers()
	}
	return resp
}

// currentMembers is the leader's member list, sorted by member id.
func (g *ClassicGroup) currentMembers() []ClassicMember {
	out := make([]ClassicMember, 0, len(g.members))
	for _, id := range g.memberIDs() {
		m := g.members[id]
		out = append(out, ClassicMember{MemberID: id, InstanceID: m.instanceID, Metadata: m.metadata(g.protocolName)})
	}
	return out
}

func (g *ClassicGroup) updateMember(m *classicMember, req JoinGroupRequest) {
	m.protocols = cloneProtocols(req.Protocols)
	m.rebalanceTimeout, m.sessionTimeout = req.RebalanceTimeout, req.SessionTimeout
}

func (g *ClassicGroup) updateMemberThenRebalance(now time.Time, m *classicMember, req JoinGroupRequest) (JoinGroupResponse, bool, error) {
	g.updateMember(m, req)
	m.awaitingJoin = true
	g.maybePrepareRebalanceOrCompleteJoin(now)
	return JoinGroupResponse{MemberID: m.id}, true, nil
}

func (g *ClassicGroup) addMember(now time.Time, req JoinGroupRequest, id string) (JoinGroupResponse, bool, error) {
	m := &classicMember{id: id, instanceID: req.InstanceID, clientID: req.ClientID, clientHost: req.ClientHost,
		protocolType: req.ProtocolType, isNew: true, awaitingJoin: true}
	g.updateMember(m, req)
	if g.state == PreparingRebalance && g.previousState == ClassicEmpty {
		g.newMemberAdded = true // extends the initial rebalance's delay
	}
	g.add(m)
	// A new member cannot heartbeat yet (it has no answer): its JoinGroup
	// times out instead, so that retries do not pile up defunct members.
	m.deadline = now.Add(g.cfg.NewMemberJoinTimeout)
	g.maybePrepareRebalanceOrCompleteJoin(now)
	return JoinGroupResponse{MemberID: id}, true, nil
}

// replaceStaticMember gives a known instance id's member a new member id
// (KIP-345): the old id is fenced (its waiting requests answered
// FENCED_INSTANCE_ID), the member keeps its assignment. In Stable with an
// unchanged protocol no rebalance happens; the group's record is written
// with the new id first and the member is answered the current
// generation (with the leader it had, so it does not assign again; a
// v9+ leader is told it leads, with the members, and to skip the
// assignment — KIP-814).
func (g *ClassicGroup) replaceStaticMember(now time.Time, req JoinGroupRequest, oldID, newID string) (JoinGroupResponse, bool, error) {
	oldLeader := g.leader
	old := g.swapMemberID(req.InstanceID, oldID, newID)
	nm := g.members[newID]
	g.resetSession(now, nm)
	oldProtocols, oldRebalance, oldSession := old.protocols, old.rebalanceTimeout, old.sessionTimeout
	g.updateMember(nm, req)
	nm.awaitingJoin = true
	switch g.state {
	case ClassicStable:
		if g.selectProtocol() == g.protocolName {
			gen := g.generation
			g.setRecord(g.snapshot(nil), func(now time.Time, err error) {
				if err != nil {
					// Revert: the old member id stays the instance's.
					nm.protocols, nm.rebalanceTimeout, nm.sessionTimeout = oldProtocols, oldRebalance, oldSession
					g.answerJoin(nm, JoinGroupResponse{Generation: g.generation, ProtocolType: g.protocolType,
						ProtocolName: g.protocolName, Leader: oldLeader}, err)
					if g.members[newID] == nm {
						g.swapMemberID(req.InstanceID, newID, oldID)
						g.resetSession(now, g.members[oldID])
					}
					return
				}
				resp := JoinGroupResponse{Generation: gen, ProtocolType: g.protocolType,
					ProtocolName: g.protocolName, Leader: oldLeader, MemberID: newID}
				if req.SupportsSkipAssignment && g.leader == newID {
					// KIP-814: the rejoined leader leads, without assigning.
					resp.Leader, resp.Members, resp.SkipAssignment = newID, g.currentMembers(), true
				}
				g.answerJoin(nm, resp, nil)
			})
			return JoinGroupResponse{MemberID: newID}, true, nil
		}
		g.maybePrepareRebalanceOrCompleteJoin(now)
	case CompletingRebalance:
		// The leader may be assigning to the old id: rebalance again.
		g.prepareRebalance(now)
	default:
		g.maybeCompleteJoinPhase(now)
	}
	return JoinGroupResponse{MemberID: newID}, true, nil
}

// swapMemberID moves instanceID's member from oldID to newID, answering
// the old id's waiting requests FENCED_INSTANCE_ID; it returns the old
// member (now detached).
func (g *ClassicGroup) swapMemberID(instanceID, oldID, newID string) *classicMember {
	old := g.members[oldID]
	fenced := fencedInstance(g.id, instanceID, oldID, newID, "join-group")
	g.answerJoin(old, JoinGroupResponse{MemberID: oldID}, fenced)
	g.answerSync(old, SyncGroupResponse{}, fenced)
	delete(g.members, oldID)
	nm := *old
	nm.id = newID
	nm.awaitingJoin, nm.awaitingSync = false, false
	g.members[newID] = &nm
	if g.leader == oldID {
		g.leader = newID
	}
	if g.pendingSync[oldID] {
		delete(g.pendingSync, oldID)
		g.pendingSync[newID] = true
	}
	g.static[instanceID] = newID
	return old
}

func cloneProtocols(ps []ClassicProtocol) []ClassicProtocol {
	out := make([]ClassicProtocol, len(ps))
	for i, p := range ps {
		out[i] = ClassicProtocol{Name: p.Name, Metadata: append([]byte(nil), p.Metadata...)}
	}
	return out
}

func (g *ClassicGroup) maybePrepareRebalanceOrCompleteJoin(now time.Time) {
	if g.canRebalance() {
		g.prepareRebalance(now)
		return
	}
	g.maybeCompleteJoinPhase(now)
}

// maybeCompleteJoinPhase completes the join phase once every member has
// rejoined — except in the initial rebalance, which only its delay ends.
func (g *ClassicGroup) maybeCompleteJoinPhase(now time.Time) {
	if g.state != PreparingRebalance || g.previousState == ClassicEmpty || !g.hasAllMembersJoined() {
		return
	}
	g.completeJoin(now)
}

// prepareRebalance starts a join phase: waiting SyncGroups are answered
// REBALANCE_IN_PROGRESS; an empty group waits InitialRebalanceDelay
// (extended per new member up to the rebalance timeout), any other
// completes once all members rejoined or at the rebalance timeout.
func (g *ClassicGroup) prepareRebalance(now time.Time) {
	if g.state == CompletingRebalance {
		for _, m := range g.members {
			m.assignment = nil
		}
		g.propagateAssignment(now, rebalanceInProgress(g.id))
	}
	clear(g.pendingSync)
	g.syncDeadline = time.Time{}
	initial := g.state == ClassicEmpty
	if initial {
		delay := max(g.cfg.InitialRebalanceDelay, 0)
		g.initial, g.initialDelay, g.remaining = true, delay, max(g.rebalanceTimeout()-delay, 0)
		g.newMemberAdded = false
		g.joinDeadline = now.Add(delay)
	}
	g.transition(PreparingRebalance)
	if initial {
		return
	}
	if g.hasAllMembersJoined() {
		g.completeJoin(now)
		return
	}
	g.joinDeadline = now.Add(g.rebalanceTimeout())
}

func rebalanceInProgress(group string) error {
	return errs.New(sluicev1.ErrorCode_REBALANCE_IN_PROGRESS, "group %s is rebalancing; join again", group)
}

// completeJoin ends the join phase: dynamic members that did not rejoin
// are removed, the generation goes up, the protocol is chosen and every
// waiting JoinGroup is answered (the leader with every member's
// metadata); the group then waits for SyncGroups. With no member left the
// group becomes Empty and its record is written.
func (g *ClassicGroup) completeJoin(now time.Time) {
	g.joinDeadline, g.initial, g.newMemberAdded = time.Time{}, false, false
	for _, id := range g.memberIDs() {
		if m := g.members[id]; !m.awaitingJoin && m.instanceID == "" {
			g.remove(id)
		}
	}
	if g.state == ClassicDead {
		return
	}
	if !g.electJoinedLeader() && len(g.members) > 0 {
		// Nobody rejoined (only static members are left): wait again for
		// their session timeouts to remove them.
		g.joinDeadline = now.Add(g.rebalanceTimeout())
		return
	}
	g.generation++
	clear(g.pendingSync)
	if len(g.members) == 0 {
		g.protocolName = ""
		g.transition(ClassicEmpty)
		g.setRecord(g.snapshot(nil), nil)
		return
	}
	g.protocolName = g.selectProtocol()
	g.transition(CompletingRebalance)
	for _, id := range g.memberIDs() {
		m := g.members[id]
		g.answerJoin(m, g.joinResponse(m), nil)
		g.resetSession(now, m)
		m.isNew = false
		g.pendingSync[id] = true
	}
	g.syncDeadline = now.Add(g.rebalanceTimeout())
}

// electJoinedLeader keeps the leader if it rejoined, else picks a member
// that did (the smallest id); false when none did.
func (g *ClassicGroup) electJoinedLeader() bool {
	if g.leader == "" {
		return false
	}
	if g.members[g.leader].awaitingJoin {
		return true
	}
	for _, id := range g.memberIDs() {
		if g.members[id].awaitingJoin {
			g.leader = id
			return true
		}
	}
	return false
}
