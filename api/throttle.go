package api

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-io/sluice/auth"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// Client quota enforcement (issue 33; docs/security.md "Quotas"). The
// rule — which quota applies, what the caller owes, the throttle time —
// is auth.QuotaManager's; the handlers record each request's bytes and
// handling time there and apply the answer as Kafka's brokers do, never
// by refusing or dropping data:
//
//   - Produce and Fetch (unary): the request is served in full, then the
//     answer is held for the throttle time (at most until the call's
//     deadline) and carries it in throttle_time_ms.
//   - ProduceStream: the answer carries throttle_time_ms and is sent when
//     ready; the broker then reads nothing more from the stream for the
//     throttle time (Kafka's muted channel, KIP-219), so a client that
//     ignores the throttle is held all the same.
//   - The other unary RPCs answered from this broker's memory
//     (requestQuotaMethods): their answer is held for the request quota's
//     throttle time; they have no throttle_time_ms to carry it.
//
// A request under both a byte-rate and a request quota is throttled for
// the longer of the two (Kafka's max of the bandwidth and request
// throttles); each is counted under its own kind.
//
// A client honours throttle_time_ms by sending its next request to the
// broker no sooner than throttle_time_ms after it sent the throttled one
// (the Go client does): with the broker's hold, that is no extra wait.

// ClientIDMetadataKey is the gRPC metadata key a client states its client
// id in (Kafka's client.id): quotas may be set per client id. A call
// without it has the empty client id, which only the client-id default
// matches.
const ClientIDMetadataKey = "client-id"

// maxClientIDLength bounds the client id read from metadata: a longer one
// is cut (a quota cannot name it: controller.MaxQuotaNameLength).
const maxClientIDLength = 1024

// Quotas is the handlers' quota enforcement (nil: none). Safe for
// concurrent use.
type Quotas struct {
	m   *auth.QuotaManager
	now func() time.Time
	// any is whether a quota is in force: without one, requests are not
	// measured at all (no per-request cost on produce and fetch).
	any atomic.Bool
	// requests is whether a request_percentage quota is in force: without
	// one, the handlers do not time their requests.
	requests atomic.Bool
	// Throttled, if set, is told of each throttled answer: the caller's
	// principal, the kind of quota and the throttle time (metrics). Set
	// before the Quotas is used.
	Throttled func(principal string, kind auth.QuotaKind, d time.Duration)
}

// NewQuotas returns the enforcement of m's decisions (now nil: time.Now).
func NewQuotas(m *auth.QuotaManager, now func() time.Time) *Quotas {
	if now == nil {
		now = time.Now
	}
	return &Quotas{m: m, now: now}
}

// Set puts the quotas of t in force.
func (q *Quotas) Set(t *auth.QuotaTable) {
	q.m.SetTable(t)
	q.any.Store(t != nil && t.Len() > 0)
	q.requests.Store(t.Has(auth.QuotaRequest))
}

// active reports whether any quota is in force.
func (q *Quotas) active() bool { return q != nil && q.any.Load() }

// clientIDFrom is the client id ctx's call stated (ClientIDMetadataKey),
// or "".
func clientIDFrom(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	v := md.Get(ClientIDMetadataKey)
	if len(v) == 0 {
		return ""
	}
	id := v[0]
	if len(id) > maxClientIDLength {
		id = id[:maxClientIDLength]
	}
	return id
}

// charge records a request's usage against the caller's quotas — bytes
// of kind (nothing when 0) and, when rt measured it, its handling time —
// and returns how long to throttle it: the longer of the two quotas'
// throttles. Only users' quotas apply: a Node principal (a broker calling
// another) is never throttled.
func (q *Quotas) charge(ctx context.Context, kind auth.QuotaKind, bytes int, rt *requestTimer) time.Duration {
	if !q.active() {
		return 0
	}
	p := auth.CallerFrom(ctx).Principal
	if p.Type != auth.UserType {
		return 0
	}
	clientID := clientIDFrom(ctx)
	now := q.now()
	var d time.Duration
	if bytes > 0 {
		d = q.record(now, p, clientID, kind, float64(bytes))
	}
	if handling := rt.handling(); handling > 0 {
		d = max(d, q.record(now, p, clientID, auth.QuotaRequest, handling.Seconds()))
	}
	return d
}

// record adds value of kind to p's usage and returns the throttle time,
// counted (Throttled) under kind.
func (q *Quotas) record(now time.Time, p auth.Principal, clientID string, kind auth.QuotaKind, value float64) time.Duration {
	th := q.m.Record(now, p.Name, clientID, kind, value)
	if th.Time > 0 && q.Throttled != nil {
		q.Throttled(p.String(), kind, th.Time)
	}
	return th.Time
}

// requestTimer measures a request's handling time for the request quota
// (request_percentage, Kafka's KIP-124: the time a caller's requests take
// of the broker's request handling): from the handler's start to its
// answer — the batches appended or the data read, and the answer built —
// less the waits that are not this broker's work: the acks=all wait for
// the ISR, a fetch's long poll for data, the transaction coordinator's
// verification of a transactional produce. The zero value (no request
// quota in force) measures nothing and costs nothing; a nil *requestTimer
// is the zero value. Not safe for concurrent use: one per request, on the
// handler's goroutine.
type requestTimer struct {
	start    time.Time     // zero: not measuring
	excluded time.Duration // waits taken out (negative: work of other goroutines added)
}

// startRequest starts timing a request if a request quota is in force.
func (q *Quotas) startRequest() requestTimer {
	if q == nil || !q.requests.Load() {
		return requestTimer{}
	}
	return requestTimer{start: time.Now()}
}

