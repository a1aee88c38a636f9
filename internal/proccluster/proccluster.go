// Package proccluster is the project's one multi-process harness (STYLE
// §15): it runs a Sluice cluster of real sluiced processes on loopback for
// the end-to-end suites (e2e/) and the chaos harness (chaos/).
//
// A Cluster gives every node a free loopback port for every listener
// (client and internal gRPC, HTTP, Raft, gossip, the Kafka protocol; never
// the defaults 9400-9404 and 9092, which a developer's `make run` node may
// hold), its own data directory and log
// file under the run directory, and an environment without SLUICE_*
// variables. It starts, waits for readiness (/readyz, which mirrors the
// gRPC health status), SIGKILLs, SIGTERMs, pauses (SIGSTOP/SIGCONT) and
// restarts nodes on the same ports and data directory, and stops every
// process it started in Close. A node that exits without being asked to is
// noticed at once: WaitReady returns an error naming it, its exit status
// and the tail of its log, and Err reports it afterwards.
//
// Typical use:
//
//	bins, _ := proccluster.Build(ctx, "", binDir)
//	c, _ := proccluster.New(proccluster.Config{Sluiced: bins.Sluiced, Dir: runDir, Nodes: 3})
//	defer c.Close()
//	if err := c.Start(ctx); err != nil { ... }
//	c.Kill(2)
//	c.Restart(2)
//	c.WaitReady(ctx, 2)
package proccluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/internal/goroutine"
)

// The roles a node can have (sluiced --roles).
const (
	RoleController = "controller"
	RoleBroker     = "broker"
)

// Config configures a Cluster.
type Config struct {
	// Sluiced is the sluiced binary (see Build).
	Sluiced string
	// Dir is the run directory; node id keeps its data in Dir/data-ID and
	// its output in Dir/node-ID.log. It is created if missing.
	Dir string
	// Nodes is the number of nodes, with ids 1..Nodes.
	Nodes int
	// Roles returns the roles of node id; nil makes every node a
	// controller voter and a broker. The controller voters are the nodes
	// with RoleController.
	Roles func(id int32) []string
	// Args are extra sluiced flags for every node (after the harness's
	// own, so they win over them).
	Args []string
	// NodeArgs, if set, returns extra flags for node n, asked again at
	// every start (the chaos harness's --fault-dial-map).
	NodeArgs func(n *Node) []string
	// Env is added to every node's environment ("KEY=VALUE"), which has
	// no other SLUICE_* variable (see Env).
	Env []string
	// OnExit, if set, is called when a node's process exits without the
	// harness having been asked to stop it (Kill, Terminate, Stop,
	// Close), with the node and an error naming its exit status and log
	// tail. It runs on the harness's own goroutine and must not block;
	// it is never called after Close returns.
	OnExit func(n *Node, err error)
}

// Cluster is Config.Nodes sluiced processes. Its methods may be called
// from any goroutine; node ids are 1-based.
type Cluster struct {
	cfg    Config
	Nodes  []*Node // by id - 1; fixed by New
	voters string  // --controller-voters, the same on every node
	procs  goroutine.Group

	mu       sync.Mutex    // guards the following
	exitCh   chan struct{} // closed (and replaced) whenever a process exits
	firstErr error         // the first unexpected exit
	closed   bool
}

// New allocates every node's ports (loopback.FreeAddrs: free for TCP and
// UDP, claimed against other processes) and directories' names; it starts
// nothing. Callers may read the nodes' addresses before Start (to set up
// proxies in front of them, for instance).
func New(cfg Config) (*Cluster, error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("proccluster: a cluster needs at least one node")
	}
	if cfg.Sluiced == "" {
		return nil, errors.New("proccluster: no sluiced binary given")
	}
	if cfg.Roles == nil {
		cfg.Roles = func(int32) []string { return []string{RoleController, RoleBroker} }
	}
	const perNode = 6
	addrs, err := loopback.FreeAddrs(perNode * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, exitCh: make(chan struct{})}
	var voters []string
	for i := range cfg.Nodes {
		id := int32(i + 1)
		a := addrs[perNode*i : perNode*i+perNode]
		n := &Node{ID: id, Roles: cfg.Roles(id),
			DataDir: filepath.Join(cfg.Dir, fmt.Sprintf("data-%d", id)),
			LogPath: filepath.Join(cfg.Dir, fmt.Sprintf("node-%d.log", id)),
			Listen:  a[0], HTTP: a[1], RaftListen: a[2], GossipListen: a[3], InternalListen: a[4], KafkaListen: a[5]}
		if slices.Contains(n.Roles, RoleController) {
			voters = append(voters, fmt.Sprintf("%d@%s", id, n.RaftListen))
		}
		c.Nodes = append(c.Nodes, n)
	}
	c.voters = strings.Join(voters, ",")
	return c, nil
}

