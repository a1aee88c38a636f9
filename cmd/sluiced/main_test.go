package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestEnvNames(t *testing.T) {
	for flagName, want := range map[string]string{
		"data-dir":    "SLUICE_DATA_DIR",
		"listen":      "SLUICE_LISTEN",
		"http-listen": "SLUICE_HTTP_LISTEN",
		"node-id":     "SLUICE_NODE_ID",
	} {
		if got := envName(flagName); got != want {
			t.Errorf("envName(%q) = %q, want %q", flagName, got, want)
		}
	}
}

// noEnv is an empty environment: tests ignore the SLUICE_* variables of
// the shell that runs them.
func noEnv(string) (string, bool) { return "", false }

// envOf is an environment holding exactly vars.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestBadFlagsAndEnvAreRejected(t *testing.T) {
	if _, err := configure([]string{"--node-id", "-4", "--data-dir", t.TempDir()}, noEnv); err == nil {
		t.Error("negative node id accepted")
	}
	if _, err := configure([]string{"--listen", "no-port", "--data-dir", t.TempDir()}, noEnv); err == nil {
		t.Error("listen address without a port accepted")
	}
	if _, err := configure([]string{"stray-arg"}, noEnv); err == nil {
		t.Error("stray argument accepted")
	}
	if _, err := configure(nil, envOf(map[string]string{"SLUICE_NODE_ID": "not-a-number"})); err == nil {
		t.Error("bad SLUICE_NODE_ID accepted")
	}
	if _, err := configure([]string{"--page-cache-window", "-1", "--data-dir", t.TempDir()}, noEnv); err == nil || !strings.Contains(err.Error(), "page cache window") {
		t.Errorf("negative --page-cache-window: got %v", err)
	}
	cfg, err := configure([]string{"--data-dir", t.TempDir()}, envOf(map[string]string{"SLUICE_PAGE_CACHE_WINDOW": "0"}))
	if err != nil || cfg.PageCacheWindow != 0 {
		t.Errorf("SLUICE_PAGE_CACHE_WINDOW=0: %v, window %d", err, cfg.PageCacheWindow)
	}
	if cfg, _ := configure([]string{"--data-dir", t.TempDir()}, noEnv); cfg.PageCacheWindow != node.DefaultPageCacheWindow {
		t.Errorf("default page cache window %d, want %d", cfg.PageCacheWindow, node.DefaultPageCacheWindow)
	}
}

