package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the group consumer against the fake coordinator
// (group_fake_test.go), named after the rule of groups.proto they check.

// produceN writes n records to each of partitions of topic.
func produceN(t *testing.T, f *fakeBroker, topic string, partitions []int32, n int) {
	t.Helper()
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	var failed error
	for _, part := range partitions {
		for i := 0; i < n; i++ {
			p.Send(context.Background(), Record{Topic: topic, Partition: part, Value: []byte(fmt.Sprintf("v%d-%d", part, i))}, func(_ RecordMetadata, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && failed == nil {
					failed = err
				}
			})
		}
	}
	if err := p.Flush(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if failed != nil {
		t.Fatal(failed)
	}
}

// recorder is a RebalanceListener that logs its calls into the fake's
// event log (so they are ordered with the requests) and keeps them.
type recorder struct {
	f        *fakeBroker
	mu       sync.Mutex
	assigned [][]TopicPartition
	revoked  [][]TopicPartition
	lost     [][]TopicPartition
	// onRevoked and onAssigned, when set, run inside OnRevoked and
	// OnAssigned.
	onRevoked, onAssigned func(ctx context.Context, parts []TopicPartition)
}

func (r *recorder) OnAssigned(ctx context.Context, p []TopicPartition) {
	if r.onAssigned != nil {
		r.onAssigned(ctx, p)
	}
	r.f.mu.Lock()
	r.f.event("assigned %s", tpsString(p))
	r.f.mu.Unlock()
	r.mu.Lock()
	r.assigned = append(r.assigned, p)
	r.mu.Unlock()
}

func (r *recorder) OnRevoked(ctx context.Context, p []TopicPartition) {
	if r.onRevoked != nil {
		r.onRevoked(ctx, p)
	}
	r.f.mu.Lock()
	r.f.event("revoked %s", tpsString(p))
	r.f.mu.Unlock()
	r.mu.Lock()
	r.revoked = append(r.revoked, p)
	r.mu.Unlock()
}

func (r *recorder) OnLost(p []TopicPartition) {
	r.f.mu.Lock()
	r.f.event("lost %s", tpsString(p))
	r.f.mu.Unlock()
	r.mu.Lock()
	r.lost = append(r.lost, p)
	r.mu.Unlock()
}

func (r *recorder) calls() (assigned, revoked, lost int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.assigned), len(r.revoked), len(r.lost)
}

// joinGroup returns a group consumer of group "g" subscribed to topic "t"
// (closed at cleanup) and its listener.
func joinGroup(t *testing.T, f *fakeBroker, opts ...ConsumerOption) (*Consumer, *recorder) {
	t.Helper()
	co, rec := newGroupConsumer(t, f, opts...)
	if err := co.Subscribe("t"); err != nil {
		t.Fatal(err)
	}
	return co, rec
}

// newGroupConsumer returns a group consumer of group "g" (closed at
// cleanup), not subscribed yet, and its listener (set hooks before
// Subscribe).
func newGroupConsumer(t *testing.T, f *fakeBroker, opts ...ConsumerOption) (*Consumer, *recorder) {
	t.Helper()
	c, err := New([]string{f.addr}, WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rec := &recorder{f: f}
	base := []ConsumerOption{WithGroup("g"), WithRebalanceListener(rec), WithMaxWait(20 * time.Millisecond),
		WithAutoOffsetReset(OffsetEarliest), WithAutoCommit(true, time.Hour)}
	co, err := c.NewConsumer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { co.Close() })
	return co, rec
}

// pollUntil polls until want records have arrived and returns them as
// "partition:offset".
func pollUntil(t *testing.T, co *Consumer, want int) []string {
	t.Helper()
	var got []string
	ctx := ctxT(t)
	wait.For(t, 10*time.Second, fmt.Sprintf("%d records", want), func() error {
		pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil && pctx.Err() == nil {
			return err
		}
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%d:%d", r.Partition, r.Offset))
		}
		if len(got) < want {
			return fmt.Errorf("%d records so far", len(got))
		}
		return nil
	})
	return got
}

