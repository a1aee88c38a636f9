package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
	"github.com/sluice-io/sluice/proto/errs"
)

// Multi-node end-to-end tests: real sluiced processes on loopback, driven
// through the sluice CLI, killed with SIGKILL. They check metadata only
// (controller election, fencing, partition leadership, topic admin):
// replication between brokers is not implemented yet, so ISRs shrink after
// a failover and under_replicated_partitions > 0 is expected.

// pollInterval is the pause between two polls of the CLI. Each poll also
// spends its own time (process start, dial, RPC: tens of ms).
const pollInterval = 25 * time.Millisecond

// clusterNode is one sluiced of a testCluster. Its ports and data directory
// never change: the Raft address is persisted in the quorum configuration,
// so a restarted node must come back on the same one.
type clusterNode struct {
	id                                                    int32
	dataDir, listen, httpListen, raftListen, gossipListen string
	log                                                   *syncBuffer // every incarnation's output, restarts marked
	srv                                                   *server     // the current process; nil before the first start
}

// testCluster is n combined (controller and broker) nodes with ids 1..n,
// every node a voter. All processes are SIGKILLed in tb.Cleanup, and the
// tail of every node's log is printed if the test failed.
type testCluster struct {
	tb      testing.TB
	sluiced string // binary paths
	sluice  string
	voters  string // --controller-voters, identical on every node
	join    string // --join: every node's gossip address
	nodes   []*clusterNode
}

// startTestCluster starts n nodes and waits until every one is ready.
func startTestCluster(tb testing.TB, n int) *testCluster {
	tb.Helper()
	c := &testCluster{tb: tb}
	c.sluiced, c.sluice = buildClusterBinaries(tb)
	addrs := freeAddrs(tb, 4*n)
	var voters, join []string
	for i := range n {
		a := addrs[4*i : 4*i+4]
		node := &clusterNode{
			id: int32(i + 1), dataDir: tb.TempDir(),
			listen: a[0], httpListen: a[1], raftListen: a[2], gossipListen: a[3],
			log: &syncBuffer{},
		}
		c.nodes = append(c.nodes, node)
		voters = append(voters, fmt.Sprintf("%d@%s", node.id, node.raftListen))
		join = append(join, node.gossipListen)
	}
	c.voters, c.join = strings.Join(voters, ","), strings.Join(join, ",")
	// Registered first, so it runs after the processes are killed and
	// their logs are complete.
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Log(c.logs())
		}
	})
	// Every node first: none is ready before a quorum of voters runs.
	for _, node := range c.nodes {
		c.start(node)
	}
	for _, node := range c.nodes {
		c.waitReady(node)
	}
	return c
}

// node returns the node with id.
func (c *testCluster) node(id int32) *clusterNode { return c.nodes[id-1] }

// ids returns every node id, ascending.
func (c *testCluster) ids() []int32 {
	out := make([]int32, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.id
	}
	return out
}

// start runs sluiced for node on its fixed ports and data directory.
func (c *testCluster) start(node *clusterNode) {
	c.tb.Helper()
	fmt.Fprintf(node.log, "=== test: starting node %d at %s\n", node.id, time.Now().Format(time.RFC3339Nano))
	s := &server{log: node.log, exited: make(chan struct{})}
	s.cmd = exec.Command(c.sluiced,
		"--node-id", strconv.Itoa(int(node.id)), "--data-dir", node.dataDir,
		"--listen", node.listen, "--http-listen", node.httpListen,
		"--raft-listen", node.raftListen, "--gossip-listen", node.gossipListen,
		"--controller-voters", c.voters, "--join", c.join)
	s.cmd.Stdout, s.cmd.Stderr = node.log, node.log
	if err := s.cmd.Start(); err != nil {
		c.tb.Fatalf("start sluiced node %d: %v", node.id, err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	c.tb.Cleanup(s.kill)
	node.srv = s
}

// waitReady waits until node's /readyz answers 200 (registered, unfenced,
// caught up), failing the test if the process exits first or 30 s pass.
func (c *testCluster) waitReady(node *clusterNode) {
	c.tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-node.srv.exited:
			c.tb.Fatalf("node %d exited before becoming ready", node.id)
		default:
		}
		if resp, err := hc.Get("http://" + node.httpListen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("node %d not ready within 30s", node.id)
		}
		time.Sleep(pollInterval) // bounded by the deadline
	}
}

