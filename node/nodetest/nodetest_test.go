package nodetest_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// checkAddrs fails t unless every address of n is on 127.0.0.1 and none
// is one of the defaults 9400-9404 (a `make run` node may hold those).
func checkAddrs(t *testing.T, name string, n *node.Node) {
	t.Helper()
	for what, addr := range map[string]string{"grpc": n.Addr(), "internal grpc": n.InternalAddr(), "raft": n.RaftAddr(), "gossip": n.GossipAddr(), "http": n.HTTPAddr()} {
		if addr == "" {
			continue // not a controller, or HTTP disabled
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s %s address %q: %v", name, what, addr, err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p == 0 || (p >= 9400 && p <= 9404) {
			t.Errorf("%s %s address %s: want 127.0.0.1 on a free port, never 9400-9404", name, what, addr)
		}
	}
}

func TestSingleListensOnFreeLoopbackPorts(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) { c.HTTPListen = "127.0.0.1:0" })
	checkAddrs(t, "single", s.Node)
	s.CreateTopic("t", 1, nil)
	if pd := s.Fetch("t", 0, 0, 0); pd.ErrorCode != 0 || len(pd.Batches) != 0 {
		t.Fatalf("fetch from a new topic: %v", pd)
	}
	s.Stop()
	s.Stop() // only the first acts
	s.Abort()
	// The data dir is free again: the same dir starts a new node.
	nodetest.StartSingle(t, s.Dir, nil)
}

func TestClusterListensOnFreeLoopbackPortsAndRestarts(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1}, true, []int32{2})
	c.StartAll()
	for id, n := range c.Nodes() {
		checkAddrs(t, "node "+strconv.Itoa(int(id)), n)
	}
	if got := c.Leader(); got != 1 {
		t.Fatalf("leader %d, want the only voter 1", got)
	}
	c.Abort(2)
	if c.Node(2) != nil {
		t.Fatal("an aborted node is still listed as running")
	}
	c.Restart(2)
	c.SyncMetadata()
	if b := c.Node(1).Metadata().Image().Brokers[2]; b == nil || b.Fenced {
		t.Fatalf("restarted broker 2 in the image: %+v", b)
	}
	if err := c.Stop(2); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
