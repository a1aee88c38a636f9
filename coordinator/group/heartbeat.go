package group

import (
	"regexp"
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// HeartbeatRequest is one ConsumerGroupHeartbeat, as the protocol carries
// it (proto/sluice/v1/groups.proto), with times as durations.
type HeartbeatRequest struct {
	// MemberID is "" on a first join: the group generates one
	// (Config.NewMemberID). A client may bring its own.
	MemberID string
	// MemberEpoch: 0 join, -1 leave, -2 static leave, > 0 heartbeat.
	MemberEpoch int32
	InstanceID  string
	// RackID: "" unchanged (none on join).
	RackID string
	// RebalanceTimeout, SessionTimeout: 0 unchanged (on join: the
	// Config's defaults).
	RebalanceTimeout time.Duration
	SessionTimeout   time.Duration
	// SubscribedTopics: nil or empty on a later heartbeat = unchanged.
	// On join it or SubscribedTopicRegex is required (INVALID_REQUEST).
	SubscribedTopics []string
	// SubscribedTopicRegex: nil unchanged, "" cleared, else an RE2
	// regex matched against whole topic names (regex.go;
	// INVALID_REGULAR_EXPRESSION). The member subscribes to the union of
	// SubscribedTopics and the topics the regex matches that
	// TopicFilter allows.
	SubscribedTopicRegex *string
	// TopicFilter is the caller's DESCRIBE check on a topic, which the
	// group keeps for the member's regex until the next heartbeat (nil:
	// every topic; see TopicFilter).
	TopicFilter TopicFilter
	// Assignor: "" unchanged; else "uniform" or "range"
	// (UNSUPPORTED_ASSIGNOR).
	Assignor string
	// OwnedSet says Owned is meaningful: the partitions the member owns.
	OwnedSet bool
	Owned    Assignment
	// ClientID: for Describe only; "" unchanged.
	ClientID string

	// compiled is SubscribedTopicRegex compiled by Heartbeat when the
	// group does not hold it yet.
	compiled *regexp.Regexp
}

// HeartbeatResponse is the answer to a successful heartbeat.
type HeartbeatResponse struct {
	MemberID    string
	MemberEpoch int32
	// HeartbeatInterval: Config.HeartbeatInterval, at most a third of the
	// member's session timeout. Zero in the answer to a leave.
	HeartbeatInterval time.Duration
	// Assignment is the member's whole assignment, valid when
	// AssignmentChanged: on a join, when it changed, when the member came
	// with its previous epoch or reported owning other partitions than
	// its assignment (its last answer may be lost), and when the request
	// was full (owned partitions, subscription and rebalance timeout all
	// given), as Kafka answers.
	Assignment        Assignment
	AssignmentChanged bool
}

// Heartbeat applies one heartbeat at now against the topics' metadata
// (only subscribed topics matter; a missing topic has no partitions). The
// group copies what it keeps of topics; it also remembers which Racks
// slices it saw, to skip comparing them again (see MetadataChanged).
// Errors are *errs.Error: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
// UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, INVALID_REQUEST,
// UNSUPPORTED_ASSIGNOR, INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED
// (and GROUP_ID_NOT_FOUND on a Dead group). A failed heartbeat changes
// nothing.
//
// On success the group epoch may have been bumped and the target
// recomputed (a join, a leave, a new subscription, rack or assignor
// choice, or changed metadata of a subscribed topic), and the member has
// taken the next reconciliation step its reported owned partitions allow.
func (g *Group) Heartbeat(now time.Time, req HeartbeatRequest, topics map[string]TopicMetadata) (HeartbeatResponse, error) {
	if g.dead {
		return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %s was deleted", g.id)
	}
	if err := g.validate(req); err != nil {
		return HeartbeatResponse{}, err
	}
	var err error
	if req.compiled, err = g.checkRegex(req); err != nil {
		return HeartbeatResponse{}, err
	}
	switch {
	case req.MemberEpoch == LeaveEpoch || req.MemberEpoch == StaticLeaveEpoch:
		return g.leave(now, req, topics)
	case req.MemberEpoch == JoinEpoch:
		return g.join(now, req, topics)
	}
	m, err := g.heartbeatMember(req)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	// KIP-848 epoch check: the member's epoch, or its previous one when
	// it owns a subset of its assignment (the answer that moved it on was
	// lost).
	lost := false
	if req.MemberEpoch > m.epoch {
		return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_FENCED_MEMBER_EPOCH,
			"member %s sent epoch %d, above its epoch %d: it must release its partitions and join again", m.id, req.MemberEpoch, m.epoch)
	}
	if req.MemberEpoch < m.epoch {
		if req.MemberEpoch != m.previousEpoch || !req.OwnedSet || !req.Owned.subsetOf(m.assigned) {
			return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_FENCED_MEMBER_EPOCH,
				"member %s sent epoch %d, below its epoch %d: it must release its partitions and join again", m.id, req.MemberEpoch, m.epoch)
		}
		lost = true
	}
	full := req.OwnedSet && (len(req.SubscribedTopics) > 0 || req.SubscribedTopicRegex != nil) && req.RebalanceTimeout > 0
	return g.apply(now, m, req, topics, false, lost || full), nil
}