func (st *fakeState) eventLog() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([]string(nil), st.grp.events...)
}

// eventIndex returns the index of the first event at or after from that
// starts with prefix, or -1.
func eventIndex(events []string, from int, prefix string) int {
	for i := from; i < len(events); i++ {
		if strings.HasPrefix(events[i], prefix) {
			return i
		}
	}
	return -1
}

func waitEvent(t *testing.T, f *fakeBroker, prefix string) {
	t.Helper()
	wait.For(t, 10*time.Second, "event "+prefix, func() error {
		if eventIndex(f.eventLog(), 0, prefix) < 0 {
			return fmt.Errorf("events: %q", f.eventLog())
		}
		return nil
	})
}

// Step 1 and 3 of groups.proto: the join heartbeat carries epoch 0, no
// member id, the subscription, the timeouts and the (empty) owned
// partitions; the member keeps the id it is given; new partitions start
// at the committed offset (OffsetFetch with require_stable and the
// member's id and epoch) or the reset policy, OnAssigned runs, and the
// next heartbeat reports them owned.
func TestGroupJoinPositionsAtCommittedOffsets(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	produceN(t, f, "t", []int32{0, 1}, 5)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	f.grp.offsets = map[TopicPartition]int64{{Topic: "t", Partition: 0}: 2}
	f.mu.Unlock()
	co, rec := newGroupConsumer(t, f, WithSessionTimeout(30*time.Second), WithRebalanceTimeout(20*time.Second),
		WithAssignor("range"), WithInstanceID("i-1"), WithRack("r1"))
	// No record of a new partition before OnAssigned has returned; a Seek
	// in OnAssigned takes effect (t-1 then starts at 0 all the same).
	var beforeAssigned []Record
	var seekErr error
	rec.onAssigned = func(ctx context.Context, parts []TopicPartition) {
		seekErr = co.Seek("t", 1, 0)
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		for pctx.Err() == nil {
			recs, _ := co.Poll(pctx)
			beforeAssigned = append(beforeAssigned, recs...)
		}
	}
	mustOK(t, "Subscribe", co.Subscribe("t"))
	// Poll is for one goroutine at a time: the one in OnAssigned first.
	wait.Until(t, 10*time.Second, "OnAssigned", func() bool { n, _, _ := rec.calls(); return n == 1 })

	got := pollUntil(t, co, 8)
	slices.Sort(got)
	want := []string{"0:2", "0:3", "0:4", "1:0", "1:1", "1:2", "1:3", "1:4"}
	if !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	waitEvent(t, f, "hb epoch=1 owned=[t-0 t-1]")
	if len(beforeAssigned) > 0 || seekErr != nil {
		t.Errorf("Poll in OnAssigned returned %d records; Seek there: %v", len(beforeAssigned), seekErr)
	}

	f.mu.Lock()
	join := f.grp.hbReqs[0]
	fetch := f.grp.fetchReqs[0]
	f.mu.Unlock()
	if join.MemberEpoch != 0 || join.MemberId != "" || !slices.Equal(join.SubscribedTopicNames, []string{"t"}) ||
		!join.TopicPartitionsSet || len(join.TopicPartitions) != 0 || join.SessionTimeoutMs != 30000 ||
		join.RebalanceTimeoutMs != 20000 || join.ServerAssignor != "range" || join.InstanceId != "i-1" || join.RackId != "r1" {
		t.Errorf("join heartbeat %v", join)
	}
	if !fetch.RequireStable || fetch.MemberId != "member-1" || fetch.MemberEpoch != 1 {
		t.Errorf("offset fetch %v: want require_stable with the member's id and epoch", fetch)
	}
	if n, _, _ := rec.calls(); n != 1 || !slices.Equal(rec.assigned[0], []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}) {
		t.Errorf("OnAssigned calls %v", rec.assigned)
	}
	if md := co.GroupMetadata(); md != (GroupMetadata{GroupID: "g", MemberID: "member-1", MemberEpoch: 1, InstanceID: "i-1"}) {
		t.Errorf("GroupMetadata %+v", md)
	}
	f.mu.Lock()
	for _, hb := range f.grp.hbReqs[1:] {
		if hb.MemberId != "member-1" {
			t.Errorf("heartbeat with member id %q, want the one given at join", hb.MemberId)
		}
	}
	f.mu.Unlock()
}

