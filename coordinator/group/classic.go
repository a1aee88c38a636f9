package group

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the classic group protocol's state (JoinGroup, SyncGroup,
// Heartbeat, LeaveGroup: Kafka's ClassicGroup and ClassicGroupMember,
// docs/design.md decision 70): the group, its members, its timers as
// deadlines, and the answers it owes to requests that wait.
// classic_join.go runs the join phase, classic_sync.go the sync phase,
// heartbeats, leaves and timers, classic_offsets.go the offset checks.

// ClassicState is a classic group's state, as Kafka's ClassicGroupState
// names them.
type ClassicState int8

const (
	// ClassicEmpty: no members (offsets may remain).
	ClassicEmpty ClassicState = iota
	// PreparingRebalance: the join phase; members (re)join.
	PreparingRebalance
	// CompletingRebalance: the join phase completed; the group waits for
	// the leader's SyncGroup with the assignment.
	CompletingRebalance
	// ClassicStable: the leader's assignment is stored and handed out.
	ClassicStable
	// ClassicDead: the group was deleted.
	ClassicDead
)

var classicStateNames = [...]string{ClassicEmpty: "Empty", PreparingRebalance: "PreparingRebalance",
	CompletingRebalance: "CompletingRebalance", ClassicStable: "Stable", ClassicDead: "Dead"}

// String returns the state's name as Kafka writes it ("PreparingRebalance").
func (s ClassicState) String() string {
	if s < 0 || int(s) >= len(classicStateNames) {
		return fmt.Sprintf("ClassicState(%d)", int8(s))
	}
	return classicStateNames[s]
}

// ConsumerProtocolType is the protocol type of Kafka's consumers; the
// group decodes the metadata and assignments of this type only (the
// subscribed topics of OffsetDelete and DescribeGroups).
const ConsumerProtocolType = "consumer"

// Defaults of ClassicConfig (Kafka's group.* settings).
const (
	DefaultInitialRebalanceDelay    = 3 * time.Second
	DefaultClassicMinSessionTimeout = 6 * time.Second
	DefaultClassicMaxSessionTimeout = 30 * time.Minute
	// DefaultNewMemberJoinTimeout is how long a new member's JoinGroup may
	// wait before the member is dropped (Kafka's fixed
	// classicGroupNewMemberJoinTimeoutMs): a client that gave up and
	// retries with no member id would otherwise leave defunct members.
	DefaultNewMemberJoinTimeout = 5 * time.Minute
)

// ClassicConfig configures classic groups. The zero value of each field
// means its default (WithDefaults).
type ClassicConfig struct {
	// InitialRebalanceDelay is group.initial.rebalance.delay.ms (3 s):
	// the first rebalance of an empty group waits this long for more
	// members, again after each new member, up to the rebalance timeout.
	// Negative: no delay.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout are
	// group.min.session.timeout.ms and group.max.session.timeout.ms
	// (6 s, 30 min): a JoinGroup outside gets INVALID_SESSION_TIMEOUT.
	MinSessionTimeout time.Duration
	MaxSessionTimeout time.Duration
	// MaxSize is group.max.size (0: unlimited): GROUP_MAX_SIZE_REACHED
	// beyond it.
	MaxSize int
	// NewMemberJoinTimeout (5 min; not a Kafka setting).
	NewMemberJoinTimeout time.Duration
	// NewMemberID returns a new unique suffix for member ids (the member
	// id is the client id or the instance id, "-", then this). Default:
	// Config's default source; tests inject a deterministic one.
	NewMemberID func() string
}

// WithDefaults returns c with every zero field set to its default.
func (c ClassicConfig) WithDefaults() ClassicConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.InitialRebalanceDelay, DefaultInitialRebalanceDelay)
	def(&c.MinSessionTimeout, DefaultClassicMinSessionTimeout)
	def(&c.MaxSessionTimeout, DefaultClassicMaxSessionTimeout)
	def(&c.NewMemberJoinTimeout, DefaultNewMemberJoinTimeout)
	if c.NewMemberID == nil {
		c.NewMemberID = randomMemberID
	}
	return c
}

