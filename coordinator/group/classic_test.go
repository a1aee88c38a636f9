package group

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the classic protocol's pure core, named after Kafka's rules.

func newTestClassic(cfg ClassicConfig) *ClassicGroup {
	if cfg.NewMemberID == nil {
		cfg.NewMemberID = counterIDs()
	}
	return NewClassic("g", 0, cfg)
}

// subscription encodes a consumer protocol subscription of topics.
func subscription(topics ...string) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Version = 3
	m.Topics = topics
	return m.AppendTo(nil)
}

// assignmentBytes encodes a consumer protocol assignment of topic's partitions.
func assignmentBytes(topic string, ps ...int32) []byte {
	m := kmsg.NewConsumerMemberAssignment()
	m.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: topic, Partitions: ps}}
	return m.AppendTo(nil)
}

func joinReq(memberID, instanceID string, protocols ...string) JoinGroupRequest {
	r := JoinGroupRequest{Group: "g", MemberID: memberID, InstanceID: instanceID, ClientID: "c", ClientHost: "/127.0.0.1",
		ProtocolType: ConsumerProtocolType, SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second}
	if len(protocols) == 0 {
		protocols = []string{"range"}
	}
	for _, p := range protocols {
		r.Protocols = append(r.Protocols, ClassicProtocol{Name: p, Metadata: subscription("t")})
	}
	return r
}

// mustWait joins and expects the request to wait; it returns the member id.
func mustWait(t *testing.T, g *ClassicGroup, now time.Time, req JoinGroupRequest) string {
	t.Helper()
	resp, wait, err := g.Join(now, req)
	if err != nil || !wait {
		t.Fatalf("join %+v: %+v wait=%v err=%v, want a waiting join", req.MemberID, resp, wait, err)
	}
	return resp.MemberID
}

// joins returns the join answers by member id.
func joins(g *ClassicGroup) map[string]ClassicJoinAnswer {
	js, _ := g.TakeAnswers()
	out := map[string]ClassicJoinAnswer{}
	for _, a := range js {
		out[a.MemberID] = a
	}
	return out
}

// stableClassic returns a group Stable at generation 1 with n dynamic
// members (c-m1, c-m2, ...; c-m1 leads) and no initial delay, and the
// time it reached Stable.
func stableClassic(t *testing.T, n int) (*ClassicGroup, []string) {
	t.Helper()
	g := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, mustWait(t, g, t0, joinReq("", "")))
	}
	g.Expire(t0) // the initial rebalance's (zero) delay
	if g.State() != CompletingRebalance || g.Generation() != 1 {
		t.Fatalf("after join: %v gen %d", g.State(), g.Generation())
	}
	if a := joins(g); len(a) != n {
		t.Fatalf("join answers: %+v", a)
	}
	syncAll(t, g, t0, ids, 1)
	return g, ids
}

// syncAll syncs every member (the leader last) and writes the record.
func syncAll(t *testing.T, g *ClassicGroup, now time.Time, ids []string, gen int32) {
	t.Helper()
	assign := map[string][]byte{}
	for i, id := range ids {
		assign[id] = assignmentBytes("t", int32(i))
	}
	for _, id := range ids {
		if id == g.Leader() {
			continue
		}
		if _, wait, err := g.Sync(now, SyncGroupRequest{MemberID: id, Generation: gen}); err != nil || !wait {
			t.Fatalf("follower sync: wait=%v %v", wait, err)
		}
	}
	if _, wait, err := g.Sync(now, SyncGroupRequest{MemberID: g.Leader(), Generation: gen, Assignments: assign}); err != nil || !wait {
		t.Fatalf("leader sync: wait=%v %v", wait, err)
	}
	if _, ok := g.PendingRecord(); !ok {
		t.Fatal("the leader's sync left no record to write")
	}
	if _, ss := g.TakeAnswers(); len(ss) != 0 {
		t.Fatalf("syncs answered before the record was written: %+v", ss)
	}
	g.RecordWritten(now, nil)
	_, ss := g.TakeAnswers()
	if len(ss) != len(ids) || g.State() != ClassicStable {
		t.Fatalf("after the record: %d answers, %v", len(ss), g.State())
	}
	for _, a := range ss {
		if a.Err != nil || string(a.Response.Assignment) != string(assign[a.MemberID]) || a.Response.ProtocolName != "range" {
			t.Fatalf("sync answer %+v", a)
		}
	}
}

