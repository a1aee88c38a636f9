package group

import (
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// step is one heartbeat of a scenario and its exact answer.
type step struct {
	who   string
	epoch int32  // member epoch sent; the client's own when 0 and not a join
	owned string // what the client reports ("-" none); "" = what it owns
	join  bool

	wantEpoch  int32
	wantAssign string // "" = no assignment in the answer
	wantCode   sluicev1.ErrorCode
	wantState  State // group state after the step
}

// runSteps plays steps on s, checking every answer.
func runSteps(t *testing.T, s *sim, steps []step) {
	t.Helper()
	for i, st := range steps {
		c := s.clients[st.who]
		if c == nil {
			c = &client{topics: []string{"t"}}
			s.clients[st.who] = c
		}
		if st.owned != "" {
			c.owned = parseAssignment(st.owned)
		}
		epoch := c.epoch
		if st.join {
			epoch = 0
		} else if st.epoch != 0 {
			epoch = st.epoch
		}
		resp, err := s.send(st.who, epoch)
		if codeOf(err) != st.wantCode {
			t.Fatalf("step %d (%s): error %v, want %v", i, st.who, err, st.wantCode)
		}
		if err != nil {
			continue
		}
		if resp.MemberEpoch != st.wantEpoch {
			t.Fatalf("step %d (%s): epoch %d, want %d", i, st.who, resp.MemberEpoch, st.wantEpoch)
		}
		got := ""
		if resp.AssignmentChanged {
			got = resp.Assignment.String()
		}
		if got != st.wantAssign {
			t.Fatalf("step %d (%s): assignment %q, want %q", i, st.who, got, st.wantAssign)
		}
		if s.g.State() != st.wantState {
			t.Fatalf("step %d (%s): group %s, want %s", i, st.who, s.g.State(), st.wantState)
		}
	}
}

// KIP-848: a partition moves from A to B only after A reported it
// released. Every answer, step by step.
func TestRevokeBeforeAssign(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 4))
	runSteps(t, s, []step{
		// A joins alone: everything, at group epoch 1.
		{who: "A", join: true, wantEpoch: 1, wantAssign: "t:0,1,2,3", wantState: Stable},
		// B joins: group epoch 2, target A=0,1 B=2,3. B moves to epoch 2
		// at once but gets nothing: A still holds 2,3.
		{who: "B", join: true, wantEpoch: 2, wantAssign: "-", wantState: Reconciling},
		// A is asked to revoke 2,3: answered 0,1 and keeps epoch 1.
		{who: "A", wantEpoch: 1, wantAssign: "t:0,1", wantState: Reconciling},
		// B heartbeats before A released: still nothing.
		{who: "B", wantEpoch: 2, wantState: Reconciling},
		// A reports 0,1 only: released; A moves to epoch 2.
		{who: "A", wantEpoch: 2, wantState: Reconciling},
		// B now gets 2,3: Stable.
		{who: "B", wantEpoch: 2, wantAssign: "t:2,3", wantState: Stable},
		// Steady state: no assignment in the answers.
		{who: "A", wantEpoch: 2, wantState: Stable},
		{who: "B", wantEpoch: 2, wantState: Stable},
	})
}

// A member that does not report what it owns is assumed to still own it:
// revocation waits.
func TestRevocationNeedsOwnedPartitions(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}})
	s.join("B", &client{topics: []string{"t"}})
	s.hb("A") // asked to revoke t:1
	a := s.clients["A"]
	resp, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: a.epoch}, s.topics)
	if err != nil || resp.MemberEpoch != 1 {
		t.Fatalf("heartbeat without owned: %+v %v, want epoch 1 (still revoking)", resp, err)
	}
	if s.g.members[a.id].state != MemberUnrevokedPartitions {
		t.Fatalf("state %s, want UnrevokedPartitions", s.g.members[a.id].state)
	}
}

