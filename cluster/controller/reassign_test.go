package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// PlanReassignment: the checks, and the start record in Kafka's order
// (target first, then the replicas being removed).
func TestPlanReassignment(t *testing.T) {
	cases := []struct {
		name     string
		setup    []Record
		topic    string
		part     int32
		target   []int32
		code     sluicev1.ErrorCode
		noChange bool
		want     *PartitionState // t-0 after applying the planned change
	}{
		{name: "swap one replica", setup: withFourthBroker(), target: []int32{1, 2, 4},
			want: &PartitionState{Replicas: []int32{1, 2, 4, 3}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 1,
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}}},
		{name: "move away from the leader", setup: withFourthBroker(), target: []int32{4, 2, 3},
			want: &PartitionState{Replicas: []int32{4, 2, 3, 1}, Leader: 1, ISR: []int32{2, 3, 1}, PartitionEpoch: 1,
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}}},
		{name: "grow", setup: withFourthBroker(), target: []int32{1, 2, 3, 4},
			want: &PartitionState{Replicas: []int32{1, 2, 3, 4}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 1,
				AddingReplicas: []int32{4}}},
		{name: "pure shrink", setup: withTopic(), target: []int32{2, 1},
			want: &PartitionState{Replicas: []int32{2, 1, 3}, Leader: 1, ISR: []int32{2, 1, 3}, PartitionEpoch: 1,
				RemovingReplicas: []int32{3}}},
		{name: "reorder only changes the preference", setup: withTopic(), target: []int32{3, 2, 1},
			want: &PartitionState{Replicas: []int32{3, 2, 1}, Leader: 1, ISR: []int32{3, 2, 1}, PartitionEpoch: 1}},
		{name: "same assignment: nothing to do", setup: withTopic(), target: []int32{1, 2, 3}, noChange: true},
		{name: "the running target again: nothing to do (a retry)", setup: reassigning(), target: []int32{1, 2, 4}, noChange: true},
		{name: "another target while one runs", setup: reassigning(), target: []int32{1, 4, 3},
			code: sluicev1.ErrorCode_REASSIGNMENT_IN_PROGRESS},
		{name: "unknown broker", setup: withTopic(), target: []int32{1, 2, 9}, code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "duplicate broker", setup: withFourthBroker(), target: []int32{1, 4, 4}, code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "empty target", setup: withTopic(), target: nil, code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "unknown partition", setup: withTopic(), part: 1, target: []int32{1}, code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "unknown topic", setup: withTopic(), topic: "u", target: []int32{1}, code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "fewer replicas than min.insync.replicas",
			setup: append(withTopic(), ConfigChange{Topic: "t", Key: ConfigMinInsyncReplicas, Value: "2"}), target: []int32{1},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "a fenced target broker is allowed (it catches up when back)",
			setup: append(withFourthBroker(), FenceBroker{BrokerID: 4, BrokerEpoch: 8}), target: []int32{1, 2, 4},
			want: &PartitionState{Replicas: []int32{1, 2, 4, 3}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 1,
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.setup...)
			topic := tc.topic
			if topic == "" {
				topic = "t"
			}
			pc, ok, err := PlanReassignment(im, topic, tc.part, tc.target)
			if errs.Code(err) != tc.code {
				t.Fatalf("error %v, want code %v", err, tc.code)
			}
			if err != nil {
				return
			}
			if ok == tc.noChange {
				t.Fatalf("change needed = %v, want %v (%+v)", ok, !tc.noChange, pc)
			}
			if !ok {
				return
			}
			if _, err := Apply(im, pc, im.Offset+1); err != nil {
				t.Fatalf("planned change %+v rejected: %v", pc, err)
			}
			if got := im.Partition("t", 0); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("partition = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// ReassignmentCompletions: a reassignment completes once every adding
// replica is in the ISR (Kafka's maybeCompleteReassignment); the leader
// moves only if it is being removed, to the first live target replica in
// the ISR, with a new leader epoch.
func TestReassignmentCompletions(t *testing.T) {
	expand := func(epoch int32, isr ...int32) PartitionChange {
		return PartitionChange{Topic: "t", PartitionEpoch: epoch, Leader: NoChange, ISR: isr}
	}
	movingLeader := append(withFourthBroker(), PartitionChange{Topic: "t", Leader: NoChange,
		Replicas: []int32{4, 2, 3, 1}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}})
	cases := []struct {
		name string
		log  []Record
		want *PartitionState // t-0 after applying the completions; nil: none due
	}{
		{name: "no reassignment: nothing", log: withTopic()},
		{name: "adding replica not in the ISR yet: wait", log: reassigning()},
		{name: "adding replica in the ISR: complete, leader kept",
			log:  append(reassigning(), expand(1, 1, 2, 3, 4)),
			want: &PartitionState{Replicas: []int32{1, 2, 4}, Leader: 1, ISR: []int32{1, 2, 4}, PartitionEpoch: 3}},
		{name: "a kept replica out of sync does not hold it back",
			log:  append(reassigning(), expand(1, 1, 3, 4)),
			want: &PartitionState{Replicas: []int32{1, 2, 4}, Leader: 1, ISR: []int32{1, 4}, PartitionEpoch: 3}},
		{name: "leader removed: first target replica in the ISR leads, leader epoch bumps",
			log:  append(movingLeader, expand(1, 1, 2, 3, 4)),
			want: &PartitionState{Replicas: []int32{4, 2, 3}, Leader: 4, LeaderEpoch: 1, ISR: []int32{4, 2, 3}, PartitionEpoch: 3}},
		{name: "leader removed, first target replica fenced: the next one leads",
			log: append(movingLeader, expand(1, 1, 2, 3, 4), FenceBroker{BrokerID: 4, BrokerEpoch: 8}),
			// Applying the log directly (no ReelectChanges) leaves 4 in the
			// ISR; it is not live, so 2 is elected.
			want: &PartitionState{Replicas: []int32{4, 2, 3}, Leader: 2, LeaderEpoch: 1, ISR: []int32{4, 2, 3}, PartitionEpoch: 3}},
		{name: "pure shrink completes at once",
			log:  append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{2, 1, 3}, RemovingReplicas: []int32{3}}),
			want: &PartitionState{Replicas: []int32{2, 1}, Leader: 1, ISR: []int32{2, 1}, PartitionEpoch: 2}},
		{name: "shrink away from the leader: the kept ISR member leads",
			log:  append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{3, 1, 2}, RemovingReplicas: []int32{1, 2}}),
			want: &PartitionState{Replicas: []int32{3}, Leader: 3, LeaderEpoch: 1, ISR: []int32{3}, PartitionEpoch: 2}},
		{name: "no target replica in the ISR: wait",
			log: append(withTopic(), expand(0, 1), PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange,
				Replicas: []int32{2, 3, 1}, RemovingReplicas: []int32{1}})},
		{name: "removing leader and no live target replica in the ISR: the leader stays until one can lead",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{3, 1, 2}, RemovingReplicas: []int32{1, 2}},
				FenceBroker{BrokerID: 3, BrokerEpoch: 3})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.log...)
			changes := ReassignmentCompletions(im)
			if tc.want == nil {
				if len(changes) != 0 {
					t.Fatalf("changes = %+v, want none", changes)
				}
				return
			}
			if len(changes) != 1 {
				t.Fatalf("changes = %+v, want one", changes)
			}
			if _, err := Apply(im, changes[0], im.Offset+1); err != nil {
				t.Fatalf("completion %+v rejected: %v", changes[0], err)
			}
			if got := im.Partition("t", 0); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("partition = %+v, want %+v", got, tc.want)
			}
			if again := ReassignmentCompletions(im); len(again) != 0 {
				t.Errorf("not converged: %+v", again)
			}
		})
	}
}