// waitStart returns the time a wait starts, zero when not measuring: pass
// it to waited when the wait ends.
func (t *requestTimer) waitStart() time.Time {
	if t == nil || t.start.IsZero() {
		return time.Time{}
	}
	return time.Now()
}

// waited takes the time since start (waitStart's) out of the handling
// time.
func (t *requestTimer) waited(start time.Time) {
	if !start.IsZero() {
		t.excluded += time.Since(start)
	}
}

// exclude takes d out of the handling time (negative: adds work done on
// other goroutines for the request).
func (t *requestTimer) exclude(d time.Duration) {
	if t != nil && !t.start.IsZero() {
		t.excluded += d
	}
}

// handling is the request's handling time so far (0 when not measuring).
func (t *requestTimer) handling() time.Duration {
	if t == nil || t.start.IsZero() {
		return 0
	}
	return max(time.Since(t.start)-t.excluded, 0)
}

// throttleMs is d in whole milliseconds, rounded up (a throttle is never
// reported as 0), as throttle_time_ms carries it.
func throttleMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	return int32((d + time.Millisecond - 1) / time.Millisecond)
}

// hold waits d, or until ctx ends or its deadline comes, or the node
// drains (holdAnswer).
func (s *Server) hold(ctx context.Context, d time.Duration) { holdAnswer(ctx, d, s.draining) }

// holdAnswer waits d, or until ctx ends or its deadline comes, or
// draining is closed (nil: never): an answer is never held past the
// call's deadline (the client would take it for a timeout, and retry data
// already written), nor delays a shutdown.
func holdAnswer(ctx context.Context, d time.Duration, draining <-chan struct{}) {
	if d <= 0 {
		return
	}
	if dl, ok := ctx.Deadline(); ok {
		// Leave the answer time to travel back.
		d = min(d, time.Until(dl)-50*time.Millisecond)
		if d <= 0 {
			return
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-draining:
	}
}

// requestQuotaMethods are the unary RPCs besides Produce and Fetch whose
// time the request quota counts (RequestQuotaInterceptor): those a broker
// answers from its memory — its metadata image, its partitions' offsets,
// its coordinators' state — so that the whole call is work. The RPCs that
// wait (for the controller, a coordinator's write, a rebalance, another
// broker) are not timed: a wall clock would count the wait as work.
var requestQuotaMethods = map[string]bool{
	"/sluice.v1.Log/ListOffsets":                    true,
	"/sluice.v1.Admin/Metadata":                     true,
	"/sluice.v1.Admin/DescribeCluster":              true,
	"/sluice.v1.Admin/ListPartitionReassignments":   true,
	"/sluice.v1.Admin/DescribeProducers":            true,
	"/sluice.v1.Admin/DescribeUserScramCredentials": true,
	"/sluice.v1.Admin/DescribeAcls":                 true,
	"/sluice.v1.Admin/DescribeClientQuotas":         true,
	"/sluice.v1.Groups/OffsetFetch":                 true,
	"/sluice.v1.Groups/ListGroups":                  true,
	"/sluice.v1.Groups/DescribeGroups":              true,
}

// RequestQuotaInterceptor is the unary server interceptor of the request
// quota for the RPCs of requestQuotaMethods: while a request_percentage
// quota is in force it times each such call and holds its answer for
// the throttle time (not past its deadline, nor once draining is
// closed). It must run after the interceptor that authenticates the
// caller (auth.CallerFrom). Without q, or without a request quota, it
// only calls the handler.
func RequestQuotaInterceptor(q *Quotas, draining <-chan struct{}) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !requestQuotaMethods[info.FullMethod] {
			return handler(ctx, req)
		}
		rt := q.startRequest()
		resp, err := handler(ctx, req)
		holdAnswer(ctx, q.charge(ctx, auth.QuotaRequest, 0, &rt), draining)
		return resp, err
	}
}

// produceBytes is the bytes of a produce request's batches: what
// producer_byte_rate counts (0 without quotas: nothing counts them).
func (q *Quotas) produceBytes(req *internalv1.ProduceRequestView) int {
	if !q.active() {
		return 0
	}
	n := 0
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			n += len(p.Batch)
		}
	}
	return n
}

// fetchBytes is the bytes of a fetch answer's batches: what
// consumer_byte_rate counts (0 without quotas).
func (q *Quotas) fetchBytes(resp *internalv1.FetchResponseView) int {
	if !q.active() {
		return 0
	}
	n := 0
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			for _, b := range p.Batches {
				n += len(b)
			}
		}
	}
	return n
}

// Charge records a request of another door (the Kafka listener) against
// p's quotas: bytes of kind (nothing when 0) and its handling time (none
// when 0), and returns how long to throttle it — the longer of the two
// quotas' throttles. Only users' quotas apply. It costs nothing while no
// quota is in force.
func (q *Quotas) Charge(p auth.Principal, clientID string, kind auth.QuotaKind, bytes int, handling time.Duration) time.Duration {
	if !q.active() || p.Type != auth.UserType {
		return 0
	}
	if len(clientID) > maxClientIDLength {
		clientID = clientID[:maxClientIDLength]
	}
	now := q.now()
	var d time.Duration
	if bytes > 0 {
		d = q.record(now, p, clientID, kind, float64(bytes))
	}
	if handling > 0 && q.requests.Load() {
		d = max(d, q.record(now, p, clientID, auth.QuotaRequest, handling.Seconds()))
	}
	return d
}

// Active reports whether any quota is in force (a door then measures
// its requests).
func (q *Quotas) Active() bool { return q.active() }
