// Package api holds Sluice's gRPC service handlers: they validate requests,
// route them to the replica manager and translate errors. Business rules
// live in cluster/ and storage/.
package api

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/codec"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Limits applied to every request.
const (
	// MaxMessageSize bounds gRPC messages both ways; it is above the
	// largest accepted batch (storage caps max.message.bytes lower).
	MaxMessageSize = 64 << 20
	// DefaultProduceTimeout is used when a ProduceRequest has timeout_ms 0.
	DefaultProduceTimeout = 30 * time.Second
	// MaxFetchWait caps FetchRequest.max_wait_ms.
	MaxFetchWait = 30 * time.Second
	// DefaultFetchMaxBytes is used when FetchRequest.max_bytes is 0.
	DefaultFetchMaxBytes = 50 << 20
	// DefaultPartitionMaxBytes is used when partition_max_bytes is 0.
	DefaultPartitionMaxBytes = 1 << 20
)

// Broker describes this node for Metadata.
type Broker struct {
	NodeID  int32
	Address string // advertised host:port
	Rack    string
}

// Server implements sluice.v1.Log and sluice.v1.Admin on a broker.
type Server struct {
	sluicev1.UnimplementedAdminServer

	replicas    *cluster.ReplicaManager
	cache       *cluster.MetadataCache
	controllers *cluster.ControllerClient
	pool        *cluster.ConnPool
	self        Broker
	log         *slog.Logger
	now         func() time.Time
	draining    <-chan struct{}
	authz       *Authz  // nil: no authorization
	quotas      *Quotas // nil: no quotas
}

// ServerConfig is what a Server needs.
type ServerConfig struct {
	Replicas    *cluster.ReplicaManager
	Metadata    *cluster.MetadataCache
	Controllers *cluster.ControllerClient
	Pool        *cluster.ConnPool
	Self        Broker
	Logger      *slog.Logger
	// Draining, when closed, ends the open ProduceStreams with UNAVAILABLE
	// (the node is stopping); nil never does.
	Draining <-chan struct{}
	// Now may be nil (time.Now).
	Now func() time.Time
	// Authz authorizes the callers (nil: everything allowed).
	Authz *Authz
	// Quotas throttles the callers over their client quotas (nil: none;
	// throttle.go).
	Quotas *Quotas
}

// NewServer returns a broker's server.
func NewServer(cfg ServerConfig) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{replicas: cfg.Replicas, cache: cfg.Metadata, controllers: cfg.Controllers, pool: cfg.Pool,
		self: cfg.Self, log: cfg.Logger, now: cfg.Now, draining: cfg.Draining, authz: cfg.Authz,
		quotas: cfg.Quotas}
}

// leaders is the shared answer of which partitions this broker leads
// (cluster.Leaders).
func (s *Server) leaders() cluster.Leaders {
	return cluster.Leaders{Self: s.self.NodeID, Replicas: s.replicas, Cache: s.cache}
}

// metadataLoaded is cluster.Leaders.MetadataLoaded.
func (s *Server) metadataLoaded() error { return s.leaders().MetadataLoaded() }

// leaderPartition is cluster.Leaders.Partition.
func (s *Server) leaderPartition(topic string, partition int32) (*cluster.Replica, error) {
	return s.leaders().Partition(topic, partition)
}

// notLeaderError is cluster.Leaders.NotLeaderError.
func (s *Server) notLeaderError(topic string, partition int32) error {
	return s.leaders().NotLeaderError(topic, partition)
}

// leaderHint is the LeaderHint to attach to a NOT_LEADER_OR_FOLLOWER
// answer, or nil.
func (s *Server) leaderHint(topic string, partition int32, code sluicev1.ErrorCode) *sluicev1.LeaderHint {
	h, ok := s.leaders().Hint(topic, partition, code)
	if !ok {
		return nil
	}
	return &sluicev1.LeaderHint{LeaderId: h.LeaderID, LeaderEpoch: h.LeaderEpoch, Address: h.Address}
}

// Register adds the Log and Admin services to g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	g.RegisterService(&logServiceDesc, s)
	sluicev1.RegisterAdminServer(g, s)
}

// logService is the handler type of logServiceDesc: the public
// sluice.v1.Log service, decoded through the server views.
type logService interface {
	produceAliased(context.Context, *codec.ProduceRequest) (*sluicev1.ProduceResponse, error)
	produceStream(grpc.ServerStream) error
	Fetch(context.Context, *sluicev1.FetchRequest) (any, error)
	ListOffsets(context.Context, *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error)
}

// logServiceDesc registers sluice.v1.Log by hand so that Produce requests
// are decoded as ProduceRequestView (batches stay bytes; with codec.Codec,
// slices of the received buffer) and Fetch responses
// are encoded from FetchResponseView (segment bytes referenced, not
// decoded or copied: codec.OutgoingFetchResponse).
// Both views are wire-compatible with the public messages (DESIGN §4).
var logServiceDesc = grpc.ServiceDesc{
	ServiceName: "sluice.v1.Log",
	HandlerType: (*logService)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Produce", Handler: unary("/sluice.v1.Log/Produce", func(s logService, ctx context.Context, in *codec.ProduceRequest) (any, error) {
			return s.produceAliased(ctx, in)
		})},
		{MethodName: "Fetch", Handler: unary("/sluice.v1.Log/Fetch", func(s logService, ctx context.Context, in *sluicev1.FetchRequest) (any, error) {
			return s.Fetch(ctx, in)
		})},
		{MethodName: "ListOffsets", Handler: unary("/sluice.v1.Log/ListOffsets", func(s logService, ctx context.Context, in *sluicev1.ListOffsetsRequest) (any, error) {
			return s.ListOffsets(ctx, in)
		})},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "ProduceStream", ServerStreams: true, ClientStreams: true, Handler: func(srv any, ss grpc.ServerStream) error {
			return srv.(logService).produceStream(ss)
		}},
	},
	Metadata: "sluice/v1/sluice.proto",
}

// unary adapts a typed handler to grpc's method handler signature.
func unary[Req any](method string, call func(logService, context.Context, *Req) (any, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(srv.(logService), ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: method}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return call(srv.(logService), ctx, req.(*Req))
		})
	}
}
