package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// scrape GETs addr's /metrics and parses it as the Prometheus text
// format, failing the test on an error.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := getMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// getMetrics GETs addr's /metrics and parses it as the Prometheus text
// format. With SLUICE_METRICS_SCRAPE_OUT set, it also writes the body
// there (make check-monitoring lints it with promtool check metrics).
func getMetrics(addr string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if out := os.Getenv("SLUICE_METRICS_SCRAPE_OUT"); out != "" {
		if err := os.WriteFile(out, body, 0o644); err != nil {
			return nil, err
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("/metrics does not parse as the text format: %w", err)
	}
	return mfs, nil
}

// sample finds the series of family name whose labels include labels
// (name, value pairs) and returns its value: a gauge's or counter's value,
// a histogram's sample count. ok is false when there is none.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// mustSample is sample, failing the test when the series is missing.
func mustSample(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	v, ok := sample(mfs, name, labels...)
	if !ok {
		t.Fatalf("/metrics has no %s series with labels %v", name, labels)
	}
	return v
}

// TestMetricsFamiliesAndTypes: a combined node's /metrics parses as the
// Prometheus text format and holds the families operators alert on with
// their types: partition health, the controller's Raft state, the gRPC
// request metrics, ISR changes, log sizes, the Go runtime and the process.
func TestMetricsFamiliesAndTypes(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) { c.HTTPListen = "127.0.0.1:0" })
	s.CreateTopic("m", 1, nil)
	s.Fetch("m", 0, 0, 0) // at least one request of each kind below
	mfs := scrape(t, s.Node.HTTPAddr())
	want := map[string]dto.MetricType{
		"sluice_topics": dto.MetricType_GAUGE, "sluice_metadata_offset": dto.MetricType_GAUGE,
		"sluice_log_end_offset": dto.MetricType_GAUGE, "sluice_log_start_offset": dto.MetricType_GAUGE,
		"sluice_log_size_bytes": dto.MetricType_GAUGE, "sluice_high_watermark": dto.MetricType_GAUGE,
		"sluice_last_stable_offset": dto.MetricType_GAUGE, "sluice_lso_lag": dto.MetricType_GAUGE,
		"sluice_open_transactions": dto.MetricType_GAUGE, "sluice_oldest_open_transaction_age_ms": dto.MetricType_GAUGE,
		"sluice_late_transactions": dto.MetricType_GAUGE, "sluice_producer_ids": dto.MetricType_GAUGE,
		"sluice_partitions_with_late_transactions": dto.MetricType_GAUGE, "sluice_max_active_transaction_duration_ms": dto.MetricType_GAUGE,
		"sluice_under_replicated_partitions": dto.MetricType_GAUGE, "sluice_partition_under_replicated": dto.MetricType_GAUGE,
		"sluice_under_min_isr_partitions": dto.MetricType_GAUGE, "sluice_partition_under_min_isr": dto.MetricType_GAUGE,
		"sluice_offline_partitions": dto.MetricType_GAUGE,
		"sluice_active_controller":  dto.MetricType_GAUGE, "sluice_raft_state": dto.MetricType_GAUGE,
		"sluice_raft_term": dto.MetricType_GAUGE, "sluice_raft_last_log_index": dto.MetricType_GAUGE,
		"sluice_raft_commit_index": dto.MetricType_GAUGE, "sluice_raft_applied_index": dto.MetricType_GAUGE,
		"sluice_isr_shrinks_total": dto.MetricType_COUNTER, "sluice_isr_expands_total": dto.MetricType_COUNTER,
		"sluice_grpc_server_requests_total":           dto.MetricType_COUNTER,
		"sluice_grpc_server_request_duration_seconds": dto.MetricType_HISTOGRAM,
		"sluice_produce_bytes_total":                  dto.MetricType_COUNTER, "sluice_fetch_bytes_total": dto.MetricType_COUNTER,
		"sluice_replica_fetch_bytes_total":               dto.MetricType_COUNTER,
		"sluice_group_rebalances_total":                  dto.MetricType_COUNTER,
		"sluice_group_coordinator_skipped_records_total": dto.MetricType_COUNTER,
		"sluice_txn_coordinator_skipped_records_total":   dto.MetricType_COUNTER,
		"sluice_txn_coordinator_append_seconds":          dto.MetricType_HISTOGRAM,
		"sluice_group_coordinator_append_seconds":        dto.MetricType_HISTOGRAM,
		"go_goroutines": dto.MetricType_GAUGE, "go_memstats_heap_alloc_bytes": dto.MetricType_GAUGE,
	}
	if runtime.GOOS == "linux" {
		want["process_cpu_seconds_total"] = dto.MetricType_COUNTER
		want["process_open_fds"] = dto.MetricType_GAUGE
	}
	for name, typ := range want {
		mf := mfs[name]
		if mf == nil {
			t.Errorf("/metrics has no family %s", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("%s is a %v, want a %v", name, mf.GetType(), typ)
		}
	}
	// The only node is the active controller, Raft leader, and leads
	// every partition with its whole ISR.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_active_controller", nil, 1},
		{"sluice_raft_state", []string{"state", "leader"}, 1},
		{"sluice_raft_state", []string{"state", "follower"}, 0},
		{"sluice_offline_partitions", nil, 0},
		{"sluice_under_replicated_partitions", nil, 0},
		{"sluice_under_min_isr_partitions", nil, 0},
		{"sluice_partition_under_replicated", []string{"topic", "m", "partition", "0"}, 0},
		{"sluice_partition_under_min_isr", []string{"topic", "m", "partition", "0"}, 0},
		{"sluice_isr_shrinks_total", nil, 0},
	} {
		if got := mustSample(t, mfs, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if term := mustSample(t, mfs, "sluice_raft_term"); term < 1 {
		t.Errorf("sluice_raft_term = %v, want at least 1", term)
	}
	commit, applied := mustSample(t, mfs, "sluice_raft_commit_index"), mustSample(t, mfs, "sluice_raft_applied_index")
	if commit < 1 || applied < 1 || applied > mustSample(t, mfs, "sluice_raft_last_log_index") {
		t.Errorf("raft commit index %v, applied index %v: want both at least 1 (the topic was created), applied <= last log index", commit, applied)
	}
}

// TestMetricsMoveWithRequests: a produce (unary and on a ProduceStream)
// adds to the request counter and duration histogram of its method, the
// produce bytes counter by the batch's size and the log end offset and
// size of its partition; a fetch adds its batches to the fetch bytes; a
// call that fails counts as an error under its gRPC code; requests over
// the Kafka door move the Kafka door's metrics (checkKafkaMetricsMove).
func TestMetricsMoveWithRequests(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.HTTPListen = "127.0.0.1:0" })
	tn.CreateTopic("m", 1, nil)
	addr := tn.Node.HTTPAddr()
	const produce, stream = "/sluice.v1.Log/Produce", "/sluice.v1.Log/ProduceStream"
	tp := []string{"topic", "m", "partition", "0"}
	before := scrape(t, addr)
	requests0, _ := sample(before, "sluice_grpc_server_requests_total", "method", produce)
	timed0, _ := sample(before, "sluice_grpc_server_request_duration_seconds", "method", produce)
	bytes0 := mustSample(t, before, "sluice_produce_bytes_total")
	size0 := mustSample(t, before, "sluice_log_size_bytes", tp...)

	raw := nodetest.Batch("metrics", 3, 1000)
	if r, err := tn.tryProduce("m", raw); err != nil || r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("produce: %v %v", r, err)
	}
	after := scrape(t, addr)
	if got := mustSample(t, after, "sluice_grpc_server_requests_total", "method", produce); got != requests0+1 {
		t.Errorf("Produce requests %v after one produce, want %v", got, requests0+1)
	}
	if got := mustSample(t, after, "sluice_grpc_server_request_duration_seconds", "method", produce); got != timed0+1 {
		t.Errorf("Produce durations observed %v after one produce, want %v", got, timed0+1)
	}
	if got := mustSample(t, after, "sluice_produce_bytes_total"); got != bytes0+float64(len(raw)) {
		t.Errorf("sluice_produce_bytes_total %v, want %v (+ the batch's %d bytes)", got, bytes0+float64(len(raw)), len(raw))
	}
	if got := mustSample(t, after, "sluice_log_end_offset", tp...); got != 3 {
		t.Errorf("sluice_log_end_offset %v after 3 records, want 3", got)
	}
	if got := mustSample(t, after, "sluice_log_size_bytes", tp...); got < size0+float64(len(raw)) {
		t.Errorf("sluice_log_size_bytes %v, want at least %v (+ the batch)", got, size0+float64(len(raw)))
	}

	// One request on a ProduceStream: counted and timed by correlation id.
	st, err := tn.Conn.NewStream(ctx(t), &grpc.StreamDesc{StreamName: "ProduceStream", ServerStreams: true, ClientStreams: true}, stream)
	if err != nil {
		t.Fatal(err)
	}
	raw2 := nodetest.Batch("stream", 2, 2000)
	req := &internalv1.ProduceStreamRequestView{CorrelationId: 7, Request: &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL,
		Topics: []*internalv1.TopicProduceDataView{{Name: "m", Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw2}}}}}}
	if err := st.SendMsg(req); err != nil {
		t.Fatal(err)
	}
	var answer sluicev1.ProduceStreamResponse
	if err := st.RecvMsg(&answer); err != nil || answer.CorrelationId != 7 || answer.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("ProduceStream answer %v, %v", &answer, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	streamed := scrape(t, addr)
	if got := mustSample(t, streamed, "sluice_grpc_server_requests_total", "method", stream); got != 1 {
		t.Errorf("ProduceStream requests %v after one, want 1", got)
	}
	if got := mustSample(t, streamed, "sluice_grpc_server_request_duration_seconds", "method", stream); got != 1 {
		t.Errorf("ProduceStream durations observed %v after one answer, want 1", got)
	}
	if got := mustSample(t, streamed, "sluice_produce_bytes_total"); got != bytes0+float64(len(raw)+len(raw2)) {
		t.Errorf("sluice_produce_bytes_total %v, want %v", got, bytes0+float64(len(raw)+len(raw2)))
	}

	fetched0 := mustSample(t, streamed, "sluice_fetch_bytes_total")
	if pd := tn.Fetch("m", 0, 0, 0); pd.ErrorCode != sluicev1.ErrorCode_NONE || len(nodetest.Values(pd, 0)) != 5 {
		t.Fatalf("fetch: %v %s", pd.ErrorCode, pd.ErrorMessage)
	}
	if got := mustSample(t, scrape(t, addr), "sluice_fetch_bytes_total"); got < fetched0+float64(len(raw)) {
		t.Errorf("sluice_fetch_bytes_total %v after fetching both batches, want at least %v", got, fetched0+float64(len(raw)))
	}

	// A failing call: health of an unknown service is NOT_FOUND.
	const check = "/grpc.health.v1.Health/Check"
	errs0, _ := sample(streamed, "sluice_grpc_server_errors_total", "method", check, "code", "NotFound")
	if _, err := healthpb.NewHealthClient(tn.Conn).Check(ctx(t), &healthpb.HealthCheckRequest{Service: "no-such-service"}); err == nil {
		t.Fatal("health check of an unknown service succeeded")
	}
	if got := mustSample(t, scrape(t, addr), "sluice_grpc_server_errors_total", "method", check, "code", "NotFound"); got != errs0+1 {
		t.Errorf("errors of %s with NotFound: %v, want %v", check, got, errs0+1)
	}

	checkKafkaMetricsMove(t, tn, "m") // last: its scrape has every family
}

