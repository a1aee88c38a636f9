package nodetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
)

// Cluster is an in-process cluster on loopback: a static quorum of
// controller voters (combined controller+broker nodes, or controller-only)
// and broker-only nodes, each with a data dir of its own that outlives its
// restarts. Nodes start when the test says (Start, StartAll) and can be
// stopped, crashed and restarted. Its methods are safe for concurrent use,
// but a test must not stop a node while it starts it.
type Cluster struct {
	tb testing.TB

	mu    sync.Mutex // guards the following
	cfgs  map[int32]node.Config
	nodes map[int32]*node.Node // the running nodes
}

// NewCluster prepares (does not start) a cluster: voters are the
// controller quorum, combined controller+broker nodes if combined, else
// controller-only; brokerOnly are broker-only nodes. Every node knows the
// quorum and every gossip address as seeds. gRPC (client and internal)
// and the Kafka protocol listen on 127.0.0.1:0 (addresses travel by
// registration and gossip); Raft and gossip
// addresses come from FreeAddrs, since a static quorum and the seeds must
// be known before the nodes start; HTTP is disabled. Configure may change
// a node's config before it starts. tb's Cleanup stops every running node.
func NewCluster(tb testing.TB, voters []int32, combined bool, brokerOnly []int32) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, cfgs: map[int32]node.Config{}, nodes: map[int32]*node.Node{}}
	all := append(slices.Clone(voters), brokerOnly...)
	gossip := map[int32]string{}
	var seeds []string
	for _, id := range all {
		gossip[id] = FreeAddr(tb)
		seeds = append(seeds, gossip[id])
	}
	var quorum []controller.Voter
	raft := map[int32]string{}
	for _, id := range voters {
		raft[id] = FreeAddr(tb)
		quorum = append(quorum, controller.Voter{ID: id, Address: raft[id]})
	}
	for _, id := range all {
		cfg := node.DefaultConfig()
		cfg.NodeID = id
		cfg.DataDir = tb.TempDir()
		cfg.Listen, cfg.InternalListen, cfg.KafkaListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", ""
		cfg.GossipListen = gossip[id]
		cfg.Join = seeds
		cfg.ControllerVoters = quorum
		cfg.RaftListen = raft[id] // "" for a broker-only node
		cfg.ShutdownTimeout = 5 * time.Second
		// The last voters to stop have no quorum left to confirm a
		// controlled shutdown; do not make every test wait long for it.
		cfg.ControlledShutdownTimeout = time.Second
		isVoter := slices.Contains(voters, id)
		switch {
		case isVoter && combined:
			cfg.Roles = []string{node.RoleController, node.RoleBroker}
		case isVoter:
			cfg.Roles = []string{node.RoleController}
		default:
			cfg.Roles = []string{node.RoleBroker}
		}
		c.cfgs[id] = cfg
	}
	tb.Cleanup(c.StopAll)
	return c
}

// IDs is every node id of the cluster, running or not, in ascending order.
func (c *Cluster) IDs() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.cfgs))
}

// Config is node id's configuration (a copy).
func (c *Cluster) Config(id int32) node.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, ok := c.cfgs[id]
	if !ok {
		c.tb.Fatalf("nodetest: no node %d in the cluster", id)
	}
	return cfg
}

// Configure applies edit to node id's configuration; the node's next
// Start uses it.
func (c *Cluster) Configure(id int32, edit func(*node.Config)) {
	cfg := c.Config(id)
	edit(&cfg)
	c.mu.Lock()
	c.cfgs[id] = cfg
	c.mu.Unlock()
}

// ConfigureAll applies edit to every node's configuration.
func (c *Cluster) ConfigureAll(edit func(id int32, cfg *node.Config)) {
	for _, id := range c.IDs() {
		c.Configure(id, func(cfg *node.Config) { edit(id, cfg) })
	}
}

