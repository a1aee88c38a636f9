package node

import (
	"testing"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
)

// The group assignors' topic metadata keeps its version while the
// metadata moves without changing a topic's partition count or replicas'
// racks (an ISR change): a new version wakes every group's timer.
func TestGroupTopicsVersionMovesOnlyWithTheTopics(t *testing.T) {
	n := &Node{cache: cluster.NewMetadataCache()}
	var off uint64
	update := func(recs ...controller.Record) {
		t.Helper()
		var ds []controller.Delta
		for _, r := range recs {
			off++
			ds = append(ds, controller.Delta{Offset: off, Record: r})
		}
		if err := n.cache.Update(off, nil, ds); err != nil {
			t.Fatal(err)
		}
	}
	update(controller.BootstrapCluster{ClusterID: "c"},
		controller.RegisterBroker{BrokerID: 1, Address: "h:1", IncarnationID: "i", Rack: "r1"},
		controller.RegisterBroker{BrokerID: 2, Address: "h:2", IncarnationID: "i", Rack: "r2"})
	update(controller.UnfenceBroker{BrokerID: 1, BrokerEpoch: 2}, controller.UnfenceBroker{BrokerID: 2, BrokerEpoch: 3})
	update(controller.CreateTopic{Name: "in", TopicID: "id", Partitions: []controller.PartitionAssignment{{Replicas: []int32{1, 2}}}})
	m, v := n.groupTopics()
	if m["in"].Partitions != 1 || len(m["in"].Racks) != 1 {
		t.Fatalf("topics %+v", m)
	}
	p := n.cache.Image().Topics["in"].Partitions[0]
	update(controller.PartitionChange{Topic: "in", Partition: 0, PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch,
		Leader: controller.NoChange, ISR: []int32{1}})
	if _, v2 := n.groupTopics(); v2 != v {
		t.Fatalf("an ISR change moved the version %d → %d", v, v2)
	}
	update(controller.CreateTopic{Name: "more", TopicID: "id2", Partitions: []controller.PartitionAssignment{{Replicas: []int32{1}}}})
	if m3, v3 := n.groupTopics(); v3 == v || m3["more"].Partitions != 1 {
		t.Fatalf("a new topic: version %d (was %d), topics %+v", v3, v, m3)
	}
}
