package controller

import (
	"reflect"
	"slices"
	"testing"
)

func liveSet(ids ...int32) func(int32) bool {
	return func(id int32) bool { return slices.Contains(ids, id) }
}

// DESIGN §6: the first live replica of the ISR in assignment order; none is
// offline unless unclean election is enabled, then the first live replica.
func TestElectLeader(t *testing.T) {
	cases := []struct {
		name        string
		replicas    []int32
		isr         []int32
		live        []int32
		unclean     bool
		want        int32
		wantUnclean bool
	}{
		{"preferred replica live and in ISR", []int32{1, 2, 3}, []int32{1, 2, 3}, []int32{1, 2, 3}, false, 1, false},
		{"assignment order, not ISR order", []int32{3, 1, 2}, []int32{1, 2, 3}, []int32{1, 2, 3}, false, 3, false},
		{"first replica dead", []int32{1, 2, 3}, []int32{1, 2, 3}, []int32{2, 3}, false, 2, false},
		{"live replica outside ISR is skipped", []int32{1, 2, 3}, []int32{1, 3}, []int32{2, 3}, false, 3, false},
		{"no live ISR member: offline", []int32{1, 2, 3}, []int32{1}, []int32{2, 3}, false, NoLeader, false},
		{"no live ISR member, unclean: first live replica", []int32{1, 2, 3}, []int32{1}, []int32{3, 2}, true, 2, true},
		{"unclean not needed is clean", []int32{1, 2, 3}, []int32{1, 2}, []int32{2}, true, 2, false},
		{"nothing live, unclean: offline", []int32{1, 2}, []int32{1}, nil, true, NoLeader, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &PartitionState{Replicas: tc.replicas, ISR: tc.isr}
			got, unclean := ElectLeader(p, liveSet(tc.live...), tc.unclean)
			if got != tc.want || unclean != tc.wantUnclean {
				t.Fatalf("ElectLeader = %d (unclean %v), want %d (unclean %v)", got, unclean, tc.want, tc.wantUnclean)
			}
		})
	}
}

// ReelectChanges turns fencing into partition changes that the FSM accepts.
func TestReelectChangesAfterFencing(t *testing.T) {
	cases := []struct {
		name      string
		log       []Record
		want      *PartitionState // partition t-0 after applying the changes
		noChanges bool
	}{
		{name: "nothing fenced: no changes", log: withTopic(), noChanges: true},
		{name: "leader fenced: next ISR member leads, fenced one leaves ISR",
			log:  append(withTopic(), FenceBroker{BrokerID: 1, BrokerEpoch: 1}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 1, ISR: []int32{2, 3}, PartitionEpoch: 1}},
		{name: "follower fenced: ISR shrinks, leader epoch kept",
			log:  append(withTopic(), FenceBroker{BrokerID: 3, BrokerEpoch: 3}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, ISR: []int32{1, 2}, PartitionEpoch: 1}},
		{name: "last ISR member fenced: offline, ISR remembers it",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				FenceBroker{BrokerID: 1, BrokerEpoch: 1}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: NoLeader, LeaderEpoch: 1, ISR: []int32{1}, PartitionEpoch: 2}},
		{name: "last ISR member fenced, unclean enabled: live replica leads alone",
			log: append(withTopic(), ConfigChange{Topic: "t", Key: ConfigUncleanLeaderElection, Value: "true"},
				PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				FenceBroker{BrokerID: 1, BrokerEpoch: 1}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 1, ISR: []int32{2}, PartitionEpoch: 2}},
		{name: "offline partition's ISR member unfenced: it leads again",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				FenceBroker{BrokerID: 1, BrokerEpoch: 1},
				PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoLeader},
				UnfenceBroker{BrokerID: 1, BrokerEpoch: 1}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 2, ISR: []int32{1}, PartitionEpoch: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.log...)
			changes := ReelectChanges(im)
			if tc.noChanges {
				if len(changes) != 0 {
					t.Fatalf("changes = %+v", changes)
				}
				return
			}
			for i, c := range changes {
				if _, err := Apply(im, c, im.Offset+1); err != nil {
					t.Fatalf("change %d %+v rejected: %v", i, c, err)
				}
			}
			if got := im.Partition("t", 0); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("partition = %+v, want %+v", got, tc.want)
			}
			if again := ReelectChanges(im); len(again) != 0 {
				t.Errorf("not converged: %+v", again)
			}
		})
	}
}
