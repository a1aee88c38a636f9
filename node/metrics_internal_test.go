package node

import (
	"testing"

	"github.com/sluice-io/sluice/cluster/controller"
)

// TestISRChangesCountsTheLeadersOwnPartitions: between two images, a
// partition this broker leads in both, in the same leader epoch, counts
// as a shrink when a replica left its ISR and as an expansion when one
// joined; partitions led elsewhere, new leaderships and recreated topics
// do not count.
func TestISRChangesCountsTheLeadersOwnPartitions(t *testing.T) {
	const self = 1
	part := func(leader, epoch int32, isr ...int32) *controller.PartitionState {
		return &controller.PartitionState{Replicas: []int32{1, 2, 3}, Leader: leader, LeaderEpoch: epoch, ISR: isr}
	}
	image := func(id string, parts ...*controller.PartitionState) *controller.Image {
		im := controller.NewImage()
		im.Topics["t"] = &controller.Topic{Name: "t", ID: id, Partitions: parts}
		return im
	}
	for _, c := range []struct {
		name                    string
		prev, next              *controller.Image
		wantShrinks, wantExpand int
	}{
		{"unchanged", image("a", part(1, 3, 1, 2, 3)), image("a", part(1, 3, 1, 2, 3)), 0, 0},
		{"shrink", image("a", part(1, 3, 1, 2, 3)), image("a", part(1, 3, 1, 3)), 1, 0},
		{"expand", image("a", part(1, 3, 1, 3)), image("a", part(1, 3, 1, 2, 3)), 0, 1},
		{"one replica out, another in", image("a", part(1, 3, 1, 2)), image("a", part(1, 3, 1, 3)), 1, 1},
		{"two partitions shrink", image("a", part(1, 3, 1, 2, 3), part(1, 1, 1, 2)), image("a", part(1, 3, 1), part(1, 1, 1)), 2, 0},
		{"led by another broker", image("a", part(2, 3, 1, 2, 3)), image("a", part(2, 3, 2)), 0, 0},
		{"this broker elected", image("a", part(2, 3, 1, 2, 3)), image("a", part(1, 4, 1, 3)), 0, 0},
		{"new leader epoch", image("a", part(1, 3, 1, 2, 3)), image("a", part(1, 4, 1)), 0, 0},
		{"topic recreated", image("a", part(1, 3, 1, 2, 3)), image("b", part(1, 3, 1)), 0, 0},
		{"partitions added", image("a", part(1, 3, 1, 2)), image("a", part(1, 3, 1, 2), part(1, 0, 1)), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			shrinks, expands := isrChanges(c.prev, c.next, self)
			if shrinks != c.wantShrinks || expands != c.wantExpand {
				t.Errorf("isrChanges = %d shrinks, %d expansions; want %d, %d", shrinks, expands, c.wantShrinks, c.wantExpand)
			}
		})
	}
}