// kill SIGKILLs node id and waits for the process to exit.
func (c *testCluster) kill(id int32) {
	node := c.node(id)
	fmt.Fprintf(node.log, "=== test: SIGKILL node %d at %s\n", id, time.Now().Format(time.RFC3339Nano))
	node.srv.kill()
}

// restart starts node id again (same ports, same data directory) and waits
// until it is ready.
func (c *testCluster) restart(id int32) {
	c.tb.Helper()
	c.start(c.node(id))
	c.waitReady(c.node(id))
}

// logs returns the tail of every node's log, for failure messages.
func (c *testCluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n----- node %d log (tail) -----\n%s", n.id, logTail(n.log.String(), 60))
	}
	return b.String()
}

// cli runs the sluice CLI against the nodes ids, bounded by d.
func (c *testCluster) cli(d time.Duration, ids []int32, args ...string) (stdout, stderr string, err error) {
	addrs := make([]string, len(ids))
	for i, id := range ids {
		addrs[i] = c.node(id).listen
	}
	return runCLIWithin(d, c.sluice, append([]string{"--brokers=" + strings.Join(addrs, ","), "--output", "json"}, args...)...)
}

// status is "cluster status" as one of ids answers it.
func (c *testCluster) status(ids []int32) (clusterJSON, error) {
	var s clusterJSON
	out, stderr, err := c.cli(10*time.Second, ids, "cluster", "status")
	if err != nil {
		return s, fmt.Errorf("cluster status: %w: %s", err, stderr)
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return s, fmt.Errorf("cluster status: %w in %q", err, out)
	}
	return s, nil
}

// describe is "topic describe NAME" as one of ids answers it.
func (c *testCluster) describe(ids []int32, topic string) (topicJSON, error) {
	var d topicJSON
	out, stderr, err := c.cli(10*time.Second, ids, "topic", "describe", topic)
	if err != nil {
		return d, fmt.Errorf("topic describe %s: %w: %s", topic, err, stderr)
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return d, fmt.Errorf("topic describe %s: %w in %q", topic, err, out)
	}
	return d, nil
}

// createTopic creates a 6-partition, RF 3 topic through one of ids,
// retrying while the CLI fails with a retriable error, for at most d. A
// retry that finds TOPIC_ALREADY_EXISTS after an ambiguous failure counts
// as success: the earlier attempt may have been applied (outcome unknown).
// It returns when the topic was created.
func (c *testCluster) createTopic(d time.Duration, ids []int32, topic string) time.Time {
	c.tb.Helper()
	deadline := time.Now().Add(d)
	var last string
	for attempt := 0; ; attempt++ {
		_, stderr, err := c.cli(time.Until(deadline), ids, "topic", "create", topic, "--partitions", "6", "--replication-factor", "3")
		switch {
		case err == nil:
			return time.Now()
		case attempt > 0 && strings.Contains(stderr, "TOPIC_ALREADY_EXISTS"):
			c.tb.Logf("topic create %s: TOPIC_ALREADY_EXISTS after an earlier failure (%s): the earlier attempt was applied", topic, last)
			return time.Now()
		case !retriableCLIError(stderr) && !errors.Is(err, errNoAnswer):
			c.tb.Fatalf("topic create %s via %v: %v, non-retriable: %s", topic, ids, err, stderr)
		}
		last = strings.TrimSpace(stderr)
		if time.Now().After(deadline) {
			c.tb.Fatalf("topic create %s via %v: no success within %v; last error: %v: %s", topic, ids, d, err, stderr)
		}
		time.Sleep(pollInterval) // bounded by the deadline
	}
}

// eventually polls cond until it returns nil, failing the test with cond's
// last error after d. It returns the time cond first held.
func eventually(tb testing.TB, d time.Duration, what string, cond func() error) time.Time {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v: %v", what, d, err)
		}
		time.Sleep(pollInterval) // bounded by the deadline
	}
}

// without returns ids minus drop, keeping the order.
func without(ids []int32, drop ...int32) []int32 {
	return slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return slices.Contains(drop, id) })
}