// Flags and SLUICE_* variables fill the same Config; a flag wins over its
// variable; what neither sets keeps node.DefaultConfig's value.
func TestFlagsAndEnvFillConfig(t *testing.T) {
	cfg, err := configure([]string{"--listen", "127.0.0.1:7000", "--roles", "broker, controller", "--join", "127.0.0.1:7002,"},
		envOf(map[string]string{"SLUICE_NODE_ID": "3", "SLUICE_LISTEN": "127.0.0.1:1", "SLUICE_CONTROLLER_VOTERS": "3@127.0.0.1:7001"}))
	if err != nil {
		t.Fatal(err)
	}
	def := node.DefaultConfig()
	if cfg.NodeID != 3 || cfg.Listen != "127.0.0.1:7000" || cfg.DataDir != def.DataDir || cfg.HTTPListen != def.HTTPListen ||
		fmt.Sprint(cfg.Roles) != "[broker controller]" || fmt.Sprint(cfg.Join) != "[127.0.0.1:7002]" ||
		len(cfg.ControllerVoters) != 1 || cfg.ControllerVoters[0].Address != "127.0.0.1:7001" {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.InternalListen != "127.0.0.1:9404" || cfg.InternalAdvertise != "" {
		t.Errorf("internal listener %q advertised as %q; want the default 127.0.0.1:9404, advertised as bound", cfg.InternalListen, cfg.InternalAdvertise)
	}
	cfg, err = configure([]string{"--internal-advertise", "n3.example:9404", "--data-dir", t.TempDir()},
		envOf(map[string]string{"SLUICE_INTERNAL_LISTEN": "0.0.0.0:9404"}))
	if err != nil || cfg.InternalListen != "0.0.0.0:9404" || cfg.InternalAdvertise != "n3.example:9404" {
		t.Fatalf("internal listener from env and flag: %v %q %q", err, cfg.InternalListen, cfg.InternalAdvertise)
	}
	if _, err := configure([]string{"--internal-listen", "127.0.0.1:9400", "--data-dir", t.TempDir()}, noEnv); err == nil {
		t.Error("an internal listener on the client port accepted")
	}
}

// The Kafka listener (issue 34): Kafka's port on loopback by default,
// advertised as bound; set by flag or SLUICE_KAFKA_*; empty disables it;
// an advertised address without a listener, or a listener on another
// listener's address, is refused.
func TestKafkaListenerFlags(t *testing.T) {
	cfg, err := configure([]string{"--data-dir", t.TempDir()}, noEnv)
	if err != nil || cfg.KafkaListen != "127.0.0.1:9092" || cfg.KafkaAdvertise != "" {
		t.Fatalf("default Kafka listener %q advertised as %q (%v); want 127.0.0.1:9092, advertised as bound", cfg.KafkaListen, cfg.KafkaAdvertise, err)
	}
	cfg, err = configure([]string{"--kafka-advertise", "n3.example:9092", "--data-dir", t.TempDir()},
		envOf(map[string]string{"SLUICE_KAFKA_LISTEN": "0.0.0.0:9092", "SLUICE_KAFKA_ADVERTISE": "ignored:1"}))
	if err != nil || cfg.KafkaListen != "0.0.0.0:9092" || cfg.KafkaAdvertise != "n3.example:9092" {
		t.Fatalf("Kafka listener from env and flag: %v %q %q", err, cfg.KafkaListen, cfg.KafkaAdvertise)
	}
	cfg, err = configure([]string{"--kafka-listen", "", "--data-dir", t.TempDir()}, noEnv)
	if err != nil || cfg.KafkaListen != "" {
		t.Fatalf("--kafka-listen '': %v %q, want the listener off", err, cfg.KafkaListen)
	}
	for _, bad := range [][]string{{"--kafka-listen", "", "--kafka-advertise", "n3.example:9092"}, {"--kafka-listen", "127.0.0.1:9400"}, {"--kafka-listen", "9092"}} {
		if _, err := configure(append(bad, "--data-dir", t.TempDir()), noEnv); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The transaction settings come from flags and SLUICE_* like the others;
// unset, they are the coordinator's defaults, and bad values are refused.
func TestTransactionFlagsFillConfig(t *testing.T) {
	cfg, err := configure([]string{"--transaction-state-partitions", "7", "--transaction-max-timeout", "5m", "--data-dir", t.TempDir()},
		envOf(map[string]string{"SLUICE_TRANSACTION_ABORT_TIMED_OUT_INTERVAL": "250ms", "SLUICE_TRANSACTIONAL_ID_EXPIRATION": "1h"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TransactionStatePartitions != 7 || cfg.TransactionMaxTimeout != 5*time.Minute ||
		cfg.TransactionAbortTimedOutInterval != 250*time.Millisecond || cfg.TransactionalIDExpiration != time.Hour {
		t.Fatalf("transaction settings: %+v", cfg)
	}
	if cfg, err := configure([]string{"--data-dir", t.TempDir()}, noEnv); err != nil || cfg.TransactionStatePartitions != txn.DefaultStatePartitions || cfg.TransactionMaxTimeout != txn.DefaultMaxTimeout {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
	for _, bad := range [][]string{{"--transaction-state-partitions", "-1"}, {"--transaction-state-partitions", "20000"},
		{"--transaction-max-timeout", "-1s"}, {"--transactional-id-expiration", "-1h"}} {
		if _, err := configure(append(bad, "--data-dir", t.TempDir()), noEnv); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// buildSluiced builds this command into a temporary directory.
func buildSluiced(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluiced")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// lockedBuffer is a bytes.Buffer safe for the writer goroutine of
// exec.Cmd and a reading test.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// child is a running sluiced process. These tests configure sluiced
// through SLUICE_* variables, the path under test here, so they start it
// themselves: internal/proccluster (the multi-process harness of the other
// suites) passes every setting as a flag.
type child struct {
	cmd    *exec.Cmd
	output lockedBuffer  // its stdout and stderr
	exited chan struct{} // closed once it has exited
	err    error         // how it exited; read after exited is closed
}

// startChild runs bin with env (see proccluster.Env) and args; the test's Cleanup
// kills it if it still runs.
func startChild(t *testing.T, bin string, env []string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	c.cmd.Env = env
	c.cmd.Stdout, c.cmd.Stderr = &c.output, &c.output
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		select {
		case <-c.exited:
		case <-time.After(5 * time.Second):
		}
	})
	return c
}

// tail is the end of the child's output, for failure messages.
func (c *child) tail() string {
	const max = 4 << 10
	out := c.output.String()
	if len(out) > max {
		out = "..." + out[len(out)-max:]
	}
	return out
}

// waitReady waits until the child's /readyz on httpAddr answers 200. If
// the child exits first it fails tb at once, with the end of its output,
// instead of waiting out timeout.
func (c *child) waitReady(tb wait.TB, httpAddr string, timeout time.Duration) {
	tb.Helper()
	probe := &http.Client{Timeout: 2 * time.Second}
	exited := false
	wait.For(tb, timeout, "sluiced ready", func() error {
		select {
		case <-c.exited:
			exited = true
			return nil // stop polling: reported below
		default:
		}
		resp, err := probe.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
	if exited {
		tb.Fatalf("sluiced exited (%v) before it was ready; its output ends:\n%s", c.err, c.tail())
	}
}

// fakeTB records the first failure instead of ending the test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	if f.failed == "" {
		f.failed = fmt.Sprintf(format, args...)
	}
}

// A child that exits before it is ready fails the wait as soon as it has
// exited, naming the exit and showing its output, not at the deadline.
func TestChildExitFailsWaitAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sluiced binary")
	}
	bin := buildSluiced(t)
	c := startChild(t, bin, proccluster.Env("SLUICE_DATA_DIR="+t.TempDir()), "--listen", "no-port")
	f := &fakeTB{}
	c.waitReady(f, nodetest.FreeAddr(t), time.Hour)
	if !strings.Contains(f.failed, "exited (exit status 1)") || !strings.Contains(f.failed, "no-port") {
		t.Fatalf("failure %q, want the exit and the output naming the bad address", f.failed)
	}
}

// SIGTERM shuts sluiced down gracefully: exit status 0, and every log gets
// its clean-shutdown marker so the next start skips the recovery scan.
// sluiced runs as started: its own process name, the GODEBUG it was
// given. The configuration comes from SLUICE_* variables only; every
// listener is on a free port (none of the defaults 9400-9404 and 9092).
func TestSIGTERMShutsDownCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the sluiced binary")
	}
	bin := buildSluiced(t)
	dir := t.TempDir()
	grpcAddr, httpAddr, raftAddr, gossipAddr := nodetest.FreeAddr(t), nodetest.FreeAddr(t), nodetest.FreeAddr(t), nodetest.FreeAddr(t)
	c := startChild(t, bin, proccluster.Env("SLUICE_DATA_DIR="+dir, "SLUICE_LISTEN="+grpcAddr, "SLUICE_HTTP_LISTEN="+httpAddr,
		"SLUICE_RAFT_LISTEN="+raftAddr, "SLUICE_GOSSIP_LISTEN="+gossipAddr, "SLUICE_INTERNAL_LISTEN="+nodetest.FreeAddr(t),
		"SLUICE_KAFKA_LISTEN="+nodetest.FreeAddr(t),
		"GODEBUG=madvdontneed=1"))
	c.waitReady(t, httpAddr, 20*time.Second)
	// The runtime settings are the environment's, as given (decision 47:
	// the deployment sets GODEBUG; sluiced does not re-execute itself to
	// change it).
	if !strings.Contains(c.output.String(), `msg="go runtime" node=1 godebug="madvdontneed=1"`+"\n") {
		t.Fatalf("the go runtime log line does not show the GODEBUG given; output:\n%s", c.tail())
	}
	if runtime.GOOS == "linux" {
		// The process is sluiced itself, under its own name (ps, pgrep
		// and container tooling find it by that).
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.cmd.Process.Pid)); err != nil || strings.TrimSpace(string(comm)) != "sluiced" {
			t.Fatalf("process name %q (%v), want sluiced", comm, err)
		}
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	resp, err := sluicev1.NewAdminClient(conn).CreateTopics(cctx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 2, ReplicationFactor: 1}}})
	if err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create topic: %v %v", err, resp)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
		if c.err != nil {
			t.Fatalf("sluiced exited with %v after SIGTERM\n%s", c.err, c.tail())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("sluiced did not stop within 20s of SIGTERM\n%s", c.tail())
	}
	if !strings.Contains(c.output.String(), "sluice node stopped") {
		t.Fatalf("no graceful-stop log line:\n%s", c.tail())
	}
	for p := 0; p < 2; p++ {
		marker := filepath.Join(dir, "logs", fmt.Sprintf("t-%d", p), ".clean_shutdown")
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("partition %d has no clean-shutdown marker: %v", p, err)
		}
	}
}

