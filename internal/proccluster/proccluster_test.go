package proccluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests run the test binary itself as a fake sluiced (fakeEnv set):
// it parses the flags the harness gives, prints them, and then either
// exits at once with status 3 (mode "exit") or serves /readyz until
// SIGTERM (mode "serve"). No Go build, no real node: the harness alone
// is under test.
const fakeEnv = "PROCCLUSTER_TEST_FAKE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeEnv); mode != "" {
		os.Exit(fakeSluiced(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeSluiced(mode string, args []string) int {
	fmt.Printf("fake sluiced args: %s\n", strings.Join(args, " "))
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLUICE_") {
			fmt.Printf("fake sluiced env: %s\n", kv)
		}
	}
	if mode == "exit" {
		fmt.Println("fake sluiced: bad configuration, exiting")
		return 3
	}
	httpAddr := args[slices.Index(args, "--http-listen")+1]
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready\n")) })
	go http.ListenAndServe(httpAddr, mux)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	<-sigs
	fmt.Println("fake sluiced: SIGTERM, exiting")
	return 0
}

func newFake(t *testing.T, mode string, nodes int) *Cluster {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Sluiced: self, Dir: t.TempDir(), Nodes: nodes, Env: []string{fakeEnv + "=" + mode, "SLUICE_ON_PURPOSE=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A node that exits during start-up fails Start at once, not at the
// readiness deadline, with an error naming the node, its exit status and
// its output.
func TestStartFailsFastWhenANodeExits(t *testing.T) {
	c := newFake(t, "exit", 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	err := c.Start(ctx)
	took := time.Since(began)
	if err == nil {
		t.Fatal("Start succeeded with a node that exits at once")
	}
	for _, want := range []string{"node 1", "exit status 3", "bad configuration, exiting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start error %q does not name %q", err, want)
		}
	}
	if took > 10*time.Second {
		t.Errorf("Start returned after %v, want at once (the deadline was a minute)", took)
	}
	if c.Err() == nil {
		t.Error("Err is nil after a node exited unexpectedly")
	}
}

// Every listener gets its own free port, never a default one, on every
// node; the voters are every node; no SLUICE_* variable of the harness's
// environment reaches a node, one set on purpose does.
func TestNodesGetOwnPortsAndCleanEnvironment(t *testing.T) {
	t.Setenv("SLUICE_NODE_ID", "7")
	t.Setenv("SLUICE_LISTEN", "127.0.0.1:9400")
	c := newFake(t, "serve", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		for _, a := range []string{n.Listen, n.InternalListen, n.KafkaListen, n.HTTP, n.RaftListen, n.GossipListen} {
			if seen[a] {
				t.Errorf("address %s handed out twice", a)
			}
			seen[a] = true
			for _, p := range []int{9400, 9401, 9402, 9403, 9404, 9092} {
				if strings.HasSuffix(a, fmt.Sprintf(":%d", p)) {
					t.Errorf("node %d listens on the default port %s", n.ID, a)
				}
			}
		}
	}
	for _, n := range c.Nodes {
		log := n.LogTail(100)
		for _, want := range []string{
			fmt.Sprintf("--node-id %d ", n.ID), "--listen " + n.Listen, "--internal-listen " + n.InternalListen, "--kafka-listen " + n.KafkaListen, "--http-listen " + n.HTTP,
			"--raft-listen " + n.RaftListen, "--gossip-listen " + n.GossipListen,
			"--controller-voters 1@" + c.Node(1).RaftListen + ",2@" + c.Node(2).RaftListen + ",3@" + c.Node(3).RaftListen,
			"fake sluiced env: SLUICE_ON_PURPOSE=1",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("node %d: %q not in its log:\n%s", n.ID, want, log)
			}
		}
		if strings.Contains(log, "SLUICE_NODE_ID") || strings.Contains(log, "SLUICE_LISTEN") {
			t.Errorf("node %d got the harness's SLUICE_* variables:\n%s", n.ID, log)
		}
	}
}

// Kill, Pause/Resume, Terminate and Restart act on the right process, and
// none of them counts as an unexpected exit.
func TestSignalsAndRestart(t *testing.T) {
	c := newFake(t, "serve", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(1); err != nil || !c.Node(1).Paused() {
		t.Fatalf("Pause: %v, paused %v", err, c.Node(1).Paused())
	}
	if err := c.Resume(1); err != nil || c.Node(1).Paused() {
		t.Fatalf("Resume: %v, paused %v", err, c.Node(1).Paused())
	}
	c.Kill(1)
	if c.Node(1).Running() {
		t.Fatal("node 1 running after Kill")
	}
	if err := c.WaitReady(ctx, 1); err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("WaitReady of a killed node: %v, want an error naming signal: killed", err)
	}
	if err := c.Restart(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(1); err == nil {
		t.Error("Restart of a running node succeeded")
	}
	if err := c.WaitReady(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	if code, err := c.Terminate(2, 10*time.Second); err != nil || code != 0 {
		t.Errorf("Terminate: exit code %d, %v; want 0", code, err)
	}
	if !strings.Contains(c.Node(2).LogTail(10), "SIGTERM, exiting") {
		t.Errorf("node 2's log lacks its SIGTERM line:\n%s", c.Node(2).LogTail(10))
	}
	if strings.Count(c.Node(1).LogTail(100), "fake sluiced args:") != 2 {
		t.Errorf("node 1's log does not hold two starts:\n%s", c.Node(1).LogTail(100))
	}
	c.Stop(10 * time.Second)
	if c.Node(1).Running() {
		t.Error("node 1 running after Stop")
	}
	if err := c.Err(); err != nil {
		t.Errorf("Err after exits the harness asked for: %v", err)
	}
}

// Roles choose each node's --roles, and the controller voters are the
// nodes with the controller role only.
func TestRolesAndVoters(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Sluiced: self, Dir: t.TempDir(), Nodes: 3, Env: []string{fakeEnv + "=serve"},
		Roles: func(id int32) []string {
			if id == 1 {
				return []string{RoleController}
			}
			return []string{RoleBroker}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	voters := "--controller-voters 1@" + c.Node(1).RaftListen + " "
	for id, roles := range map[int32]string{1: "--roles controller ", 2: "--roles broker ", 3: "--roles broker "} {
		log := c.Node(id).LogTail(100)
		if !strings.Contains(log, roles) || !strings.Contains(log, voters) {
			t.Errorf("node %d: want %q and %q in its arguments:\n%s", id, roles, voters, log)
		}
	}
}
