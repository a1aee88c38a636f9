package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The gRPC methods whose messages carry record batches.
const (
	methodProduce            = "/sluice.v1.Log/Produce"
	methodProduceStream      = "/sluice.v1.Log/ProduceStream"
	methodFetch              = "/sluice.v1.Log/Fetch"
	methodReplicaFetch       = "/sluice.internal.v1.Replica/ReplicaFetch"
	methodReplicaFetchStream = "/sluice.internal.v1.Replica/ReplicaFetchStream"
)

// requestDurationBuckets spans a local acks=1 append (well under a
// millisecond) to a long-polling fetch or a slow acks=all produce
// (seconds).
var requestDurationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// grpcMetrics are the gRPC server's request metrics, updated by its
// interceptors (unary and stream). The label method is the full gRPC
// method name ("/sluice.v1.Log/Produce"): bounded by the services the
// server registers, as gRPC runs no interceptor for an unknown method.
// Safe for concurrent use.
type grpcMetrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	errors       *prometheus.CounterVec
	produceBytes prometheus.Counter
	fetchBytes   prometheus.Counter
	replicaBytes prometheus.Counter
}

// newGRPCMetrics creates the metrics, unregistered (see collectors).
func newGRPCMetrics() *grpcMetrics {
	return &grpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_server_requests_total",
			Help: "gRPC request messages received per method: one per unary call, one per message a client sends on a stream (each request of a ProduceStream or ReplicaFetchStream).",
		}, []string{"method"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_grpc_server_request_duration_seconds",
			Help:    "Time to answer a request per method: a unary call's handler time, and for ProduceStream each request from its receipt to its answer (acks=all waits included). Other streams are not timed.",
			Buckets: requestDurationBuckets,
		}, []string{"method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_grpc_server_errors_total",
			Help: "gRPC requests that failed per method and gRPC status code: unary calls and streams that ended with a non-OK status, and ProduceStream requests answered with an error (code as a unary Produce would have sent it).",
		}, []string{"method", "code"}),
		produceBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_produce_bytes_total",
			Help: "Record batch bytes received in produce requests (Produce and ProduceStream), whether appended or refused.",
		}),
		fetchBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_fetch_bytes_total",
			Help: "Record batch bytes sent to consumers in Fetch responses.",
		}),
		replicaBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_replica_fetch_bytes_total",
			Help: "Record batch bytes sent to follower replicas in replica fetch responses (this broker as a partition leader).",
		}),
	}
}

// collectors lists every metric of m, for registration.
func (m *grpcMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.errors, m.produceBytes, m.fetchBytes, m.replicaBytes}
}

// unary is the grpc.UnaryServerInterceptor that counts and times unary
// calls and the record bytes they carry.
func (m *grpcMetrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	m.requests.WithLabelValues(info.FullMethod).Inc()
	m.countRequestBytes(req)
	resp, err := handler(ctx, req)
	m.duration.WithLabelValues(info.FullMethod).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	} else {
		m.countResponseBytes(info.FullMethod, resp)
	}
	return resp, err
}

// stream is the grpc.StreamServerInterceptor that counts a stream's
// request messages, the record bytes its messages carry, times each
// ProduceStream request, and counts streams that end with an error.
func (m *grpcMetrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ms := &meteredStream{ServerStream: ss, m: m, method: info.FullMethod,
		requests: m.requests.WithLabelValues(info.FullMethod), duration: m.duration.WithLabelValues(info.FullMethod)}
	if info.FullMethod == methodProduceStream {
		ms.pending = map[int64]time.Time{}
	}
	err := handler(srv, ms)
	if err != nil {
		m.errors.WithLabelValues(info.FullMethod, status.Code(err).String()).Inc()
	}
	return err
}

// countRequestBytes adds the batches of a produce request to
// sluice_produce_bytes_total. It must run before the handler releases
// the request's buffer.
func (m *grpcMetrics) countRequestBytes(req any) {
	switch r := req.(type) {
	case *codec.ProduceRequest:
		m.produceBytes.Add(float64(produceBatchBytes(&r.ProduceRequestView)))
	case *codec.ProduceStreamRequest:
		m.produceBytes.Add(float64(produceBatchBytes(&r.Request)))
	}
}