// End to end on a single-node controller (real Raft): a reassignment is
// recorded, completes when the leader's AlterPartition adds the new
// replica to the ISR, and a second one is refused while the first runs.
func TestSingleNodeReassignment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), Rack: "", IncarnationID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
		epochs[id] = e
	}
	if _, err := c.CreateTopic(ctx, "t", 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	before := c.Image().Partition("t", 0)
	var spare int32
	for id := int32(1); id <= 3; id++ {
		if !slices.Contains(before.Replicas, id) {
			spare = id
		}
	}
	target := []int32{before.Replicas[0], spare} // keep the leader, swap the follower
	p, err := c.ReassignPartition(ctx, "t", 0, target)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Reassigning() || !reflect.DeepEqual(p.AddingReplicas, []int32{spare}) || !reflect.DeepEqual(p.RemovingReplicas, []int32{before.Replicas[1]}) {
		t.Fatalf("after start: %+v", p)
	}
	if _, err := c.ReassignPartition(ctx, "t", 0, []int32{spare, before.Replicas[1]}); errs.Code(err) != sluicev1.ErrorCode_REASSIGNMENT_IN_PROGRESS {
		t.Fatalf("second reassignment: %v, want REASSIGNMENT_IN_PROGRESS", err)
	}
	if _, err := c.ReassignPartition(ctx, "t", 0, target); err != nil {
		t.Fatalf("the same reassignment again: %v", err)
	}
	// The leader adds the new replica to the ISR; the controller completes.
	leader := p.Leader
	if _, err := c.AlterPartition(ctx, AlterPartitionRequest{BrokerID: leader, BrokerEpoch: epochs[leader], Topic: "t",
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, NewISR: append(p.ISR, spare)}); err != nil {
		t.Fatal(err)
	}
	got := c.Image().Partition("t", 0)
	want := &PartitionState{Replicas: target, Leader: leader, LeaderEpoch: p.LeaderEpoch, ISR: target, PartitionEpoch: p.PartitionEpoch + 2}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after completion: %+v, want %+v", got, want)
	}
	// A pure shrink completes within the request.
	p, err = c.ReassignPartition(ctx, "t", 0, []int32{spare})
	if err != nil {
		t.Fatal(err)
	}
	if p.Reassigning() || !reflect.DeepEqual(p.Replicas, []int32{spare}) || p.Leader != spare || p.LeaderEpoch != want.LeaderEpoch+1 {
		t.Fatalf("after shrink: %+v", p)
	}
}

