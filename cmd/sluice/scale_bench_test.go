package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// BenchmarkCLIScale measures what the operator's commands print, and how
// long they take, against a real single node holding SLUICE_SCALE_TOPICS
// topics (default 200) of 10 partitions each (issue 31): the bytes of
// stdout per command, in text and in JSON. Run it with
// go test -run '^$' -bench CLIScale -benchtime 1x ./cmd/sluice/.
// The answers' sizes at the full 10,000 partitions with replication
// factor 3 are api's BenchmarkAdminScale.
func BenchmarkCLIScale(b *testing.B) {
	topics := 200
	if v := os.Getenv("SLUICE_SCALE_TOPICS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_SCALE_TOPICS=%q: want a positive number", v)
		}
		topics = n
	}
	s := nodetest.StartSingle(b, b.TempDir(), nil)
	start := time.Now()
	for i := 0; i < topics; i += 50 {
		req := &sluicev1.CreateTopicsRequest{TimeoutMs: 60000}
		for j := i; j < min(i+50, topics); j++ {
			req.Topics = append(req.Topics, &sluicev1.CreatableTopic{Name: fmt.Sprintf("topic-%04d", j), NumPartitions: 10, ReplicationFactor: 1})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		resp, err := s.Admin.CreateTopics(ctx, req)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range resp.Topics {
			if r.ErrorCode != sluicev1.ErrorCode_NONE {
				b.Fatalf("create %s: %v %s", r.Name, r.ErrorCode, r.ErrorMessage)
			}
		}
	}
	b.Logf("%d topics, %d partitions created in %v", topics, topics*10, time.Since(start).Round(time.Millisecond))
	brokers := "--brokers=" + s.Node.Addr()
	for _, args := range scaleCommands {
		b.Run(fmt.Sprint(args), func(b *testing.B) {
			var size, errSize int
			for b.Loop() {
				var out, stderr bytes.Buffer
				if err := run(context.Background(), append([]string{brokers}, args...), nil, &out, &stderr); err != nil {
					b.Fatalf("%v: %s", err, stderr.String())
				}
				size, errSize = out.Len(), stderr.Len()
			}
			b.ReportMetric(float64(size), "stdout-bytes")
			// A note (no partition matched) or offsets unknown.
			b.ReportMetric(float64(errSize), "stderr-bytes")
		})
	}
}

// scaleCommands are the commands BenchmarkCLIScale runs.
var scaleCommands = [][]string{
	{"topic", "list"},
	{"--output", "json", "topic", "list"},
	{"topic", "describe", "topic-0100"},
	{"topic", "list", "--prefix", "topic-01"},
	{"topic", "describe", "--under-replicated-partitions"},
	{"topic", "describe", "--prefix", "topic-01"},
	{"topic", "describe"},
	{"cluster", "status"},
	{"--output", "json", "cluster", "status"},
}