// KIP-394: a v4+ join without a member id gets one with
// MEMBER_ID_REQUIRED; it is pending until the member joins with it or
// its session timeout passes.
func TestClassicJoinMemberIDRequired(t *testing.T) {
	g := newTestClassic(ClassicConfig{})
	req := joinReq("", "")
	req.RequireKnownMemberID = true
	resp, wait, err := g.Join(t0, req)
	if codeOf(err) != sluicev1.ErrorCode_MEMBER_ID_REQUIRED || wait || resp.MemberID != "c-m1" {
		t.Fatalf("first join: %+v %v %v", resp, wait, err)
	}
	if g.Empty() {
		t.Fatal("a pending member id leaves the group empty")
	}
	// A second client never comes back: its id expires.
	if _, _, err := g.Join(t0, req); codeOf(err) != sluicev1.ErrorCode_MEMBER_ID_REQUIRED {
		t.Fatal(err)
	}
	req.MemberID = "c-m1"
	mustWait(t, g, t0, req)
	// The initial delay (3 s) ends the join phase.
	if d := g.NextDeadline(); !d.Equal(t0.Add(DefaultInitialRebalanceDelay)) {
		t.Fatalf("next deadline %v", d)
	}
	g.Expire(t0.Add(DefaultInitialRebalanceDelay))
	a := joins(g)["c-m1"]
	if a.Err != nil || a.Response.Generation != 1 || a.Response.Leader != "c-m1" || a.Response.ProtocolName != "range" ||
		len(a.Response.Members) != 1 || string(a.Response.Members[0].Metadata) != string(subscription("t")) {
		t.Fatalf("join answer %+v", a)
	}
	g.Expire(t0.Add(req.SessionTimeout))
	if g.isPending("c-m2") {
		t.Fatal("the unused pending id outlived its session timeout")
	}
}

// The initial rebalance of an empty group waits the delay, extended by
// each new member, but never beyond the rebalance timeout.
func TestClassicInitialRebalanceDelay(t *testing.T) {
	g := newTestClassic(ClassicConfig{})
	r := joinReq("", "")
	r.RebalanceTimeout = 5 * time.Second
	mustWait(t, g, t0, r)
	mustWait(t, g, t0.Add(time.Second), r)
	g.Expire(t0.Add(3 * time.Second)) // a member came: extended by min(3 s, 5-3 s)
	if g.State() != PreparingRebalance {
		t.Fatalf("completed at the first delay: %v", g.State())
	}
	if d := g.NextDeadline(); !d.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("extended to %v, want the rebalance timeout", d)
	}
	g.Expire(t0.Add(5 * time.Second))
	if g.State() != CompletingRebalance || len(joins(g)) != 2 {
		t.Fatalf("after the extension: %v", g.State())
	}
}

// A rebalance completes as soon as every known member has rejoined; a
// member that does not rejoin is removed at the rebalance timeout.
func TestClassicRebalanceCompletion(t *testing.T) {
	t.Run("all rejoined", func(t *testing.T) {
		g, ids := stableClassic(t, 2)
		now := t0.Add(time.Second)
		newID := mustWait(t, g, now, joinReq("", ""))
		if g.State() != PreparingRebalance {
			t.Fatalf("a new member: %v", g.State())
		}
		mustWait(t, g, now, joinReq(ids[0], ""))
		if g.State() != PreparingRebalance {
			t.Fatal("completed before every member rejoined")
		}
		mustWait(t, g, now, joinReq(ids[1], ""))
		a := joins(g)
		if g.State() != CompletingRebalance || g.Generation() != 2 || len(a) != 3 {
			t.Fatalf("after all rejoined: %v gen %d, %d answers", g.State(), g.Generation(), len(a))
		}
		if len(a[ids[0]].Response.Members) != 3 || len(a[newID].Response.Members) != 0 || a[newID].Response.Leader != ids[0] {
			t.Fatalf("only the leader gets the members: %+v", a)
		}
	})
	t.Run("timeout removes the absent", func(t *testing.T) {
		g, ids := stableClassic(t, 2)
		now := t0.Add(time.Second)
		mustWait(t, g, now, joinReq(ids[0], "")) // the leader rejoins (a rebalance); the follower does not
		// Keep the follower's session alive so only the rebalance timeout decides.
		if err := g.Heartbeat(now.Add(9*time.Second), ids[1], "", 1); codeOf(err) != sluicev1.ErrorCode_REBALANCE_IN_PROGRESS {
			t.Fatalf("heartbeat during the join phase: %v", err)
		}
		g.Expire(now.Add(18 * time.Second))
		if err := g.Heartbeat(now.Add(18*time.Second), ids[1], "", 1); codeOf(err) != sluicev1.ErrorCode_REBALANCE_IN_PROGRESS {
			t.Fatalf("heartbeat: %v", err)
		}
		g.Expire(now.Add(30 * time.Second))
		a := joins(g)
		if g.State() != CompletingRebalance || g.Size() != 1 || g.Leader() != ids[0] || a[ids[0]].Response.Generation != 2 {
			t.Fatalf("after the rebalance timeout: %v size %d leader %s %+v", g.State(), g.Size(), g.Leader(), a)
		}
	})
}

