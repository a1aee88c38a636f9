package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Leadership balance (issue 18): after a node restarts, the partitions it
// preferably leads are led elsewhere; ElectLeaders moves them back, and so
// does the controller on its own when the rebalance runs.

const rebalanceTopic = "balance"

// restartAndWaitISR stops node id, waits until none of its partitions is
// led by it, starts it again and waits until it is back in every ISR.
func restartAndWaitISR(t *testing.T, c *nodetest.Cluster, id int32, partitions int) {
	t.Helper()
	if err := c.Stop(id); err != nil {
		t.Fatal(err)
	}
	other := c.IDs()[0]
	if other == id {
		other = c.IDs()[1]
	}
	wait.For(t, 20*time.Second, fmt.Sprintf("node %d leads nothing", id), func() error {
		im := c.Node(other).Metadata().Image()
		for i, p := range im.Topics[rebalanceTopic].Partitions {
			if p.Leader == id || p.Leader == controller.NoLeader {
				return fmt.Errorf("partition %d led by %d", i, p.Leader)
			}
		}
		return nil
	})
	c.Restart(id)
	wait.For(t, 30*time.Second, fmt.Sprintf("node %d back in every ISR", id), func() error {
		im := c.Node(other).Metadata().Image()
		for i, p := range im.Topics[rebalanceTopic].Partitions {
			if len(p.ISR) != 3 {
				return fmt.Errorf("partition %d ISR %v", i, p.ISR)
			}
		}
		return nil
	})
}

// preferredLeaders reports which partitions are not led by their first
// replica, in every broker's image.
func preferredLeaders(c *nodetest.Cluster) error {
	for id, n := range c.Nodes() {
		for i, p := range n.Metadata().Image().Topics[rebalanceTopic].Partitions {
			if p.Leader != p.Replicas[0] {
				return fmt.Errorf("node %d sees partition %d led by %d, preferred %d", id, i, p.Leader, p.Replicas[0])
			}
		}
	}
	return nil
}

func startBalanceCluster(t *testing.T, interval time.Duration) *nodetest.Cluster {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(_ int32, cfg *node.Config) { cfg.LeaderRebalanceInterval = interval })
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(c.Dial(1)).CreateTopics(ctx, &sluicev1.CreateTopicsRequest{
		Topics: []*sluicev1.CreatableTopic{{Name: rebalanceTopic, NumPartitions: 6, ReplicationFactor: 3}}})
	if err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create topic: %v %v", err, resp)
	}
	c.WaitTopic(rebalanceTopic, 6)
	if err := preferredLeaders(c); err != nil {
		t.Fatalf("a new topic: %v", err)
	}
	return c
}

func TestElectLeadersMovesLeadershipsBack(t *testing.T) {
	c := startBalanceCluster(t, -1) // no automatic rebalance
	restartAndWaitISR(t, c, 2, 6)
	if err := preferredLeaders(c); err == nil {
		t.Fatal("node 2 leads again right after its restart; nothing left to test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(c.Dial(3)).ElectLeaders(ctx, &sluicev1.ElectLeadersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Elected) != 2 {
		t.Errorf("elected %v, want node 2's two preferred partitions", resp.Elected)
	}
	for _, e := range resp.Elected {
		if e.LeaderId != 2 {
			t.Errorf("elected %v, want leader 2", e)
		}
	}
	c.SyncMetadata()
	if err := preferredLeaders(c); err != nil {
		t.Error(err)
	}
	// Nothing left to move: a second call elects nothing.
	resp, err = sluicev1.NewAdminClient(c.Dial(1)).ElectLeaders(ctx, &sluicev1.ElectLeadersRequest{
		Topics: []*sluicev1.TopicPartitions{{Name: rebalanceTopic}}})
	if err != nil || len(resp.Elected) != 0 {
		t.Errorf("second election: %v %v", resp, err)
	}
}

func TestControllerRebalancesAfterARestart(t *testing.T) {
	c := startBalanceCluster(t, 200*time.Millisecond)
	restartAndWaitISR(t, c, 3, 6)
	wait.For(t, 20*time.Second, "leaderships back on their preferred replicas", func() error { return preferredLeaders(c) })
}
