package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Client quotas, the client's side (KIP-219; docs/security.md "Quotas"):
// a broker answers a caller over its quota with throttle_time_ms (and
// holds the answer that long, or until the call's deadline). The client
// then sends nothing more to that broker until throttle_time_ms has
// passed since it sent the throttled request — after a held answer that
// is no wait at all; after an answer the broker could not hold (a short
// deadline, a ProduceStream), it is the rest of the throttle.

// ClientIDMetadataKey is the gRPC metadata key the client id is sent in
// (the broker's api.ClientIDMetadataKey).
const ClientIDMetadataKey = "client-id"

// WithClientID names the client to the brokers (Kafka's client.id): every
// call carries it in the "client-id" gRPC metadata key, and quotas may be
// set per client id. Default: none (only a client-id default quota
// matches).
func WithClientID(id string) Option {
	return func(c *clientConfig) error {
		c.clientID = id
		return nil
	}
}

// clientIDOptions add the client id to every call.
func clientIDOptions(id string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(metadata.AppendToOutgoingContext(ctx, ClientIDMetadataKey, id), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, ClientIDMetadataKey, id), desc, cc, method, opts...)
		}),
	}
}

// ThrottleStats sums the throttles the brokers answered a Producer or
// Consumer with.
type ThrottleStats struct {
	// Count is the answers with a throttle_time_ms above 0.
	Count int64
	// Total and Max are the sum and the largest of their throttle times.
	Total, Max time.Duration
}

// brokerThrottle is the time before which no request goes to each
// broker, and the stats. Safe for concurrent use.
type brokerThrottle struct {
	mu    sync.Mutex // guards the following
	until map[string]time.Time
	stats ThrottleStats
}

// observe notes an answer from addr to a request sent at sent that
// carried throttleMs.
func (t *brokerThrottle) observe(addr string, sent time.Time, throttleMs int32) {
	if throttleMs <= 0 {
		return
	}
	d := time.Duration(throttleMs) * time.Millisecond
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.until == nil {
		t.until = map[string]time.Time{}
	}
	if u := sent.Add(d); u.After(t.until[addr]) {
		t.until[addr] = u
	}
	t.stats.Count++
	t.stats.Total += d
	t.stats.Max = max(t.stats.Max, d)
}

// wait returns once a request may go to addr, or when done is closed
// (false).
func (t *brokerThrottle) wait(addr string, done <-chan struct{}) bool {
	t.mu.Lock()
	d := time.Until(t.until[addr])
	t.mu.Unlock()
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done:
		return false
	}
}

// snapshot is the stats so far.
func (t *brokerThrottle) snapshot() ThrottleStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}