// ClassicProtocol is one protocol a member supports: its name (the
// consumer's assignor, "range") and its metadata (for the consumer
// protocol type, Kafka's ConsumerProtocolSubscription), which the group
// only relays.
type ClassicProtocol struct {
	Name     string
	Metadata []byte
}

// ClassicMember is one member in the leader's JoinGroup answer.
type ClassicMember struct {
	MemberID   string
	InstanceID string
	// Metadata is the member's metadata for the group's protocol.
	Metadata []byte
}

// JoinGroupRequest is one JoinGroup.
type JoinGroupRequest struct {
	Group string
	// MemberID: "" on a first join (the group makes one).
	MemberID string
	// InstanceID: the static member's group.instance.id (KIP-345); ""
	// for a dynamic member.
	InstanceID   string
	ClientID     string
	ClientHost   string
	ProtocolType string
	// Reason is the client's reason (v8+), for the log.
	Reason string
	// Protocols in the member's order of preference; names are unique.
	Protocols        []ClassicProtocol
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration // v1+; v0 sends the session timeout
	// RequireKnownMemberID is JoinGroup v4+ (KIP-394): a dynamic member
	// without a member id is given one with MEMBER_ID_REQUIRED and must
	// join again with it.
	RequireKnownMemberID bool
	// SupportsSkipAssignment is JoinGroup v9+ (KIP-814): a static leader
	// that rejoins a Stable group is told it leads, with the members,
	// and to skip the assignment (JoinGroupResponse.SkipAssignment).
	SupportsSkipAssignment bool
}

// JoinGroupResponse is a JoinGroup's answer.
type JoinGroupResponse struct {
	Generation   int32
	ProtocolType string
	ProtocolName string
	Leader       string
	// MemberID is the member's id; set with MEMBER_ID_REQUIRED too.
	MemberID string
	// Members: the leader's answer only; every member's metadata for the
	// chosen protocol, sorted by member id.
	Members []ClassicMember
	// SkipAssignment: the leader must not assign (v9+, KIP-814: a static
	// leader that rejoined a Stable group; the assignment stands, and it
	// leads so that it watches the metadata).
	SkipAssignment bool
}

// SyncGroupRequest is one SyncGroup.
type SyncGroupRequest struct {
	Group      string
	MemberID   string
	InstanceID string
	Generation int32
	// ProtocolType and ProtocolName are v5+; nil when absent. When given
	// they must match the group's (INCONSISTENT_GROUP_PROTOCOL).
	ProtocolType, ProtocolName *string
	// Assignments is the leader's assignment by member id (ignored from
	// followers); members it leaves out get an empty assignment.
	Assignments map[string][]byte
}

// SyncGroupResponse is a SyncGroup's answer.
type SyncGroupResponse struct {
	ProtocolType string
	ProtocolName string
	Assignment   []byte
}

// LeaveMember is one member of a LeaveGroup: by member id, by instance
// id (an administrator removing a static member: MemberID ""), or both.
type LeaveMember struct {
	MemberID, InstanceID, Reason string
}

// ClassicJoinAnswer is the answer to a JoinGroup that waited
// (ClassicGroup.Join returned wait).
type ClassicJoinAnswer struct {
	MemberID string
	Response JoinGroupResponse
	Err      error
}

// ClassicSyncAnswer is the answer to a SyncGroup that waited.
type ClassicSyncAnswer struct {
	MemberID string
	Response SyncGroupResponse
	Err      error
}

// classicMember is one member of a classic group (ClassicGroupMember).
type classicMember struct {
	id, instanceID, clientID, clientHost, protocolType string
	protocols                                          []ClassicProtocol
	sessionTimeout, rebalanceTimeout                   time.Duration
	assignment                                         []byte
	// awaitingJoin, awaitingSync: a JoinGroup (SyncGroup) of the member
	// waits for the group's answer. A request that stopped waiting (its
	// caller's context ended) still counts, as Kafka's parked future
	// does: the member is not lost.
	awaitingJoin, awaitingSync bool
	// isNew: joined in this rebalance; expires at its join timeout even
	// while awaiting join.
	isNew bool
	// deadline is when the member's session runs out (zero: it has no
	// session timer, as while it awaits the group's answer).
	deadline time.Time
}

