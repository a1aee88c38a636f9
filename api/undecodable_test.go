package api_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/codec"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// rawBytes is a gRPC codec that sends a *[]byte as it is and receives
// into one: a client sending bytes that are no valid request.
type rawBytes struct{}

func (rawBytes) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawBytes) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawBytes) Name() string { return codec.Name }

// Issue 29: a request whose bytes do not decode is the client's error —
// InvalidArgument, on both listeners, for unary methods (generated or
// decoded in place) and streams — not grpc-go's Internal; the node goes on
// serving.
func TestUndecodableRequestsAreInvalidArgument(t *testing.T) {
	tn := startNode(t, t.TempDir())
	garbage := []byte{0xff, 0xff, 0xff, 0xff} // a truncated varint tag
	raw := grpc.ForceCodecV2(rawBytes{})
	for _, c := range []struct {
		conn   *grpc.ClientConn
		method string
	}{
		{tn.conn, sluicev1.Log_Produce_FullMethodName},        // decoded in place (codec.ProduceRequest)
		{tn.conn, sluicev1.Log_Fetch_FullMethodName},          // generated
		{tn.conn, sluicev1.Admin_CreateTopics_FullMethodName}, // generated
		{tn.internal, internalv1.Replica_ReplicaFetch_FullMethodName},
	} {
		var out []byte
		err := c.conn.Invoke(ctx(t), c.method, &garbage, &out, raw)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s with garbage: %v, want InvalidArgument", c.method, err)
		}
	}
	st, err := tn.conn.NewStream(ctx(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, sluicev1.Log_ProduceStream_FullMethodName, raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&garbage); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := st.RecvMsg(&out); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ProduceStream with garbage: %v, want InvalidArgument", err)
	}
	// Still serving.
	tn.createTopic("t", 1, nil)
	if pr := tn.produceRaw("t", 0, makeBatch("v", 1, 1000)); pr.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("produce after the garbage: %v %s", pr.ErrorCode, pr.ErrorMessage)
	}
}

// Issue 29: an error names a client's string (a config key or value) by
// at most errs.MaxEcho bytes of it and its length: a long config value
// does not come back as an error as long. (Strings longer than a request
// may carry, and topic names longer than a topic's, are refused before
// decoding: api/limits.go.)
func TestErrorsDoNotEchoLongClientStrings(t *testing.T) {
	tn := startNode(t, t.TempDir())
	long := strings.Repeat("x", 30_000)
	for _, ct := range []*sluicev1.CreatableTopic{
		{Name: "bad-value", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": long}},
		{Name: "bad-key", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{long: "1"}},
		{Name: "bad-min-isr", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{"min.insync.replicas": long}},
		{Name: "bad-timestamp-type", NumPartitions: 1, ReplicationFactor: 1, Configs: map[string]string{"message.timestamp.type": long}},
	} {
		resp, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{ct}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Topics[0]
		if r.ErrorCode != sluicev1.ErrorCode_INVALID_CONFIG || len(r.ErrorMessage) > 1024 || !strings.Contains(r.ErrorMessage, "… (30000 bytes)") {
			t.Errorf("create %s: %v, a %d-byte message %.300q; want INVALID_CONFIG naming the string's first bytes and its length", r.Name, r.ErrorCode, len(r.ErrorMessage), r.ErrorMessage)
		}
	}
}
