package node_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// A node started without --join (the others join it) remembers their
// gossip addresses in its data dir; restarted without --join again, it
// joins them while it starts — it is not left alone until one of them
// happens to gossip to it.
func TestRestartWithoutSeedsJoinsRememberedPeers(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.Configure(1, func(cfg *node.Config) { cfg.Join = nil })
	c.StartAll()
	path := filepath.Join(c.Config(1).DataDir, "gossip-peers.json")
	wait.For(t, 10*time.Second, "node 1 remembers nodes 2 and 3", func() error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var doc struct {
			Peers []struct {
				NodeID int32  `json:"node_id"`
				Addr   string `json:"addr"`
			} `json:"peers"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		var ids []int32
		for _, p := range doc.Peers {
			if p.Addr != c.Config(p.NodeID).GossipListen {
				return fmt.Errorf("node %d remembered at %s, listens on %s", p.NodeID, p.Addr, c.Config(p.NodeID).GossipListen)
			}
			ids = append(ids, p.NodeID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, []int32{2, 3}) {
			return fmt.Errorf("remembers %v", ids)
		}
		return nil
	})
	if err := c.Stop(1); err != nil {
		t.Fatal(err)
	}
	n := c.Start(1) // still without --join
	// Start joined the remembered peers before returning.
	var ids []int32
	for _, m := range n.GossipMembers() {
		ids = append(ids, m.NodeID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int32{1, 2, 3}) {
		t.Fatalf("right after its restart node 1 sees members %v, want [1 2 3]", ids)
	}
	c.WaitReady(1)
}
