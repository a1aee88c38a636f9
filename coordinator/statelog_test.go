package coordinator

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/txn"
)

// ReplicaStateLog over a real one-node ReplicaManager: a coordinator
// registered as its leadership listener loads __transaction_state,
// writes through AppendCommitted, and a second coordinator registered on
// the same replica manager loads what the first wrote.
func TestReplicaStateLogWritesAndLoadsThroughTheReplicaManager(t *testing.T) {
	now := time.Unix(5000, 0)
	rm, err := cluster.NewReplicaManager(cluster.ReplicaManagerConfig{DataDir: t.TempDir(), NodeID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rm.Close() })
	im := controller.NewImage()
	off := uint64(0)
	for _, r := range []controller.Record{
		controller.BootstrapCluster{ClusterID: "c1"},
		controller.RegisterBroker{BrokerID: 1, Address: "b:1", IncarnationID: "i"},
		controller.UnfenceBroker{BrokerID: 1, BrokerEpoch: 2},
		controller.CreateTopic{Name: txn.StateTopic, TopicID: "id-ts", Partitions: []controller.PartitionAssignment{{Replicas: []int32{1}}}},
	} {
		off++
		if _, err := controller.Apply(im, r, off); err != nil {
			t.Fatalf("apply %T: %v", r, err)
		}
	}
	if err := rm.Apply(im.Clone(), now, true); err != nil {
		t.Fatal(err)
	}

	e := newTxnEnv()
	newCoordinator := func() (*txn.Coordinator, func()) {
		c := txn.NewCoordinator(txn.CoordinatorDeps{
			Log: ReplicaStateLog{Replicas: rm}, ProducerIDs: e.pids, Markers: e.markers, Now: e.now,
		}, e.cfg)
		unregister := rm.RegisterLeadershipListener(txn.StateTopic, c)
		return c, func() {
			unregister()
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	a, stopA := newCoordinator()
	waitLoaded(t, a, 0)
	pe := must[txn.ProducerIDAndEpoch](t, "init")(initPID(a, "real", 60000))
	if err := addPartition(a, "real", pe, txn.TopicPartition{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	must[txn.ProducerIDAndEpoch](t, "commit")(endTxn(a, "real", pe, true))
	waitState(t, a, "real", txn.CompleteCommit)
	stopA()

	b, stopB := newCoordinator()
	defer stopB()
	waitLoaded(t, b, 0)
	d := must[txn.Description](t, "describe after reload")(b.Describe("real"))
	if d.State != txn.CompleteCommit || d.ProducerID != pe.ProducerID || d.ProducerEpoch != pe.ProducerEpoch+1 {
		t.Fatalf("reloaded %+v", d.Metadata)
	}
	p, err := rm.Replica(txn.StateTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if hw := p.HighWatermark(); hw != 4 {
		t.Fatalf("high watermark %d, want 4 records (Empty, Ongoing, PrepareCommit, CompleteCommit)", hw)
	}
}
