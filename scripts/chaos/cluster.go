package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
)

// Node is one sluiced process of a Cluster. Its ports and data directory
// never change: a restarted node must come back on the same Raft and
// gossip addresses (they are in the quorum configuration and in other
// nodes' gossip state).
type Node struct {
	ID                                     int32
	DataDir                                string
	Listen, HTTP, RaftListen, GossipListen string
	LogPath                                string // every incarnation's output, appended

	mu     sync.Mutex // guards the following
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	paused bool
	starts int
}

// Running reports whether the node's process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Paused reports whether the node is stopped with SIGSTOP.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// ClusterConfig configures a Cluster.
type ClusterConfig struct {
	Sluiced string // path of the sluiced binary
	Nodes   int    // 3 or 5; every node is a controller voter and a broker
	Dir     string // run directory: data-N/ and node-N.log per node
	// Extra sluiced flags for every node.
	Extra []string
}

// Cluster is Nodes real sluiced processes on loopback, each pair of nodes
// connected through two fault-injecting Links (one per direction).
type Cluster struct {
	cfg   ClusterConfig
	Nodes []*Node
	links map[[2]int32]*Link // (from, to) → link
}

// NewCluster allocates ports, starts the link proxies and writes nothing
// else; Start starts the processes.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("chaos: a cluster needs at least one node")
	}
	c := &Cluster{cfg: cfg, links: map[[2]int32]*Link{}}
	// Node ports come from below the ephemeral range, where the links'
	// proxies (port 0) never land.
	addrs, err := loopback.FreeAddrs(4 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Nodes; i++ {
		a := addrs[4*i : 4*i+4]
		id := int32(i + 1)
		n := &Node{ID: id, DataDir: filepath.Join(cfg.Dir, fmt.Sprintf("data-%d", id)),
			Listen: a[0], HTTP: a[1], RaftListen: a[2], GossipListen: a[3],
			LogPath: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.log", id))}
		c.Nodes = append(c.Nodes, n)
	}
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if from == to {
				continue
			}
			l, err := newLink(from.ID, to.ID,
				map[string]string{"grpc": to.Listen, "raft": to.RaftListen, "gossip": to.GossipListen},
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

// Node returns the node with id (1-based).
func (c *Cluster) Node(id int32) *Node { return c.Nodes[id-1] }

// IDs returns every node id, ascending.
func (c *Cluster) IDs() []int32 {
	out := make([]int32, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.ID
	}
	return out
}

// Addrs returns every node's gRPC address (what clients dial; client
// traffic does not go through the links).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Listen
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
			to.Listen+"="+l.Port("grpc"),
			to.RaftListen+"="+l.Port("raft"),
			to.GossipListen+"="+l.Port("gossip"))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Start starts every node, then waits until all are ready.
func (c *Cluster) Start(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.start(n); err != nil {
			return err
		}
	}
	for _, n := range c.Nodes {
		if err := c.WaitReady(ctx, n.ID); err != nil {
			return err
		}
	}
	return nil
}

// start runs sluiced for n.
func (c *Cluster) start(n *Node) error {
	var voters, join []string
	for _, o := range c.Nodes {
		voters = append(voters, fmt.Sprintf("%d@%s", o.ID, o.RaftListen))
		if o.ID != n.ID {
			join = append(join, o.GossipListen)
		}
	}
	if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.starts++
	fmt.Fprintf(logf, "=== chaos: start %d of node %d at %s\n", n.starts, n.ID, time.Now().Format(time.RFC3339Nano))
	n.mu.Unlock()
	args := []string{
		"--node-id", strconv.Itoa(int(n.ID)), "--data-dir", n.DataDir,
		"--listen", n.Listen, "--http-listen", n.HTTP,
		"--raft-listen", n.RaftListen, "--gossip-listen", n.GossipListen,
		"--controller-voters", strings.Join(voters, ","), "--join", strings.Join(join, ","),
		"--fault-dial-map", c.dialMap(n.ID), "--fault-injection",
	}
	args = append(args, c.cfg.Extra...)
	cmd := exec.Command(c.cfg.Sluiced, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a signal to the harness does not reach it,
	// and Close kills it explicitly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("chaos: start node %d: %w", n.ID, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited, n.paused = cmd, exited, false
	n.mu.Unlock()
	return nil
}

// note appends a harness line to node id's log, so that a post-mortem sees
// the faults between the node's own lines.
func (c *Cluster) note(id int32, format string, args ...any) {
	f, err := os.OpenFile(c.Node(id).LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== chaos: %s %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
}

// WaitReady waits until node id's /readyz answers 200 (registered,
// unfenced, caught up with the metadata), or ctx ends, or the process
// exits.
func (c *Cluster) WaitReady(ctx context.Context, id int32) error {
	n := c.Node(id)
	hc := &http.Client{Timeout: time.Second}
	for {
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("chaos: node %d exited before becoming ready (log %s)", id, n.LogPath)
		default:
		}
		if resp, err := hc.Get("http://" + n.HTTP + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: node %d not ready: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill SIGKILLs node id (resuming it first if paused, so that it dies at
// once) and waits for it to exit.
func (c *Cluster) Kill(id int32) {
	n := c.Node(id)
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.paused = false
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Restart starts node id again on the same ports and data directory (it
// must not be running) and does not wait for it to be ready.
func (c *Cluster) Restart(id int32) error {
	if c.Node(id).Running() {
		return fmt.Errorf("chaos: node %d is still running", id)
	}
	return c.start(c.Node(id))
}

// Pause SIGSTOPs node id; Resume SIGCONTs it.
func (c *Cluster) Pause(id int32) error  { return c.signal(id, syscall.SIGSTOP, true) }
func (c *Cluster) Resume(id int32) error { return c.signal(id, syscall.SIGCONT, false) }

func (c *Cluster) signal(id int32, sig syscall.Signal, paused bool) error {
	n := c.Node(id)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("chaos: node %d was never started", id)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("chaos: %v node %d: %w", sig, id, err)
	}
	n.paused = paused
	return nil
}

// Stop stops every node gracefully (SIGTERM, controlled shutdown, files
// closed and checkpointed), SIGKILLing any still running after timeout.
func (c *Cluster) Stop(timeout time.Duration) {
	for _, n := range c.Nodes {
		n.mu.Lock()
		cmd, paused := n.cmd, n.paused
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		if paused {
			_ = c.Resume(n.ID)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(timeout)
	for _, n := range c.Nodes {
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		if exited == nil {
			continue
		}
		select {
		case <-exited:
		case <-deadline:
			c.Kill(n.ID)
		}
	}
}

// Close SIGKILLs every process still running and closes every link. Safe
// to call more than once.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.Running() {
			c.Kill(n.ID)
		}
	}
	for _, l := range c.links {
		l.Close()
	}
}
