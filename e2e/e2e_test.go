package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
	c := startTestCluster(t, 1)
	sluice, listen := c.sluice, c.node(1).Listen
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
	c.kill(1)
	c.restart(1)

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

	seg := findSegment(t, c.node(1).DataDir, topic)
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