// validate checks what needs no group state (Kafka's
// throwIfConsumerGroupHeartbeatRequestIsInvalid).
func (g *Group) validate(req HeartbeatRequest) error {
	invalid := func(format string, args ...any) error {
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, format, args...)
	}
	switch e := req.MemberEpoch; {
	case e < StaticLeaveEpoch:
		return invalid("member epoch %d is invalid", e)
	case e == JoinEpoch:
		if len(req.SubscribedTopics) == 0 && (req.SubscribedTopicRegex == nil || *req.SubscribedTopicRegex == "") {
			return invalid("subscribed topic names or a regular expression are required on join")
		}
		if req.OwnedSet && req.Owned.Len() > 0 {
			return invalid("a joining member owns no partitions (it owned %s)", req.Owned)
		}
	case e == StaticLeaveEpoch:
		if req.InstanceID == "" {
			return invalid("member epoch -2 is for static members: instance id required")
		}
		fallthrough
	default:
		if req.MemberID == "" {
			return invalid("member id required with member epoch %d", e)
		}
	}
	for _, t := range req.SubscribedTopics {
		if t == "" {
			return invalid("empty topic name in subscription")
		}
	}
	if req.Assignor != "" {
		if _, ok := AssignorByName(req.Assignor); !ok {
			return errs.New(sluicev1.ErrorCode_UNSUPPORTED_ASSIGNOR, "assignor %q is not supported (uniform, range)", errs.Echo(req.Assignor))
		}
	}
	if s := req.SessionTimeout; s != 0 && (s < g.cfg.MinSessionTimeout || s > g.cfg.MaxSessionTimeout) {
		return errs.New(sluicev1.ErrorCode_INVALID_SESSION_TIMEOUT, "session timeout %v is outside [%v, %v]", s, g.cfg.MinSessionTimeout, g.cfg.MaxSessionTimeout)
	}
	if req.RebalanceTimeout < 0 {
		return invalid("rebalance timeout %v is negative", req.RebalanceTimeout)
	}
	return nil
}

// heartbeatMember finds the member of a heartbeat or leave: by instance
// id for a static member (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID when
// another member id holds it), else by member id.
func (g *Group) heartbeatMember(req HeartbeatRequest) (*member, error) {
	if req.InstanceID != "" {
		id, ok := g.static[req.InstanceID]
		if !ok {
			return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "instance id %s is not in group %s", errs.Echo(req.InstanceID), g.id)
		}
		if id != req.MemberID {
			return nil, errs.New(sluicev1.ErrorCode_FENCED_INSTANCE_ID, "instance id %s is held by member %s, not %s", errs.Echo(req.InstanceID), id, errs.Echo(req.MemberID))
		}
	}
	m, ok := g.members[req.MemberID]
	if !ok {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "member %s is not in group %s", errs.Echo(req.MemberID), g.id)
	}
	return m, nil
}

// leave handles member epochs -1 and -2. Leaves carry no epoch check, as
// in Kafka: a member may always give up.
func (g *Group) leave(now time.Time, req HeartbeatRequest, topics map[string]TopicMetadata) (HeartbeatResponse, error) {
	m, err := g.heartbeatMember(req)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	resp := HeartbeatResponse{MemberID: m.id, MemberEpoch: req.MemberEpoch}
	if req.MemberEpoch == StaticLeaveEpoch {
		// The instance keeps its assignment (not what it was releasing)
		// until its session runs out; no epoch bump, so the rest of the
		// group is undisturbed if it comes back in time.
		if !m.departed() {
			g.markDirty(m.id)
			g.setOwnership(m, m.assigned, nil)
			g.setEpoch(m, StaticLeaveEpoch)
			m.state = MemberStable
			m.revokeDeadline = time.Time{}
			m.sessionDeadline = now.Add(m.sessionTimeout)
			g.touch(m)
		}
		return resp, nil
	}
	g.removeMember(m)
	g.bump(topics)
	return resp, nil
}

// join handles member epoch 0: a new member, a known member joining again
// (its partitions are dropped as if it had been fenced; the id stays), or
// a static member taking over its departed instance.
func (g *Group) join(now time.Time, req HeartbeatRequest, topics map[string]TopicMetadata) (HeartbeatResponse, error) {
	var m *member
	bump := false
	if req.InstanceID != "" {
		if id, ok := g.static[req.InstanceID]; ok {
			old := g.members[id]
			switch {
			case !old.departed() && id != req.MemberID:
				return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_UNRELEASED_INSTANCE_ID,
					"instance id %s is still held by member %s", req.InstanceID, id)
			case !old.departed():
				m = old
				g.rejoin(m)
				bump = true
			default:
				newID := req.MemberID
				if newID == "" {
					newID = g.newMemberID()
				} else if other, ok := g.members[newID]; ok && other != old {
					return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST,
						"member id %s is in use by another member of group %s", newID, g.id)
				}
				m = old
				g.rename(m, newID)
				m.epoch, m.previousEpoch = 0, 0
			}
		}
	}
	if m == nil && req.MemberID != "" {
		if known, ok := g.members[req.MemberID]; ok {
			if req.InstanceID != "" && known.instanceID != req.InstanceID {
				return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST,
					"member %s has instance id %q, not %q", known.id, known.instanceID, req.InstanceID)
			}
			m = known
			g.rejoin(m)
			bump = true
		}
	}
	if m == nil {
		if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
			return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_GROUP_MAX_SIZE_REACHED,
				"group %s has reached its maximum of %d members", g.id, g.cfg.MaxSize)
		}
		id := req.MemberID
		if id == "" {
			id = g.newMemberID()
		}
		m = &member{
			id:               id,
			instanceID:       req.InstanceID,
			sessionTimeout:   g.cfg.SessionTimeout,
			rebalanceTimeout: g.cfg.RebalanceTimeout,
			sessionDeadline:  now.Add(g.cfg.SessionTimeout),
		}
		g.addMember(m)
		bump = true
	}
	return g.apply(now, m, req, topics, bump, true), nil
}

