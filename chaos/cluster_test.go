package chaos

import (
	"testing"

	"github.com/sluice-io/sluice/cluster/faultnet"
)

// Every address a node dials another at goes through the link between
// them: the internal gRPC address above all (decision 41: the inter-node
// calls go there, so a link that proxied only the client port would let
// them pass unharmed), and the client gRPC, Raft and gossip addresses.
// NewCluster starts the links but no process.
func TestDialMapProxiesEveryInterNodeAddress(t *testing.T) {
	c, err := NewCluster(ClusterConfig{Sluiced: "/nonexistent/sluiced", Nodes: 3, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, from := range c.Nodes {
		dm, err := faultnet.ParseDialMap(c.dialMap(from.ID))
		if err != nil {
			t.Fatal(err)
		}
		for _, to := range c.Nodes {
			if to == from {
				continue
			}
			l := c.Link(from.ID, to.ID)
			for addr, port := range map[string]string{to.InternalListen: l.Port("grpc"), to.Listen: l.Port("client"),
				to.RaftListen: l.Port("raft"), to.GossipListen: l.Port("gossip")} {
				if got, ok := dm.Lookup(addr); port == "" || !ok || got != port {
					t.Errorf("node %d dials node %d's %s at %q (mapped %v), want the link's %q", from.ID, to.ID, addr, got, ok, port)
				}
			}
		}
		if len(dm) != 4*(len(c.Nodes)-1) {
			t.Errorf("node %d's dial map has %d entries, want 4 per other node: %v", from.ID, len(dm), dm)
		}
	}
}