func TestJoinGeneratesMemberIDAndAnswersInterval(t *testing.T) {
	g := newTestGroup(Config{HeartbeatInterval: 5 * time.Second})
	resp, err := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t", "t"}, SessionTimeout: 6 * time.Second}, meta("t", 3))
	if err != nil {
		t.Fatal(err)
	}
	want := HeartbeatResponse{MemberID: "m1", MemberEpoch: 1, HeartbeatInterval: 2 * time.Second, Assignment: parseAssignment("t:0,1,2"), AssignmentChanged: true}
	if resp.MemberID != want.MemberID || resp.MemberEpoch != want.MemberEpoch || resp.HeartbeatInterval != want.HeartbeatInterval ||
		!resp.Assignment.Equal(want.Assignment) || !resp.AssignmentChanged {
		t.Fatalf("got %+v, want %+v", resp, want)
	}
	if g.Size() != 1 || g.State() != Stable || g.Epoch() != 1 || g.Describe().Members[0].SubscribedTopics[0] != "t" || len(g.Describe().Members[0].SubscribedTopics) != 1 {
		t.Fatalf("size %d state %s epoch %d %+v", g.Size(), g.State(), g.Epoch(), g.Describe())
	}
	// A client that brings its own id keeps it.
	resp, err = g.Heartbeat(t0, HeartbeatRequest{MemberID: "own-uuid", SubscribedTopics: []string{"t"}}, meta("t", 3))
	if err != nil || resp.MemberID != "own-uuid" || resp.HeartbeatInterval != 5*time.Second {
		t.Fatalf("%+v %v", resp, err)
	}
}

func TestDefaultMemberIDsAreRandom(t *testing.T) {
	g := New("g", Config{})
	a, _ := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t"}}, nil)
	b, _ := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t"}}, nil)
	if len(a.MemberID) != 22 || a.MemberID == b.MemberID {
		t.Fatalf("ids %q %q", a.MemberID, b.MemberID)
	}
}

// Request checks that need no group state, and the lookups.
func TestHeartbeatErrors(t *testing.T) {
	topics := meta("t", 2)
	setup := func() *Group {
		g := newTestGroup(Config{MaxSize: 3})
		mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics)                                                // m1, epoch 1
		mustHB(t, g, HeartbeatRequest{InstanceID: "i1", SubscribedTopics: []string{"t"}}, topics)                              // m2 static, epoch 2
		mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: 1, OwnedSet: true, Owned: Assignment{"t": {0, 1}}}, topics) // revoking
		return g
	}
	tests := []struct {
		name string
		req  HeartbeatRequest
		want sluicev1.ErrorCode
	}{
		{"epoch below -2", HeartbeatRequest{MemberID: "m1", MemberEpoch: -3}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"join without topics", HeartbeatRequest{}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"join owning partitions", HeartbeatRequest{SubscribedTopics: []string{"t"}, OwnedSet: true, Owned: Assignment{"t": {0}}}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"heartbeat without member id", HeartbeatRequest{MemberEpoch: 1}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"leave without member id", HeartbeatRequest{MemberEpoch: -1}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"static leave without instance id", HeartbeatRequest{MemberID: "m1", MemberEpoch: -2}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"empty topic name", HeartbeatRequest{SubscribedTopics: []string{""}}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"negative rebalance timeout", HeartbeatRequest{SubscribedTopics: []string{"t"}, RebalanceTimeout: -1}, sluicev1.ErrorCode_INVALID_REQUEST},
		{"unknown assignor", HeartbeatRequest{SubscribedTopics: []string{"t"}, Assignor: "sticky"}, sluicev1.ErrorCode_UNSUPPORTED_ASSIGNOR},
		{"session below min", HeartbeatRequest{SubscribedTopics: []string{"t"}, SessionTimeout: 999 * time.Millisecond}, sluicev1.ErrorCode_INVALID_SESSION_TIMEOUT},
		{"session above max", HeartbeatRequest{SubscribedTopics: []string{"t"}, SessionTimeout: 31 * time.Minute}, sluicev1.ErrorCode_INVALID_SESSION_TIMEOUT},
		{"unknown member", HeartbeatRequest{MemberID: "nobody", MemberEpoch: 1}, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"unknown member leaves", HeartbeatRequest{MemberID: "nobody", MemberEpoch: -1}, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"unknown instance", HeartbeatRequest{MemberID: "m2", InstanceID: "i9", MemberEpoch: 2}, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"instance held by another member id", HeartbeatRequest{MemberID: "m1", InstanceID: "i1", MemberEpoch: 1}, sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"static leave by another member id", HeartbeatRequest{MemberID: "m1", InstanceID: "i1", MemberEpoch: -2}, sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"join with a live instance id", HeartbeatRequest{InstanceID: "i1", SubscribedTopics: []string{"t"}}, sluicev1.ErrorCode_UNRELEASED_INSTANCE_ID},
		{"epoch above the member's", HeartbeatRequest{MemberID: "m1", MemberEpoch: 3}, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH},
		{"epoch below, not the previous", HeartbeatRequest{MemberID: "m2", MemberEpoch: 1, OwnedSet: true}, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH},
		{"join with another member's id and an instance id", HeartbeatRequest{MemberID: "m1", InstanceID: "i7", SubscribedTopics: []string{"t"}}, sluicev1.ErrorCode_INVALID_REQUEST},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := setup()
			before := g.Describe()
			_, err := g.Heartbeat(t0.Add(time.Second), tc.req, topics)
			if codeOf(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if after := g.Describe(); !sameDescription(before, after) {
				t.Fatalf("a failed heartbeat changed the group:\n%+v\n%+v", before, after)
			}
		})
	}
}

