package group

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/fakeclock"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// newClassicTestCoordinator leads partition 0 of a fresh log with a
// frozen fake clock and no initial rebalance delay.
func newClassicTestCoordinator(t *testing.T) (*Coordinator, *fakeOffsetsLog, *fakeclock.Clock) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	clock := fakeclock.New(t0)
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l, Now: clock.Now,
		Topics: func() (map[string]TopicMetadata, int64) { return nil, 0 }},
		CoordinatorConfig{Partitions: 1, Group: Config{NewMemberID: counterIDs()}, Classic: ClassicConfig{InitialRebalanceDelay: -1}})
	t.Cleanup(func() { _ = c.Close() })
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	return c, l, clock
}

type joinResult struct {
	resp JoinGroupResponse
	err  error
}

// joinAsync runs a JoinGroup in a goroutine.
func joinAsync(c *Coordinator, ctx context.Context, req JoinGroupRequest) chan joinResult {
	ch := make(chan joinResult, 1)
	go func() {
		resp, err := c.JoinGroup(ctx, req)
		ch <- joinResult{resp, err}
	}()
	return ch
}

type syncResult struct {
	resp SyncGroupResponse
	err  error
}

func syncAsync(c *Coordinator, req SyncGroupRequest) chan syncResult {
	ch := make(chan syncResult, 1)
	go func() {
		resp, err := c.SyncGroup(context.Background(), req)
		ch <- syncResult{resp, err}
	}()
	return ch
}

// waitJoining waits until member's JoinGroup waits in the group.
func waitJoining(t *testing.T, c *Coordinator, g, member string) {
	t.Helper()
	waitFor(t, member+" joining", func() error {
		c.mu.Lock()
		e := c.rt.PartitionsLocked()[0].groups[g]
		c.mu.Unlock()
		if e == nil {
			return errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "no group")
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.cg == nil || !e.cg.Awaiting(member, true) {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "not joining yet")
		}
		return nil
	})
}

func classicJoinReq(memberID string) JoinGroupRequest {
	r := joinReq(memberID, "")
	r.SessionTimeout = 30 * time.Second
	r.RequireKnownMemberID = true
	return r
}

