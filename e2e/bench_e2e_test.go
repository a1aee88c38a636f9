package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// bench produce --sync sends one record at a time: every record is acked
// before the next is sent, so each lands in a batch of its own, and every
// record's latency is counted.
func TestBenchProduceSyncSendsOneRecordPerBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	c := startTestCluster(t, 1)
	sluice, listen, dataDir := c.sluice, c.node(1).Listen, c.node(1).DataDir
	brokers := "--brokers=" + listen
	if _, stderr, err := runCLI(t, sluice, "", brokers, "topic", "create", "sync", "--partitions", "1", "--replication-factor", "1"); err != nil {
		t.Fatalf("topic create: %v\n%s", err, stderr)
	}

	const n = 40
	out, stderr, err := runCLI(t, sluice, "", brokers, "--output", "json", "bench", "produce", "--topic", "sync", "--sync", "--acks", "all", "--records", "40", "--record-size", "10")
	if err != nil {
		t.Fatalf("bench produce --sync: %v\n%s", err, stderr)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	if res.Records != n || res.Errors != 0 || res.Bytes != 10*n {
		t.Errorf("summary: %d records, %d bytes, %d errors; want %d, %d, 0", res.Records, res.Bytes, res.Errors, n, 10*n)
	}
	if !(res.LatencyMeanMs > 0 && res.LatencyP50Ms > 0 && res.LatencyP50Ms <= res.LatencyP99Ms && res.LatencyP99Ms <= res.LatencyP999Ms) {
		t.Errorf("latencies: p50 %v, p99 %v, p99.9 %v, mean %v; want 0 < p50 <= p99 <= p99.9 and mean > 0",
			res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyP999Ms, res.LatencyMeanMs)
	}

	dump, stderr, err := runCLI(t, sluice, "", "dump-log", findSegment(t, dataDir, "sync"))
	if err != nil {
		t.Fatalf("dump-log: %v\n%s", err, stderr)
	}
	batches := strings.Count(dump, "baseOffset: ")
	if batches != n || strings.Count(dump, " count: 1 ") != n {
		t.Errorf("segment holds %d batches (%d of one record), want %d of one record each:\n%s", batches, strings.Count(dump, " count: 1 "), n, dump)
	}
}