// broker returns broker id in s.
func (s clusterJSON) broker(id int32) (brokerJSON, bool) {
	for _, b := range s.Brokers {
		if b.ID == id {
			return b, true
		}
	}
	return brokerJSON{}, false
}

// voter returns voter id's state in s.
func (s clusterJSON) voter(id int32) (voterJSON, bool) {
	for _, v := range s.Quorum {
		if v.ID == id {
			return v, true
		}
	}
	return voterJSON{}, false
}

// checkHealthy reports why s is not a cluster whose voters are ids, with a
// controller leader among them and every one of ids registered, unfenced.
func checkHealthy(s clusterJSON, ids []int32) error {
	if !slices.Equal(s.Voters, ids) {
		return fmt.Errorf("voters %v, want %v", s.Voters, ids)
	}
	if !slices.Contains(ids, s.ControllerLeader) {
		return fmt.Errorf("controller_leader %d, want one of %v", s.ControllerLeader, ids)
	}
	for _, id := range ids {
		b, ok := s.broker(id)
		if !ok || b.Fenced {
			return fmt.Errorf("broker %d registered %v fenced %v, want registered and unfenced (brokers %+v)", id, ok, b.Fenced, s.Brokers)
		}
	}
	return nil
}

// checkLedBy reports why topic d does not have 6 partitions of 3 replicas
// each, every one led by a node in live.
func checkLedBy(d topicJSON, live []int32) error {
	if len(d.Partitions) != 6 {
		return fmt.Errorf("topic %s has %d partitions, want 6", d.Name, len(d.Partitions))
	}
	for _, p := range d.Partitions {
		if len(p.Replicas) != 3 {
			return fmt.Errorf("topic %s partition %d replicas %v, want 3", d.Name, p.Partition, p.Replicas)
		}
		if !slices.Contains(live, p.Leader) {
			return fmt.Errorf("topic %s partition %d leader %d, want one of the live nodes %v", d.Name, p.Partition, p.Leader, live)
		}
	}
	return nil
}

// replicaSets maps partition to its replica list.
func replicaSets(d topicJSON) map[int32][]int32 {
	out := map[int32][]int32{}
	for _, p := range d.Partitions {
		out[p.Partition] = p.Replicas
	}
	return out
}

// TestClusterControllerLeaderKilled: when the controller leader of three
// voters is SIGKILLed, the two survivors elect a new leader, fence the dead
// broker and move every partition it led to a live replica, without
// touching replica assignments; the node restarted on its data directory
// registers again, unfenced, with a higher broker epoch.
func TestClusterControllerLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs three sluiced processes")
	}
	c := startTestCluster(t, 3)
	all := c.ids()
	const topic = "failover"
	c.createTopic(20*time.Second, all, topic)

	var st clusterJSON
	eventually(t, 10*time.Second, "healthy three-node cluster", func() (err error) {
		if st, err = c.status(all); err != nil {
			return err
		}
		return checkHealthy(st, all)
	})
	leader := st.ControllerLeader
	before, _ := st.broker(leader)
	desc, err := c.describe(all, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkLedBy(desc, all); err != nil {
		t.Fatal(err)
	}
	replicas := replicaSets(desc)
	t.Logf("controller leader %d (broker epoch %d, leads %d partitions)", leader, before.Epoch, before.LeaderPartitions)

	killed := time.Now()
	c.kill(leader)
	survivors := without(all, leader)

	electedAt := eventually(t, 20*time.Second, "a new controller leader seen by a survivor", func() error {
		s, err := c.status(survivors)
		if err != nil {
			return err
		}
		if s.ControllerLeader == 0 || s.ControllerLeader == leader {
			return fmt.Errorf("controller_leader %d (killed %d)", s.ControllerLeader, leader)
		}
		st = s
		return nil
	})
	t.Logf("kill → new controller leader %d seen: %v", st.ControllerLeader, electedAt.Sub(killed))

	movedAt := eventually(t, 20*time.Second, "every partition led by a survivor", func() (err error) {
		if desc, err = c.describe(survivors, topic); err != nil {
			return err
		}
		return checkLedBy(desc, survivors)
	})
	t.Logf("kill → all partitions led by survivors: %v", movedAt.Sub(killed))
	if got := replicaSets(desc); !equalReplicaSets(got, replicas) {
		t.Errorf("replica sets changed by the failover: %v, want %v", got, replicas)
	}

	eventually(t, 10*time.Second, "killed broker fenced", func() error {
		s, err := c.status(survivors)
		if err != nil {
			return err
		}
		if b, ok := s.broker(leader); !ok || !b.Fenced {
			return fmt.Errorf("broker %d: %+v (registered %v), want fenced", leader, b, ok)
		}
		return nil
	})

	c.restart(leader)
	eventually(t, 20*time.Second, "restarted broker unfenced with a new epoch", func() error {
		s, err := c.status(all)
		if err != nil {
			return err
		}
		b, ok := s.broker(leader)
		if !ok || b.Fenced || b.Epoch <= before.Epoch {
			return fmt.Errorf("broker %d: %+v (registered %v), want unfenced with epoch > %d", leader, b, ok, before.Epoch)
		}
		if v, ok := s.voter(leader); !ok || v.State == "unreachable" {
			return fmt.Errorf("voter %d: %+v, want back in the quorum", leader, v)
		}
		return nil
	})
}