// TestMetricsPartitionHealthAndISRChanges: in a three-node cluster, when a
// follower of a partition with min.insync.replicas 3 stops, its leader
// reports the partition under-replicated and under min ISR and counts an
// ISR shrink; when the follower is back in the ISR, the gauges return to
// 0 and an expansion is counted. The leader counts the bytes its
// followers fetched. Exactly one node is the active
// controller, and it reports no offline partition.
func TestMetricsPartitionHealthAndISRChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("three-node cluster")
	}
	const topic = "health"
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(_ int32, cfg *node.Config) { cfg.HTTPListen = "127.0.0.1:0" })
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(c.Dial(1)).CreateTopics(ctx, &sluicev1.CreateTopicsRequest{
		Topics: []*sluicev1.CreatableTopic{{Name: topic, NumPartitions: 1, ReplicationFactor: 3, Configs: map[string]string{"min.insync.replicas": "3"}}}})
	if err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create topic: %v %v", err, resp)
	}
	c.WaitTopic(topic, 1)
	ctlLeader := c.Leader()
	wait.For(t, 20*time.Second, "one active controller, no offline partition", func() error {
		active := 0.0
		for id, n := range c.Nodes() {
			mfs, err := getMetrics(n.HTTPAddr())
			if err != nil {
				return err
			}
			v, ok := sample(mfs, "sluice_active_controller")
			if !ok {
				return fmt.Errorf("node %d has no sluice_active_controller", id)
			}
			active += v
			if off, ok := sample(mfs, "sluice_offline_partitions"); id == ctlLeader && (!ok || off != 0) {
				return fmt.Errorf("the active controller reports %v offline partitions (present %v)", off, ok)
			}
		}
		if active != 1 {
			return fmt.Errorf("sum of sluice_active_controller = %v", active)
		}
		return nil
	})

	// The leader's ISR must be complete before a shrink can be seen.
	var leader int32
	wait.For(t, 30*time.Second, "the ISR holds all three replicas", func() error {
		p := c.Node(ctlLeader).Metadata().Image().Partition(topic, 0)
		if p == nil || p.Leader == controller.NoLeader || len(p.ISR) != 3 {
			return fmt.Errorf("partition state %+v", p)
		}
		leader = p.Leader
		return nil
	})
	addr := c.Node(leader).HTTPAddr()
	tp := []string{"topic", topic, "partition", "0"}
	// An acks=all produce: both followers fetch the batch from the leader.
	raw := nodetest.Batch("replicated", 2, 1000)
	req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*internalv1.TopicProduceDataView{{Name: topic, Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw}}}}}
	var produced sluicev1.ProduceResponse
	if err := c.Dial(leader).Invoke(ctx, "/sluice.v1.Log/Produce", req, &produced); err != nil || produced.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("produce: %v %v", &produced, err)
	}
	want := func(what string, cond func(mfs map[string]*dto.MetricFamily) error) {
		t.Helper()
		wait.For(t, 30*time.Second, what, func() error {
			mfs, err := getMetrics(addr)
			if err != nil {
				return err
			}
			return cond(mfs)
		})
	}
	want("the leader counts the batch sent to both followers", func(mfs map[string]*dto.MetricFamily) error {
		if got, _ := sample(mfs, "sluice_replica_fetch_bytes_total"); got < float64(2*len(raw)) {
			return fmt.Errorf("sluice_replica_fetch_bytes_total = %v, want at least %d", got, 2*len(raw))
		}
		return nil
	})
	before := scrape(t, addr)
	shrinks0, expands0 := mustSample(t, before, "sluice_isr_shrinks_total"), mustSample(t, before, "sluice_isr_expands_total")
	// The victim is a follower, the active controller only if nothing
	// else is left.
	var victim int32
	for _, id := range c.IDs() {
		if id != leader && (victim == 0 || id != ctlLeader) {
			victim = id
		}
	}
	if err := c.Stop(victim); err != nil {
		t.Fatal(err)
	}
	gaugesAre := func(v float64) func(map[string]*dto.MetricFamily) error {
		return func(mfs map[string]*dto.MetricFamily) error {
			for _, s := range []struct {
				name   string
				labels []string
			}{
				{"sluice_under_replicated_partitions", nil}, {"sluice_partition_under_replicated", tp},
				{"sluice_under_min_isr_partitions", nil}, {"sluice_partition_under_min_isr", tp},
			} {
				if got, ok := sample(mfs, s.name, s.labels...); !ok || got != v {
					return fmt.Errorf("%s%v = %v (present %v), want %v", s.name, s.labels, got, ok, v)
				}
			}
			return nil
		}
	}
	want(fmt.Sprintf("node %d's partition under-replicated and under min ISR after node %d stopped", leader, victim), gaugesAre(1))
	if got := mustSample(t, scrape(t, addr), "sluice_isr_shrinks_total"); got <= shrinks0 {
		t.Errorf("sluice_isr_shrinks_total %v after a follower left the ISR, want more than %v", got, shrinks0)
	}
	c.Restart(victim)
	want(fmt.Sprintf("node %d's partition healthy again after node %d restarted", leader, victim), gaugesAre(0))
	if got := mustSample(t, scrape(t, addr), "sluice_isr_expands_total"); got <= expands0 {
		t.Errorf("sluice_isr_expands_total %v after the follower rejoined the ISR, want more than %v", got, expands0)
	}
}