// Start starts node id (again, on its data dir, after a Stop or Abort)
// without waiting for it to be ready, failing the test at once if it does
// not start or is running already.
func (c *Cluster) Start(id int32) *node.Node {
	c.tb.Helper()
	cfg := c.Config(id)
	c.mu.Lock()
	_, running := c.nodes[id]
	c.mu.Unlock()
	if running {
		c.tb.Fatalf("nodetest: node %d is running already", id)
	}
	n, err := node.Start(cfg)
	if err != nil {
		c.tb.Fatalf("start node %d: %v", id, err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n
}

// StartAll starts every node in id order and waits until all are ready.
func (c *Cluster) StartAll() {
	c.tb.Helper()
	ids := c.IDs()
	for _, id := range ids {
		c.Start(id)
	}
	c.WaitReady(ids...)
}

// WaitReady waits until the running nodes ids are ready (node.WaitReady),
// within ReadyTimeout in all, failing the test otherwise.
func (c *Cluster) WaitReady(ids ...int32) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for _, id := range ids {
		n := c.Node(id)
		if n == nil {
			c.tb.Fatalf("nodetest: node %d is not running", id)
		}
		if err := n.WaitReady(ctx); err != nil {
			c.tb.Fatal(err)
		}
	}
}

// Restart starts node id again on its data dir and waits until it is ready.
func (c *Cluster) Restart(id int32) *node.Node {
	c.tb.Helper()
	n := c.Start(id)
	c.WaitReady(id)
	return n
}

// take removes node id from the running set and returns it.
func (c *Cluster) take(id int32) *node.Node {
	c.tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[id]
	if !ok {
		c.tb.Fatalf("nodetest: node %d is not running", id)
	}
	delete(c.nodes, id)
	return n
}

// Stop shuts node id down gracefully (controlled shutdown and all, bounded
// by StopTimeout) and returns Shutdown's error for the test to judge.
func (c *Cluster) Stop(id int32) error {
	c.tb.Helper()
	n := c.take(id)
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	return n.Shutdown(ctx)
}

// Abort stops node id as if its process were killed (node.Node.Abort).
func (c *Cluster) Abort(id int32) {
	c.tb.Helper()
	c.take(id).Abort()
}

// StopAll shuts every running node down gracefully, all at once (errors
// are not reported: the cluster is losing its quorum on the way).
func (c *Cluster) StopAll() {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = map[int32]*node.Node{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
			defer cancel()
			_ = n.Shutdown(ctx)
		}()
	}
	wg.Wait()
}

// Node is running node id, or nil when it is not running.
func (c *Cluster) Node(id int32) *node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// Nodes is the running nodes by id (a new map each call).
func (c *Cluster) Nodes() map[int32]*node.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.nodes)
}

// Leader is the id of the active controller among the running nodes,
// waiting up to 20 s for one.
func (c *Cluster) Leader() int32 {
	c.tb.Helper()
	var leader int32
	wait.Until(c.tb, 20*time.Second, "a controller leader", func() bool {
		for id, n := range c.Nodes() {
			if ctl := n.Controller(); ctl != nil && ctl.IsLeader() {
				leader = id
				return true
			}
		}
		return false
	})
	return leader
}

// Dial opens a client connection to running node id (its client
// listener: the public services), closed by the test's Cleanup.
func (c *Cluster) Dial(id int32) *grpc.ClientConn {
	c.tb.Helper()
	n := c.Node(id)
	if n == nil {
		c.tb.Fatalf("nodetest: node %d is not running", id)
	}
	return Dial(c.tb, n.Addr())
}

// DialInternal opens a connection to running node id's internal listener
// (the inter-node services, decision 41), for a test that acts as another
// node; closed by the test's Cleanup.
func (c *Cluster) DialInternal(id int32) *grpc.ClientConn {
	c.tb.Helper()
	n := c.Node(id)
	if n == nil {
		c.tb.Fatalf("nodetest: node %d is not running", id)
	}
	return Dial(c.tb, n.InternalAddr())
}

// WaitTopic waits (up to 20 s) until every running broker has applied
// metadata in which topic has exactly partitions partitions, each with a
// leader: after it, a Metadata request to any of them describes the whole
// topic and the leaders take produce requests. A topic created through one
// broker is known to that broker when CreateTopics answers, to the others
// only a moment later.
func (c *Cluster) WaitTopic(topic string, partitions int) {
	c.tb.Helper()
	wait.For(c.tb, 20*time.Second, fmt.Sprintf("every broker has %s with %d partitions and their leaders", topic, partitions), func() error {
		for id, n := range c.Nodes() {
			if n.Replicas() == nil {
				continue // controller-only
			}
			applied := n.Metadata().Offset()
			im := n.Metadata().Image()
			if im.Offset > applied {
				return fmt.Errorf("node %d has not applied metadata offset %d yet (at %d)", id, im.Offset, applied)
			}
			t := im.Topics[topic]
			if t == nil || len(t.Partitions) != partitions {
				return fmt.Errorf("node %d does not have all partitions of %s", id, topic)
			}
			for i, p := range t.Partitions {
				if p.Leader == controller.NoLeader {
					return fmt.Errorf("node %d: %s-%d has no leader", id, topic, i)
				}
			}
		}
		return nil
	})
}

// SyncMetadata waits (up to 20 s) until every running broker has applied
// the metadata the active controller had applied when SyncMetadata was
// called: after a change committed through the controller (a fencing, a
// registration), a broker's image shows it. Brokers follow the controller
// a moment behind, so reading one right after the change is a race.
func (c *Cluster) SyncMetadata() {
	c.tb.Helper()
	leader := c.Node(c.Leader())
	offset := leader.Controller().Image().Offset
	wait.For(c.tb, 20*time.Second, fmt.Sprintf("every broker at metadata offset %d", offset), func() error {
		for id, n := range c.Nodes() {
			if n.Replicas() == nil {
				continue // controller-only
			}
			if got := n.Metadata().Offset(); got < offset {
				return fmt.Errorf("node %d has applied metadata offset %d", id, got)
			}
		}
		return nil
	})
}
