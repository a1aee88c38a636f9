package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

func TestDataDirLockedAgainstSecondNode(t *testing.T) {
	dir := t.TempDir()
	nodetest.StartSingle(t, dir, nil)
	if n, err := node.Start(nodetest.Config(t, dir)); err == nil {
		n.Shutdown(context.Background())
		t.Fatal("a second node opened a data dir in use")
	}
}

// TestLegacyCatalogImported: a data dir written by single-node Sluice
// before the controller (meta/topics.json, logs without partition
// metadata) starts with its topics and data intact.
func TestLegacyCatalogImported(t *testing.T) {
	dir := t.TempDir()
	l, err := storage.Open(filepath.Join(dir, "logs", "old-1"), storage.DefaultConfig(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(nodetest.Batch("legacy", 3, 1000), 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	catalog := `{"version":1,"cluster_id":"x","topics":[{"name":"old","id":"0123456789abcdef0123456789abcdef","partitions":2,"replication_factor":1,"configs":{"retention.ms":"3600000"}}]}`
	if err := os.MkdirAll(filepath.Join(dir, "meta"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta", "topics.json"), []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	tn := nodetest.StartSingle(t, dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var md *sluicev1.MetadataResponse
	wait.For(t, 10*time.Second, "legacy topic imported", func() error {
		md, err = tn.Admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{"old"}})
		if err != nil {
			t.Fatal(err)
		}
		if md.Topics[0].ErrorCode == sluicev1.ErrorCode_NONE && md.Topics[0].Partitions[1].LeaderId == 1 {
			return nil
		}
		return fmt.Errorf("metadata %v", md)
	})
	if got := md.Topics[0].Configs["retention.ms"]; got != "3600000" {
		t.Errorf("retention.ms = %q", got)
	}
	var pd *sluicev1.PartitionData
	wait.For(t, 10*time.Second, "legacy partition served", func() error {
		pd = tn.Fetch("old", 1, 0, 0)
		if pd.ErrorCode != sluicev1.ErrorCode_NONE {
			return fmt.Errorf("%v %s", pd.ErrorCode, pd.ErrorMessage)
		}
		return nil
	})
	if got := nodetest.Values(pd, 0); len(got) != 3 || got[0] != "legacy-0" {
		t.Fatalf("legacy data: %v (%v %s)", got, pd.ErrorCode, pd.ErrorMessage)
	}
	if _, err := os.Stat(filepath.Join(dir, "meta", "topics.json.migrated")); err != nil {
		t.Errorf("catalog not renamed: %v", err)
	}
}

// The HTTP listener serves liveness, readiness (the gRPC health status),
// Prometheus metrics of the hosted partitions (labels in the text format's
// sorted order) and pprof. The metrics show
// an open transaction: it holds the last stable offset at its first
// offset while the high watermark moves on.
func TestHTTPEndpoints(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) { c.HTTPListen = "127.0.0.1:0" })
	s.CreateTopic("h", 2, nil)
	// h-0: committed records at 0-1, then a transaction of producer 77
	// opened at 2 (appended as the leader writes it), then records at 3-5.
	var b batch.Builder
	b.Reset(1000)
	b.Add(1000, nil, []byte("open"), nil)
	txn := b.Finish(batch.Producer{ID: 77, Epoch: 0, BaseSequence: 0}, batch.AttrTransactional)
	tp := cluster.TopicPartition{Topic: "h", Partition: 0}
	for _, raw := range [][]byte{nodetest.Batch("a", 2, 1000), txn, nodetest.Batch("b", 3, 1000)} {
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Appended "a minute ago": the open transaction's age shows it.
		_, err := s.Node.Replicas().AppendCommitted(actx, tp, raw, cluster.NoLeaderEpoch, time.Now().Add(-time.Minute))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Node.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz of a ready node: %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"\nsluice_topics ", `sluice_log_end_offset{partition="1",topic="h"} 0`, `sluice_high_watermark{partition="1",topic="h"} 0`,
		`sluice_high_watermark{partition="0",topic="h"} 6`, `sluice_last_stable_offset{partition="0",topic="h"} 2`,
		`sluice_lso_lag{partition="0",topic="h"} 4`, `sluice_open_transactions{partition="0",topic="h"} 1`,
		`sluice_last_stable_offset{partition="1",topic="h"} 0`, `sluice_lso_lag{partition="1",topic="h"} 0`,
		`sluice_open_transactions{partition="1",topic="h"} 0`, "# TYPE sluice_lso_lag gauge\n",
		`sluice_oldest_open_transaction_age_ms{partition="1",topic="h"} 0`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, want a line with %q in:\n%s", code, want, body)
		}
	}
	const agePrefix = `sluice_oldest_open_transaction_age_ms{partition="0",topic="h"} `
	if _, rest, ok := strings.Cut(body, agePrefix); !ok {
		t.Errorf("/metrics: no %q line", agePrefix)
	} else if v, _, _ := strings.Cut(rest, "\n"); !atLeast(v, 60000) {
		t.Errorf("/metrics: oldest open transaction age %s ms, want at least 60000 (its first batch was appended a minute ago)", v)
	}
	if code, _ := get("/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
}

// atLeast reports whether the decimal integer v is at least min.
func atLeast(v string, min int64) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n >= min
}