// Node returns the node with id.
func (c *Cluster) Node(id int32) *Node { return c.Nodes[id-1] }

// IDs returns every node id, ascending.
func (c *Cluster) IDs() []int32 {
	out := make([]int32, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.ID
	}
	return out
}

// Addrs returns the client gRPC addresses of nodes ids, or of every node
// when ids is empty.
func (c *Cluster) Addrs(ids ...int32) []string {
	if len(ids) == 0 {
		ids = c.IDs()
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = c.Node(id).Listen
	}
	return out
}

// Start starts every node (all first: none is ready before a quorum of
// voters runs), then waits until all are ready (see WaitReady).
func (c *Cluster) Start(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.start(n); err != nil {
			return err
		}
	}
	return c.WaitReady(ctx, c.IDs()...)
}

// Restart starts node id again on the same ports and data directory; it
// must not be running. It does not wait for readiness.
func (c *Cluster) Restart(id int32) error {
	n := c.Node(id)
	if n.Running() {
		return fmt.Errorf("proccluster: node %d is still running", id)
	}
	return c.start(n)
}

// args is node n's command line.
func (c *Cluster) args(n *Node) []string {
	var join []string
	for _, o := range c.Nodes {
		if o != n {
			join = append(join, o.GossipListen)
		}
	}
	args := []string{
		"--node-id", strconv.Itoa(int(n.ID)), "--data-dir", n.DataDir,
		"--roles", strings.Join(n.Roles, ","),
		"--listen", n.Listen, "--internal-listen", n.InternalListen, "--kafka-listen", n.KafkaListen, "--http-listen", n.HTTP,
		"--raft-listen", n.RaftListen, "--gossip-listen", n.GossipListen,
		"--controller-voters", c.voters,
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	args = append(args, c.cfg.Args...)
	if c.cfg.NodeArgs != nil {
		args = append(args, c.cfg.NodeArgs(n)...)
	}
	return args
}

// start runs sluiced for n, its output appended to n's log file.
func (c *Cluster) start(n *Node) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errors.New("proccluster: cluster closed")
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
	fmt.Fprintf(logf, "=== proccluster: %s start %d of node %d\n", stamp(), n.starts, n.ID)
	n.mu.Unlock()
	cmd := exec.Command(c.cfg.Sluiced, c.args(n)...)
	cmd.Env = Env(c.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("proccluster: start node %d: %w", n.ID, err)
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.exited, n.paused, n.stopping, n.status = cmd, exited, false, false, ""
	n.mu.Unlock()
	c.procs.Go(func() {
		werr := cmd.Wait()
		logf.Close()
		status := "exit status 0"
		if werr != nil {
			status = werr.Error() // "exit status 1", "signal: killed"
		}
		n.mu.Lock()
		n.status, n.paused = status, false
		expected := n.stopping
		n.mu.Unlock()
		var unexpected error
		if !expected {
			unexpected = fmt.Errorf("proccluster: node %d exited unexpectedly (%s); %s", n.ID, status, n.tailForError())
		}
		c.mu.Lock()
		if unexpected != nil && c.firstErr == nil {
			c.firstErr = unexpected
		}
		close(c.exitCh)
		c.exitCh = make(chan struct{})
		c.mu.Unlock()
		close(exited)
		if unexpected != nil && c.cfg.OnExit != nil {
			c.cfg.OnExit(n, unexpected)
		}
	})
	return nil
}

// Err returns the first unexpected exit of a node (one the harness was
// not asked for), or nil.
func (c *Cluster) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstErr
}

// exits returns a channel closed at the next process exit.
func (c *Cluster) exits() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exitCh
}

// readyPoll is the pause between two readiness checks.
const readyPoll = 25 * time.Millisecond