// Step 2 of groups.proto (revoke before assign): a partition taken away
// stops being fetched — records prefetched and not yet returned are
// dropped — its position is committed and OnRevoked runs, all before
// the heartbeat that reports it released, which is sent at once.
func TestGroupRevocationCommitsAndCallsOnRevokedBeforeReportingRelease(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	produceN(t, f, "t", []int32{0, 1}, 5)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	f.grp.interval = 60000 // the release must not wait for an interval
	f.mu.Unlock()
	co, rec := newGroupConsumer(t, f)
	// Poll inside OnRevoked: the prefetched records of t-1 must not come
	// back once its revocation has begun.
	var duringRevoke []string
	rec.onRevoked = func(ctx context.Context, _ []TopicPartition) {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		for pctx.Err() == nil {
			recs, _ := co.Poll(pctx)
			for _, r := range recs {
				duringRevoke = append(duringRevoke, fmt.Sprintf("%d:%d", r.Partition, r.Offset))
			}
		}
	}
	mustOK(t, "Subscribe", co.Subscribe("t"))
	pollUntil(t, co, 10)
	waitEvent(t, f, "hb epoch=1 owned=[t-0 t-1]")

	// Three more records on t-1, fetched ahead of Poll.
	produceN(t, f, "t", []int32{1}, 3)
	wait.For(t, 10*time.Second, "t-1 prefetched", func() error {
		co.mu.Lock()
		defer co.mu.Unlock()
		a := co.assigned[topicPartition{"t", 1}]
		if a == nil || a.fetchPos != 8 {
			return fmt.Errorf("assignment %+v", a)
		}
		return nil
	})

	f.setTarget("member-1", TopicPartition{Topic: "t", Partition: 0})
	notify(co.group.wake) // the interval is long: nudge the next heartbeat
	waitEvent(t, f, "hb epoch=2 owned=[t-0]")
	ev := f.eventLog()
	commit := eventIndex(ev, 0, "commit epoch=2 t-1=5")
	revoked := eventIndex(ev, 0, "revoked [t-1]")
	release := eventIndex(ev, 0, "hb epoch=2 owned=[t-0]")
	if commit < 0 || revoked < commit || release < revoked {
		t.Fatalf("want commit of t-1, then OnRevoked, then the release heartbeat; events %q", ev)
	}
	if len(duringRevoke) > 0 {
		t.Errorf("Poll in OnRevoked returned %v of the revoked partition", duringRevoke)
	}
	if _, ok := co.Position("t", 1); ok {
		t.Error("t-1 still has a position after revocation")
	}
	if got := co.Assignment(); !slices.Equal(got, []TopicPartition{{Topic: "t", Partition: 0}}) {
		t.Errorf("Assignment %v", got)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	for ctx.Err() == nil {
		recs, _ := co.Poll(ctx)
		for _, r := range recs {
			if r.Partition == 1 {
				t.Fatalf("Poll returned %d:%d of a revoked partition", r.Partition, r.Offset)
			}
		}
	}
	if _, n, _ := rec.calls(); n != 1 {
		t.Errorf("OnRevoked called %d times", n)
	}
}

// The user may commit in OnRevoked instead of auto-commit; that commit,
// too, happens before the release is reported.
func TestGroupCommitInOnRevokedPrecedesRelease(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	produceN(t, f, "t", []int32{0, 1}, 4)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	f.mu.Unlock()
	var commitErr error
	co, rec := newGroupConsumer(t, f, WithAutoCommit(false, 0))
	rec.onRevoked = func(ctx context.Context, parts []TopicPartition) { commitErr = co.Commit(ctx) }
	mustOK(t, "Subscribe", co.Subscribe("t"))
	pollUntil(t, co, 8)
	waitEvent(t, f, "hb epoch=1 owned=[t-0 t-1]")
	f.setTarget("member-1", TopicPartition{Topic: "t", Partition: 1})
	waitEvent(t, f, "hb epoch=2 owned=[t-1]")
	if commitErr != nil {
		t.Fatalf("Commit in OnRevoked: %v", commitErr)
	}
	ev := f.eventLog()
	if c, r := eventIndex(ev, 0, "commit epoch=2 t-0=4 t-1=4"), eventIndex(ev, 0, "hb epoch=2 owned=[t-1]"); c < 0 || r < c {
		t.Fatalf("events %q", ev)
	}
}

// FENCED_MEMBER_EPOCH: the partitions are dropped without a commit
// (OnLost), and the member joins again with epoch 0 and the same member
// id, then gets its partitions back (OnAssigned again).
func TestGroupFencedLosesPartitionsAndRejoins(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	produceN(t, f, "t", []int32{0}, 3)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, rec := joinGroup(t, f)
	pollUntil(t, co, 3)
	waitEvent(t, f, "hb epoch=1 owned=[t-0]")
	f.mu.Lock()
	f.grp.fence = 1
	f.mu.Unlock()
	wait.Until(t, 10*time.Second, "assigned again", func() bool { n, _, _ := rec.calls(); return n == 2 })
	ev := f.eventLog()
	fenced := eventIndex(ev, 0, "hb refused FENCED_MEMBER_EPOCH")
	lost := eventIndex(ev, fenced, "lost [t-0]")
	rejoin := eventIndex(ev, lost, "hb epoch=0 owned=[]")
	if fenced < 0 || lost < 0 || rejoin < 0 {
		t.Fatalf("want fenced, OnLost, rejoin with epoch 0; events %q", ev)
	}
	if c := eventIndex(ev, fenced, "commit"); c >= 0 && c < rejoin {
		t.Errorf("a commit after being fenced: events %q", ev)
	}
	if _, revoked, lostN := rec.calls(); revoked != 0 || lostN != 1 {
		t.Errorf("OnRevoked %d, OnLost %d calls; want 0 and 1", revoked, lostN)
	}
	f.mu.Lock()
	for _, hb := range f.grp.hbReqs[1:] {
		if hb.MemberId != "member-1" {
			t.Errorf("heartbeat with member id %q after the join", hb.MemberId)
		}
	}
	f.mu.Unlock()
	// The partition restarts from the committed offset (none): earliest.
	got := pollUntil(t, co, 3)
	if got[0] != "0:0" {
		t.Errorf("after rejoining, first record %s, want 0:0", got[0])
	}
}

// NOT_COORDINATOR: the coordinator moved; the member finds it again and
// keeps heartbeating and committing there.
func TestGroupCoordinatorMoveIsRediscovered(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	produceN(t, f, "t", []int32{0}, 2)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, _ := joinGroup(t, f)
	pollUntil(t, co, 2)
	waitEvent(t, f, "hb epoch=1 owned=[t-0]")
	f.mu.Lock()
	f.txn.owner = map[string]int32{"g": 2}
	finds := f.txn.findCalls
	f.mu.Unlock()
	waitEvent(t, f, "hb refused NOT_COORDINATOR")
	wait.Until(t, 10*time.Second, "heartbeats at node 2", func() bool {
		ev := f.eventLog()
		return eventIndex(ev, eventIndex(ev, 0, "hb refused NOT_COORDINATOR"), "hb epoch=1") >= 0
	})
	if err := co.Commit(ctxT(t)); err != nil {
		t.Fatalf("Commit after the move: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.txn.findCalls <= finds {
		t.Error("the coordinator was not looked up again")
	}
	if f.grp.offsets[TopicPartition{Topic: "t", Partition: 0}] != 2 {
		t.Errorf("committed %v", f.grp.offsets)
	}
}

// COORDINATOR_LOAD_IN_PROGRESS and COORDINATOR_NOT_AVAILABLE on join are
// retried; so is UNSTABLE_OFFSET_COMMIT on the assignment's OffsetFetch
// (offsets pending in an open transaction), before OnAssigned.
func TestGroupJoinRetriesCoordinatorAndUnstableOffsets(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.grp.hbErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE}
	f.grp.fetchErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT, sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT}
	f.grp.offsets = map[TopicPartition]int64{{Topic: "t", Partition: 0}: 0}
	f.mu.Unlock()
	_, rec := joinGroup(t, f)
	wait.Until(t, 10*time.Second, "assigned", func() bool { n, _, _ := rec.calls(); return n == 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.grp.fetchReqs); n != 3 {
		t.Errorf("%d offset fetches, want 3 (two UNSTABLE_OFFSET_COMMIT)", n)
	}
}

// Subscribe again changes the subscription: the next heartbeat carries it.
func TestGroupSubscriptionChangeIsSent(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1, "u": 1})
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, rec := joinGroup(t, f)
	wait.Until(t, 10*time.Second, "assigned", func() bool { n, _, _ := rec.calls(); return n == 1 })
	mustOK(t, "Subscribe", co.Subscribe("t", "u"))
	wait.For(t, 10*time.Second, "the new subscription sent", func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		last := f.grp.hbReqs[len(f.grp.hbReqs)-1]
		for _, hb := range f.grp.hbReqs[1:] {
			if hb.MemberEpoch > 0 && slices.Equal(hb.SubscribedTopicNames, []string{"t", "u"}) {
				return nil
			}
		}
		return fmt.Errorf("last heartbeat %v", last)
	})
}

