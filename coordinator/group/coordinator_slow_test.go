package group

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A write to one group that takes 5 s (the log holds its append) delays
// only that group: another group on the same coordinator partition joins,
// rebalances, fences a member whose session ran out and rebalances again
// while the write is still held, and describing, listing and the metrics
// do not wait either. The held group's own join answers once its write
// commits. (Issue 30: the group's lock used to be held across the append
// and the single timeout scan took every group's lock in turn.)
func TestSlowGroupWriteDelaysOnlyThatGroup(t *testing.T) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	topics := map[string]TopicMetadata{"in": {Partitions: 4}}
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l,
		Topics: func() (map[string]TopicMetadata, int64) { return topics, 1 }},
		CoordinatorConfig{Partitions: 1, Group: Config{
			SessionTimeout: 300 * time.Millisecond, MinSessionTimeout: 100 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond}})
	t.Cleanup(func() { _ = c.Close() })
	c.BecameLeader(offsetsTP0, 1)
	waitGroupsLoaded(t, c)
	ctx := context.Background()
	join := func(g string) HeartbeatResponse {
		t.Helper()
		resp, err := c.Heartbeat(ctx, g, HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"in"}})
		if err != nil {
			t.Fatalf("join %s: %v", g, err)
		}
		return resp
	}

	// The slow group has a member; its next write is held.
	join("slow")
	hold := make(chan struct{})
	l.mu.Lock()
	l.holds = map[string]chan struct{}{"slow": hold}
	l.mu.Unlock()
	released := time.AfterFunc(5*time.Second, func() { close(hold) })
	defer released.Stop()
	slowJoined := make(chan error, 1)
	go func() {
		_, err := c.Heartbeat(ctx, "slow", HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"in"}})
		slowJoined <- err
	}()
	waitFor(t, "the slow group's write is in flight", func() error {
		if !offsetsShard(c).Busy("slow") {
			return fmt.Errorf("the slow group's key is free")
		}
		return nil
	})

	// Meanwhile, on the same partition: two members join the fast
	a, b := join("fast"), join("fast")
	// b heartbeats on (reporting what it owns); a goes silent and must be
	// fenced after its session, giving b the whole topic.
	owned := Assignment{}
	var epochAfterB int32
	waitFor(t, "a fenced and b given every partition", func() error {
		resp, err := c.Heartbeat(ctx, "fast", HeartbeatRequest{MemberID: b.MemberID, MemberEpoch: b.MemberEpoch, OwnedSet: true, Owned: owned})
		if err != nil {
			return err
		}
		b.MemberEpoch = resp.MemberEpoch
		if resp.AssignmentChanged {
			owned = resp.Assignment
		}
		if epochAfterB == 0 {
			epochAfterB = resp.MemberEpoch
		}
		d, err := c.DescribeGroup("fast")
		if err != nil {
			return err
		}
		if len(d.Members) != 1 || len(owned["in"]) != 4 {
			return fmt.Errorf("%d members, b owns %v", len(d.Members), owned)
		}
		return nil
	})
	select {
	case err := <-slowJoined:
		t.Fatalf("the slow group's join answered (%v) before its write was released: the test proves nothing", err)
	default:
	}
	if d, _ := c.DescribeGroup("fast"); d.GroupEpoch <= epochAfterB || d.Members[0].MemberID != b.MemberID {
		t.Fatalf("fast group %+v: want a's expiry to bump the epoch past %d and leave b (a was %s)", d, epochAfterB, a.MemberID)
	}
	if _, err := c.ListGroups(nil); err != nil {
		t.Fatalf("list while a write is held: %v", err)
	}
	if stats, _, _ := c.Stats(); len(stats) != 1 {
		t.Fatalf("stats while a write is held: %+v", stats)
	}
	if depth := offsetsShard(c).QueueDepth(); depth < 1 {
		t.Fatalf("queue depth %d while the slow group's write is held, want at least 1", depth)
	}

	// Released: the slow group's join answers, with its epoch durable.
	released.Stop()
	close(hold)
	select {
	case err := <-slowJoined:
		if err != nil {
			t.Fatalf("the slow group's join: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow group's join did not answer after its write was released")
	}
	// (Its members, silent since, have expired meanwhile.)
	if d, err := c.DescribeGroup("slow"); err != nil || d.GroupEpoch < 2 {
		t.Fatalf("slow group %+v %v, want the join's epoch 2 written", d, err)
	}
	if _, err := c.Heartbeat(ctx, "fast", HeartbeatRequest{MemberID: a.MemberID, MemberEpoch: a.MemberEpoch}); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_MEMBER_ID {
		t.Fatalf("the fenced member's heartbeat: %v, want UNKNOWN_MEMBER_ID", err)
	}
}

// offsetsShard is c's shard of partition 0.
func offsetsShard(c *Coordinator) *offsetsPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rt.PartitionsLocked()[0]
}
