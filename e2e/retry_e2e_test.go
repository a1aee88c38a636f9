package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/proccluster"
)

// Issue 15, "one retry policy": every command tries each address of
// --brokers and retries retriable failures (refused connections, a broker
// starting up with no cluster metadata yet) with backoff until
// --request-timeout. A dead or restarting node listed first must not fail
// a command while healthy brokers are listed after it.

// cliWithin runs the CLI against ids (in that order) with
// --request-timeout rt and fails the test unless it exits 0 within
// rt + 3 s (process start-up and the CLI's own work on top of the retries).
func (c *testCluster) cliWithin(t *testing.T, rt time.Duration, ids []int32, args ...string) string {
	t.Helper()
	start := time.Now()
	out, stderr, err := c.cli(rt+5*time.Second, ids, append([]string{"--request-timeout", rt.String()}, args...)...)
	if err != nil {
		t.Fatalf("sluice %v via %v: %v: %s", args, ids, err, stderr)
	}
	if d := time.Since(start); d > rt+3*time.Second {
		t.Fatalf("sluice %v via %v took %v, request timeout %v", args, ids, d, rt)
	}
	return out
}

// checkStatus fails the test unless out is a cluster status with metadata
// and all of want among its brokers.
func checkStatus(t *testing.T, out string, want int) {
	t.Helper()
	var s clusterJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("cluster status: %v in %q", err, out)
	}
	if s.MetadataOffset == 0 || len(s.Brokers) != want {
		t.Fatalf("cluster status answered by node %d: metadata offset %d, %d brokers, want metadata and %d brokers:\n%s",
			s.NodeID, s.MetadataOffset, len(s.Brokers), want, out)
	}
}

func TestCLIRidesThroughDeadOrRestartingFirstBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	c := startTestCluster(t, 3)
	all := c.ids()
	const topic = "r"
	c.createTopic(30*time.Second, all, topic, "--partitions", "1", "--replication-factor", "3")
	before := numbered("before", 10)
	c.mustProduce(t, all, topic, "all", before)

	const rt = 5 * time.Second
	// The node that dies is partition 0's leader, listed first in --brokers.
	d, err := c.describe(all, topic)
	if err != nil {
		t.Fatal(err)
	}
	dead := d.Partitions[0].Leader
	if dead <= 0 {
		t.Fatalf("partition 0 has no leader: %+v", d.Partitions[0])
	}
	first := append([]int32{dead}, without(all, dead)...)

	// The leader dead: its address refuses connections.
	c.kill(dead)
	out := c.cliWithin(t, rt, first, "topic", "describe", topic)
	if !strings.Contains(out, `"partition":0`) {
		t.Fatalf("topic describe with node %d dead: %s", dead, out)
	}
	checkStatus(t, c.cliWithin(t, rt, first, "cluster", "status"), 3)

	// A consumer started at once, while its partition's leader is dead
	// (its metadata still names the dead node until the controller notices,
	// after the broker session timeout), waits for the new leader and reads
	// everything within its --timeout.
	out, stderr, err := c.cli(40*time.Second, first, "--request-timeout", rt.String(),
		"consume", topic, "--partition", "0", "--from-beginning", "--max-messages", "10", "--timeout", "30s")
	if err != nil {
		t.Fatalf("consume with the leader (node %d) dead: %v: %s", dead, err, stderr)
	}
	if got := consumedValues(t, out); strings.Join(got, " ") != strings.Join(before, " ") {
		t.Fatalf("consumed with the leader dead %q, want %q", got, before)
	}

	// Then produce and consume through the dead node first.
	c.eventually(30*time.Second, "partition 0 led by a live node", func() error {
		d, err := c.describe(without(all, dead), topic)
		if err != nil {
			return err
		}
		if l := d.Partitions[0].Leader; l == dead || l <= 0 {
			return fmt.Errorf("leader %d", l)
		}
		return nil
	})
	after := numbered("after", 10)
	if stderr, err := c.produceCLI(t, first, topic, "all", rt, 20*time.Second, after); err != nil {
		t.Fatalf("produce with node %d dead and first: %v: %s", dead, err, stderr)
	}
	out = c.cliWithin(t, rt, first, "consume", topic, "--partition", "0", "--from-beginning", "--max-messages", "20", "--timeout", "10s")
	if got, want := consumedValues(t, out), append(before, after...); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("consumed %q, want %q", got, want)
	}

	// The dead node restarting: as soon as the process is started, before
	// it has cluster metadata, commands listing it first still answer from
	// the others (it answers LEADER_NOT_AVAILABLE or an empty cluster
	// meanwhile).
	if err := c.Restart(dead); err != nil {
		t.Fatal(err)
	}
	out = c.cliWithin(t, rt, first, "topic", "describe", topic)
	if !strings.Contains(out, `"partition":0`) {
		t.Fatalf("topic describe with node %d restarting: %s", dead, out)
	}
	checkStatus(t, c.cliWithin(t, rt, first, "cluster", "status"), 3)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.WaitReady(ctx, dead); err != nil {
		t.Fatal(err)
	}
}

