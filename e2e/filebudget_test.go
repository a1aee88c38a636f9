package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/proccluster"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 29, decision 50: a node hosts more partitions than its open-files
// limit could hold open at four descriptors a segment. A real sluiced
// runs with a hard limit of 1,024 (so a file budget of 256 and a replica
// limit of 512); a topic of 400 partitions (1,600 segment files) takes a
// record in every partition, and the node stays ready with no partition
// offline and no operation out of descriptors, within its file budget; a
// topic that would pass the replica limit is refused naming it; and the
// node restarts with every partition. Before the file cache, the same
// node ran out of descriptors (every segment held its four files open).
func TestFileBudgetKeepsPartitionsPastTheOpenFilesLimitOnline(t *testing.T) {
	const limit, topic, partitions = 1024, "wide", 400
	b := binaries(t)
	dir := t.TempDir()
	// The limit is set where a deployment sets it: in the environment that
	// starts the process (ulimit sets the hard and the soft limit).
	wrapper := filepath.Join(dir, "sluiced-ulimit")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 1\nexec %q \"$@\"\n", limit, b.Sluiced)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pc, err := proccluster.New(proccluster.Config{Sluiced: wrapper, Dir: dir, Nodes: 1,
		OnExit: func(_ *proccluster.Node, err error) { t.Errorf("%v", err) }})
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{Cluster: pc, tb: t, sluice: b.Sluice}
	t.Cleanup(func() {
		pc.Close()
		if t.Failed() {
			t.Log(pc.Logs(60))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := pc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	n := c.node(1)
	c.createTopic(time.Minute, c.ids(), topic, "--partitions", strconv.Itoa(partitions), "--replication-factor", "1")

	cl, err := client.New(c.addrs(c.ids()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(client.WithLinger(5 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, partitions)
	for i := int32(0); i < partitions; i++ {
		p.Send(ctx, client.Record{Topic: topic, Partition: i, Value: []byte(fmt.Sprintf("v%d", i))}, func(_ client.RecordMetadata, err error) {
			if err != nil {
				failed <- err
			}
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	p.Close()
	close(failed)
	for err := range failed {
		t.Fatalf("a record to one of %d partitions: %v", partitions, err)
	}

	m := scrapeMetrics(t, n.HTTP)
	if m["sluice_storage_failed_partitions"] != 0 || m["sluice_storage_fd_exhausted_total"] != 0 {
		t.Errorf("failed partitions %v, operations out of descriptors %v; want 0 and 0",
			m["sluice_storage_failed_partitions"], m["sluice_storage_fd_exhausted_total"])
	}
	if budget := m["sluice_storage_segment_files_budget"]; budget != limit/4 || m["sluice_storage_segment_files_open"] > budget+32 {
		t.Errorf("segment files open %v, budget %v; want a budget of %d and at most 32 over it", m["sluice_storage_segment_files_open"], budget, limit/4)
	}
	if m["sluice_storage_segment_file_evictions_total"] == 0 {
		t.Errorf("no segment file evicted: %d partitions fit the budget of %d, the test proves nothing", partitions, limit/4)
	}
	if code := httpStatus(t, n.HTTP, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d with %d partitions", code, partitions)
	}

	// Past the replica limit (half the open-files limit): refused, naming it.
	err = cl.CreateTopic(ctx, "wider", limit/2-partitions+1, 1, nil)
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_PARTITIONS || !strings.Contains(fmt.Sprint(err), "open-files limit") {
		t.Errorf("a topic past the replica limit: %v, want INVALID_PARTITIONS naming the open-files limit", err)
	}

	c.terminate(t, 1)
	c.restart(1)
	cl2, err := client.New(c.addrs(c.ids()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	for _, part := range []int32{0, partitions / 2, partitions - 1} {
		c.eventually(time.Minute, fmt.Sprintf("partition %d's record after the restart", part), func() error {
			hw, _, err := cl2.Watermarks(ctx, topic, part)
			if err != nil {
				return err
			}
			if hw != 1 {
				return fmt.Errorf("high watermark %d, want 1", hw)
			}
			return nil
		})
	}
	if m := scrapeMetrics(t, n.HTTP); m["sluice_storage_failed_partitions"] != 0 || m["sluice_storage_fd_exhausted_total"] != 0 {
		t.Errorf("after the restart: failed partitions %v, operations out of descriptors %v; want 0 and 0",
			m["sluice_storage_failed_partitions"], m["sluice_storage_fd_exhausted_total"])
	}
}

// scrapeMetrics reads the unlabelled samples of a node's /metrics.
func scrapeMetrics(t *testing.T, httpAddr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			m[name] = f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// httpStatus is the status code of a GET of path on httpAddr.
func httpStatus(t *testing.T, httpAddr, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