// equalReplicaSets reports whether a and b assign the same replicas, in the
// same order, to the same partitions.
func equalReplicaSets(a, b map[int32][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for p, r := range a {
		if !slices.Equal(r, b[p]) {
			return false
		}
	}
	return true
}

// TestClusterFiveVotersLoseTwoThenThree: five voters tolerate two failures,
// the controller leader among them (a new leader is elected and topic
// creation works), but not three: then topic creation fails with an error
// naming the controller, and does not hang, while metadata reads keep being
// answered from the brokers' last image. One node back restores the
// quorum and topic creation.
func TestClusterFiveVotersLoseTwoThenThree(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs five sluiced processes")
	}
	c := startTestCluster(t, 5)
	all := c.ids()
	c.createTopic(20*time.Second, all, "a")

	var st clusterJSON
	eventually(t, 10*time.Second, "healthy five-node cluster", func() (err error) {
		if st, err = c.status(all); err != nil {
			return err
		}
		return checkHealthy(st, all)
	})
	leader := st.ControllerLeader
	other := without(all, leader)[0]
	c.kill(leader)
	c.kill(other)
	survivors := without(all, leader, other)
	t.Logf("killed controller leader %d and node %d; survivors %v", leader, other, survivors)

	// The create waits for (or retries until) the new controller leader.
	c.createTopic(20*time.Second, survivors, "b")
	eventually(t, 10*time.Second, "topic b described by every survivor", func() error {
		for _, id := range survivors {
			d, err := c.describe([]int32{id}, "b")
			if err != nil {
				return fmt.Errorf("node %d: %w", id, err)
			}
			if len(d.Partitions) != 6 {
				return fmt.Errorf("node %d: topic b has %d partitions, want 6", id, len(d.Partitions))
			}
		}
		return nil
	})
	// Both dead brokers fenced before the quorum goes: otherwise a
	// controller elected later could still count them live.
	eventually(t, 20*time.Second, "dead brokers fenced", func() (err error) {
		if st, err = c.status(survivors); err != nil {
			return err
		}
		for _, id := range []int32{leader, other} {
			if b, ok := st.broker(id); !ok || !b.Fenced {
				return fmt.Errorf("broker %d: %+v (registered %v), want fenced", id, b, ok)
			}
		}
		return nil
	})

	// A third failure: two voters of five are no quorum. Kill a follower,
	// so the sitting leader must notice it lost the quorum and step down.
	third := without(survivors, st.ControllerLeader)[0]
	c.kill(third)
	left := without(survivors, third)
	t.Logf("killed node %d too; left %v", third, left)
	eventually(t, 20*time.Second, "no controller leader", func() error {
		s, err := c.status(left)
		if err != nil {
			return err
		}
		if s.ControllerLeader != 0 {
			return fmt.Errorf("controller_leader %d with voters %v down", s.ControllerLeader, []int32{leader, other, third})
		}
		return nil
	})

	// --request-timeout bounds the call; the client sends timeout_ms below
	// it, so the broker's NOT_CONTROLLER answer arrives before the client
	// gives up. runCLIWithin bounds the process as a backstop.
	const bound = 8 * time.Second
	start := time.Now()
	_, stderr, err := c.cli(bound, left, "--request-timeout", "3s", "topic", "create", "c", "--partitions", "6", "--replication-factor", "3")
	took := time.Since(start)
	if err == nil {
		t.Errorf("topic create c without a quorum succeeded")
	} else if !strings.Contains(stderr, "NOT_CONTROLLER") && !strings.Contains(stderr, "controller") {
		t.Errorf("topic create c without a quorum: %v after %v, stderr %q; want a non-zero exit within %v with an error naming NOT_CONTROLLER or the controller",
			err, took.Round(time.Millisecond), strings.TrimSpace(stderr), bound)
	}

	// Reads are served from the brokers' last image, quorum or not.
	d, err := c.describe(left, "a")
	if err != nil {
		t.Fatalf("topic describe a without a quorum: %v", err)
	}
	if len(d.Partitions) != 6 {
		t.Fatalf("topic describe a without a quorum: %d partitions, want 6", len(d.Partitions))
	}
	if _, err := c.status(left); err != nil {
		t.Fatalf("cluster status without a quorum: %v", err)
	}

	// One voter back: three of five.
	c.restart(third)
	back := append(slices.Clone(left), third)
	slices.Sort(back)
	c.createTopic(20*time.Second, back, "c")
	eventually(t, 10*time.Second, "topic c placed on live brokers only", func() error {
		d, err := c.describe(back, "c")
		if err != nil {
			return err
		}
		for _, p := range d.Partitions {
			for _, r := range p.Replicas {
				if !slices.Contains(back, r) {
					return fmt.Errorf("topic c partition %d replicas %v include fenced broker %d", p.Partition, p.Replicas, r)
				}
			}
		}
		return checkLedBy(d, back)
	})
}

