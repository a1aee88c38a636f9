package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
)

// A broker that registers a new incarnation (it restarted) loses its
// leaderships and ISR memberships at once, and leads again only in a new
// leader epoch: a restarted leader must never go on appending in the epoch
// of its previous life, since followers may hold records of that epoch its
// log no longer has, and epoch-based truncation cannot find a divergence
// within one epoch. Found by the chaos harness (replicas diverged below the
// high watermark after two of three nodes were killed and restarted before
// their sessions expired).
func TestNewIncarnationLeadsOnlyInANewEpoch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	for id := int32(1); id <= 3; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), Rack: "", IncarnationID: "first"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateTopic(ctx, "rf3", 3, 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, "rf1", 3, 1, nil); err != nil {
		t.Fatal(err)
	}
	before := map[string][]PartitionState{}
	for _, name := range []string{"rf3", "rf1"} {
		for _, p := range c.Image().Topics[name].Partitions {
			before[name] = append(before[name], *p)
		}
	}

	// The same incarnation registering again changes nothing.
	if _, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: 1, Address: "h1:1", Rack: "", IncarnationID: "first"}); err != nil {
		t.Fatal(err)
	}
	for i, p := range c.Image().Topics["rf3"].Partitions {
		if p.Leader != before["rf3"][i].Leader || p.LeaderEpoch != before["rf3"][i].LeaderEpoch {
			t.Fatalf("rf3-%d changed on a repeated registration: %+v", i, p)
		}
	}

	// Broker 1 restarts: a new incarnation.
	epoch, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: 1, Address: "h1:1", Rack: "", IncarnationID: "second"})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range c.Image().Topics["rf3"].Partitions {
		was := before["rf3"][i]
		if slices.Contains(p.ISR, 1) {
			t.Errorf("rf3-%d: restarted broker 1 still in the ISR %v", i, p.ISR)
		}
		if was.Leader == 1 && (p.Leader == 1 || p.Leader == NoLeader || p.LeaderEpoch <= was.LeaderEpoch) {
			t.Errorf("rf3-%d led by broker 1 in epoch %d: now leader %d epoch %d, want another broker in a later epoch", i, was.LeaderEpoch, p.Leader, p.LeaderEpoch)
		}
	}
	var led []int
	for i, p := range c.Image().Topics["rf1"].Partitions {
		if before["rf1"][i].Leader != 1 {
			continue
		}
		led = append(led, i)
		if p.Leader != NoLeader {
			t.Errorf("rf1-%d, whose only replica restarted: leader %d, want none until it is back", i, p.Leader)
		}
	}
	if len(led) == 0 {
		t.Fatal("broker 1 led no rf1 partition: the test checks nothing there")
	}
	// Back (unfenced): it leads its single-replica partitions again, in a
	// new epoch.
	if err := c.UnfenceBroker(ctx, 1, epoch); err != nil {
		t.Fatal(err)
	}
	for _, i := range led {
		p := c.Image().Topics["rf1"].Partitions[i]
		if p.Leader != 1 || p.LeaderEpoch <= before["rf1"][i].LeaderEpoch {
			t.Errorf("rf1-%d after broker 1 is back: leader %d epoch %d (was epoch %d)", i, p.Leader, p.LeaderEpoch, before["rf1"][i].LeaderEpoch)
		}
	}
}
