package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/loopback"
)

// moduleRoot walks up from the working directory to the directory holding
// go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// buildBinary builds ./cmd/<name> into dir.
func buildBinary(t *testing.T, root, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, b)
	}
	return out
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrs, err := loopback.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// syncBuffer is a bytes.Buffer safe for a process writer and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server is a running sluiced.
type server struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
}

// startServer starts sluiced and waits until /readyz answers 200. The
// process is killed in t.Cleanup.
func startServer(t *testing.T, bin, dataDir, listen, httpListen string, extra ...string) *server {
	t.Helper()
	s := &server{log: &syncBuffer{}, exited: make(chan struct{})}
	args := append([]string{"--node-id", "1", "--data-dir", dataDir, "--listen", listen, "--http-listen", httpListen}, extra...)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sluiced: %v", err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.kill)
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.exited:
			t.Fatalf("sluiced exited before becoming ready:\n%s", s.log.String())
		default:
		}
		if resp, err := hc.Get("http://" + httpListen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluiced not ready within 30s:\n%s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond) // poll interval, bounded by the deadline
	}
}

// kill SIGKILLs the server and waits (bounded) for it to exit.
func (s *server) kill() {
	if s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// runCLI runs the sluice binary with a bounded time and returns stdout,
// stderr and the exit error.
func runCLI(t *testing.T, bin string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
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

// findSegment returns the first .log segment of topic partition 0.
func findSegment(t *testing.T, dataDir, topic string) string {
	t.Helper()
	var found []string
	filepath.WalkDir(dataDir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") && strings.Contains(filepath.Base(filepath.Dir(path)), topic) &&
			strings.HasSuffix(filepath.Base(filepath.Dir(path)), "-0") {
			found = append(found, path)
		}
		return nil
	})
	if len(found) == 0 {
		t.Fatalf("no .log segment for %s-0 under %s", topic, dataDir)
	}
	// Segment names sort by base offset; the first holds offset 0.
	first := found[0]
	for _, f := range found[1:] {
		if filepath.Base(f) < filepath.Base(first) {
			first = f
		}
	}
	return first
}

// TestProduceSurvivesKillAndConsumeInOrder is the end-to-end contract of
// the CLI against a real sluiced: every line acknowledged by "sluice
// produce" (acks=all) survives a SIGKILL of the broker and is read back
// exactly once, in order; errors are clear and exit non-zero.
func TestProduceSurvivesKillAndConsumeInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	root := moduleRoot(t)
	bin := t.TempDir()
	sluiced := buildBinary(t, root, bin, "sluiced")
	sluice := buildBinary(t, root, bin, "sluice")
	dataDir := t.TempDir()
	listen, httpListen := freeAddr(t), freeAddr(t)
	// The Raft address is part of the persisted quorum: keep it across the
	// restart.
	ports := []string{"--raft-listen", freeAddr(t), "--gossip-listen", freeAddr(t)}
	srv := startServer(t, sluiced, dataDir, listen, httpListen, ports...)
	brokers := "--brokers=" + listen

	const topic = "e2e"
	if _, stderr, err := runCLI(t, sluice, "", brokers, "topic", "create", topic, "--partitions", "3", "--replication-factor", "1"); err != nil {
		t.Fatalf("topic create: %v\n%s", err, stderr)
	}
	out, stderr, err := runCLI(t, sluice, "", brokers, "--output", "json", "topic", "describe", topic)
	if err != nil || !strings.Contains(out, `"partition":2`) || !strings.Contains(out, `"leader":1`) {
		t.Fatalf("topic describe: %v\nstdout: %s\nstderr: %s", err, out, stderr)
	}

	const n = 10000
	var in strings.Builder
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("line-%05d-%x", i, i*7919)
		in.WriteString(want[i])
		in.WriteByte('\n')
	}
	if _, stderr, err := runCLI(t, sluice, in.String(), brokers, "produce", topic, "--partition", "0", "--acks", "all"); err != nil {
		t.Fatalf("produce: %v\n%s", err, stderr)
	}

	// Unknown topic: a clear error, non-zero exit.
	_, stderr, err = runCLI(t, sluice, "x\n", brokers, "produce", "no-such-topic")
	if err == nil || !strings.Contains(stderr, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Errorf("produce to an unknown topic: err %v, stderr %q; want non-zero exit naming UNKNOWN_TOPIC_OR_PARTITION", err, stderr)
	}
	_, stderr, err = runCLI(t, sluice, "", brokers, "consume", "no-such-topic", "--from-beginning", "--timeout", "2s")
	if err == nil {
		t.Errorf("consume of an unknown topic exited 0; stderr %q", stderr)
	}

	// SIGKILL and restart on the same data directory.
	srv.kill()
	startServer(t, sluiced, dataDir, listen, freeAddr(t), ports...)

	out, stderr, err = runCLI(t, sluice, "", brokers, "consume", topic, "--partition", "0", "--from-beginning", "--max-messages", fmt.Sprint(n), "--timeout", "10s")
	if err != nil {
		t.Fatalf("consume after restart: %v\n%s", err, stderr)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(got) != n {
		t.Fatalf("consumed %d lines, want %d (stderr %s)", len(got), n, stderr)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d = %q, want %q", i, got[i], want[i])
		}
	}

	seg := findSegment(t, dataDir, topic)
	out, stderr, err = runCLI(t, sluice, "", "dump-log", seg)
	if err != nil {
		t.Fatalf("dump-log %s: %v\n%s", seg, err, stderr)
	}
	lines := strings.Split(out, "\n")
	var firstBatch string
	for _, l := range lines {
		if strings.HasPrefix(l, "baseOffset:") {
			firstBatch = l
			break
		}
	}
	if !strings.HasPrefix(firstBatch, "baseOffset: 0 ") || !strings.Contains(firstBatch, "isvalid: true") {
		t.Errorf("dump-log first batch line = %q, want baseOffset: 0 ... isvalid: true", firstBatch)
	}
}
