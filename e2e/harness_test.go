package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
)

// The e2e suites' side of the multi-process harness: the binaries built
// once, a testCluster that ties a proccluster.Cluster to a test (cleanup,
// log tails on failure, a node's unexpected exit failing the test), and
// runners of the sluice CLI.

// bins holds the binaries, built on first use by one test and shared by
// all; TestMain removes them.
var bins = proccluster.NewBuildCache("sluice-e2e-bin-")

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	os.Exit(code)
}

// binaries returns sluiced and sluice built from this module, building
// them on the first call of the test binary.
func binaries(tb testing.TB) proccluster.Binaries { return bins.Get(tb) }

// readyTimeout bounds every wait for nodes to become ready.
const readyTimeout = 30 * time.Second

// testCluster is n nodes (ids 1..n) of real sluiced processes, every node
// a controller voter and a broker. All processes are SIGKILLed in
// tb.Cleanup, and the tail of every node's log is logged if the test
// failed. A node that exits without the test having stopped it fails the
// test (tb.Errorf at once, and Fatalf in the next c.eventually poll).
type testCluster struct {
	*proccluster.Cluster
	tb     testing.TB
	sluice string // the CLI binary
}

// startTestCluster starts n nodes with extra sluiced flags and waits
// until every one is ready.
func startTestCluster(tb testing.TB, n int, args ...string) *testCluster {
	tb.Helper()
	b := binaries(tb)
	pc, err := proccluster.New(proccluster.Config{Sluiced: b.Sluiced, Dir: tb.TempDir(), Nodes: n, Args: args,
		OnExit: func(_ *proccluster.Node, err error) { tb.Errorf("%v", err) }})
	if err != nil {
		tb.Fatal(err)
	}
	c := &testCluster{Cluster: pc, tb: tb, sluice: b.Sluice}
	tb.Cleanup(func() {
		pc.Close()
		if tb.Failed() {
			tb.Log(pc.Logs(60))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := pc.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	return c
}

// node returns the node with id.
func (c *testCluster) node(id int32) *proccluster.Node { return c.Node(id) }

// ids returns every node id, ascending.
func (c *testCluster) ids() []int32 { return c.IDs() }

// addrs returns the gRPC addresses of nodes ids.
func (c *testCluster) addrs(ids []int32) []string { return c.Addrs(ids...) }

// kill SIGKILLs node id and waits for the process to exit.
func (c *testCluster) kill(id int32) { c.Kill(id) }

// restart starts node id again (same ports, same data directory) and waits
// until it is ready, failing the test if it exits first or is not ready
// within readyTimeout.
func (c *testCluster) restart(id int32) {
	c.tb.Helper()
	if err := c.Restart(id); err != nil {
		c.tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.WaitReady(ctx, id); err != nil {
		c.tb.Fatal(err)
	}
}

// pause SIGSTOPs node id: the process keeps its sockets open (connections
// are accepted by the kernel, nothing answers), as a hung machine would.
// The cleanup's SIGKILL ends it paused or not.
func (c *testCluster) pause(t *testing.T, id int32) {
	t.Helper()
	if err := c.Pause(id); err != nil {
		t.Fatal(err)
	}
}

// resume SIGCONTs node id.
func (c *testCluster) resume(t *testing.T, id int32) {
	t.Helper()
	if err := c.Resume(id); err != nil {
		t.Fatal(err)
	}
}

// terminate SIGTERMs node id (controlled shutdown: its leaderships and ISR
// memberships move away first, then it flushes and closes its logs) and
// waits for the process to exit, failing the test after 30 s and marking
// it failed unless the exit status is 0.
func (c *testCluster) terminate(t *testing.T, id int32) {
	t.Helper()
	code, err := c.Terminate(id, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("node %d exited with status %d after SIGTERM, want 0", id, code)
	}
}

// eventually is wait.For that also fails the test at once, naming the
// node and its exit status, when a node has exited unexpectedly: then the
// condition may never hold, and waiting out the deadline would hide why.
func (c *testCluster) eventually(d time.Duration, what string, cond func() error) time.Time {
	c.tb.Helper()
	return wait.For(c.tb, d, what, func() error {
		if err := c.Err(); err != nil {
			c.tb.Fatalf("%s: %v", what, err)
		}
		return cond()
	})
}

// cli runs the sluice CLI against the nodes ids, bounded by d.
func (c *testCluster) cli(d time.Duration, ids []int32, args ...string) (stdout, stderr string, err error) {
	return runCLIWithin(d, c.sluice, append([]string{"--brokers=" + strings.Join(c.addrs(ids), ","), "--output", "json"}, args...)...)
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
	cmd.Env = proccluster.Env()
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

// runCLI runs the sluice binary with stdin, bounded by 60 s (failing the
// test after that), and returns stdout, stderr and the exit error.
func runCLI(t *testing.T, bin string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = proccluster.Env()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice %v did not finish within 60s; stderr:\n%s", args, errb.String())
	}
	return out.String(), errb.String(), err
}

// retriableCLIError reports whether the CLI's stderr names a retriable
// Sluice error code, a gRPC transport failure or the client's "no broker
// reachable" (every listed address refused within the request timeout).
func retriableCLIError(stderr string) bool {
	for _, e := range errs.Table() {
		if e.Retriable && strings.Contains(stderr, e.Code.String()) {
			return true
		}
	}
	return strings.Contains(stderr, "code = Unavailable") || strings.Contains(stderr, "code = DeadlineExceeded") ||
		strings.Contains(stderr, "no broker reachable")
}

// createTopic creates topic through one of ids with the CLI's topic-create
// flags, retrying while the CLI fails with a retriable error (or gets no
// answer), for at most d; a non-retriable failure fails the test at once.
// A retry that finds TOPIC_ALREADY_EXISTS after an ambiguous failure
// counts as success: the earlier attempt may have been applied (outcome
// unknown). It returns when the topic was created.
func (c *testCluster) createTopic(d time.Duration, ids []int32, topic string, flags ...string) time.Time {
	c.tb.Helper()
	deadline := time.Now().Add(d)
	attempt := 0
	var last string
	return c.eventually(d, fmt.Sprintf("topic create %s via %v", topic, ids), func() error {
		attempt++
		_, stderr, err := c.cli(max(time.Until(deadline), time.Second), ids, append([]string{"topic", "create", topic}, flags...)...)
		switch {
		case err == nil:
			return nil
		case attempt > 1 && strings.Contains(stderr, "TOPIC_ALREADY_EXISTS"):
			c.tb.Logf("topic create %s: TOPIC_ALREADY_EXISTS after an earlier failure (%s): the earlier attempt was applied", topic, last)
			return nil
		case !retriableCLIError(stderr) && !errors.Is(err, errNoAnswer):
			c.tb.Fatalf("topic create %s via %v: %v, non-retriable: %s", topic, ids, err, stderr)
		}
		last = strings.TrimSpace(stderr)
		return fmt.Errorf("%v: %s", err, last)
	})
}
