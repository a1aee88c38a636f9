package node_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Decision 41: the client listener serves the public services and health,
// the internal listener the inter-node services and health. Whoever
// reaches the client port gets UNIMPLEMENTED for an inter-node call, so a
// RegisterBroker there registers no phantom broker.
func TestClientListenerRefusesInternalServices(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	if s.Node.Addr() == s.Node.InternalAddr() {
		t.Fatalf("one address %s for both listeners", s.Node.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wantCode := func(what string, err error, want codes.Code) {
		t.Helper()
		if got := status.Code(err); got != want {
			t.Errorf("%s: %v (code %v), want %v", what, err, got, want)
		}
	}

	// The inter-node services on the client listener: UNIMPLEMENTED.
	client := s.Conn
	phantom := &internalv1.RegisterBrokerRequest{BrokerId: 99, Address: "phantom:1", InternalAddress: "phantom:2", IncarnationId: "p"}
	_, err := internalv1.NewControllerClient(client).RegisterBroker(ctx, phantom)
	wantCode("RegisterBroker on the client listener", err, codes.Unimplemented)
	_, err = internalv1.NewControllerClient(client).QuorumState(ctx, &internalv1.QuorumStateRequest{})
	wantCode("QuorumState on the client listener", err, codes.Unimplemented)
	_, err = internalv1.NewReplicaClient(client).ReplicaFetch(ctx, &internalv1.ReplicaFetchRequest{ReplicaId: 99})
	wantCode("ReplicaFetch on the client listener", err, codes.Unimplemented)
	_, err = internalv1.NewTxnBrokerClient(client).WriteTxnMarkers(ctx, &internalv1.WriteTxnMarkersRequest{BrokerId: 99})
	wantCode("WriteTxnMarkers on the client listener", err, codes.Unimplemented)
	// Registration goes through Raft synchronously: had the call been
	// served, the controller's image would hold broker 99 now.
	if b := s.Node.Controller().Image().Brokers[99]; b != nil {
		t.Fatalf("the client listener registered a phantom broker: %+v", b)
	}

	// The public services on the internal listener: UNIMPLEMENTED too.
	internal := s.Internal
	_, err = sluicev1.NewAdminClient(internal).Metadata(ctx, &sluicev1.MetadataRequest{})
	wantCode("Metadata on the internal listener", err, codes.Unimplemented)
	_, err = sluicev1.NewTransactionsClient(internal).InitProducerId(ctx, &sluicev1.InitProducerIdRequest{})
	wantCode("InitProducerId on the internal listener", err, codes.Unimplemented)

	// The internal listener serves the inter-node services.
	q, err := internalv1.NewControllerClient(internal).QuorumState(ctx, &internalv1.QuorumStateRequest{})
	if err != nil || q.NodeId != s.Node.Controller().NodeID() {
		t.Fatalf("QuorumState on the internal listener: %v, %v", q, err)
	}
	_, err = internalv1.NewReplicaClient(internal).ReplicaFetch(ctx, &internalv1.ReplicaFetchRequest{ReplicaId: 99, BrokerEpoch: 1})
	if status.Code(err) == codes.Unimplemented {
		t.Errorf("ReplicaFetch on the internal listener: %v", err)
	}
	// And the public services are served on the client listener.
	if _, err := s.Admin.Metadata(ctx, &sluicev1.MetadataRequest{}); err != nil {
		t.Errorf("Metadata on the client listener: %v", err)
	}

	// Health on both.
	for what, cc := range map[string]*grpc.ClientConn{"client": client, "internal": internal} {
		for _, svc := range []string{"", node.LivenessService} {
			resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health %q on the %s listener: %v, %v", svc, what, resp, err)
			}
		}
	}
}

// A node registers and gossips both addresses: clients get the client one
// in Metadata, the other nodes dial the internal one.
func TestNodeAdvertisesBothListeners(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	b := s.Node.Metadata().Image().Brokers[s.Node.Controller().NodeID()]
	if b == nil || b.Address != s.Node.Addr() || b.InternalAddress != s.Node.InternalAddr() {
		t.Fatalf("registration %+v, want address %s and internal address %s", b, s.Node.Addr(), s.Node.InternalAddr())
	}
	members := s.Node.GossipMembers()
	if len(members) != 1 || members[0].GRPCAddress != s.Node.Addr() || members[0].InternalAddress != s.Node.InternalAddr() {
		t.Errorf("gossip meta %+v, want grpc %s and internal %s", members, s.Node.Addr(), s.Node.InternalAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := s.Admin.Metadata(ctx, &sluicev1.MetadataRequest{})
	if err != nil || len(md.Brokers) != 1 || md.Brokers[0].Address != s.Node.Addr() {
		t.Fatalf("Metadata brokers %v, %v; want the client address %s", md.GetBrokers(), err, s.Node.Addr())
	}
}

// A node whose internal listener cannot bind does not start, says which
// listener failed, and leaves nothing behind: the data dir starts again.
func TestInternalListenerBindFailureStopsStart(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	cfg := nodetest.Config(t, dir)
	cfg.InternalListen = held.Addr().String()
	if n, err := node.Start(cfg); err == nil {
		n.Abort()
		t.Fatalf("a node started with its internal listener on %s, a port in use", cfg.InternalListen)
	} else if !strings.Contains(err.Error(), "listen internal") {
		t.Errorf("start error %q does not name the internal listener", err)
	}
	nodetest.StartSingle(t, dir, nil)
}
