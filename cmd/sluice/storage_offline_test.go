//go:build sluicetest

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/storage"
)

// Issue 28: on a single node whose log directory fails (ENOSPC), `sluice
// produce` and `sluice consume` say at once that the partition is offline
// with KAFKA_STORAGE_ERROR, naming the broker, its directory and the OS
// error, instead of retrying for the 30 s delivery timeout and reporting
// LEADER_NOT_AVAILABLE ("has no leader").
func TestProduceAndConsumeSayTheDiskFailedPromptly(t *testing.T) {
	faults := &storage.FaultSet{}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { cfg.FaultStorage = faults })
	s.CreateTopic("orders", 1, nil)
	brokers := "--brokers=" + s.Node.Addr()
	if _, stderr, err := runWithStdin(t, "before\n", "produce", "orders", brokers); err != nil {
		t.Fatalf("produce on a healthy disk: %v: %s", err, stderr)
	}
	dir := filepath.Join(s.Dir, "logs", "orders-0")
	faults.Fail(dir+string(os.PathSeparator), syscall.ENOSPC)
	// Within a few seconds, well under the 30 s delivery timeout.
	const bound = 15 * time.Second
	check := func(what string, err error, took time.Duration) {
		t.Helper()
		t.Logf("%s failed after %v: %v", what, took, err)
		if err == nil {
			t.Fatalf("%s on the failed disk succeeded", what)
		}
		for _, want := range []string{"KAFKA_STORAGE_ERROR", "partition orders-0 is offline", "broker 1's log directory " + dir, "no space left on device"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", what, err, want)
			}
		}
		if took > bound {
			t.Errorf("%s took %v, want at most %v", what, took, bound)
		}
	}

	start := time.Now()
	_, _, err := runWithStdin(t, "after\n", "produce", "orders", brokers)
	check("produce", err, time.Since(start))

	start = time.Now()
	_, _, err = runWithStdin(t, "", "consume", "orders", "--from-beginning", brokers)
	check("consume", err, time.Since(start))
}
