package api

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/sluice-io/sluice/auth"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
)

// Client quota enforcement (issue 33; docs/security.md "Quotas"). The
// rule — which quota applies, the rate, the throttle time — is
// auth.QuotaManager's; the handlers record each request's bytes there and
// apply the answer as Kafka's brokers do, never by refusing or dropping
// data:
//
//   - Produce and Fetch (unary): the request is served in full, then the
//     answer is held for the throttle time (at most until the call's
//     deadline) and carries it in throttle_time_ms.
//   - ProduceStream: the answer carries throttle_time_ms and is sent when
//     ready; the broker then reads nothing more from the stream for the
//     throttle time (Kafka's muted channel, KIP-219), so a client that
//     ignores the throttle is held all the same.
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

// record adds value of kind to the caller's usage and returns the
// throttle time. Only users' quotas apply: a Node principal (a broker
// calling another) is never throttled.
func (q *Quotas) record(ctx context.Context, kind auth.QuotaKind, value float64) time.Duration {
	if !q.active() || value <= 0 {
		return 0
	}
	p := auth.CallerFrom(ctx).Principal
	if p.Type != auth.UserType {
		return 0
	}
	th := q.m.Record(q.now(), p.Name, clientIDFrom(ctx), kind, value)
	if th.Time > 0 && q.Throttled != nil {
		q.Throttled(p.String(), kind, th.Time)
	}
	return th.Time
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
// drains: an answer is never held past the call's deadline (the client
// would take it for a timeout, and retry data already written), nor
// delays a shutdown.
func (s *Server) hold(ctx context.Context, d time.Duration) {
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
	case <-s.draining: // nil: never
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