// rejoin drops m's partitions as a fence would, keeping the member and its
// id, at epoch 0.
func (g *Group) rejoin(m *member) {
	g.dropOwnership(m)
	m.epoch, m.previousEpoch = 0, 0
	m.state = MemberStable
	m.revokeDeadline = time.Time{}
}

// rename gives a departed static member the member id of the instance
// that takes it over, with its assignment and target.
func (g *Group) rename(m *member, id string) {
	if m.id == id {
		return
	}
	g.markDirty(m.id) // the old id's record goes (a tombstone)
	g.markDirty(id)
	assigned, at := m.assigned, m.assignedAt
	g.dropOwnership(m)
	m.assignedAt = at
	target, hasTarget := g.target[m.id]
	delete(g.target, m.id)
	delete(g.members, m.id)
	m.id = id
	g.members[id] = m
	g.static[m.instanceID] = id
	if hasTarget {
		g.target[id] = target
	}
	g.setOwnership(m, assigned, nil)
	g.touch(m)
}

// newMemberID returns an id no member has.
func (g *Group) newMemberID() string {
	for {
		id := g.cfg.NewMemberID()
		if _, taken := g.members[id]; !taken && id != "" {
			return id
		}
	}
}

// apply updates m from req, bumps the epoch if what the assignor sees
// changed (or bump is set), reconciles m and answers.
func (g *Group) apply(now time.Time, m *member, req HeartbeatRequest, topics map[string]TopicMetadata, bump, full bool) HeartbeatResponse {
	if len(req.SubscribedTopics) > 0 && !equalStrings(req.SubscribedTopics, m.names) {
		m.names = sortedUnique(req.SubscribedTopics)
	}
	if g.applyRegex(now, m, req, topics) {
		bump = true
	}
	if req.RackID != "" && req.RackID != m.rackID {
		m.rackID = req.RackID
		bump = true
	}
	if req.Assignor != "" && req.Assignor != m.assignor {
		m.assignor = req.Assignor
		if g.chooseAssignor() != g.assignor {
			bump = true
		}
	}
	if req.ClientID != "" {
		m.clientID = req.ClientID
	}
	if req.SessionTimeout != 0 {
		m.sessionTimeout = req.SessionTimeout
	}
	if req.RebalanceTimeout != 0 {
		m.rebalanceTimeout = req.RebalanceTimeout
	}
	switch {
	case bump || g.metadataChanged(topics, true):
		g.bump(topics)
	case g.epoch > g.assignmentEpoch: // Assigning after RestoreEpoch
		g.computeTarget(topics)
	}
	changed := g.reconcile(now, m, req.Owned, req.OwnedSet)
	g.markDirty(m.id) // PendingRecords writes it only if it changed
	m.sessionDeadline = now.Add(m.sessionTimeout)
	g.touch(m)

	interval := g.cfg.HeartbeatInterval
	if third := m.sessionTimeout / 3; third < interval {
		interval = third
	}
	resp := HeartbeatResponse{MemberID: m.id, MemberEpoch: m.epoch, HeartbeatInterval: interval}
	// A member reporting other partitions than it was last given has not
	// seen its last answer (lost, or still being applied): it gets the
	// assignment again, so a lost answer costs one heartbeat, not a
	// rebalance timeout. Repeating it is harmless.
	if changed || full || (req.OwnedSet && !sameSet(req.Owned, m.assigned)) {
		resp.Assignment = m.assigned.Clone()
		if resp.Assignment == nil {
			resp.Assignment = Assignment{}
		}
		resp.AssignmentChanged = true
	}
	return resp
}

// sortedUnique returns ts sorted without duplicates (a new slice).
func sortedUnique(ts []string) []string {
	out := append([]string(nil), ts...)
	sort.Strings(out)
	k := 0
	for i, t := range out {
		if i == 0 || t != out[k-1] {
			out[k] = t
			k++
		}
	}
	return out[:k]
}

// sameSet reports whether owned (as a client sent it: any order, no
// duplicates expected) holds exactly the partitions of assigned.
func sameSet(owned, assigned Assignment) bool {
	return owned.Len() == assigned.Len() && owned.subsetOf(assigned)
}