// errNoAnswer marks a CLI run stopped by runCLIWithin's bound.
var errNoAnswer = errors.New("no answer within the bound")

// runCLIWithin runs the sluice binary and returns stdout, stderr and the
// exit error. After d the process gets SIGTERM, which cancels the command's
// context (main uses signal.NotifyContext) so it still prints its error and
// exits; 2 s later it is killed. The error then wraps errNoAnswer.
func runCLIWithin(d time.Duration, bin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 2 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v): %v", errNoAnswer, d, err)
	}
	return out.String(), errb.String(), err
}

// retriableCLIError reports whether the CLI's stderr names a retriable
// Sluice error code or a gRPC transport failure.
func retriableCLIError(stderr string) bool {
	for _, e := range errs.Table() {
		if e.Retriable && strings.Contains(stderr, e.Code.String()) {
			return true
		}
	}
	return strings.Contains(stderr, "code = Unavailable") || strings.Contains(stderr, "code = DeadlineExceeded")
}

// buildClusterBinaries builds sluiced and sluice into a temporary
// directory. It is moduleRoot and buildBinary (e2e_test.go) for a
// testing.TB, so that BenchmarkFailover can use it too.
func buildClusterBinaries(tb testing.TB) (sluiced, sluice string) {
	tb.Helper()
	root, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(root) == root {
			tb.Fatal("go.mod not found above the working directory")
		}
		root = filepath.Dir(root)
	}
	dir := tb.TempDir()
	for _, name := range []string{"sluiced", "sluice"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			tb.Fatalf("go build ./cmd/%s: %v\n%s", name, err, b)
		}
	}
	return filepath.Join(dir, "sluiced"), filepath.Join(dir, "sluice")
}

// freeAddrs returns n distinct loopback addresses that were free a moment
// ago, for TCP and UDP (memberlist uses both on the gossip port).
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs, err := loopback.FreeAddrs(n)
	if err != nil {
		tb.Fatal(err)
	}
	return addrs
}

// logTail returns the last n lines of a node's log s, leaving out the
// "connection refused" lines Raft and the brokers repeat many times a
// second while a peer is down (counted instead), which would otherwise
// push everything else out of the tail.
func logTail(s string, n int) string {
	var keep []string
	dropped := 0
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.Contains(l, "connection refused") {
			dropped++
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return fmt.Sprintf("(%d \"connection refused\" lines left out)\n%s", dropped, strings.Join(keep, ""))
}