// hasSatisfiedHeartbeat is Kafka's rule: a member waiting for the group
// needs no heartbeat, unless it is new.
func (m *classicMember) hasSatisfiedHeartbeat() bool {
	return !m.isNew && (m.awaitingJoin || m.awaitingSync)
}

// metadata returns m's metadata for protocol name.
func (m *classicMember) metadata(name string) []byte {
	for _, p := range m.protocols {
		if p.Name == name {
			return p.Metadata
		}
	}
	return nil
}

// matches reports whether protocols equal m's (names, order and bytes).
func (m *classicMember) matches(protocols []ClassicProtocol) bool {
	return slices.EqualFunc(m.protocols, protocols, func(a, b ClassicProtocol) bool {
		return a.Name == b.Name && string(a.Metadata) == string(b.Metadata)
	})
}

// vote returns m's first protocol among candidates.
func (m *classicMember) vote(candidates map[string]bool) string {
	for _, p := range m.protocols {
		if candidates[p.Name] {
			return p.Name
		}
	}
	return ""
}

// ClassicGroup is one classic group's state, Kafka's ClassicGroup. It is
// not safe for concurrent use: its owner serialises calls, and after each
// call writes PendingRecord (if any), calls RecordWritten, then delivers
// TakeAnswers — in that order: an answer may depend on the record being
// durable (etcd-io/raft's Ready is the model).
type ClassicGroup struct {
	id  string
	cfg ClassicConfig

	state, previousState ClassicState
	generation           int32
	protocolType         string
	protocolName         string // "" while Empty
	leader               string // "" when none

	members map[string]*classicMember
	static  map[string]string // instance id -> member id
	// pending: KIP-394 member ids handed out with MEMBER_ID_REQUIRED, by
	// the deadline (their session timeout) to join again with them.
	pending map[string]time.Time
	// pendingSync: members that have not sent SyncGroup this generation.
	pendingSync map[string]bool

	// joinDeadline: when the join phase completes (PreparingRebalance).
	joinDeadline time.Time
	// initial: the initial rebalance's delay is running (Kafka's
	// tryCompleteInitialRebalanceElseSchedule): delay and remaining are
	// its arguments, newMemberAdded extends it.
	initial                 bool
	initialDelay, remaining time.Duration
	newMemberAdded          bool
	// syncDeadline: when members that have not synced are removed
	// (CompletingRebalance and Stable after a join).
	syncDeadline time.Time

	// record: the group's record to write before the answers go out;
	// written: what to do once its outcome is known (RecordWritten).
	record  *ClassicGroupRecord
	written []func(now time.Time, err error)

	joinAnswers []ClassicJoinAnswer
	syncAnswers []ClassicSyncAnswer
}

// NewClassic returns an empty classic group at generation (the group
// epoch the log holds for id, so that generations never repeat; 0 for a
// new group).
func NewClassic(id string, generation int32, cfg ClassicConfig) *ClassicGroup {
	return &ClassicGroup{
		id:          id,
		cfg:         cfg.WithDefaults(),
		generation:  generation,
		members:     map[string]*classicMember{},
		static:      map[string]string{},
		pending:     map[string]time.Time{},
		pendingSync: map[string]bool{},
	}
}

// ID returns the group id.
func (g *ClassicGroup) ID() string { return g.id }

// State returns the group's state.
func (g *ClassicGroup) State() ClassicState { return g.state }

// Generation returns the generation id.
func (g *ClassicGroup) Generation() int32 { return g.generation }

// ProtocolType returns the members' protocol type ("" when the group has
// never had a member).
func (g *ClassicGroup) ProtocolType() string { return g.protocolType }

// ProtocolName returns the protocol chosen for the generation ("" while
// Empty).
func (g *ClassicGroup) ProtocolName() string { return g.protocolName }

// Leader returns the leader's member id ("" when none).
func (g *ClassicGroup) Leader() string { return g.leader }

// Size returns the number of members (pending KIP-394 ids not counted).
func (g *ClassicGroup) Size() int { return len(g.members) }

// Empty reports whether the group has no members and no pending member
// ids: then the other protocol may take the group id.
func (g *ClassicGroup) Empty() bool { return len(g.members) == 0 && len(g.pending) == 0 }

