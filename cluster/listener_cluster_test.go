package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// leadershipEvent is one call a LeadershipListener received.
type leadershipEvent struct {
	leader bool // BecameLeader; else Resigned
	tp     cluster.TopicPartition
	epoch  int32
}

func (e leadershipEvent) String() string {
	if e.leader {
		return fmt.Sprintf("lead %s@%d", e.tp, e.epoch)
	}
	return fmt.Sprintf("resign %s@%d", e.tp, e.epoch)
}

// fakeCoordinator is a LeadershipListener that records what it hears.
type fakeCoordinator struct {
	mu     sync.Mutex
	events []leadershipEvent
}

func (c *fakeCoordinator) BecameLeader(tp cluster.TopicPartition, epoch int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, leadershipEvent{true, tp, epoch})
}

func (c *fakeCoordinator) Resigned(tp cluster.TopicPartition, epoch int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, leadershipEvent{false, tp, epoch})
}

func (c *fakeCoordinator) heard() []leadershipEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// checkOrder fails unless events alternate, per partition, BecameLeader(e)
// then Resigned(e), with epochs increasing.
func checkOrder(t *testing.T, node int32, events []leadershipEvent) {
	t.Helper()
	last := map[cluster.TopicPartition]leadershipEvent{}
	for _, e := range events {
		prev, seen := last[e.tp]
		ok := false
		switch {
		case e.leader:
			ok = !seen || (!prev.leader && e.epoch > prev.epoch)
		default:
			ok = seen && prev.leader && e.epoch == prev.epoch
		}
		if !ok {
			t.Fatalf("node %d heard %v out of order: %v", node, e, events)
		}
		last[e.tp] = e
	}
}

// TestLeadershipListenerFollowsBrokerCrash: a coordinator's listener on
// every broker hears, in order, that its node became leader of the
// coordinator topic's partition and, when that broker is killed, that it
// resigned; the listener of the broker that takes over hears it lead at a
// higher epoch, and can append committed records there at that epoch.
func TestLeadershipListenerFollowsBrokerCrash(t *testing.T) {
	tc := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	tc.StartAll()
	admin := sluicev1.NewAdminClient(tc.Dial(1))
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if r, err := admin.CreateTopics(cctx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "coord", NumPartitions: 1, ReplicationFactor: 3}}}); err != nil || r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %v", err, r)
	}
	listeners := map[int32]*fakeCoordinator{}
	for id, n := range tc.Nodes() {
		listeners[id] = &fakeCoordinator{}
		n.Replicas().RegisterLeadershipListener("coord", listeners[id])
	}
	tp := cluster.TopicPartition{Topic: "coord", Partition: 0}
	var old int32
	var oldEpoch int32
	wait.Until(t, 10*time.Second, "the leader's listener hears it lead", func() bool {
		for id, l := range listeners {
			if ev := l.heard(); len(ev) > 0 && ev[len(ev)-1].leader {
				old, oldEpoch = id, ev[len(ev)-1].epoch
				return true
			}
		}
		return false
	})
	if im := tc.Node(old).Metadata().Image(); im.Topics["coord"].Partitions[0].Leader != old || im.Topics["coord"].Partitions[0].LeaderEpoch != oldEpoch {
		t.Fatalf("node %d heard it leads at epoch %d; its image says %+v", old, oldEpoch, im.Topics["coord"].Partitions[0])
	}

	tc.Abort(old) // closes its replica manager: listeners are told
	heard := listeners[old].heard()
	checkOrder(t, old, heard)
	if n := len(heard); n < 2 || heard[n-1] != (leadershipEvent{false, tp, oldEpoch}) {
		t.Fatalf("killed leader %d heard %v, want it to end with resign %s@%d", old, heard, tp, oldEpoch)
	}

	var next int32
	var nextEpoch int32
	wait.Until(t, 20*time.Second, "a surviving broker's listener hears it lead at a higher epoch", func() bool {
		for id, l := range listeners {
			if id == old {
				continue
			}
			if ev := l.heard(); len(ev) > 0 && ev[len(ev)-1].leader && ev[len(ev)-1].epoch > oldEpoch {
				next, nextEpoch = id, ev[len(ev)-1].epoch
				return true
			}
		}
		return false
	})
	for id, l := range listeners {
		if id != old {
			checkOrder(t, id, l.heard())
		}
	}
	if p, err := tc.Node(next).Replicas().Replica("coord", 0); err != nil || !p.IsLeader(nextEpoch) {
		t.Fatalf("node %d heard it leads at epoch %d but its replica says otherwise (%v)", next, nextEpoch, err)
	}

	// The new leader appends as a coordinator would: at the epoch it heard.
	var b batch.Builder
	b.Reset(time.Now().UnixMilli())
	b.Add(time.Now().UnixMilli(), []byte("k"), []byte("v"), nil)
	actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer acancel()
	res, err := tc.Node(next).Replicas().AppendCommitted(actx, tp, b.Finish(batch.PlainProducer, 0), nextEpoch, time.Now())
	if err != nil {
		t.Fatalf("committed append on the new leader: %v", err)
	}
	if p, _ := tc.Node(next).Replicas().Replica("coord", 0); p.HighWatermark() <= res.LastOffset {
		t.Fatalf("append answered before offset %d was committed (HW %d)", res.LastOffset, p.HighWatermark())
	}
	b.Reset(time.Now().UnixMilli())
	b.Add(time.Now().UnixMilli(), []byte("k"), []byte("v"), nil)
	if _, err := tc.Node(next).Replicas().AppendCommitted(actx, tp, b.Finish(batch.PlainProducer, 0), oldEpoch, time.Now()); err == nil {
		t.Fatal("an append at the killed leader's epoch was accepted")
	}
}
