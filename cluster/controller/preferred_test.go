package controller

import (
	"math"
	"testing"
)

// tenPartitions is topic "p" with 10 partitions, preferred leaders 1, 2,
// 3, 1, 2, ... (replicas rotated), all led by their preferred replica.
func tenPartitions() []Record {
	var parts []PartitionAssignment
	for i := range 10 {
		r := []int32{1, 2, 3}
		k := i % 3
		parts = append(parts, PartitionAssignment{Replicas: append(r[k:], r[:k]...)})
	}
	return append(threeBrokers(), CreateTopic{Name: "p", TopicID: "id-p", Partitions: parts})
}

// moveLeader is the change that makes to lead partition i of "p" (as a
// failover would, keeping every replica in the ISR).
func moveLeader(t *testing.T, im *Image, i int32, to int32) {
	t.Helper()
	p := im.Partition("p", i)
	if _, err := Apply(im, PartitionChange{Topic: "p", Partition: i, PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch, Leader: to}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
}

func TestPreferredLeaderChanges(t *testing.T) {
	im := build(t, tenPartitions()...)
	if got := PreferredLeaderChanges(im, nil); len(got) != 0 {
		t.Fatalf("balanced cluster: changes %+v", got)
	}
	// Broker 1 restarted: its partitions 0, 3, 6, 9 are led by 2.
	for _, i := range []int32{0, 3, 6, 9} {
		moveLeader(t, im, i, 2)
	}
	imb := LeaderImbalance(im)
	if imb[1] != 1 || imb[2] != 0 || imb[3] != 0 {
		t.Fatalf("imbalance %v, want broker 1 at 1.0, the others 0", imb)
	}
	// Partition 6's preferred replica is out of the ISR (still catching
	// up): it cannot lead yet.
	p6 := im.Partition("p", 6)
	if _, err := Apply(im, PartitionChange{Topic: "p", Partition: 6, PartitionEpoch: p6.PartitionEpoch, LeaderEpoch: p6.LeaderEpoch, Leader: NoChange, ISR: []int32{2, 3}}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	// A selection: partition 9 left out.
	got := PreferredLeaderChanges(im, func(topic string, partition int32) bool { return partition != 9 })
	if len(got) != 2 || got[0].Partition != 0 || got[1].Partition != 3 || got[0].Leader != 1 || got[1].Leader != 1 {
		t.Fatalf("changes %+v, want partitions 0 and 3 to broker 1", got)
	}
	for _, c := range RebalanceChanges(im, 0.10) {
		if _, err := Apply(im, c, im.Offset+1); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	for i, want := range map[int32]int32{0: 1, 3: 1, 6: 2, 9: 1} {
		if p := im.Partition("p", i); p.Leader != want {
			t.Errorf("partition %d led by %d, want %d", i, p.Leader, want)
		}
	}
	if r := LeaderImbalance(im)[1]; math.Abs(r-0.25) > 1e-9 {
		t.Errorf("broker 1 imbalance after the rebalance %v, want 0.25 (partition 6 waits for its ISR)", r)
	}
	// Below the threshold nothing moves; above it, what can move does.
	if got := RebalanceChanges(im, 0.30); len(got) != 0 {
		t.Errorf("imbalance 0.25 under threshold 0.30: changes %+v", got)
	}
	// A fenced preferred broker cannot lead.
	p6 = im.Partition("p", 6)
	if _, err := Apply(im, PartitionChange{Topic: "p", Partition: 6, PartitionEpoch: p6.PartitionEpoch, LeaderEpoch: p6.LeaderEpoch, Leader: NoChange, ISR: []int32{1, 2, 3}}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(im, FenceBroker{BrokerID: 1, BrokerEpoch: 1}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if got := PreferredLeaderChanges(im, nil); len(got) != 0 {
		t.Errorf("preferred broker fenced: changes %+v", got)
	}
}