func sameDescription(a, b Description) bool {
	if a.State != b.State || a.GroupEpoch != b.GroupEpoch || a.AssignmentEpoch != b.AssignmentEpoch || a.Assignor != b.Assignor || len(a.Members) != len(b.Members) {
		return false
	}
	for i := range a.Members {
		x, y := a.Members[i], b.Members[i]
		if x.MemberID != y.MemberID || x.MemberEpoch != y.MemberEpoch || x.MemberState != y.MemberState || !x.Assignment.Equal(y.Assignment) ||
			!x.TargetAssignment.Equal(y.TargetAssignment) || strings.Join(x.SubscribedTopics, ",") != strings.Join(y.SubscribedTopics, ",") {
			return false
		}
	}
	return true
}

func mustHB(t *testing.T, g *Group, req HeartbeatRequest, topics map[string]TopicMetadata) HeartbeatResponse {
	t.Helper()
	resp, err := g.Heartbeat(t0, req, topics)
	if err != nil {
		t.Fatalf("%+v: %v", req, err)
	}
	checkInvariants(t, g)
	return resp
}

func TestMaxSize(t *testing.T) {
	g := newTestGroup(Config{MaxSize: 2})
	topics := meta("t", 2)
	mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics)
	mustHB(t, g, HeartbeatRequest{InstanceID: "i", SubscribedTopics: []string{"t"}}, topics) // m2
	if _, err := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics); codeOf(err) != sluicev1.ErrorCode_GROUP_MAX_SIZE_REACHED {
		t.Fatalf("third join: %v", err)
	}
	// A known member rejoining is not a new member.
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", SubscribedTopics: []string{"t"}}, topics)
	// A departed static member still counts; its instance may come back.
	mustHB(t, g, HeartbeatRequest{MemberID: "m2", InstanceID: "i", MemberEpoch: -2}, topics)
	if _, err := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics); codeOf(err) != sluicev1.ErrorCode_GROUP_MAX_SIZE_REACHED {
		t.Fatalf("join while a static member is away: %v", err)
	}
	mustHB(t, g, HeartbeatRequest{InstanceID: "i", SubscribedTopics: []string{"t"}}, topics)
	// A leave makes room.
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: -1}, topics)
	mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics)
}