// Delete marks an empty group Dead (DeleteGroups); NON_EMPTY_GROUP while
// it has members.
func (g *ClassicGroup) Delete() error {
	if len(g.members) > 0 || g.state != ClassicEmpty {
		return nonEmptyError(g.id, len(g.members))
	}
	g.transition(ClassicDead)
	return nil
}

// TakeAnswers returns the answers owed to waiting JoinGroup and SyncGroup
// requests since the last call (in the order they were made) and forgets
// them. The caller delivers them only after writing PendingRecord.
func (g *ClassicGroup) TakeAnswers() ([]ClassicJoinAnswer, []ClassicSyncAnswer) {
	j, s := g.joinAnswers, g.syncAnswers
	g.joinAnswers, g.syncAnswers = nil, nil
	return j, s
}

// Awaiting reports whether memberID's JoinGroup (join) or SyncGroup
// (!join) still waits for an answer.
func (g *ClassicGroup) Awaiting(memberID string, join bool) bool {
	m := g.members[memberID]
	if m == nil {
		return false
	}
	if join {
		return m.awaitingJoin
	}
	return m.awaitingSync
}

// memberIDs returns every member id, sorted.
func (g *ClassicGroup) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// transition moves the group to s, remembering the state it leaves.
func (g *ClassicGroup) transition(s ClassicState) {
	g.previousState, g.state = g.state, s
}

// canRebalance: a rebalance may start from Stable, CompletingRebalance or
// Empty (Kafka's PreparingRebalance.validPreviousStates).
func (g *ClassicGroup) canRebalance() bool {
	return g.state == ClassicStable || g.state == CompletingRebalance || g.state == ClassicEmpty
}

// rebalanceTimeout is the largest rebalance timeout of the members.
func (g *ClassicGroup) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// numAwaitingJoin counts the members whose JoinGroup waits.
func (g *ClassicGroup) numAwaitingJoin() int {
	n := 0
	for _, m := range g.members {
		if m.awaitingJoin {
			n++
		}
	}
	return n
}

// hasAllMembersJoined: every member awaits join and no KIP-394 id is
// pending.
func (g *ClassicGroup) hasAllMembersJoined() bool {
	return g.numAwaitingJoin() == len(g.members) && len(g.pending) == 0
}

// candidateProtocols are the protocols every member supports.
func (g *ClassicGroup) candidateProtocols() map[string]bool {
	count := map[string]int{}
	for _, m := range g.members {
		for _, p := range m.protocols {
			count[p.Name]++
		}
	}
	out := map[string]bool{}
	for name, n := range count {
		if n == len(g.members) {
			out[name] = true
		}
	}
	return out
}