// Blocking JoinGroup and SyncGroup through a whole rebalance, then a
// coordinator failover: the new coordinator loads the group from its
// record, so the members keep their generation, heartbeats and commits.
func TestClassicCoordinatorRebalanceAndFailover(t *testing.T) {
	c, l, _ := newClassicTestCoordinator(t)
	ctx := context.Background()
	// KIP-394, then the join completes at the (zero) initial delay.
	resp, err := c.JoinGroup(ctx, classicJoinReq(""))
	if errs.Code(err) != sluicev1.ErrorCode_MEMBER_ID_REQUIRED || resp.MemberID == "" {
		t.Fatalf("first join: %+v %v", resp, err)
	}
	a := resp.MemberID
	resp, err = c.JoinGroup(ctx, classicJoinReq(a))
	if err != nil || resp.Generation != 1 || resp.Leader != a || len(resp.Members) != 1 {
		t.Fatalf("join: %+v %v", resp, err)
	}
	sresp, err := c.SyncGroup(ctx, SyncGroupRequest{Group: "g", MemberID: a, Generation: 1,
		Assignments: map[string][]byte{a: assignmentBytes("t", 0, 1)}})
	if err != nil || string(sresp.Assignment) != string(assignmentBytes("t", 0, 1)) {
		t.Fatalf("leader sync: %+v %v", sresp, err)
	}
	// A second member: its join waits for the first to rejoin.
	resp, _ = c.JoinGroup(ctx, classicJoinReq(""))
	b := resp.MemberID
	bJoin := joinAsync(c, ctx, classicJoinReq(b))
	waitJoining(t, c, "g", b)
	if err := c.ClassicHeartbeat(ctx, "g", a, "", 1); errs.Code(err) != sluicev1.ErrorCode_REBALANCE_IN_PROGRESS {
		t.Fatalf("heartbeat during the rebalance: %v", err)
	}
	resp, err = c.JoinGroup(ctx, classicJoinReq(a))
	if err != nil || resp.Generation != 2 || len(resp.Members) != 2 {
		t.Fatalf("leader rejoin: %+v %v", resp, err)
	}
	if r := <-bJoin; r.err != nil || r.resp.Generation != 2 || r.resp.Leader != a || len(r.resp.Members) != 0 {
		t.Fatalf("follower join: %+v", r)
	}
	bSync := syncAsync(c, SyncGroupRequest{Group: "g", MemberID: b, Generation: 2})
	waitFor(t, "follower syncing", func() error {
		c.mu.Lock()
		e := c.rt.PartitionsLocked()[0].groups["g"]
		c.mu.Unlock()
		e.mu.Lock()
		defer e.mu.Unlock()
		if !e.cg.Awaiting(b, false) {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "not yet")
		}
		return nil
	})
	if _, err := c.SyncGroup(ctx, SyncGroupRequest{Group: "g", MemberID: a, Generation: 2,
		Assignments: map[string][]byte{a: assignmentBytes("t", 0), b: assignmentBytes("t", 1)}}); err != nil {
		t.Fatal(err)
	}
	if r := <-bSync; r.err != nil || string(r.resp.Assignment) != string(assignmentBytes("t", 1)) {
		t.Fatalf("follower sync: %+v", r)
	}
	// Two generations written: two rebalances in the metric.
	if _, rebalances, _ := c.Stats(); rebalances != 2 {
		t.Errorf("rebalances = %d after generation 2, want 2", rebalances)
	}
	in := TopicPartition{Topic: "t", Partition: 1}
	if _, err := c.CommitOffsets(ctx, "g", b, "", 1, []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: 5}}}); errs.Code(err) != sluicev1.ErrorCode_ILLEGAL_GENERATION {
		t.Fatalf("commit at a stale generation: %v", err)
	}
	// Failover.
	l.mu.Lock()
	l.epochs[0] = 2
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	waitGroupsLoaded(t, c)
	for _, m := range []string{a, b} {
		if err := c.ClassicHeartbeat(ctx, "g", m, "", 2); err != nil {
			t.Fatalf("heartbeat of %s after failover: %v", m, err)
		}
	}
	res, err := c.CommitOffsets(ctx, "g", b, "", 2, []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: 5}}})
	if err != nil || res[in] != nil {
		t.Fatalf("commit after failover: %v %v", res, err)
	}
	sresp, err = c.SyncGroup(ctx, SyncGroupRequest{Group: "g", MemberID: b, Generation: 2})
	if err != nil || string(sresp.Assignment) != string(assignmentBytes("t", 1)) {
		t.Fatalf("assignment after failover: %+v %v", sresp, err)
	}
	d, err := c.DescribeGroup("g")
	if err != nil || d.Type != TypeClassic || d.Classic.State != ClassicStable || d.Classic.Generation != 2 || len(d.Classic.Members) != 2 {
		t.Fatalf("describe: %+v %v", d, err)
	}
	ls, err := c.ListGroups(nil)
	if err != nil || len(ls) != 1 || ls[0].Type != TypeClassic || ls[0].State != "Stable" || ls[0].ProtocolType != "consumer" || ls[0].Members != 2 {
		t.Fatalf("list: %+v %v", ls, err)
	}
	// Not deletable with members; its subscribed topic's offsets neither.
	if err := c.DeleteGroup(ctx, "g"); errs.Code(err) != sluicev1.ErrorCode_NON_EMPTY_GROUP {
		t.Fatalf("delete: %v", err)
	}
	dres, err := c.DeleteOffsets(ctx, "g", []TopicPartition{in, {Topic: "u", Partition: 0}})
	if err != nil || errs.Code(dres[in]) != sluicev1.ErrorCode_GROUP_SUBSCRIBED_TO_TOPIC || dres[TopicPartition{Topic: "u"}] != nil {
		t.Fatalf("delete offsets: %v %v", dres, err)
	}
	// Both leave: the group is Empty (and that is written); now it goes.
	lerrs, err := c.LeaveGroup(ctx, "g", []LeaveMember{{MemberID: a}, {MemberID: b}})
	if err != nil || lerrs[0] != nil || lerrs[1] != nil {
		t.Fatalf("leave: %v %v", lerrs, err)
	}
	dres, err = c.DeleteOffsets(ctx, "g", []TopicPartition{in})
	if err != nil || dres[in] != nil {
		t.Fatalf("delete offsets of the empty group: %v %v", dres, err)
	}
	if err := c.DeleteGroup(ctx, "g"); err != nil {
		t.Fatalf("delete the empty group: %v", err)
	}
}