// Epoch checks on heartbeat (KIP-848), including the lost-answer case.
func TestEpochFencing(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 4))
	s.join("A", &client{topics: []string{"t"}})
	s.join("B", &client{topics: []string{"t"}})
	s.settle(5) // A at epoch 2 with t:0,1; previous epoch 1
	a := s.g.members[s.clients["A"].id]
	if a.epoch != 2 || a.previousEpoch != 1 {
		t.Fatalf("A epoch %d previous %d", a.epoch, a.previousEpoch)
	}
	tests := []struct {
		name  string
		epoch int32
		owned string
		set   bool
		want  sluicev1.ErrorCode
		full  bool
	}{
		{"current epoch", 2, "t:0,1", true, sluicev1.ErrorCode_NONE, false},
		{"previous epoch, owning a subset: the answer was lost", 1, "t:0", true, sluicev1.ErrorCode_NONE, true},
		{"previous epoch, owning all it has", 1, "t:0,1", true, sluicev1.ErrorCode_NONE, true},
		{"previous epoch, owning more", 1, "t:0,1,2", true, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, false},
		{"previous epoch, owned not reported", 1, "", false, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, false},
		{"above the current epoch", 3, "t:0,1", true, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: tc.epoch, OwnedSet: tc.set, Owned: parseAssignment(tc.owned)}, s.topics)
			if codeOf(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil && (resp.MemberEpoch != 2 || resp.AssignmentChanged != tc.full || (tc.full && resp.Assignment.String() != "t:0,1")) {
				t.Fatalf("answer %+v", resp)
			}
		})
	}
	// An epoch older than the previous one is fenced.
	s.join("C", &client{topics: []string{"t"}}) // group epoch 3
	s.settle(5)                                 // A at 3, previous 2
	if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: 1, OwnedSet: true}, s.topics); codeOf(err) != sluicev1.ErrorCode_FENCED_MEMBER_EPOCH {
		t.Fatalf("epoch 1 after 3: %v", err)
	}
}

// A known member id joining again with epoch 0 loses its partitions as if
// fenced and keeps its id; the group epoch bumps.
func TestRejoinDropsPartitions(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}})
	s.join("B", &client{topics: []string{"t"}})
	s.settle(5)
	epoch := s.g.Epoch()
	a := s.clients["A"]
	held := a.owned.String()
	resp, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, SubscribedTopics: []string{"t"}, OwnedSet: true}, s.topics)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, s.g)
	if resp.MemberID != a.id || s.g.Epoch() != epoch+1 || resp.MemberEpoch != epoch+1 || resp.Assignment.String() != held {
		t.Fatalf("rejoin answered %+v (group epoch %d), want id %s epoch %d and %s back (its partitions were free)", resp, s.g.Epoch(), a.id, epoch+1, held)
	}
}

func TestLeave(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 4))
	s.join("A", &client{topics: []string{"t"}})
	s.join("B", &client{topics: []string{"t"}})
	s.settle(5)
	epoch := s.g.Epoch()
	s.leave("B", LeaveEpoch)
	if s.g.Epoch() != epoch+1 || s.g.Size() != 1 || s.clients["B"].epoch != LeaveEpoch {
		t.Fatalf("after leave: epoch %d size %d", s.g.Epoch(), s.g.Size())
	}
	delete(s.clients, "B")
	resp := s.hb("A")
	if resp.Assignment.String() != "t:0,1,2,3" || s.g.State() != Stable {
		t.Fatalf("A after B left: %+v %s", resp, s.g.State())
	}
	s.leave("A", LeaveEpoch)
	if s.g.State() != Empty || s.g.Size() != 0 {
		t.Fatalf("state %s", s.g.State())
	}
}

