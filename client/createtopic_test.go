package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// registeringAdmin refuses the first CreateTopics as a starting cluster
// does ("larger than the 0 live brokers") while its Metadata already
// lists the broker: the broker registered between the controller's
// refusal and the client's look. Later creates succeed, or, with
// tooFew, keep refusing (there really are too few brokers).
type registeringAdmin struct {
	*fakeBroker
	tooFew  bool
	creates atomic.Int64
}

func (a *registeringAdmin) CreateTopics(_ context.Context, req *sluicev1.CreateTopicsRequest) (*sluicev1.CreateTopicsResponse, error) {
	t := req.Topics[0]
	if a.creates.Add(1) == 1 || a.tooFew {
		return &sluicev1.CreateTopicsResponse{Topics: []*sluicev1.CreatableTopicResult{{Name: t.Name,
			ErrorCode: sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR, ErrorMessage: "replication factor 1 is larger than the 0 live brokers"}}}, nil
	}
	return &sluicev1.CreateTopicsResponse{Topics: []*sluicev1.CreatableTopicResult{{Name: t.Name, NumPartitions: t.NumPartitions, ReplicationFactor: 1}}}, nil
}

func startRegisteringAdmin(t *testing.T, tooFew bool) (*registeringAdmin, string) {
	t.Helper()
	a := &registeringAdmin{fakeBroker: startFake(t, nil), tooFew: tooFew}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The fake's metadata lists this server as broker 1 (no client yet).
	a.fakeBroker.addr = l.Addr().String()
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, a)
	done := make(chan struct{})
	go func() { defer close(done); s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return a, l.Addr().String()
}

// Rule (CreateTopic): a refusal for "0 live brokers" is retried while the
// metadata lists no broker, and once more, at once, when it lists some —
// the broker may have registered between the refusal and the look
// (e2e TestCLIFreshNodeUsableAtOnce failed so under load). A refusal that
// stands with brokers listed is returned, after that one retry.
func TestCreateTopicRetriesARefusalOlderThanTheBrokersRegistration(t *testing.T) {
	a, addr := startRegisteringAdmin(t, false)
	c, err := New([]string{addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.CreateTopic(context.Background(), "q", 1, 1, nil); err != nil {
		t.Fatalf("create after the broker registered: %v", err)
	}
	if n := a.creates.Load(); n != 2 {
		t.Fatalf("%d creates, want 2", n)
	}

	few, addr := startRegisteringAdmin(t, true)
	c2, err := New([]string{addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	start := time.Now()
	err = c2.CreateTopic(context.Background(), "q", 1, 1, nil)
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
		t.Fatalf("create with too few brokers: %v, want INVALID_REPLICATION_FACTOR", err)
	}
	if n := few.creates.Load(); n != 2 {
		t.Fatalf("%d creates of a standing refusal, want 2", n)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a standing refusal took %v, want it at once", d)
	}
}
