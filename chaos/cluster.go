package chaos

import (
	"errors"
	"sort"
	"strings"

	"github.com/sluice-io/sluice/internal/proccluster"
)

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	Sluiced string // path of the sluiced binary
	Nodes   int    // 3 or 5; every node is a controller voter and a broker
	Dir     string // run directory: data-N/ and node-N.log per node
	// Extra sluiced flags for every node.
	Extra []string
	// NodeExtra, if set, returns extra sluiced flags for node id (its
	// certificate in a secured run).
	NodeExtra func(id int32) []string
	// OnExit is called when a node exits without a fault having killed
	// it (see proccluster.Config.OnExit).
	OnExit func(n *proccluster.Node, err error)
}

// Cluster is Nodes real sluiced processes on loopback (the project's
// multi-process harness, proccluster), each pair of nodes connected
// through two fault-injecting Links (one per direction): every node dials
// the others' internal gRPC, Raft and gossip addresses through the links,
// by its --fault-dial-map, and serves /debug/faults (--fault-injection).
// The client gRPC addresses are mapped through the links too, although
// nodes dial each other only at the internal ones (decision 41): a call
// that strayed to a client port would still meet the faults.
type Cluster struct {
	*proccluster.Cluster
	links map[[2]int32]*Link // (from, to) → link
}

// NewCluster allocates ports, starts the link proxies and writes nothing
// else; Start starts the processes.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("chaos: a cluster needs at least one node")
	}
	c := &Cluster{links: map[[2]int32]*Link{}}
	// Node ports come from below the ephemeral range (loopback), where
	// the links' proxies (port 0) never land.
	pc, err := proccluster.New(proccluster.Config{
		Sluiced: cfg.Sluiced, Dir: cfg.Dir, Nodes: cfg.Nodes, OnExit: cfg.OnExit,
		Args: append([]string{"--fault-injection"}, cfg.Extra...),
		NodeArgs: func(n *proccluster.Node) []string {
			args := []string{"--fault-dial-map", c.dialMap(n.ID)}
			if cfg.NodeExtra != nil {
				args = append(args, cfg.NodeExtra(n.ID)...)
			}
			return args
		},
	})
	if err != nil {
		return nil, err
	}
	c.Cluster = pc
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			l, err := newLink(from.ID, to.ID,
				map[string]string{"grpc": to.InternalListen, "client": to.Listen, "raft": to.RaftListen, "gossip": to.GossipListen},
				map[string]bool{"gossip": true})
			if err != nil {
				c.Close()
				return nil, err
			}
			c.links[[2]int32{from.ID, to.ID}] = l
		}
	}
	return c, nil
}

// KafkaAddrs returns every node's Kafka listener (proccluster starts each
// node with --kafka-listen on a free loopback port; the nodes advertise
// it in Metadata).
func (c *Cluster) KafkaAddrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.KafkaListen
	}
	return out
}

// Link returns the directed link from → to.
func (c *Cluster) Link(from, to int32) *Link { return c.links[[2]int32{from, to}] }

// dialMap is node id's --fault-dial-map: every other node's real addresses
// pointed at the links from id.
func (c *Cluster) dialMap(id int32) string {
	var pairs []string
	for _, to := range c.Nodes {
		if to.ID == id {
			continue
		}
		l := c.Link(id, to.ID)
		pairs = append(pairs,
			to.InternalListen+"="+l.Port("grpc"),
			to.Listen+"="+l.Port("client"),
			to.RaftListen+"="+l.Port("raft"),
			to.GossipListen+"="+l.Port("gossip"))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Close SIGKILLs every process still running and closes every link. Safe
// to call more than once.
func (c *Cluster) Close() {
	c.Cluster.Close()
	for _, l := range c.links {
		l.Close()
	}
}