func TestSessionExpiry(t *testing.T) {
	s := newSim(t, Config{SessionTimeout: 10 * time.Second}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}})
	s.now = s.now.Add(4 * time.Second)
	s.join("B", &client{topics: []string{"t"}})
	s.settle(5)
	if got := s.g.NextDeadline(); !got.Equal(t0.Add(14 * time.Second)) {
		t.Fatalf("next deadline %v", got) // A's last heartbeat was at +4s in settle
	}
	s.now = t0.Add(13 * time.Second)
	s.hb("B") // B's deadline moves to +23s
	if fenced := s.g.Expire(t0.Add(14*time.Second-time.Millisecond), s.topics); fenced != nil {
		t.Fatalf("fenced %v before the deadline", fenced)
	}
	epoch := s.g.Epoch()
	if fenced := s.g.Expire(t0.Add(14*time.Second), s.topics); len(fenced) != 1 || fenced[0] != s.clients["A"].id {
		t.Fatalf("fenced %v at A's deadline", fenced)
	}
	checkInvariants(t, s.g)
	if s.g.Epoch() != epoch+1 || s.g.Size() != 1 || !s.g.NextDeadline().Equal(t0.Add(23*time.Second)) {
		t.Fatalf("epoch %d size %d next %v", s.g.Epoch(), s.g.Size(), s.g.NextDeadline())
	}
	if _, err := s.send("A", s.clients["A"].epoch); codeOf(err) != sluicev1.ErrorCode_UNKNOWN_MEMBER_ID {
		t.Fatalf("fenced A heartbeats: %v", err)
	}
	delete(s.clients, "A")
	if resp := s.hb("B"); resp.Assignment.String() != "t:0,1" {
		t.Fatalf("B: %+v", resp)
	}
	if fenced := s.g.Expire(t0.Add(time.Hour), s.topics); len(fenced) != 1 || s.g.State() != Empty || !s.g.NextDeadline().IsZero() {
		t.Fatalf("fenced %v state %s", fenced, s.g.State())
	}
}

// A member that does not release revoked partitions within its rebalance
// timeout is fenced, even while it keeps heartbeating.
func TestRebalanceTimeout(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}})
	s.join("B", &client{topics: []string{"t"}})
	a := s.clients["A"]
	if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: 1, RebalanceTimeout: 20 * time.Second, OwnedSet: true, Owned: parseAssignment("t:0,1")}, s.topics); err != nil {
		t.Fatal(err)
	}
	if got := s.g.NextDeadline(); !got.Equal(t0.Add(20 * time.Second)) {
		t.Fatalf("deadline %v, want the rebalance deadline", got)
	}
	for i := 1; i <= 3; i++ { // keeps heartbeating, still owning t:1
		s.now = t0.Add(time.Duration(i) * 5 * time.Second)
		if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: 1, OwnedSet: true, Owned: parseAssignment("t:0,1")}, s.topics); err != nil {
			t.Fatal(err)
		}
		s.hb("B")
	}
	if fenced := s.g.Expire(t0.Add(20*time.Second), s.topics); len(fenced) != 1 || fenced[0] != a.id {
		t.Fatalf("fenced %v", fenced)
	}
	delete(s.clients, "A")
	if resp := s.hb("B"); resp.Assignment.String() != "t:0,1" {
		t.Fatalf("B: %+v", resp)
	}
}

// Static membership: -2 keeps the instance's assignment for its session;
// the instance comes back (any member id) with the same assignment and
// epoch, and nobody else moves.
func TestStaticLeaveAndReturn(t *testing.T) {
	s := newSim(t, Config{SessionTimeout: 30 * time.Second}, meta("t", 4))
	s.join("A", &client{topics: []string{"t"}})
	s.join("S", &client{topics: []string{"t"}, instance: "inst"})
	s.settle(5)
	sOld := *s.clients["S"]
	epoch := s.g.Epoch()
	s.now = s.now.Add(time.Second)
	s.leave("S", StaticLeaveEpoch)
	if s.g.Epoch() != epoch || s.g.Size() != 1 || s.g.State() != Stable {
		t.Fatalf("after static leave: epoch %d size %d %s", s.g.Epoch(), s.g.Size(), s.g.State())
	}
	if d := s.g.Describe(); d.Members[1].MemberEpoch != StaticLeaveEpoch || d.Members[1].Assignment.String() != sOld.owned.String() {
		t.Fatalf("departed member: %+v", d.Members[1])
	}
	// Heartbeats of the remaining member change nothing.
	if resp := s.hb("A"); resp.AssignmentChanged {
		t.Fatalf("A: %+v", resp)
	}
	// The instance comes back under a new member id within its session.
	s.now = s.now.Add(29 * time.Second)
	s.clients["S"] = &client{topics: []string{"t"}, instance: "inst", id: "new-incarnation"}
	resp := s.join("S", s.clients["S"])
	if resp.MemberID != "new-incarnation" || resp.MemberEpoch != sOld.epoch || resp.Assignment.String() != sOld.owned.String() || s.g.Epoch() != epoch {
		t.Fatalf("return: %+v (group epoch %d), want epoch %d and %s", resp, s.g.Epoch(), sOld.epoch, sOld.owned)
	}
	if _, ok := s.g.members[sOld.id]; ok || s.g.Size() != 2 || s.g.State() != Stable {
		t.Fatalf("old member id still there or group not stable: %+v", s.g.Describe())
	}
	// Its old member id is fenced by instance.
	if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: sOld.id, InstanceID: "inst", MemberEpoch: sOld.epoch}, s.topics); codeOf(err) != sluicev1.ErrorCode_FENCED_INSTANCE_ID {
		t.Fatalf("old incarnation: %v", err)
	}
}

