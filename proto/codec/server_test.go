package codec_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sluice-io/sluice/proto/codec"
)

// rawCodec sends a *[]byte as it is and receives into one: a client that
// can send bytes that are not a valid message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return codec.Name }

// serve starts a gRPC server with codec.ServerOptions and the health
// service registered through register, and returns a connection to it.
func serve(t *testing.T, register func(*grpc.Server) grpc.ServiceRegistrar) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(codec.ServerOptions()...)
	healthpb.RegisterHealthServer(register(s), health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// garbage are request bytes that are no HealthCheckRequest: a truncated
// varint tag, and a string field that is not UTF-8.
var garbage = map[string][]byte{"truncated": {0xff, 0xff, 0xff}, "not UTF-8": {0x0a, 0x02, 0xff, 0xfe}}

// Issue 29: a request whose bytes do not decode is the client's error
// (InvalidArgument), on a unary method and on a stream, where grpc-go
// alone answers Internal; a valid request is served as before.
func TestServerAnswersUndecodableRequestsInvalidArgument(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wrapped := serve(t, func(s *grpc.Server) grpc.ServiceRegistrar { return codec.Server{Server: s} })
	plain := serve(t, func(s *grpc.Server) grpc.ServiceRegistrar { return s })
	for name, in := range garbage {
		var out []byte
		err := wrapped.Invoke(ctx, healthpb.Health_Check_FullMethodName, &in, &out, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "the request does not decode") {
			t.Errorf("%s, unary: %v, want InvalidArgument saying the request does not decode", name, err)
		}
		st, err := wrapped.NewStream(ctx, &healthpb.Health_ServiceDesc.Streams[0], healthpb.Health_Watch_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(&in); err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s, stream: %v, want InvalidArgument", name, err)
		}
		// What grpc-go answers without codec.Server.
		if err := plain.Invoke(ctx, healthpb.Health_Check_FullMethodName, &in, &out, grpc.ForceCodecV2(rawCodec{})); status.Code(err) != codes.Internal {
			t.Errorf("%s, plain server: %v, want grpc-go's Internal", name, err)
		}
	}
	resp, err := healthpb.NewHealthClient(wrapped).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("a valid request: %v %v", resp, err)
	}
}