// Auto-commit commits the positions of the owned partitions every
// interval.
func TestGroupAutoCommit(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	produceN(t, f, "t", []int32{0, 1}, 3)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}
	f.mu.Unlock()
	co, _ := joinGroup(t, f, WithAutoCommit(true, 20*time.Millisecond))
	pollUntil(t, co, 6)
	wait.Until(t, 10*time.Second, "positions committed", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.grp.offsets[TopicPartition{Topic: "t", Partition: 0}] == 3 && f.grp.offsets[TopicPartition{Topic: "t", Partition: 1}] == 3
	})
}

// Close commits (auto-commit), calls OnRevoked and leaves with epoch -1;
// a static member leaves with -2.
func TestGroupCloseCommitsAndLeaves(t *testing.T) {
	for _, tc := range []struct {
		name, instance string
		epoch          int32
	}{{"dynamic", "", -1}, {"static", "i-1", -2}} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			produceN(t, f, "t", []int32{0}, 2)
			f.mu.Lock()
			f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
			f.mu.Unlock()
			co, _ := joinGroup(t, f, WithInstanceID(tc.instance))
			pollUntil(t, co, 2)
			waitEvent(t, f, "hb epoch=1 owned=[t-0]")
			if err := co.Close(); err != nil {
				t.Fatal(err)
			}
			ev := f.eventLog()
			c := eventIndex(ev, 0, "commit epoch=1 t-0=2")
			r := eventIndex(ev, c, "revoked [t-0]")
			l := eventIndex(ev, r, fmt.Sprintf("leave member-1 epoch=%d", tc.epoch))
			if c < 0 || r < 0 || l < 0 {
				t.Fatalf("want commit, OnRevoked, leave; events %q", ev)
			}
			if co.group.goroutines.Running() != 0 {
				t.Error("membership goroutines still running after Close")
			}
		})
	}
}

