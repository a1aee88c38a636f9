package node_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// preEncodedCodec sends a request encoded beforehand (*[]byte) as it is,
// without a copy, and decodes answers as protobuf: a client sending many
// copies of one large request costs the test process nothing per copy,
// so the process's heap is the node's.
type preEncodedCodec struct{}

func (preEncodedCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (preEncodedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (preEncodedCodec) Name() string { return "proto" }

// liveHeap is the Go runtime's live heap as of the last collection.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Issue 29, decision 51: request bytes in flight are bounded per listener.
// Sixteen 60 MB produce requests sent at once to a node with a 128 MiB
// budget (the smallest) are read at most two at a time: the others wait,
// not fail, and each is answered (MESSAGE_TOO_LARGE: above the topic's
// max.message.bytes). Meanwhile sluice_request_bytes_in_flight never
// exceeds sluice_request_bytes_budget, requests are counted as having
// waited, a producer beside them gets its records acknowledged and kept,
// and the node's live heap grows by less than twice the budget (a
// message is copied once while decoded) plus a stream window per waiting
// request (what HTTP/2 lets a client send before it is read) and 64 MiB
// for the rest. Before the budget it grew by about 1.7 GiB: every request
// was read at once.
func TestRequestByteBudgetBoundsConcurrentLargeRequests(t *testing.T) {
	const (
		requests = 16
		size     = 60 << 20
		budget   = node.MinQueuedMaxRequestBytes
	)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.QueuedMaxRequestBytes = budget
	})
	s.CreateTopic("big", 1, nil)
	s.CreateTopic("canary", 1, nil)

	var b batch.Builder
	b.Reset(time.Now().UnixMilli())
	b.Add(time.Now().UnixMilli(), nil, make([]byte, size), nil)
	raw, err := proto.Marshal(&sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, Topics: []*sluicev1.TopicProduceData{
		{Name: "big", Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, b.Finish(batch.PlainProducer, 0))}}}}})
	if err != nil {
		t.Fatal(err)
	}
	b = batch.Builder{}

	// The canary's requests wait for the budget behind the large ones,
	// in arrival order (as Kafka's queued.max.request.bytes): under -race
	// on a slow machine its metadata call waited past the client's
	// default 30 s request timeout (CI, once). Each request may take as
	// long as the test allows.
	cl, err := client.New([]string{s.Node.Addr()}, client.WithRequestTimeout(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(client.WithLinger(0), client.WithDeliveryTimeout(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, client.Record{Topic: "canary", Partition: 0, Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}

	// Sample the live heap and the client listener's bytes in flight
	// while the requests run.
	bs := startBudgetSampler(s, "client", 10*time.Millisecond)

	var calls sync.WaitGroup
	errs := make(chan error, requests+1)
	for range requests {
		calls.Go(func() {
			var resp sluicev1.ProduceResponse
			if err := s.Conn.Invoke(ctx, "/sluice.v1.Log/Produce", &raw, &resp, grpc.ForceCodecV2(preEncodedCodec{})); err != nil {
				errs <- err
				return
			}
			if c := resp.GetTopics()[0].GetPartitions()[0].GetErrorCode(); c != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
				errs <- fmt.Errorf("a 60 MB batch answered %v, want MESSAGE_TOO_LARGE", c)
			}
		})
	}
	var acked []string
	calls.Go(func() {
		for i := range 5 {
			v := fmt.Sprintf("during-%d", i)
			if _, err := p.SendSync(ctx, client.Record{Topic: "canary", Partition: 0, Value: []byte(v)}); err != nil {
				errs <- fmt.Errorf("canary: %w", err)
				return
			}
			acked = append(acked, v)
		}
	})
	calls.Wait()
	base, peakHeap, peakInFlight, limit := bs.stop(t)
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if limit != budget {
		t.Errorf("sluice_request_bytes_budget = %v, want %d", limit, budget)
	}
	// A client stream's message (the canary's, about 100 bytes) waits
	// until the largest message would fit and is then taken at its size:
	// a unary call admitted in between can leave the total over the
	// budget by that message (requestBudget.take). Found failing by 107
	// bytes on a loaded machine.
	if slack := float64(64 << 10); peakInFlight <= 0 || peakInFlight > budget+slack {
		t.Errorf("sluice_request_bytes_in_flight peaked at %v, want within (0, %d + %v]", peakInFlight, budget, slack)
	}
	mfs := scrape(t, s.Node.HTTPAddr())
	if v := mustSample(t, mfs, "sluice_request_budget_waits_total", "listener", "client"); v < 1 {
		t.Errorf("sluice_request_budget_waits_total = %v: no request waited", v)
	}
	wait.For(t, 10*time.Second, "every request's bytes given back", func() error {
		if v := mustSample(t, scrape(t, s.Node.HTTPAddr()), "sluice_request_bytes_in_flight", "listener", "client"); v != 0 {
			return fmt.Errorf("%v bytes in flight", v)
		}
		return nil
	})
	bound := uint64(2*budget + requests*cluster.StreamWindow + 64<<20)
	t.Logf("live heap %d MiB before, peak %d MiB (+%d MiB; bound +%d MiB); bytes in flight peaked at %.0f MiB",
		base>>20, peakHeap>>20, (peakHeap-base)>>20, bound>>20, peakInFlight/(1<<20))
	if peakHeap > base+bound {
		t.Errorf("the live heap grew by %d MiB, more than %d MiB", (peakHeap-base)>>20, bound>>20)
	}

	got := nodetest.Values(s.Fetch("canary", 0, 0, 0), 0)
	want := append([]string{"before"}, acked...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("canary partition holds %q, want %q", got, want)
	}
}

// budgetSampler samples the process's live heap every millisecond, and a
// listener's request budget metrics every scrapeEvery, while requests
// run.
type budgetSampler struct {
	base uint64 // the live heap when it started
	done chan struct{}
	wg   sync.WaitGroup

	mu                  sync.Mutex
	peakHeap            uint64
	peakInFlight, limit float64
	scrapeErr           error
}

func startBudgetSampler(s *nodetest.Single, listener string, scrapeEvery time.Duration) *budgetSampler {
	runtime.GC()
	b := &budgetSampler{base: liveHeap(), done: make(chan struct{})}
	b.wg.Go(func() {
		var scraped time.Time
		for {
			h := liveHeap()
			var mfs map[string]*dto.MetricFamily
			var err error
			if time.Since(scraped) >= scrapeEvery {
				mfs, err = getMetrics(s.Node.HTTPAddr())
				scraped = time.Now()
			}
			b.mu.Lock()
			b.peakHeap = max(b.peakHeap, h)
			if err != nil && b.scrapeErr == nil {
				b.scrapeErr = err
			}
			if v, ok := sample(mfs, "sluice_request_bytes_in_flight", "listener", listener); ok {
				b.peakInFlight = max(b.peakInFlight, v)
			}
			if v, ok := sample(mfs, "sluice_request_bytes_budget", "listener", listener); ok {
				b.limit = v
			}
			b.mu.Unlock()
			select {
			case <-b.done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	return b
}

// stop ends the sampling (failing t if a scrape failed) and returns the
// live heap at the start, its peak, and the budget's peak bytes in flight
// and limit.
func (b *budgetSampler) stop(t *testing.T) (base, peakHeap uint64, peakInFlight, limit float64) {
	t.Helper()
	close(b.done)
	b.wg.Wait()
	if b.scrapeErr != nil {
		t.Fatal(b.scrapeErr)
	}
	return b.base, b.peakHeap, b.peakInFlight, b.limit
}
