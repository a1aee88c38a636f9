package node

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
)

// DefaultQueuedMaxRequestBytes is the default QueuedMaxRequestBytes, per
// listener: four requests of the largest size a listener takes
// (api.MaxMessageSize, 64 MiB) read at once, or 192 MiB of requests
// being served (48 of the Go client's 4 MiB requests waiting for
// acks=all) before the next one waits (decision 51).
const DefaultQueuedMaxRequestBytes = 256 << 20

// MinQueuedMaxRequestBytes is the smallest QueuedMaxRequestBytes: room for
// the largest request (api.MaxMessageSize) besides as much again held by
// requests being served (a long-lived stream holds its request for its
// whole life).
const MinQueuedMaxRequestBytes = 2 * api.MaxMessageSize

// errNodeDraining ends a wait for the request byte budget when the node
// stops serving.
var errNodeDraining = errors.New("node is shutting down")

// requestBudget is one gRPC listener's budget of request bytes in flight
// (issue 29; Kafka's queued.max.request.bytes; decision 51): a semaphore
// of bytes whose waiters are served in arrival order. A unary call holds
// reserve bytes (the largest message the listener accepts) from just
// before gRPC reads its message until the message has been read, then
// the message's size until its handler is done with it; a client
// stream's message is taken at its size once read (requestbudget_grpc.go).
// A request that finds the budget spent waits, bounded by its context
// and by the node draining; it is never refused for the budget alone.
// Safe for concurrent use.
type requestBudget struct {
	listener string // the listener's label value: client, internal
	limit    int64
	reserve  int64           // at most limit
	draining <-chan struct{} // closed when the node stops serving
	// readTimeout bounds a reserved read (requestReadTimeout; shorter in
	// tests).
	readTimeout time.Duration

	mu      sync.Mutex // guards the following
	used    int64      // bytes held; above limit only by what take took
	waiters list.List  // of *budgetWaiter, in arrival order

	waits, abandoned atomic.Uint64 // requests that had to wait; of those, the ones whose wait ended unadmitted
	waitNanos        atomic.Int64  // the time they waited, summed
}

// budgetWaiter is a request waiting for n bytes; ready is closed once
// they are its.
type budgetWaiter struct {
	n     int64
	ready chan struct{}
}

// newRequestBudget is a budget of limit bytes (at least reserve) for
// listener, whose waits end when draining closes.
func newRequestBudget(listener string, limit, reserve int64, draining <-chan struct{}) *requestBudget {
	return &requestBudget{listener: listener, limit: limit, reserve: min(reserve, limit), draining: draining, readTimeout: requestReadTimeout}
}

// newListenerBudgets returns the client and the internal gRPC listener's
// budgets and the Kafka listener's, of cfg.QueuedMaxRequestBytes each,
// whose waits end when draining closes. Each listener has its own so that
// clients cannot hold back the replication and the transaction markers
// their own requests wait for (decision 51), and so that one door's
// clients cannot hold back the other's.
func newListenerBudgets(cfg Config, draining <-chan struct{}) (client, internal, kafka *requestBudget) {
	limit := cfg.QueuedMaxRequestBytes
	if limit == 0 {
		limit = DefaultQueuedMaxRequestBytes
	}
	return newRequestBudget("client", limit, api.MaxMessageSize, draining),
		newRequestBudget("internal", limit, api.MaxMessageSize, draining),
		newRequestBudget("kafka", limit, api.MaxMessageSize, draining)
}

// acquire takes n bytes (at most the limit), waiting behind earlier
// waiters until they fit. It returns ctx's error, or errNodeDraining,
// with nothing taken if either ends the wait first.
func (b *requestBudget) acquire(ctx context.Context, n int64) error {
	n = min(n, b.limit)
	b.mu.Lock()
	if b.waiters.Len() == 0 && b.used+n <= b.limit {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.mu.Unlock()

	b.waits.Add(1)
	start := time.Now()
	defer func() { b.waitNanos.Add(int64(time.Since(start))) }()
	var err error
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-b.draining:
		err = errNodeDraining
	}
	b.mu.Lock()
	select {
	case <-w.ready:
		// Granted meanwhile: hand the bytes back.
		b.used -= n
	default:
		b.waiters.Remove(e)
	}
	// Either may let the next waiters in.
	b.grantLocked()
	b.mu.Unlock()
	b.abandoned.Add(1)
	return err
}