// WithLeaveGroupOnClose(false): Close is a crash for the group — no
// commit, no OnRevoked, no leave; the session timeout fences the member.
func TestGroupCloseWithoutLeaving(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	produceN(t, f, "t", []int32{0}, 2)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, _ := joinGroup(t, f, WithLeaveGroupOnClose(false))
	pollUntil(t, co, 2)
	waitEvent(t, f, "hb epoch=1 owned=[t-0]")
	if err := co.Close(); err != nil {
		t.Fatal(err)
	}
	for _, e := range f.eventLog() {
		if strings.HasPrefix(e, "commit") || strings.HasPrefix(e, "revoked") || strings.HasPrefix(e, "leave") {
			t.Errorf("Close without leaving did %q", e)
		}
	}
	if co.group.goroutines.Running() != 0 {
		t.Error("membership goroutines still running after Close")
	}
}

// Close is bounded when the coordinator does not answer.
func TestGroupCloseIsBounded(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, rec := joinGroup(t, f, WithGroupCloseTimeout(300*time.Millisecond))
	wait.Until(t, 10*time.Second, "assigned", func() bool { n, _, _ := rec.calls(); return n == 1 })
	f.mu.Lock()
	f.txn.owner = map[string]int32{"g": 7} // no such node: nobody answers
	f.nodes[7] = &fakeBroker{addr: "127.0.0.1:1"}
	f.mu.Unlock()
	start := time.Now()
	co.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a 300ms close timeout", d)
	}
}