// A departed static member whose session runs out is fenced; its
// partitions go to the others.
func TestStaticLeaveExpires(t *testing.T) {
	s := newSim(t, Config{SessionTimeout: 30 * time.Second}, meta("t", 4))
	s.join("A", &client{topics: []string{"t"}})
	s.join("S", &client{topics: []string{"t"}, instance: "inst"})
	s.settle(5)
	s.now = t0.Add(10 * time.Second)
	s.hb("A")
	s.leave("S", StaticLeaveEpoch)
	if got := s.g.NextDeadline(); !got.Equal(t0.Add(40 * time.Second)) {
		t.Fatalf("deadline %v", got)
	}
	s.now = t0.Add(35 * time.Second)
	s.hb("A")
	epoch := s.g.Epoch()
	if fenced := s.g.Expire(t0.Add(40*time.Second), s.topics); len(fenced) != 1 || fenced[0] != s.clients["S"].id {
		t.Fatalf("fenced %v", fenced)
	}
	delete(s.clients, "S")
	if s.g.Epoch() != epoch+1 {
		t.Fatalf("epoch %d", s.g.Epoch())
	}
	if resp := s.hb("A"); resp.Assignment.String() != "t:0,1,2,3" {
		t.Fatalf("A: %+v", resp)
	}
	// The instance id is free: a new incarnation joins as a new member.
	resp := s.join("S", &client{topics: []string{"t"}, instance: "inst"})
	if resp.MemberEpoch != s.g.Epoch() || s.g.Size() != 2 {
		t.Fatalf("%+v", resp)
	}
}

// -1 from a static member removes it for good: the instance's partitions
// move at once.
func TestStaticLeaveForGood(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}})
	s.join("S", &client{topics: []string{"t"}, instance: "inst"})
	s.settle(5)
	epoch := s.g.Epoch()
	s.leave("S", LeaveEpoch)
	delete(s.clients, "S")
	if s.g.Epoch() != epoch+1 || len(s.g.static) != 0 {
		t.Fatalf("epoch %d static %v", s.g.Epoch(), s.g.static)
	}
	if resp := s.hb("A"); resp.Assignment.String() != "t:0,1" {
		t.Fatalf("A: %+v", resp)
	}
}

// A static member that rejoins (epoch 0) under its own member id while
// live is the same member starting over, not an unreleased instance.
func TestStaticRejoinSameMemberID(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("S", &client{topics: []string{"t"}, instance: "inst"})
	c := s.clients["S"]
	if _, err := s.send("S", 0); err != nil {
		t.Fatal(err)
	}
	if c.owned.String() != "t:0,1" || s.g.Epoch() != 2 {
		t.Fatalf("%s epoch %d", c.owned, s.g.Epoch())
	}
}