// A reassignment whose last step (the new replica joining the ISR) was
// committed by a controller that then crashed is completed by the next
// active controller when it takes over. The session loop's periodic check
// is disabled here (a huge SessionCheckInterval), so only the
// leadership-gain path can complete it.
func TestReassignmentCompletesAfterControllerFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	voters := []Voter{{ID: 1, Address: freeAddr(t)}, {ID: 2, Address: freeAddr(t)}, {ID: 3, Address: freeAddr(t)}}
	nodes := map[int32]*Controller{}
	for _, v := range voters {
		nodes[v.ID] = startController(t, Config{NodeID: v.ID, DataDir: t.TempDir(), RaftBind: v.Address, Voters: voters,
			Logger: testLogger(), SessionTimeout: time.Hour, SessionCheckInterval: time.Hour})
	}
	var leader *Controller
	wait.For(t, 15*time.Second, "a sole leader", func() (err error) { leader, err = soleLeader(nodes); return err })
	for id := int32(1); id <= 3; id++ {
		e, err := leader.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), Rack: "", IncarnationID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := leader.CreateTopic(ctx, "t", 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	cur := leader.Image().Partition("t", 0)
	spare := int32(1)
	for slices.Contains(cur.Replicas, spare) {
		spare++
	}
	target := []int32{cur.Leader, spare}
	p, err := leader.ReassignPartition(ctx, "t", 0, target)
	if err != nil || !p.Reassigning() {
		t.Fatalf("start: %+v %v", p, err)
	}
	// The ISR expansion, proposed as a bare PartitionChange: it does not
	// run the completions that AlterPartition would.
	if _, err := leader.PartitionChange(ctx, PartitionChange{Topic: "t", PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch,
		Leader: NoChange, ISR: append(slices.Clone(p.ISR), spare)}); err != nil {
		t.Fatal(err)
	}
	if got := leader.Image().Partition("t", 0); !got.Reassigning() {
		t.Fatalf("completed before the failover: %+v", got)
	}
	old := leader.NodeID()
	if err := leader.Abort(); err != nil {
		t.Fatal(err)
	}
	delete(nodes, old)
	wait.For(t, 15*time.Second, "reassignment done on every node", func() error {
		for id, c := range nodes {
			got := c.Image().Partition("t", 0)
			if got.Reassigning() || !slices.Equal(got.Replicas, target) || !slices.Equal(got.ISR, target) {
				return fmt.Errorf("node %d: %+v", id, got)
			}
		}
		return nil
	})
}

// A replica a reassignment is still adding does not make its partition
// under-replicated; any other replica out of the ISR does.
func TestPartitionUnderReplicated(t *testing.T) {
	tests := []struct {
		name string
		p    PartitionState
		want bool
	}{
		{"full ISR", PartitionState{Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}}, false},
		{"one out", PartitionState{Replicas: []int32{1, 2, 3}, ISR: []int32{1, 3}}, true},
		{"adding, not yet in", PartitionState{Replicas: []int32{1, 2, 3, 4}, ISR: []int32{1, 2, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{1}}, false},
		{"adding in, an old one out", PartitionState{Replicas: []int32{1, 2, 3, 4}, ISR: []int32{1, 2, 4}, AddingReplicas: []int32{4}}, true},
		{"offline", PartitionState{Replicas: []int32{1, 2}, ISR: []int32{1}, Leader: NoLeader}, true},
	}
	for _, tc := range tests {
		if got := tc.p.UnderReplicated(); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