// SyncGroup: followers wait for the leader; stale generations, unknown
// members, rebalances and v5+ protocol mismatches are refused; a failed
// record answers the waiting syncs and rebalances.
func TestClassicSync(t *testing.T) {
	g, ids := stableClassic(t, 2)
	other := "other"
	for _, tc := range []struct {
		name string
		req  SyncGroupRequest
		want sluicev1.ErrorCode
	}{
		{"stale generation", SyncGroupRequest{MemberID: ids[1], Generation: 0}, sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"unknown member", SyncGroupRequest{MemberID: "nobody", Generation: 1}, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"protocol name", SyncGroupRequest{MemberID: ids[1], Generation: 1, ProtocolName: &other}, sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL},
		{"protocol type", SyncGroupRequest{MemberID: ids[1], Generation: 1, ProtocolType: &other}, sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL},
	} {
		if _, _, err := g.Sync(t0, tc.req); codeOf(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Stable: the assignment at once.
	resp, wait, err := g.Sync(t0, SyncGroupRequest{MemberID: ids[1], Generation: 1})
	if err != nil || wait || string(resp.Assignment) != string(assignmentBytes("t", 1)) {
		t.Fatalf("stable sync: %+v %v %v", resp, wait, err)
	}
	// A rebalance: REBALANCE_IN_PROGRESS.
	mustWait(t, g, t0, joinReq(ids[0], ""))
	if _, _, err := g.Sync(t0, SyncGroupRequest{MemberID: ids[1], Generation: 1}); codeOf(err) != sluicev1.ErrorCode_REBALANCE_IN_PROGRESS {
		t.Fatalf("sync during the join phase: %v", err)
	}
	mustWait(t, g, t0, joinReq(ids[1], ""))
	joins(g)
	// The record of the leader's sync fails: every waiting sync gets the
	// error and the group rebalances.
	if _, wait, _ := g.Sync(t0, SyncGroupRequest{MemberID: ids[1], Generation: 2}); !wait {
		t.Fatal("follower did not wait")
	}
	if _, wait, _ := g.Sync(t0, SyncGroupRequest{MemberID: ids[0], Generation: 2}); !wait {
		t.Fatal("leader did not wait")
	}
	g.RecordWritten(t0, rebalanceInProgress("g"))
	_, ss := g.TakeAnswers()
	if len(ss) != 2 || ss[0].Err == nil || g.State() != PreparingRebalance {
		t.Fatalf("after a failed record: %+v %v", ss, g.State())
	}
}

// Heartbeat's answers by state and member.
func TestClassicHeartbeat(t *testing.T) {
	g, ids := stableClassic(t, 1)
	inst := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	sid := mustWait(t, inst, t0, joinReq("", "i1"))
	inst.Expire(t0)
	for _, tc := range []struct {
		name             string
		g                *ClassicGroup
		member, instance string
		gen              int32
		want             sluicev1.ErrorCode
	}{
		{"ok", g, ids[0], "", 1, sluicev1.ErrorCode_NONE},
		{"stale generation", g, ids[0], "", 0, sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"unknown", g, "x", "", 1, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"completing rebalance", inst, sid, "i1", 1, sluicev1.ErrorCode_NONE},
		{"stale static member id", inst, "i1-old", "i1", 1, sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"unknown instance", inst, sid, "i2", 1, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
	} {
		if err := tc.g.Heartbeat(t0, tc.member, tc.instance, tc.gen); codeOf(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// KIP-345: a known instance id joining without a member id replaces the
// old member id (fenced from then on); in Stable with the same protocol
// no rebalance happens, only the group's record is written.
func TestClassicStaticMemberReplacement(t *testing.T) {
	g := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	old := mustWait(t, g, t0, joinReq("", "i1"))
	dyn := mustWait(t, g, t0, joinReq("", ""))
	g.Expire(t0)
	joins(g)
	syncAll(t, g, t0, []string{old, dyn}, 1)
	resp, wait, err := g.Join(t0, joinReq("", "i1"))
	if err != nil || !wait || resp.MemberID == old {
		t.Fatalf("rejoin: %+v %v %v", resp, wait, err)
	}
	newID := resp.MemberID
	if g.State() != ClassicStable {
		t.Fatalf("replacement rebalanced: %v", g.State())
	}
	rec, ok := g.PendingRecord()
	if !ok || rec.Members[0].MemberID != newID && rec.Members[1].MemberID != newID {
		t.Fatalf("record %+v", rec)
	}
	g.RecordWritten(t0, nil)
	a := joins(g)[newID]
	if a.Err != nil || a.Response.Generation != 1 || a.Response.Leader != old {
		t.Fatalf("answer %+v (the old leader id: the member must not assign)", a)
	}
	if err := g.Heartbeat(t0, old, "i1", 1); codeOf(err) != sluicev1.ErrorCode_FENCED_INSTANCE_ID {
		t.Fatalf("old id: %v", err)
	}
	if err := g.Heartbeat(t0, newID, "i1", 1); err != nil {
		t.Fatalf("new id: %v", err)
	}
	if _, _, err := g.Join(t0, joinReq(old, "i1")); codeOf(err) != sluicev1.ErrorCode_FENCED_INSTANCE_ID {
		t.Fatalf("old id joins: %v", err)
	}
	resp2, _, _ := g.Sync(t0, SyncGroupRequest{MemberID: newID, InstanceID: "i1", Generation: 1})
	if len(resp2.Assignment) == 0 {
		t.Fatal("the replaced member lost its assignment")
	}
}

// LeaveGroup v3+: each member gets its own answer; a rebalance starts.
func TestClassicLeaveBatched(t *testing.T) {
	g := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	a := mustWait(t, g, t0, joinReq("", ""))
	s := mustWait(t, g, t0, joinReq("", "i1"))
	c := mustWait(t, g, t0, joinReq("", ""))
	g.Expire(t0)
	joins(g)
	syncAll(t, g, t0, []string{a, s, c}, 1)
	errsOut, err := g.Leave(t0, []LeaveMember{{MemberID: a}, {MemberID: "nobody"}, {InstanceID: "i1"}, {MemberID: "x", InstanceID: "i9"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sluicev1.ErrorCode{sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID}
	for i, w := range want {
		if codeOf(errsOut[i]) != w {
			t.Errorf("member %d: %v, want %v", i, errsOut[i], w)
		}
	}
	if g.Size() != 1 || g.State() != PreparingRebalance {
		t.Fatalf("after leaving: size %d %v", g.Size(), g.State())
	}
	// The last member leaves: the join phase completes Empty at the next
	// generation, and that is written.
	if _, err := g.Leave(t0, []LeaveMember{{MemberID: c}}); err != nil {
		t.Fatal(err)
	}
	rec, ok := g.PendingRecord()
	if g.State() != ClassicEmpty || !ok || rec.Generation != 2 || len(rec.Members) != 0 {
		t.Fatalf("empty: %v %+v %v", g.State(), rec, ok)
	}
}

// A member that neither heartbeats nor waits is removed when its session
// times out, and the group rebalances without it.
func TestClassicSessionExpiry(t *testing.T) {
	g, ids := stableClassic(t, 2)
	hb := t0.Add(8 * time.Second)
	if err := g.Heartbeat(hb, ids[1], "", 1); err != nil {
		t.Fatal(err)
	}
	if removed := g.Expire(t0.Add(10 * time.Second)); len(removed) != 1 || removed[0] != ids[0] {
		t.Fatalf("removed %v", removed)
	}
	if g.State() != PreparingRebalance || g.Leader() != ids[1] {
		t.Fatalf("%v leader %s", g.State(), g.Leader())
	}
	mustWait(t, g, hb, joinReq(ids[1], ""))
	if g.State() != CompletingRebalance || g.Generation() != 2 {
		t.Fatalf("after the survivor rejoined: %v gen %d", g.State(), g.Generation())
	}
}

// Kafka's validation of JoinGroup: protocol type and common protocol,
// session timeout bounds, group.max.size; and the vote.
func TestClassicJoinRefusals(t *testing.T) {
	g, _ := stableClassic(t, 1)
	other := joinReq("", "", "roundrobin")
	if _, _, err := g.Join(t0, other); codeOf(err) != sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL {
		t.Errorf("no common protocol: %v", err)
	}
	typ := joinReq("", "")
	typ.ProtocolType = "connect"
	if _, _, err := g.Join(t0, typ); codeOf(err) != sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL {
		t.Errorf("another protocol type: %v", err)
	}
	empty := newTestClassic(ClassicConfig{})
	none := joinReq("", "")
	none.ProtocolType = ""
	if _, _, err := empty.Join(t0, none); codeOf(err) != sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL {
		t.Errorf("no protocol type: %v", err)
	}
	for _, d := range []time.Duration{5 * time.Second, 31 * time.Minute} {
		r := joinReq("", "")
		r.SessionTimeout = d
		if _, _, err := empty.Join(t0, r); codeOf(err) != sluicev1.ErrorCode_INVALID_SESSION_TIMEOUT {
			t.Errorf("session %v: %v", d, err)
		}
	}
	small := newTestClassic(ClassicConfig{MaxSize: 1, InitialRebalanceDelay: -1})
	mustWait(t, small, t0, joinReq("", ""))
	small.Expire(t0)
	if _, _, err := small.Join(t0, joinReq("", "")); codeOf(err) != sluicev1.ErrorCode_GROUP_MAX_SIZE_REACHED {
		t.Errorf("beyond group.max.size: %v", err)
	}
	// The vote: each member votes for its first common protocol.
	v := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	mustWait(t, v, t0, joinReq("", "", "a", "b"))
	mustWait(t, v, t0, joinReq("", "", "b", "a"))
	mustWait(t, v, t0, joinReq("", "", "b", "c", "a"))
	v.Expire(t0)
	if v.ProtocolName() != "b" {
		t.Errorf("chosen %q, want b (two votes)", v.ProtocolName())
	}
}

// ClassicGroup.validateOffsetCommit and validateTransactionalOffsetCommit.
func TestClassicOffsetCommitChecks(t *testing.T) {
	stable, ids := stableClassic(t, 1)
	completing := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	cid := mustWait(t, completing, t0, joinReq("", "i1"))
	completing.Expire(t0)
	empty := newTestClassic(ClassicConfig{})
	for _, tc := range []struct {
		name             string
		g                *ClassicGroup
		member, instance string
		gen              int32
		want, wantTxn    sluicev1.ErrorCode
	}{
		{"admin commit, empty group", empty, "", "", -1, sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_NONE},
		{"admin commit, members", stable, "", "", -1, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, sluicev1.ErrorCode_NONE},
		{"member", stable, ids[0], "", 1, sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_NONE},
		{"stale generation", stable, ids[0], "", 0, sluicev1.ErrorCode_ILLEGAL_GENERATION, sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"unknown member", stable, "x", "", 1, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"member with generation -1", stable, ids[0], "", -1, sluicev1.ErrorCode_ILLEGAL_GENERATION, sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"completing rebalance", completing, cid, "i1", 1, sluicev1.ErrorCode_REBALANCE_IN_PROGRESS, sluicev1.ErrorCode_NONE},
		{"fenced instance", completing, "i1-old", "i1", 1, sluicev1.ErrorCode_FENCED_INSTANCE_ID, sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"unknown member of empty group", empty, "x", "", 3, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
	} {
		if err := tc.g.CheckOffsetCommit(t0, tc.member, tc.instance, tc.gen); codeOf(err) != tc.want {
			t.Errorf("%s: commit %v, want %v", tc.name, err, tc.want)
		}
		if err := tc.g.CheckTxnOffsetCommit(tc.member, tc.instance, tc.gen); codeOf(err) != tc.wantTxn {
			t.Errorf("%s: txn commit %v, want %v", tc.name, err, tc.wantTxn)
		}
	}
}

// OffsetDelete's subscription check decodes the consumer protocol.
func TestClassicSubscribedTopics(t *testing.T) {
	g, _ := stableClassic(t, 1)
	if !g.IsSubscribed("t") || g.IsSubscribed("u") {
		t.Fatalf("subscribed: t %v u %v", g.IsSubscribed("t"), g.IsSubscribed("u"))
	}
	d := g.Describe()
	a, err := DecodeAssignment(d.Members[0].Assignment)
	if err != nil || a.String() != "t:0" {
		t.Fatalf("assignment %v %v", a, err)
	}
}

// A group restored from its record is Stable at its generation with its
// members, whose sessions start at the load.
func TestClassicRestore(t *testing.T) {
	g, ids := stableClassic(t, 2)
	rec := g.snapshot(nil)
	raw := GroupValue(GroupRecord{Classic: &rec, TimeMs: 1})
	back, err := DecodeGroupValue(raw)
	if err != nil || back.Classic == nil || back.Epoch != 1 {
		t.Fatalf("decode: %+v %v", back, err)
	}
	load := t0.Add(time.Hour)
	r := RestoreClassic(load, "g", *back.Classic, ClassicConfig{})
	if r.State() != ClassicStable || r.Generation() != 1 || r.Leader() != ids[0] || r.Size() != 2 {
		t.Fatalf("restored %v gen %d leader %s", r.State(), r.Generation(), r.Leader())
	}
	if err := r.Heartbeat(load, ids[1], "", 1); err != nil {
		t.Fatal(err)
	}
	if err := r.CheckOffsetCommit(load, ids[0], "", 1); err != nil {
		t.Fatal(err)
	}
	if d := r.NextDeadline(); !d.Equal(load.Add(10 * time.Second)) {
		t.Fatalf("sessions restart at the load: %v", d)
	}
	resp, _, err := r.Sync(load, SyncGroupRequest{MemberID: ids[1], Generation: 1})
	if err != nil || string(resp.Assignment) != string(assignmentBytes("t", 1)) {
		t.Fatalf("assignment after restore: %+v %v", resp, err)
	}
}

// KIP-814 (JoinGroup v9+): a static leader that rejoins a Stable group is
// told it leads, with every member's metadata, and to skip the
// assignment; a static follower is answered as before (the leader's id,
// no members, no skip).
func TestClassicStaticLeaderRejoinSkipsAssignment(t *testing.T) {
	g := newTestClassic(ClassicConfig{InitialRebalanceDelay: -1})
	leader := mustWait(t, g, t0, joinReq("", "i1"))
	follower := mustWait(t, g, t0, joinReq("", "i2"))
	g.Expire(t0)
	joins(g)
	syncAll(t, g, t0, []string{leader, follower}, 1)
	rejoin := func(instance string) JoinGroupResponse {
		t.Helper()
		req := joinReq("", instance)
		req.SupportsSkipAssignment = true
		resp, wait, err := g.Join(t0, req)
		if err != nil || !wait {
			t.Fatalf("rejoin of %s: %+v %v %v", instance, resp, wait, err)
		}
		g.RecordWritten(t0, nil)
		a := joins(g)[resp.MemberID]
		if a.Err != nil {
			t.Fatalf("rejoin of %s answered %v", instance, a.Err)
		}
		return a.Response
	}
	f := rejoin("i2")
	if f.SkipAssignment || len(f.Members) != 0 || f.Leader != leader || f.Generation != 1 {
		t.Fatalf("the follower's rejoin: %+v", f)
	}
	l := rejoin("i1")
	if !l.SkipAssignment || l.Leader != l.MemberID || l.Generation != 1 || len(l.Members) != 2 {
		t.Fatalf("the leader's rejoin: %+v, want it to lead, skip assigning, with both members", l)
	}
	if g.State() != ClassicStable {
		t.Fatalf("a static rejoin rebalanced: %v", g.State())
	}
}