// The deployment flags: the node id from a StatefulSet pod name (also from
// the environment, as the manifests set it); bad values are refused
// naming the flag. The testing-only --hosts: TestTestMachineryFlags.
func TestDeployFlags(t *testing.T) {
	cfg, err := configure([]string{"--data-dir", t.TempDir(), "--node-id", "9", "--node-id-from-name", "sluice-2"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != 3 {
		t.Errorf("node id %d, want 3", cfg.NodeID)
	}
	cfg, err = configure([]string{"--data-dir", t.TempDir(), "--roles", "broker", "--controller-voters", "1@a:1", "--join", "a:2"},
		envOf(map[string]string{"SLUICE_NODE_ID_FROM_NAME": "sluice-broker-4", "SLUICE_NODE_ID_OFFSET": "100"}))
	if err != nil || cfg.NodeID != 104 {
		t.Errorf("node id from the environment: %d, %v; want 104", cfg.NodeID, err)
	}
	for _, bad := range [][]string{{"--node-id-from-name", "sluice"}} {
		if _, err := configure(append(bad, "--data-dir", t.TempDir()), noEnv); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
}

// --log-format json makes the logger write one JSON object per line, each
// naming the node; an unknown format is refused.
func TestLogFormat(t *testing.T) {
	if _, err := configure([]string{"--log-format", "yaml", "--data-dir", t.TempDir()}, noEnv); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("--log-format yaml: %v", err)
	}
	cfg, err := configure([]string{"--log-format", "json", "--node-id", "7", "--data-dir", t.TempDir()}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Logger.Handler().(*slog.JSONHandler); !ok {
		// With attributes the handler is still a JSON handler.
		t.Errorf("handler %T, want *slog.JSONHandler", cfg.Logger.Handler())
	}
	if !cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("info not enabled")
	}
}