// consumedValues returns the values of consume's JSON lines.
func consumedValues(t *testing.T, out string) []string {
	t.Helper()
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct{ Value string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("consume: %v in %q", err, line)
		}
		got = append(got, r.Value)
	}
	return got
}

// With nothing listening, a command fails within its request timeout
// with one line that says so, not gRPC's text; produce too, bounded by
// --request-timeout rather than a 60 s block.
func TestCLINoBrokerReachable(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test runs the sluice CLI")
	}
	bin := binaries(t).Sluice
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	want := "no broker reachable at " + addr + " (is sluiced running?)"
	for _, args := range [][]string{
		{"topic", "describe", "t"},
		{"cluster", "status"},
		{"consume", "t", "--partition", "0", "--from-beginning", "--timeout", "10s"},
		{"produce", "t"},
	} {
		start := time.Now()
		cargs := append([]string{"--brokers=" + addr, "--request-timeout", "2s"}, args...)
		var stderr string
		if args[0] == "produce" {
			_, stderr, err = runCLI(t, bin, "x\n", cargs...)
		} else {
			_, stderr, err = runCLIWithin(10*time.Second, bin, cargs...)
		}
		d := time.Since(start)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		switch {
		case err == nil:
			t.Errorf("sluice %v with nothing listening exited 0", args)
		case d > 5*time.Second:
			t.Errorf("sluice %v with nothing listening took %v, request timeout 2s", args, d)
		case len(lines) != 1 || !strings.Contains(stderr, want) || strings.Contains(stderr, "rpc error"):
			t.Errorf("sluice %v with nothing listening said %q, want one line with %q", args, stderr, want)
		}
	}
}

// The README's quick start as a script runs it: sluiced started and, at
// once, a topic created, written and read. Until the node's broker is
// registered and unfenced the controller has 0 live brokers and refuses
// the replication factor; the client retries that (and the refused
// connections before it) within its request timeout instead of failing.
func TestCLIFreshNodeUsableAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	b := binaries(t)
	pc, err := proccluster.New(proccluster.Config{Sluiced: b.Sluiced, Dir: t.TempDir(), Nodes: 1,
		OnExit: func(_ *proccluster.Node, err error) { t.Errorf("%v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := &testCluster{Cluster: pc, tb: t, sluice: b.Sluice}
	if err := pc.Restart(1); err != nil { // started, not waited for
		t.Fatal(err)
	}
	const rt = 15 * time.Second
	one := []int32{1}
	c.cliWithin(t, rt, one, "topic", "create", "q", "--partitions", "1", "--replication-factor", "1")
	values := numbered("v", 5)
	if stderr, err := c.produceCLI(t, one, "q", "all", rt, 20*time.Second, values); err != nil {
		t.Fatalf("produce: %v: %s", err, stderr)
	}
	out := c.cliWithin(t, rt, one, "consume", "q", "--from-beginning", "--max-messages", "5", "--timeout", "10s")
	if got := consumedValues(t, out); strings.Join(got, " ") != strings.Join(values, " ") {
		t.Fatalf("consumed %q, want %q", got, values)
	}
}