func TestSubscriptionAndMetadataChanges(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2, "u", 2))
	s.join("A", &client{topics: []string{"t"}})
	e := s.g.Epoch()
	// Same subscription, no metadata change: no bump.
	s.hb("A")
	if s.g.Epoch() != e {
		t.Fatal("bumped without a change")
	}
	// New subscription.
	a := s.clients["A"]
	resp, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: a.epoch, SubscribedTopics: []string{"u", "t"}, OwnedSet: true, Owned: a.owned}, s.topics)
	if err != nil || s.g.Epoch() != e+1 || resp.Assignment.String() != "t:0,1 u:0,1" {
		t.Fatalf("%+v %v epoch %d", resp, err, s.g.Epoch())
	}
	a.epoch, a.owned = resp.MemberEpoch, resp.Assignment
	// Partitions added to a subscribed topic, seen by a heartbeat.
	s.topics = meta("t", 3, "u", 2)
	if resp := s.hb("A"); s.g.Epoch() != e+2 || resp.Assignment.String() != "t:0,1,2 u:0,1" {
		t.Fatalf("%+v epoch %d", resp, s.g.Epoch())
	}
	// An unsubscribed topic changing: nothing.
	s.topics["v"] = TopicMetadata{Partitions: 7}
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != e+2 {
		t.Fatal("bumped for an unsubscribed topic")
	}
	// Racks appearing, through MetadataChanged.
	s.topics["t"] = TopicMetadata{Partitions: 3, Racks: [][]string{{"r1"}, {"r2"}, {"r1"}}}
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != e+3 {
		t.Fatal("racks changed without a bump")
	}
	// The group keeps its own copy: racks changed in place are seen by
	// MetadataChanged (Heartbeat's fast path skips slices it has seen).
	s.topics["t"].Racks[0][0] = "r9"
	if s.g.metadata["t"].Racks[0][0] != "r1" {
		t.Fatal("snapshot shares the caller's slices")
	}
	s.hb("A")
	if s.g.Epoch() != e+3 {
		t.Fatal("heartbeat compared a racks slice it had seen")
	}
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != e+4 {
		t.Fatal("MetadataChanged missed racks changed in place")
	}
	// New slices with other racks: a heartbeat sees them.
	s.topics["t"] = TopicMetadata{Partitions: 3, Racks: [][]string{{"r1"}, {"r2"}, {"r2"}}}
	s.hb("A")
	if s.g.Epoch() != e+5 {
		t.Fatal("heartbeat missed new racks")
	}
	// Equal racks in new slices: no bump.
	s.topics["t"] = TopicMetadata{Partitions: 3, Racks: [][]string{{"r1"}, {"r2"}, {"r2"}}}
	s.hb("A")
	if s.g.Epoch() != e+5 {
		t.Fatal("bumped for equal racks")
	}
	e += 2
	// A deleted topic has no partitions.
	delete(s.topics, "u")
	if resp := s.hb("A"); s.g.Epoch() != e+4 || resp.Assignment.String() != "t:0,1,2" {
		t.Fatalf("%+v epoch %d", resp, s.g.Epoch())
	}
}

func TestAssignorChoice(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 3))
	s.join("A", &client{topics: []string{"t"}, assignor: "range"})
	if s.g.Assignor() != "range" {
		t.Fatalf("assignor %s", s.g.Assignor())
	}
	s.join("B", &client{topics: []string{"t"}, assignor: "uniform"})
	if s.g.Assignor() != "uniform" { // tie: the default
		t.Fatalf("tie: %s", s.g.Assignor())
	}
	s.join("C", &client{topics: []string{"t"}, assignor: "range"})
	if s.g.Assignor() != "range" || s.g.Describe().Assignor != "range" {
		t.Fatalf("majority: %s", s.g.Assignor())
	}
	s.settle(5)
	// A vote that changes the choice bumps the epoch.
	e := s.g.Epoch()
	s.clients["C"].assignor = "uniform"
	s.hb("C")
	if s.g.Assignor() != "uniform" || s.g.Epoch() != e+1 {
		t.Fatalf("assignor %s epoch %d", s.g.Assignor(), s.g.Epoch())
	}
	// One that does not, does not.
	s.clients["A"].assignor = "uniform"
	s.hb("A")
	if s.g.Epoch() != e+1 {
		t.Fatalf("epoch %d", s.g.Epoch())
	}
}

