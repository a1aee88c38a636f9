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

	// The same segment as JSON lines, one per batch, records included.
	dump, stderr, err = runCLI(t, sluice, "", "--output", "json", "dump-log", "--records", findSegment(t, dataDir, "sync"))
	if err != nil {
		t.Fatalf("dump-log --output json: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(dump), "\n")
	for i, line := range lines {
		var b struct {
			BaseOffset int64 `json:"baseOffset"`
			Count      int   `json:"count"`
			IsValid    bool  `json:"isValid"`
			Records    []struct {
				Offset      int64   `json:"offset"`
				Value       *string `json:"value"`
				ValueBase64 []byte  `json:"valueBase64"`
			} `json:"records"`
		}
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			t.Fatalf("dump-log --output json line %d: %v: %q", i, err, line)
		}
		// The values are random bytes: UTF-8 ones as text, others in base64.
		if b.BaseOffset != int64(i) || b.Count != 1 || !b.IsValid || len(b.Records) != 1 || b.Records[0].Offset != int64(i) ||
			(b.Records[0].Value == nil) == (b.Records[0].ValueBase64 == nil) ||
			b.Records[0].Value != nil && len(*b.Records[0].Value) != 10 || b.Records[0].ValueBase64 != nil && len(b.Records[0].ValueBase64) != 10 {
			t.Fatalf("dump-log --output json line %d: %q", i, line)
		}
	}
	if len(lines) != n {
		t.Errorf("dump-log --output json printed %d lines, want %d", len(lines), n)
	}

	// bench consume asked for more records than there are: it reports
	// what it read and exits non-zero.
	out, stderr, err = runCLI(t, sluice, "", brokers, "bench", "consume", "--topic", "sync", "--records", "50", "--timeout", "1s")
	if err == nil || !strings.Contains(stderr, "stopped early after 40 of 50 records") || !strings.Contains(out, "40 records") {
		t.Errorf("bench consume of 50 with 40 in the topic: err %v, stdout %q, stderr %q", err, out, stderr)
	}
	// A missing topic is named with the flag that creates it.
	_, stderr, err = runCLI(t, sluice, "", brokers, "bench", "produce", "--topic", "missing", "--records", "1")
	if err == nil || !strings.Contains(stderr, "--create-partitions") {
		t.Errorf("bench produce to a missing topic: err %v, stderr %q", err, stderr)
	}
}