// countResponseBytes adds the batches of a fetch response sent on method
// to sluice_fetch_bytes_total or sluice_replica_fetch_bytes_total.
func (m *grpcMetrics) countResponseBytes(method string, resp any) {
	switch r := resp.(type) {
	case *codec.OutgoingFetchResponse:
		if method == methodFetch {
			m.fetchBytes.Add(float64(fetchBatchBytes(r.FetchResponseView)))
		}
	case *internalv1.ReplicaFetchResponse:
		if method == methodReplicaFetch || method == methodReplicaFetchStream {
			m.replicaBytes.Add(float64(replicaFetchBatchBytes(r)))
		}
	case *codec.OutgoingReplicaFetchResponse:
		if method == methodReplicaFetch || method == methodReplicaFetchStream {
			m.replicaBytes.Add(float64(replicaFetchBatchBytes(r.ReplicaFetchResponse)))
		}
	}
}

// produceBatchBytes sums the record batches of a produce request.
func produceBatchBytes(r *internalv1.ProduceRequestView) int {
	n := 0
	for _, t := range r.GetTopics() {
		for _, p := range t.GetPartitions() {
			n += len(p.GetBatch())
		}
	}
	return n
}

// fetchBatchBytes sums the record batches of a Fetch response.
func fetchBatchBytes(r *internalv1.FetchResponseView) int {
	n := 0
	for _, t := range r.GetTopics() {
		for _, p := range t.GetPartitions() {
			for _, b := range p.GetBatches() {
				n += len(b)
			}
		}
	}
	return n
}

// replicaFetchBatchBytes sums the record batches of a replica fetch
// response.
func replicaFetchBatchBytes(r *internalv1.ReplicaFetchResponse) int {
	n := 0
	for _, p := range r.GetPartitions() {
		for _, b := range p.GetBatches() {
			n += len(b)
		}
	}
	return n
}

// maxPendingProduceTimings bounds the receipt times one ProduceStream
// keeps (the server answers at most api.MaxProduceStreamInFlight at a
// time; a client reusing a correlation id only loses a sample).
const maxPendingProduceTimings = 1024

// meteredStream wraps a server stream to count its messages. RecvMsg and
// SendMsg may run on different goroutines (gRPC allows one of each at a
// time), so the ProduceStream timings are guarded by mu.
type meteredStream struct {
	grpc.ServerStream
	m      *grpcMetrics
	method string
	// The method's series, looked up once per stream rather than per
	// message.
	requests prometheus.Counter
	duration prometheus.Observer

	mu      sync.Mutex          // guards the following
	pending map[int64]time.Time // ProduceStream: receipt time per correlation id; nil on other methods
}

// RecvMsg counts a request received, its batches, and on a ProduceStream
// its receipt time.
func (s *meteredStream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	if w, ok := msg.(interface{ Request() any }); ok {
		// A request received through a wrapper (api.LimitRequests checks
		// the bytes before decoding into the request it carries).
		msg = w.Request()
	}
	s.requests.Inc()
	s.m.countRequestBytes(msg)
	if r, ok := msg.(*codec.ProduceStreamRequest); ok && s.pending != nil {
		s.mu.Lock()
		if len(s.pending) < maxPendingProduceTimings {
			s.pending[r.CorrelationID] = time.Now()
		}
		s.mu.Unlock()
	}
	return nil
}

// SendMsg times a ProduceStream answer against its request's receipt
// and counts it as an error when it carries one, then counts the batches
// of a fetch response once sent.
func (s *meteredStream) SendMsg(msg any) error {
	if r, ok := msg.(*sluicev1.ProduceStreamResponse); ok && s.pending != nil {
		s.mu.Lock()
		start, found := s.pending[r.GetCorrelationId()]
		delete(s.pending, r.GetCorrelationId())
		s.mu.Unlock()
		if found {
			s.duration.Observe(time.Since(start).Seconds())
		}
		if c := r.GetErrorCode(); c != sluicev1.ErrorCode_NONE {
			s.m.errors.WithLabelValues(s.method, errs.GRPCCode(c).String()).Inc()
		}
	}
	err := s.ServerStream.SendMsg(msg)
	if err == nil {
		s.m.countResponseBytes(s.method, msg)
	}
	return err
}