func TestStatesAndDelete(t *testing.T) {
	g := newTestGroup(Config{})
	if g.State() != Empty || g.State().String() != "Empty" {
		t.Fatal(g.State())
	}
	g.RestoreEpoch(41)
	g.RestoreEpoch(7) // never lowers
	if g.Epoch() != 41 || g.AssignmentEpoch() != 41 {
		t.Fatalf("restored %d/%d", g.Epoch(), g.AssignmentEpoch())
	}
	resp := mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, meta("t", 1))
	if resp.MemberEpoch != 42 || g.State() != Stable {
		t.Fatalf("%+v %s", resp, g.State())
	}
	// Restored under members: Assigning until the next call computes the
	// target; members then move to the new epoch.
	g.RestoreEpoch(50)
	if g.State() != Assigning || g.Epoch() != 50 || g.AssignmentEpoch() != 42 {
		t.Fatalf("%s %d/%d", g.State(), g.Epoch(), g.AssignmentEpoch())
	}
	resp = mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: 42, OwnedSet: true, Owned: Assignment{"t": {0}}}, meta("t", 1))
	if resp.MemberEpoch != 50 || g.State() != Stable || g.AssignmentEpoch() != 50 {
		t.Fatalf("%+v %s %d", resp, g.State(), g.AssignmentEpoch())
	}
	if err := g.Delete(); codeOf(err) != sluicev1.ErrorCode_NON_EMPTY_GROUP {
		t.Fatalf("delete non-empty: %v", err)
	}
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: -1}, nil)
	if err := g.Delete(); err != nil || g.State() != Dead || g.State().String() != "Dead" {
		t.Fatalf("%v %s", err, g.State())
	}
	if _, err := g.Heartbeat(t0, HeartbeatRequest{SubscribedTopics: []string{"t"}}, nil); codeOf(err) != sluicev1.ErrorCode_GROUP_ID_NOT_FOUND {
		t.Fatalf("join a dead group: %v", err)
	}
	for s, name := range map[State]string{Assigning: "Assigning", Reconciling: "Reconciling", Stable: "Stable"} {
		if s.String() != name {
			t.Errorf("%d: %s", s, s)
		}
	}
	for s, name := range map[MemberState]string{MemberStable: "Stable", MemberUnrevokedPartitions: "UnrevokedPartitions", MemberUnreleasedPartitions: "UnreleasedPartitions"} {
		if s.String() != name {
			t.Errorf("%d: %s", s, s)
		}
	}
}

func TestDescribe(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	s.join("A", &client{topics: []string{"t"}, rack: "r1"})
	a := s.clients["A"]
	if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: a.epoch, ClientID: "cli", OwnedSet: true, Owned: a.owned}, s.topics); err != nil {
		t.Fatal(err)
	}
	s.join("B", &client{topics: []string{"t"}, instance: "i"})
	s.hb("A") // revoking
	d := s.g.Describe()
	want := []MemberDescription{
		{MemberID: "m1", RackID: "r1", ClientID: "cli", MemberEpoch: 1, SubscribedTopics: []string{"t"}, Assignment: parseAssignment("t:0"), TargetAssignment: parseAssignment("t:0"), MemberState: MemberUnrevokedPartitions},
		{MemberID: "m2", InstanceID: "i", MemberEpoch: 2, SubscribedTopics: []string{"t"}, Assignment: Assignment{}, TargetAssignment: parseAssignment("t:1"), MemberState: MemberUnreleasedPartitions},
	}
	if d.GroupID != "g" || d.State != Reconciling || d.GroupEpoch != 2 || d.AssignmentEpoch != 2 || d.Assignor != "uniform" || len(d.Members) != 2 {
		t.Fatalf("%+v", d)
	}
	for i, w := range want {
		m := d.Members[i]
		if m.MemberID != w.MemberID || m.InstanceID != w.InstanceID || m.RackID != w.RackID || m.ClientID != w.ClientID || m.MemberEpoch != w.MemberEpoch ||
			strings.Join(m.SubscribedTopics, ",") != "t" || !m.Assignment.Equal(w.Assignment) || !m.TargetAssignment.Equal(w.TargetAssignment) || m.MemberState != w.MemberState {
			t.Errorf("member %d: %+v, want %+v", i, m, w)
		}
	}
}