// A JoinGroup whose caller gives up answers REBALANCE_IN_PROGRESS, and
// the member is not lost: it still counts as joining.
func TestClassicCoordinatorJoinContextEnds(t *testing.T) {
	c, _, _ := newClassicTestCoordinator(t)
	ctx := context.Background()
	resp, _ := c.JoinGroup(ctx, classicJoinReq(""))
	a := resp.MemberID
	if _, err := c.JoinGroup(ctx, classicJoinReq(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SyncGroup(ctx, SyncGroupRequest{Group: "g", MemberID: a, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	resp, _ = c.JoinGroup(ctx, classicJoinReq(""))
	b := resp.MemberID
	short, cancel := context.WithCancel(ctx)
	bJoin := joinAsync(c, short, classicJoinReq(b))
	waitJoining(t, c, "g", b)
	cancel()
	if r := <-bJoin; errs.Code(r.err) != sluicev1.ErrorCode_REBALANCE_IN_PROGRESS || r.resp.MemberID != b {
		t.Fatalf("given-up join: %+v", r)
	}
	// The leader's rejoin completes the phase: b counted as joined.
	resp, err := c.JoinGroup(ctx, classicJoinReq(a))
	if err != nil || resp.Generation != 2 || len(resp.Members) != 2 {
		t.Fatalf("rejoin: %+v %v", resp, err)
	}
	// b asks again (same metadata): the current generation at once.
	resp, err = c.JoinGroup(ctx, classicJoinReq(b))
	if err != nil || resp.Generation != 2 {
		t.Fatalf("b again: %+v %v", resp, err)
	}
}

// One group id, one protocol: a classic join into a KIP-848 group with
// members is INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat into a
// classic group with members GROUP_ID_NOT_FOUND; a group with only
// offsets, or emptied, is taken by either.
func TestClassicCoordinatorOneProtocolPerGroup(t *testing.T) {
	c, _, _ := newClassicTestCoordinator(t)
	ctx := context.Background()
	in := TopicPartition{Topic: "t", Partition: 0}
	if _, err := c.CommitOffsets(ctx, "k", "", "", -1, []OffsetCommitEntry{{TP: in, Offset: Offset{Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	hr, err := c.Heartbeat(ctx, "k", HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"t"}})
	if err != nil {
		t.Fatalf("a KIP-848 member takes a group with only offsets: %v", err)
	}
	if _, err := c.JoinGroup(ctx, classicJoinReq("")); errs.Code(err) != sluicev1.ErrorCode_MEMBER_ID_REQUIRED {
		t.Fatal(err) // "g" is another group
	}
	kj := classicJoinReq("")
	kj.Group = "k"
	if _, err := c.JoinGroup(ctx, kj); errs.Code(err) != sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL {
		t.Fatalf("classic join into a KIP-848 group: %v", err)
	}
	// Classic group "c" with a member.
	cj := classicJoinReq("")
	cj.Group = "c"
	cj.RequireKnownMemberID = false
	if _, err := c.JoinGroup(ctx, cj); err != nil {
		t.Fatal(err)
	}
	_, err = c.Heartbeat(ctx, "c", HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"t"}})
	if errs.Code(err) != sluicev1.ErrorCode_GROUP_ID_NOT_FOUND || errs.Message(err) != "Group c is not a consumer group" {
		t.Fatalf("KIP-848 join into a classic group: %v", err)
	}
	// The KIP-848 member leaves; the group is empty: classic may take it.
	if _, err := c.Heartbeat(ctx, "k", HeartbeatRequest{MemberID: hr.MemberID, MemberEpoch: LeaveEpoch}); err != nil {
		t.Fatal(err)
	}
	kj.RequireKnownMemberID = false
	resp, err := c.JoinGroup(ctx, kj)
	if err != nil || resp.Generation <= hr.MemberEpoch {
		t.Fatalf("classic join into the emptied group: %+v %v (generation must continue above epoch %d)", resp, err, hr.MemberEpoch)
	}
}

// TestClassicGroupRecordSurvivesTopicChanges: a topic-metadata change runs
// every group's timer; for a classic group it must write no KIP-848
// group record under the group's key — the last group value there is
// what a new coordinator loads, and a KIP-848 one would replace the
// classic group (its members, generation and assignments) after a
// failover. Found by the chaos harness's classic Kafka copier: a
// coordinator move lost the group, and a member re-copied records
// another had committed.
func TestClassicGroupRecordSurvivesTopicChanges(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	clock := fakeclock.New(t0)
	var mu sync.Mutex
	topics, version := map[string]TopicMetadata{}, int64(0)
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l, Now: clock.Now,
		Topics: func() (map[string]TopicMetadata, int64) {
			mu.Lock()
			defer mu.Unlock()
			return topics, version
		}},
		CoordinatorConfig{Partitions: 1, Group: Config{NewMemberID: counterIDs()}, Classic: ClassicConfig{InitialRebalanceDelay: -1}})
	t.Cleanup(func() { _ = c.Close() })
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	resp, _ := c.JoinGroup(ctx, classicJoinReq(""))
	a := resp.MemberID
	if resp, err := c.JoinGroup(ctx, classicJoinReq(a)); err != nil || resp.Generation != 1 {
		t.Fatalf("join: %+v %v", resp, err)
	}
	if _, err := c.SyncGroup(ctx, SyncGroupRequest{Group: "g", MemberID: a, Generation: 1,
		Assignments: map[string][]byte{a: assignmentBytes("t", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	// Topics appear and change; the group's timer runs after each.
	for i := range 3 {
		mu.Lock()
		topics = map[string]TopicMetadata{"t": {Partitions: 2}, "other": {Partitions: int32(i + 1)}}
		version++
		mu.Unlock()
		c.mu.Lock()
		c.topicsLocked() // take the new metadata, as checkMetadata does
		ps := c.rt.PartitionsLocked()[0]
		c.mu.Unlock()
		c.groupTimer(ps, "g")
	}
	// Failover: the new coordinator loads the classic group as it was.
	l.mu.Lock()
	l.epochs[0] = 2
	l.mu.Unlock()
	c.Resigned(offsetsTP0, 1)
	c.BecameLeader(offsetsTP0, 2)
	waitGroupsLoaded(t, c)
	d, err := c.DescribeGroup("g")
	if err != nil || d.Type != TypeClassic || d.Classic == nil || d.Classic.Generation != 1 || len(d.Classic.Members) != 1 {
		t.Fatalf("after the topic changes and a failover: %+v %v", d, err)
	}
	if err := c.ClassicHeartbeat(ctx, "g", a, "", 1); err != nil {
		t.Fatalf("the member's heartbeat after the failover: %v", err)
	}
}