// await waits as acquire does until n bytes fit, but takes nothing.
func (b *requestBudget) await(ctx context.Context, n int64) error {
	if err := b.acquire(ctx, n); err != nil {
		return err
	}
	b.release(min(n, b.limit))
	return nil
}

// take takes n bytes at once, even beyond the limit (bytes already read:
// later requests wait until the budget is under its limit again).
func (b *requestBudget) take(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// release gives back n bytes taken by acquire or take.
func (b *requestBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked admits waiters in arrival order while the first one fits.
// b.mu must be held.
func (b *requestBudget) grantLocked() {
	for e := b.waiters.Front(); e != nil; e = b.waiters.Front() {
		w := e.Value.(*budgetWaiter)
		if b.used+w.n > b.limit {
			return
		}
		b.used += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// kafkaBudget is a requestBudget as the Kafka listener takes it
// (kafka.RequestBudget): a frame's size is known before its body is read,
// so it acquires exactly that.
type kafkaBudget struct{ b *requestBudget }

func (k kafkaBudget) Acquire(ctx context.Context, n int64) error { return k.b.acquire(ctx, n) }

func (k kafkaBudget) Release(n int64) { k.b.release(min(n, k.b.limit)) }

// state is the bytes held and the requests waiting now.
func (b *requestBudget) state() (used int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waiters.Len()
}

// requestBudgetCollector is the prometheus.Collector of the nodes'
// request byte budgets, one series per listener. It holds no state.
type requestBudgetCollector struct {
	budgets []*requestBudget

	inFlight, limit, waiting, waits, waitSeconds, abandoned *prometheus.Desc
}

func newRequestBudgetCollector(budgets ...*requestBudget) *requestBudgetCollector {
	listener := []string{"listener"}
	return &requestBudgetCollector{
		budgets: budgets,
		inFlight: prometheus.NewDesc("sluice_request_bytes_in_flight",
			"Request bytes the listener (client, internal, kafka) holds: the size of every request received and not yet done with, plus the largest message size for each request being read. Above sluice_request_bytes_budget only by client-stream messages read while it was spent (each waits until the largest message would fit, then is taken at its size).", listener, nil),
		limit: prometheus.NewDesc("sluice_request_bytes_budget",
			"The listener's budget of request bytes in flight (--queued-max-request-bytes).", listener, nil),
		waiting: prometheus.NewDesc("sluice_request_budget_waiting",
			"Requests waiting for the listener's request byte budget before their message is read.", listener, nil),
		waits: prometheus.NewDesc("sluice_request_budget_waits_total",
			"Requests that had to wait for the listener's request byte budget before their message was read.", listener, nil),
		waitSeconds: prometheus.NewDesc("sluice_request_budget_wait_seconds_total",
			"Time requests waited for the listener's request byte budget, summed.", listener, nil),
		abandoned: prometheus.NewDesc("sluice_request_budget_abandoned_total",
			"Waits for the request byte budget that ended before the request was admitted: its deadline passed, the client cancelled it, or the node began shutting down.", listener, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *requestBudgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.limit, c.waiting, c.waits, c.waitSeconds, c.abandoned} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *requestBudgetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.budgets {
		used, waiting := b.state()
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(used), b.listener)
		ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(b.limit), b.listener)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(waiting), b.listener)
		ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(b.waits.Load()), b.listener)
		ch <- prometheus.MustNewConstMetric(c.waitSeconds, prometheus.CounterValue, time.Duration(b.waitNanos.Load()).Seconds(), b.listener)
		ch <- prometheus.MustNewConstMetric(c.abandoned, prometheus.CounterValue, float64(b.abandoned.Load()), b.listener)
	}
}