// supportsProtocols is Kafka's rule: an empty group takes any non-empty
// protocol type with at least one protocol; otherwise the type must be the
// group's and one protocol must be supported by every member.
func (g *ClassicGroup) supportsProtocols(protocolType string, protocols []ClassicProtocol) bool {
	if g.state == ClassicEmpty {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	candidates := g.candidateProtocols()
	for _, p := range protocols {
		if candidates[p.Name] {
			return true
		}
	}
	return false
}

// selectProtocol is Kafka's vote: each member votes for its first
// candidate protocol; the most votes win (ties: the smaller name, where
// Kafka's hash-map order decides).
func (g *ClassicGroup) selectProtocol() string {
	candidates := g.candidateProtocols()
	votes := map[string]int{}
	for _, m := range g.members {
		votes[m.vote(candidates)]++
	}
	best, bestVotes := "", 0
	for name, n := range votes {
		if n > bestVotes || (n == bestVotes && name < best) {
			best, bestVotes = name, n
		}
	}
	return best
}

// add inserts m (awaiting join if awaiting).
func (g *ClassicGroup) add(m *classicMember) {
	if len(g.members) == 0 {
		g.protocolType = m.protocolType
	}
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	if g.leader == "" {
		g.leader = m.id
	}
	g.members[m.id] = m
	delete(g.pending, m.id)
}

// remove drops memberID (member or pending id). A JoinGroup or SyncGroup
// of the member still waiting is answered UNKNOWN_MEMBER_ID (a removed
// member's request would otherwise wait for nothing).
func (g *ClassicGroup) remove(memberID string) {
	if m := g.members[memberID]; m != nil {
		g.answerJoin(m, JoinGroupResponse{MemberID: memberID}, unknownMember(g.id, memberID))
		g.answerSync(m, SyncGroupResponse{}, unknownMember(g.id, memberID))
		delete(g.members, memberID)
		if m.instanceID != "" && g.static[m.instanceID] == memberID {
			delete(g.static, m.instanceID)
		}
	}
	if g.leader == memberID {
		g.leader = ""
		if ids := g.memberIDs(); len(ids) > 0 {
			g.leader = ids[0]
		}
	}
	delete(g.pending, memberID)
	delete(g.pendingSync, memberID)
}

// answerJoin answers m's waiting JoinGroup, if any.
func (g *ClassicGroup) answerJoin(m *classicMember, resp JoinGroupResponse, err error) {
	if !m.awaitingJoin {
		return
	}
	m.awaitingJoin = false
	g.joinAnswers = append(g.joinAnswers, ClassicJoinAnswer{MemberID: m.id, Response: resp, Err: err})
}

// answerSync answers m's waiting SyncGroup, if any; it reports whether
// there was one.
func (g *ClassicGroup) answerSync(m *classicMember, resp SyncGroupResponse, err error) bool {
	if !m.awaitingSync {
		return false
	}
	m.awaitingSync = false
	g.syncAnswers = append(g.syncAnswers, ClassicSyncAnswer{MemberID: m.id, Response: resp, Err: err})
	return true
}

// resetSession restarts m's session timer from now.
func (g *ClassicGroup) resetSession(now time.Time, m *classicMember) {
	m.deadline = now.Add(m.sessionTimeout)
}

// validateMember is Kafka's ClassicGroup.validateMember: a static
// member's instance id must map to this member id (else
// FENCED_INSTANCE_ID; unknown instance: UNKNOWN_MEMBER_ID), and the member
// must exist.
func (g *ClassicGroup) validateMember(memberID, instanceID, op string) error {
	if instanceID != "" {
		existing, ok := g.static[instanceID]
		if !ok {
			return unknownMember(g.id, memberID)
		}
		if existing != memberID {
			return fencedInstance(g.id, instanceID, memberID, existing, op)
		}
	}
	if g.members[memberID] == nil {
		return unknownMember(g.id, memberID)
	}
	return nil
}

// NextDeadline is the earliest time Expire has work (zero: none).
func (g *ClassicGroup) NextDeadline() time.Time {
	d, _, _ := g.earliest()
	return d
}

// Timer kinds of earliest.
const (
	timerJoin = iota
	timerSync
	timerPending
	timerSession
)

// earliest returns the earliest deadline, its kind and its member id
// (ties: the kinds' order, then the member id).
func (g *ClassicGroup) earliest() (time.Time, int, string) {
	var best time.Time
	kind, who := -1, ""
	consider := func(d time.Time, k int, id string) {
		if d.IsZero() {
			return
		}
		if best.IsZero() || d.Before(best) || (d.Equal(best) && (k < kind || (k == kind && id < who))) {
			best, kind, who = d, k, id
		}
	}
	consider(g.joinDeadline, timerJoin, "")
	consider(g.syncDeadline, timerSync, "")
	for id, d := range g.pending {
		consider(d, timerPending, id)
	}
	for id, m := range g.members {
		consider(m.deadline, timerSession, id)
	}
	return best, kind, who
}

func unknownMember(group, memberID string) error {
	if memberID == "" {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %s has no member without a member id", group)
	}
	return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "member %s is not in group %s", errs.Echo(memberID), group)
}

func fencedInstance(group, instanceID, memberID, existing, op string) error {
	return errs.New(sluicev1.ErrorCode_FENCED_INSTANCE_ID, "%s: instance id %s of group %s belongs to member %s, not %s",
		op, errs.Echo(instanceID), group, errs.Echo(existing), errs.Echo(memberID))
}

func nonEmptyError(group string, n int) error {
	noun := "members"
	if n == 1 {
		noun = "member"
	}
	return errs.New(sluicev1.ErrorCode_NON_EMPTY_GROUP, "group %s has %d %s; stop its consumers first", group, n, noun)
}