// WaitReady waits until every node of ids answers 200 on /readyz (a
// broker registered, unfenced and caught up with the metadata; a
// controller-only node once a leader is known). It returns at once with an
// error naming the node, its exit status and its log tail when one of them
// is not running or exits meanwhile, and with an error naming the nodes
// not ready (and their log tails) when ctx ends first.
func (c *Cluster) WaitReady(ctx context.Context, ids ...int32) error {
	hc := &http.Client{Timeout: time.Second}
	pending := slices.Clone(ids)
	for {
		exits := c.exits()
		for _, id := range pending {
			if status, ok := c.Node(id).exitStatus(); ok {
				n := c.Node(id)
				return fmt.Errorf("proccluster: node %d exited (%s) before becoming ready; %s", id, status, n.tailForError())
			}
		}
		pending = slices.DeleteFunc(pending, func(id int32) bool { return ready(ctx, hc, c.Node(id).HTTP) })
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			for _, id := range pending {
				fmt.Fprintf(&b, "\nnode %d: %s", id, c.Node(id).tailForError())
			}
			return fmt.Errorf("proccluster: nodes %v not ready: %w%s", pending, ctx.Err(), b.String())
		case <-exits:
		case <-time.After(readyPoll):
		}
	}
}

// ready reports whether /readyz at httpAddr answers 200.
func ready(ctx context.Context, hc *http.Client, httpAddr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Kill SIGKILLs node id (a paused node too: SIGKILL needs no SIGCONT) and
// waits for it to exit. A node not running is left alone.
func (c *Cluster) Kill(id int32) {
	n := c.Node(id)
	exited, ok := n.markStopping()
	if !ok {
		return
	}
	c.Note(id, "SIGKILL node %d", id)
	_ = n.signal(syscall.SIGKILL)
	<-exited
}

// Terminate SIGTERMs node id (resuming it first if paused): a controlled
// shutdown, leaderships handed off, logs flushed and closed. It waits up to
// timeout for the process to exit and returns its exit code; after
// timeout it returns an error and leaves the process running (Kill or
// Close ends it).
func (c *Cluster) Terminate(id int32, timeout time.Duration) (exitCode int, err error) {
	n := c.Node(id)
	exited, ok := n.markStopping()
	if !ok {
		return 0, fmt.Errorf("proccluster: node %d is not running", id)
	}
	c.Note(id, "SIGTERM node %d", id)
	_ = n.signal(sigCont)
	if err := n.signal(syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("proccluster: SIGTERM node %d: %w", id, err)
	}
	select {
	case <-exited:
	case <-time.After(timeout):
		return 0, fmt.Errorf("proccluster: node %d still running %v after SIGTERM; %s", id, timeout, n.tailForError())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd.ProcessState.ExitCode(), nil
}

// Pause SIGSTOPs node id: it keeps its sockets open (the kernel accepts
// connections, nothing answers), as a hung machine would.
func (c *Cluster) Pause(id int32) error {
	c.Note(id, "SIGSTOP node %d", id)
	return c.Node(id).setPaused(true)
}

// Resume SIGCONTs node id.
func (c *Cluster) Resume(id int32) error {
	c.Note(id, "SIGCONT node %d", id)
	return c.Node(id).setPaused(false)
}

// Stop stops every running node gracefully (SIGTERM, paused ones resumed
// first) and SIGKILLs those still running after timeout.
func (c *Cluster) Stop(timeout time.Duration) {
	var waits []int32
	for _, n := range c.Nodes {
		if _, ok := n.markStopping(); !ok {
			continue
		}
		c.Note(n.ID, "SIGTERM node %d (stopping the cluster)", n.ID)
		_ = n.signal(sigCont)
		_ = n.signal(syscall.SIGTERM)
		waits = append(waits, n.ID)
	}
	deadline := time.After(timeout)
	for _, id := range waits {
		n := c.Node(id)
		n.mu.Lock()
		exited := n.exited
		n.mu.Unlock()
		select {
		case <-exited:
		case <-deadline:
			c.Kill(id)
		}
	}
}

// Close SIGKILLs every process still running and waits until the harness
// has reaped them all. Nothing can be started afterwards. Safe to call more
// than once.
func (c *Cluster) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	for _, n := range c.Nodes {
		c.Kill(n.ID)
	}
	c.procs.Wait()
}

// Note appends a harness line to node id's log, so that a post-mortem
// sees what was done to the node between its own lines.
func (c *Cluster) Note(id int32, format string, args ...any) {
	f, err := os.OpenFile(c.Node(id).LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== proccluster: %s %s\n", stamp(), fmt.Sprintf(format, args...))
}

// Logs returns the last lines of every node's log (see Node.LogTail), for
// a failure message.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "\n----- node %d log %s (tail) -----\n%s", n.ID, n.LogPath, n.LogTail(lines))
	}
	return b.String()
}

func stamp() string { return time.Now().Format(time.RFC3339Nano) }