// STALE_MEMBER_EPOCH on Commit: refresh the epoch (the next heartbeat)
// and try once more.
func TestGroupCommitRetriesStaleEpochOnce(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	produceN(t, f, "t", []int32{0}, 2)
	f.mu.Lock()
	f.grp.defaultTarget = []TopicPartition{{Topic: "t", Partition: 0}}
	f.mu.Unlock()
	co, _ := joinGroup(t, f)
	pollUntil(t, co, 2)
	f.mu.Lock()
	f.grp.commitErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_STALE_MEMBER_EPOCH}
	n := len(f.grp.commitReqs)
	f.mu.Unlock()
	if err := co.Commit(ctxT(t)); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	f.mu.Lock()
	tries := len(f.grp.commitReqs) - n
	f.grp.commitErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_STALE_MEMBER_EPOCH, sluicev1.ErrorCode_STALE_MEMBER_EPOCH}
	f.mu.Unlock()
	if tries != 2 {
		t.Errorf("%d commit requests, want 2", tries)
	}
	if err := co.CommitOffsets(ctxT(t), map[TopicPartition]int64{{Topic: "t", Partition: 0}: 1}); errs.Code(err) != sluicev1.ErrorCode_STALE_MEMBER_EPOCH {
		t.Errorf("twice stale: %v, want STALE_MEMBER_EPOCH", err)
	}
}

// Group options are refused without WithGroup, Assign is refused with
// it, and Commit needs a membership.
func TestGroupOptionMisuse(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.NewConsumer(WithInstanceID("x")); err == nil || !strings.Contains(err.Error(), "WithInstanceID needs WithGroup") {
		t.Errorf("WithInstanceID without a group: %v", err)
	}
	if _, err := c.NewConsumer(WithGroup("g"), WithAssignor("sticky")); err == nil {
		t.Error("assignor sticky accepted")
	}
	co, err := c.NewConsumer(WithGroup("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 0, 0); err == nil {
		t.Error("Assign on a group consumer accepted")
	}
	if err := co.CommitOffsets(ctxT(t), map[TopicPartition]int64{{Topic: "t", Partition: 0}: 1}); !errors.Is(err, ErrNotGroupMember) {
		t.Errorf("commit before joining: %v", err)
	}
	plain, _ := c.NewConsumer()
	defer plain.Close()
	if err := plain.Subscribe("t"); err == nil {
		t.Error("Subscribe without a group accepted")
	}
}
