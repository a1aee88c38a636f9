package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Authorization of the Log and Admin services (issue 33): every RPC asks
// for what auth.Operations lists for it, as Kafka asks for the request it
// mirrors. TestAuthorizationLogAdmin walks the table, so an RPC added to
// it (or a requirement changed) is tested, or the test says what is
// missing: a probe in authzProbes, or a named test for a condition.

// authzPrincipalKey is the metadata key in which a caller of an authzHarness
// server names itself (User:<value>). The node's own authentication is
// tested in node/; here only who the caller is matters.
const authzPrincipalKey = "x-test-principal"

// authzUser is the caller the tests authorize.
const authzUser = "alice"

// authzAs is a context whose calls to an authzHarness server are user's.
func authzAs(t *testing.T, user string) context.Context {
	return metadata.AppendToOutgoingContext(ctx(t), authzPrincipalKey, user)
}

// authzCallerOf is ctx with the caller its authzPrincipalKey names (none: as it
// is, ANONYMOUS).
func authzCallerOf(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(authzPrincipalKey); len(v) > 0 {
			return auth.WithCaller(ctx, auth.Caller{Principal: auth.User(v[0]), Method: auth.MethodNone})
		}
	}
	return ctx
}

// authzCallerStream is a server stream whose context carries its caller.
type authzCallerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s authzCallerStream) Context() context.Context { return s.ctx }

// authzHarness is a single node, and its Log and Admin services served
// again — on its replica manager, metadata cache and controller — by an
// api.Server that authorizes (on) and by one that does not (off), each
// on a listener of the test whose callers name themselves (authzPrincipalKey).
// tn, the node's own connection, sets things up, unauthorized.
type authzHarness struct {
	tn      *testNode
	authz   *api.Authz
	on, off *grpc.ClientConn
	seq     int // names the resources of each case

	mu      sync.Mutex
	denials map[auth.ResourceType]int // guarded by mu: denials counted by Authz
}

func newAuthzHarness(t *testing.T) *authzHarness {
	t.Helper()
	h := &authzHarness{tn: startNode(t, t.TempDir()), denials: map[auth.ResourceType]int{}}
	h.authz = api.NewAuthz(auth.NewAuthorizer(nil, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.authz.Denied = func(rt auth.ResourceType) {
		h.mu.Lock()
		h.denials[rt]++
		h.mu.Unlock()
	}
	h.on = serveLogAdmin(t, h.tn.node, h.tn.node.InternalAddr(), h.authz)
	h.off = serveLogAdmin(t, h.tn.node, h.tn.node.InternalAddr(), nil)
	return h
}

// serveLogAdmin serves the Log and Admin services on n's replicas and
// metadata, authorized by authz (nil: not at all), forwarding to the
// controller at controllerAddr, on a listener of the test whose callers
// name themselves in authzPrincipalKey; it returns a connection to it.
func serveLogAdmin(t *testing.T, n *node.Node, controllerAddr string, authz *api.Authz) *grpc.ClientConn {
	t.Helper()
	pool := cluster.NewConnPool()
	t.Cleanup(func() { pool.Close() })
	// nodetest's single node is node 1.
	ctl := cluster.NewControllerClient(pool, func() []cluster.ControllerEndpoint {
		return []cluster.ControllerEndpoint{{ID: 1, Address: controllerAddr}}
	})
	srv := api.NewServer(api.ServerConfig{Replicas: n.Replicas(), Metadata: n.Metadata(), Controllers: ctl, Pool: pool,
		Self: api.Broker{NodeID: 1, Address: n.Addr()}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Authz: authz})
	g := grpc.NewServer(append(codec.ServerOptions(),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(authzCallerOf(ctx), req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, authzCallerStream{ServerStream: ss, ctx: authzCallerOf(ss.Context())})
		}))...)
	srv.Register(codec.Server{Server: g})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis) // ends with Stop
	t.Cleanup(g.Stop)
	return nodetest.Dial(t, lis.Addr().String())
}

// setACLs makes acls (and superUsers, as principals) the authorizer's.
func (h *authzHarness) setACLs(acls []auth.ACL, superUsers ...string) {
	h.authz.Set(auth.NewAuthorizer(acls, superUsers))
}

// denied is the number of denials of rt counted so far.
func (h *authzHarness) denied(rt auth.ResourceType) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.denials[rt]
}

// createTopics creates one-partition topics through the node, unauthorized.
func (h *authzHarness) createTopics(t *testing.T, names ...string) {
	t.Helper()
	req := &sluicev1.CreateTopicsRequest{}
	for _, name := range names {
		req.Topics = append(req.Topics, &sluicev1.CreatableTopic{Name: name, NumPartitions: 1, ReplicationFactor: 1})
	}
	resp, err := h.tn.admin.CreateTopics(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Topics {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("create %s: %v %s", r.Name, r.ErrorCode, r.ErrorMessage)
		}
	}
}

// produce appends one record to partition 0 of each topic through the
// node, unauthorized.
func (h *authzHarness) produce(t *testing.T, topics ...string) {
	t.Helper()
	for _, topic := range topics {
		resp, err := h.tn.log.Produce(ctx(t), publicRequest(t, sluicev1.Acks_ACKS_ALL, topic, 0, "v", 1))
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("produce to %s: %v %s", topic, p.ErrorCode, p.ErrorMessage)
		}
	}
}

// highWatermark is partition 0's high watermark, as the node says.
func (h *authzHarness) highWatermark(t *testing.T, topic string) int64 {
	t.Helper()
	resp, err := h.tn.log.ListOffsets(ctx(t), &sluicev1.ListOffsetsRequest{IsolationLevel: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED,
		Topics: []*sluicev1.ListOffsetsTopic{{Name: topic, Partitions: []*sluicev1.ListOffsetsPartition{{Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}}}}})
	if err != nil {
		t.Fatal(err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("high watermark of %s: %v %s", topic, p.ErrorCode, p.ErrorMessage)
	}
	return p.Offset
}

// topicExists reports whether the node's metadata has topic.
func (h *authzHarness) topicExists(t *testing.T, topic string) bool {
	t.Helper()
	resp, err := h.tn.admin.Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{topic}, ExcludeConfigs: true})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Topics[0].ErrorCode == sluicev1.ErrorCode_NONE
}

// authzOutcome is how an RPC answered for the resource under test: the
// item's code and message (grpc OK) or the request's refusal.
type authzOutcome struct {
	code sluicev1.ErrorCode
	grpc codes.Code
	msg  string
}

func authzItemOutcome(code sluicev1.ErrorCode, msg string) authzOutcome {
	return authzOutcome{code: code, grpc: codes.OK, msg: msg}
}

// authzRequestOutcome is the outcome of a call that answered err (nil: served).
func authzRequestOutcome(err error) authzOutcome {
	if err == nil {
		return authzOutcome{grpc: codes.OK}
	}
	e, _ := errs.FromStatus(err)
	return authzOutcome{code: errs.Code(e), grpc: status.Code(err), msg: status.Convert(err).Message()}
}

// authorizationFailed reports whether o is a refusal by the authorizer.
func (o authzOutcome) authorizationFailed() bool {
	switch o.code {
	case sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED, sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED,
		sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED, sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
		return true
	}
	return o.grpc == codes.PermissionDenied
}

func (o authzOutcome) String() string { return fmt.Sprintf("%v (gRPC %v) %q", o.code, o.grpc, o.msg) }

// authzOther is the second item of a request whose requirement is per item:
// the caller may always act on it, and it must be served whatever is
// decided for name.
func authzOther(name string) string { return "other-" + name }

// authzProbe calls one RPC through conn as the caller of c, on the
// resource named name where its requirement is on a topic (created by
// the probe as the RPC needs it), and reports how it answered for name.
// A per-item RPC's request also names authzOther(name), which the probe fails
// t for if it is not served. A probe also checks that a refused item was
// not acted on (nothing appended, created, deleted).
type authzProbe func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome

// authzProbes has a probe for every Log and Admin RPC of auth.Operations.
var authzProbes = map[string]authzProbe{
	"/sluice.v1.Log/Produce": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		req := publicRequest(t, sluicev1.Acks_ACKS_ALL, name, 0, "v", 1)
		req.Topics = append(req.Topics, publicRequest(t, sluicev1.Acks_ACKS_ALL, authzOther(name), 0, "v", 1).Topics...)
		resp, err := sluicev1.NewLogClient(conn).Produce(c, req)
		if err != nil {
			return authzRequestOutcome(err)
		}
		return authzProduced(t, h, name, resp)
	},
	"/sluice.v1.Log/ProduceStream": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		req := publicRequest(t, sluicev1.Acks_ACKS_ALL, name, 0, "v", 1)
		req.Topics = append(req.Topics, publicRequest(t, sluicev1.Acks_ACKS_ALL, authzOther(name), 0, "v", 1).Topics...)
		st, err := sluicev1.NewLogClient(conn).ProduceStream(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: 1, Request: req}); err != nil {
			t.Fatal(err)
		}
		a, err := st.Recv()
		if err != nil {
			return authzRequestOutcome(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("stream after the answer: %v, want its end", err)
		}
		if a.ErrorCode != sluicev1.ErrorCode_NONE {
			return authzItemOutcome(a.ErrorCode, a.ErrorMessage)
		}
		return authzProduced(t, h, name, a.Response)
	},
	"/sluice.v1.Log/Fetch": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		h.produce(t, name, authzOther(name))
		fp := []*sluicev1.FetchPartition{{Partition: 0, CurrentLeaderEpoch: -1}}
		// Answered at once: authzOther(name) has a record.
		resp, err := sluicev1.NewLogClient(conn).Fetch(c, &sluicev1.FetchRequest{MaxWaitMs: 5000, MinBytes: 1,
			Topics: []*sluicev1.FetchTopic{{Name: name, Partitions: fp}, {Name: authzOther(name), Partitions: fp}}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if o := resp.Topics[1].Partitions[0]; o.ErrorCode != sluicev1.ErrorCode_NONE || len(o.Batches) != 1 {
			t.Errorf("fetch of %s: %v %s, %d batches; want its record", authzOther(name), o.ErrorCode, o.ErrorMessage, len(o.Batches))
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE && (len(p.Batches) != 0 || p.HighWatermark != -1) {
			t.Errorf("refused fetch of %s answered %d batches, high watermark %d", name, len(p.Batches), p.HighWatermark)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Log/ListOffsets": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		h.produce(t, name, authzOther(name))
		lp := []*sluicev1.ListOffsetsPartition{{Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}}
		resp, err := sluicev1.NewLogClient(conn).ListOffsets(c, &sluicev1.ListOffsetsRequest{
			Topics: []*sluicev1.ListOffsetsTopic{{Name: name, Partitions: lp}, {Name: authzOther(name), Partitions: lp}}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if o := resp.Topics[1].Partitions[0]; o.ErrorCode != sluicev1.ErrorCode_NONE || o.Offset != 1 {
			t.Errorf("offsets of %s: %v %s at %d; want 1", authzOther(name), o.ErrorCode, o.ErrorMessage, o.Offset)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE && p.Offset != -1 {
			t.Errorf("refused offsets of %s answered offset %d", name, p.Offset)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Admin/Metadata": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		resp, err := sluicev1.NewAdminClient(conn).Metadata(c, &sluicev1.MetadataRequest{Topics: []string{name, authzOther(name)}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if len(resp.Brokers) != 1 {
			t.Errorf("brokers %v, want the node", resp.Brokers)
		}
		if o := resp.Topics[1]; o.ErrorCode != sluicev1.ErrorCode_NONE || len(o.Partitions) != 1 {
			t.Errorf("metadata of %s: %v", authzOther(name), o)
		}
		p := resp.Topics[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE && (len(p.Partitions) != 0 || p.PartitionCount != 0 || p.Configs != nil) {
			t.Errorf("refused metadata of %s tells about it: %v", name, p)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Admin/CreateTopics": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		resp, err := sluicev1.NewAdminClient(conn).CreateTopics(c, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{
			{Name: name, NumPartitions: 1, ReplicationFactor: 1}, {Name: authzOther(name), NumPartitions: 1, ReplicationFactor: 1}}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if o := resp.Topics[1]; o.ErrorCode != sluicev1.ErrorCode_NONE || !h.topicExists(t, authzOther(name)) {
			t.Errorf("create %s: %v %s", authzOther(name), o.ErrorCode, o.ErrorMessage)
		}
		p := resp.Topics[0]
		if exists := h.topicExists(t, name); exists != (p.ErrorCode == sluicev1.ErrorCode_NONE) {
			t.Errorf("create %s answered %v, and it exists: %v", name, p.ErrorCode, exists)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Admin/DeleteTopics": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		resp, err := sluicev1.NewAdminClient(conn).DeleteTopics(c, &sluicev1.DeleteTopicsRequest{Names: []string{name, authzOther(name)}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if o := resp.Topics[1]; o.ErrorCode != sluicev1.ErrorCode_NONE || h.topicExists(t, authzOther(name)) {
			t.Errorf("delete %s: %v %s", authzOther(name), o.ErrorCode, o.ErrorMessage)
		}
		p := resp.Topics[0]
		if exists := h.topicExists(t, name); exists != (p.ErrorCode != sluicev1.ErrorCode_NONE) {
			t.Errorf("delete %s answered %v, and it exists: %v", name, p.ErrorCode, exists)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Admin/DescribeCluster": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		resp, err := sluicev1.NewAdminClient(conn).DescribeCluster(c, &sluicev1.DescribeClusterRequest{})
		if err == nil && len(resp.Brokers) != 1 {
			t.Errorf("cluster brokers %v, want the node", resp.Brokers)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/AlterPartitionReassignments": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name)
		resp, err := sluicev1.NewAdminClient(conn).AlterPartitionReassignments(c, &sluicev1.AlterPartitionReassignmentsRequest{Topic: name, Replicas: []int32{1}})
		if err == nil && resp.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Errorf("reassign %s-0 to its replicas: %v %s", name, resp.ErrorCode, resp.ErrorMessage)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/ListPartitionReassignments": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		_, err := sluicev1.NewAdminClient(conn).ListPartitionReassignments(c, &sluicev1.ListPartitionReassignmentsRequest{})
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/ElectLeaders": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name)
		_, err := sluicev1.NewAdminClient(conn).ElectLeaders(c, &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{{Name: name}}})
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/UnregisterBroker": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		resp, err := sluicev1.NewAdminClient(conn).UnregisterBroker(c, &sluicev1.UnregisterBrokerRequest{BrokerId: 99})
		if err == nil && resp.ErrorCode != sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED {
			t.Errorf("unregister broker 99: %v %s, want BROKER_ID_NOT_REGISTERED from the controller", resp.ErrorCode, resp.ErrorMessage)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/DescribeProducers": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name, authzOther(name))
		h.produce(t, name, authzOther(name))
		resp, err := sluicev1.NewAdminClient(conn).DescribeProducers(c, &sluicev1.DescribeProducersRequest{
			Topics: []*sluicev1.DescribeProducersTopic{{Name: name, Partitions: []int32{0}}, {Name: authzOther(name), Partitions: []int32{0}}}})
		if err != nil {
			return authzRequestOutcome(err)
		}
		if o := resp.Topics[1].Partitions[0]; o.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Errorf("producers of %s: %v %s", authzOther(name), o.ErrorCode, o.ErrorMessage)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != sluicev1.ErrorCode_NONE && len(p.ActiveProducers) != 0 {
			t.Errorf("refused producers of %s answered %v", name, p.ActiveProducers)
		}
		return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
	},
	"/sluice.v1.Admin/AbortTransaction": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createTopics(t, name)
		resp, err := sluicev1.NewAdminClient(conn).AbortTransaction(c, &sluicev1.AbortTransactionRequest{Topic: name, ProducerId: 1000, ProducerEpoch: 0})
		if err == nil && resp.ErrorCode != sluicev1.ErrorCode_INVALID_TXN_STATE {
			t.Errorf("abort of no transaction: %v %s, want INVALID_TXN_STATE", resp.ErrorCode, resp.ErrorMessage)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/AlterUserScramCredentials": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		u := newScramUser(t, name, auth.ScramSHA256, 4096)
		_, err := sluicev1.NewAdminClient(conn).AlterUserScramCredentials(c, &sluicev1.AlterUserScramCredentialsRequest{
			Upsertions: []*sluicev1.ScramCredentialUpsertion{u.upsertion()}})
		d, derr := h.tn.admin.DescribeUserScramCredentials(ctx(t), &sluicev1.DescribeUserScramCredentialsRequest{Users: []string{name}})
		if derr != nil {
			t.Fatal(derr)
		}
		if stored := d.Users[0].ErrorCode == sluicev1.ErrorCode_NONE; stored != (err == nil) {
			t.Errorf("alter answered %v, and the credential is stored: %v", err, stored)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/DescribeUserScramCredentials": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		_, err := sluicev1.NewAdminClient(conn).DescribeUserScramCredentials(c, &sluicev1.DescribeUserScramCredentialsRequest{})
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/CreateAcls": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		resp, err := sluicev1.NewAdminClient(conn).CreateAcls(c, &sluicev1.CreateAclsRequest{Creations: []*sluicev1.AclBinding{authzBinding(name)}})
		if err == nil && resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
			t.Errorf("create an ACL: %v", resp.Results[0])
		}
		if n := h.aclsOf(t, name); n != map[bool]int{true: 1, false: 0}[err == nil] {
			t.Errorf("create answered %v, and %d ACLs are stored", err, n)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/DescribeAcls": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createACL(t, name)
		resp, err := sluicev1.NewAdminClient(conn).DescribeAcls(c, &sluicev1.DescribeAclsRequest{Filter: &sluicev1.AclBindingFilter{Principal: "User:" + name}})
		if err == nil && len(resp.Acls) != 1 {
			t.Errorf("describe ACLs: %v", resp)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/DeleteAcls": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		h.createACL(t, name)
		_, err := sluicev1.NewAdminClient(conn).DeleteAcls(c, &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{{Principal: "User:" + name}}})
		if n := h.aclsOf(t, name); n != map[bool]int{true: 0, false: 1}[err == nil] {
			t.Errorf("delete answered %v, and %d ACLs are stored", err, n)
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/AlterClientQuotas": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		resp, err := sluicev1.NewAdminClient(conn).AlterClientQuotas(c, &sluicev1.AlterClientQuotasRequest{Entries: []*sluicev1.ClientQuotaAlteration{{
			Entity: &sluicev1.QuotaEntity{User: &sluicev1.QuotaEntityName{Name: name}}, Ops: []*sluicev1.QuotaOp{{Key: "producer_byte_rate", Value: 1 << 30}}}}})
		if err == nil && resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
			t.Errorf("alter a quota: %v", resp.Results[0])
		}
		return authzRequestOutcome(err)
	},
	"/sluice.v1.Admin/DescribeClientQuotas": func(t *testing.T, h *authzHarness, conn *grpc.ClientConn, c context.Context, name string) authzOutcome {
		_, err := sluicev1.NewAdminClient(conn).DescribeClientQuotas(c, &sluicev1.DescribeClientQuotasRequest{})
		return authzRequestOutcome(err)
	},
}

// authzBinding is an ACL of the principal User:name (so that each case
// has its own).
func authzBinding(name string) *sluicev1.AclBinding {
	return &sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "t", PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL,
		Principal: "User:" + name, Host: "*", Operation: sluicev1.AclOperation_ACL_OPERATION_READ, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
}

// createACL stores authzBinding(name) through the node, unauthorized.
func (h *authzHarness) createACL(t *testing.T, name string) {
	t.Helper()
	resp, err := h.tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{Creations: []*sluicev1.AclBinding{authzBinding(name)}})
	if err != nil || resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create an ACL: %v %v", resp, err)
	}
}

// aclsOf is the number of ACLs of User:name the node has.
func (h *authzHarness) aclsOf(t *testing.T, name string) int {
	t.Helper()
	resp, err := h.tn.admin.DescribeAcls(ctx(t), &sluicev1.DescribeAclsRequest{Filter: &sluicev1.AclBindingFilter{Principal: "User:" + name}})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Acls)
}

// authzCoveredElsewhere names the test of each conditional requirement
// (method and Of) of the Log and Admin services.
var authzCoveredElsewhere = map[string]string{
	"/sluice.v1.Log/Produce if transactional":       "TestAuthorizationProduceTransactionalID",
	"/sluice.v1.Log/ProduceStream if transactional": "TestAuthorizationProduceTransactionalID",
}

// authzProduced checks a Produce answer for name and authzOther(name) and
// that name's record was appended exactly when it was accepted.
func authzProduced(t *testing.T, h *authzHarness, name string, resp *sluicev1.ProduceResponse) authzOutcome {
	t.Helper()
	if o := resp.Topics[1].Partitions[0]; o.ErrorCode != sluicev1.ErrorCode_NONE || h.highWatermark(t, authzOther(name)) != 1 {
		t.Errorf("produce to %s: %v %s", authzOther(name), o.ErrorCode, o.ErrorMessage)
	}
	p := resp.Topics[0].Partitions[0]
	want := int64(0)
	if p.ErrorCode == sluicev1.ErrorCode_NONE {
		want = 1
	}
	if hw := h.highWatermark(t, name); hw != want {
		t.Errorf("produce to %s answered %v; high watermark %d, want %d", name, p.ErrorCode, hw, want)
	}
	return authzItemOutcome(p.ErrorCode, p.ErrorMessage)
}

// authzACL is an ACL of principal (User:name, or User:*) from any host.
func authzACL(r auth.Resource, pattern auth.PatternType, principal string, op auth.Operation, perm auth.Permission) auth.ACL {
	return auth.ACL{ResourceType: r.Type, Name: r.Name, Pattern: pattern, Principal: principal, Host: auth.WildcardHost, Operation: op, Permission: perm}
}

// logAdminCase is one setting of the ACLs under which a requirement is
// checked: acls are those on r, the resource under test (the other
// item's ALLOW is added).
type logAdminCase struct {
	name    string
	acls    func(r auth.Resource, op auth.Operation) []auth.ACL
	super   bool // the caller is a super user
	off     bool // through the server without authorization
	topic   bool // only for a topic requirement
	allowed bool
}

var logAdminCases = []logAdminCase{
	{name: "the ACL the table names", allowed: true, acls: func(r auth.Resource, op auth.Operation) []auth.ACL {
		return []auth.ACL{authzACL(r, auth.PatternLiteral, "User:"+authzUser, op, auth.Allow)}
	}},
	{name: "no ACL"},
	{name: "another principal's ACL", acls: func(r auth.Resource, op auth.Operation) []auth.ACL {
		return []auth.ACL{authzACL(r, auth.PatternLiteral, "User:bob", op, auth.Allow)}
	}},
	{name: "a DENY wins over an ALLOW", acls: func(r auth.Resource, op auth.Operation) []auth.ACL {
		return []auth.ACL{authzACL(r, auth.PatternLiteral, "User:"+authzUser, op, auth.Allow), authzACL(r, auth.PatternLiteral, auth.WildcardPrincipal, op, auth.Deny)}
	}},
	{name: "a prefixed ACL", topic: true, allowed: true, acls: func(r auth.Resource, op auth.Operation) []auth.ACL {
		r.Name = strings.TrimRight(r.Name, "0123456789") // az-<rpc>-
		return []auth.ACL{authzACL(r, auth.PatternPrefixed, "User:"+authzUser, op, auth.Allow)}
	}},
	{name: "a super user", super: true, allowed: true},
	{name: "authorization off", off: true, allowed: true},
}

// authzAlternatives are the ACLs of the table's alternatives (Alt).
var authzAlternatives = map[string]auth.ACL{
	"CREATE on the cluster": authzACL(auth.Cluster, auth.PatternLiteral, "User:"+authzUser, auth.OpCreate, auth.Allow),
}

// TestAuthorizationLogAdmin checks every requirement of auth.Operations
// of the Log and Admin services with its RPC's probe: allowed with the
// ACL the table names (literal or prefixed) or its alternative, and to a
// super user, and with authorization off; refused without it, with
// another principal's, and when a DENY matches too (deny wins) — per item
// (the item's *_AUTHORIZATION_FAILED naming it, the other items served,
// the item not acted on) or for the request (gRPC PERMISSION_DENIED) as
// the table says, each denial counted.
func TestAuthorizationLogAdmin(t *testing.T) {
	h := newAuthzHarness(t)
	var methods []string
	for m := range auth.Operations {
		if strings.HasPrefix(m, "/sluice.v1.Log/") || strings.HasPrefix(m, "/sluice.v1.Admin/") {
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	for _, method := range methods {
		short := method[strings.LastIndex(method, "/")+1:]
		t.Run(short, func(t *testing.T) {
			probe := authzProbes[method]
			if probe == nil {
				t.Fatalf("%s is in auth.Operations but has no probe in authzProbes", method)
			}
			for _, req := range auth.Operations[method] {
				var perItem bool
				switch {
				case req.Of == "request":
				case req.Of == "each" || strings.HasPrefix(req.Of, "each;"):
					perItem = true
				default:
					if authzCoveredElsewhere[method+" "+req.Of] == "" {
						t.Errorf("%s %s %s: no test for the condition %q (authzCoveredElsewhere)", req.Op, req.Resource, method, req.Of)
					}
					continue
				}
				cases := logAdminCases
				if req.Alt != "" {
					alt, ok := authzAlternatives[req.Alt]
					if !ok {
						t.Errorf("%s: no ACL for the alternative %q (authzAlternatives)", method, req.Alt)
					}
					cases = append(slices.Clip(cases), logAdminCase{name: "the alternative, " + req.Alt, allowed: true,
						acls: func(auth.Resource, auth.Operation) []auth.ACL { return []auth.ACL{alt} }})
				}
				for _, c := range cases {
					if c.topic && req.Resource != auth.ResourceTopic {
						continue
					}
					t.Run(fmt.Sprintf("%s %s/%s", req.Op, req.Resource, c.name), func(t *testing.T) {
						h.seq++
						name := fmt.Sprintf("az-%s-%d", strings.ToLower(short), h.seq)
						r := auth.Cluster
						if req.Resource != auth.ResourceCluster {
							r = auth.Resource{Type: req.Resource, Name: name}
						}
						var acls []auth.ACL
						if c.acls != nil {
							acls = c.acls(r, req.Op)
						}
						if perItem {
							acls = append(acls, authzACL(auth.Resource{Type: req.Resource, Name: authzOther(name)}, auth.PatternLiteral, "User:"+authzUser, req.Op, auth.Allow))
						}
						var supers []string
						if c.super {
							supers = []string{"User:" + authzUser}
						}
						h.setACLs(acls, supers...)
						conn := h.on
						if c.off {
							conn = h.off
						}
						before := h.denied(req.Resource)
						o := probe(t, h, conn, authzAs(t, authzUser), name)
						if c.allowed {
							if o.authorizationFailed() {
								t.Fatalf("refused: %v", o)
							}
							return
						}
						wantGRPC := codes.PermissionDenied
						if perItem {
							wantGRPC = codes.OK
						}
						if o.code != api.DeniedCode(req.Resource) || o.grpc != wantGRPC {
							t.Fatalf("answered %v; want %v with gRPC %v", o, api.DeniedCode(req.Resource), wantGRPC)
						}
						if want := fmt.Sprintf("User:%s may not %s", authzUser, strings.ToLower(strings.ReplaceAll(string(req.Op), "_", " "))); !strings.Contains(o.msg, want) ||
							!strings.Contains(o.msg, r.Name) {
							t.Errorf("message %q does not say %q on %q", o.msg, want, r.Name)
						}
						if h.denied(req.Resource) == before {
							t.Errorf("the denial was not counted")
						}
					})
				}
			}
		})
	}
}

// unimplementedController answers every call UNIMPLEMENTED.
type unimplementedController struct {
	internalv1.UnimplementedControllerServer
}

// countingController serves the Controller service, answering every
// call UNIMPLEMENTED (which the controller client retries until the
// request's timeout) and counting them; it returns its address.
func countingController(t *testing.T, calls *atomic.Int32) string {
	t.Helper()
	g := grpc.NewServer(grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return handler(ctx, req)
	}))
	internalv1.RegisterControllerServer(g, unimplementedController{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis) // ends with Stop
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// An admin request refused as a whole, or whose every item is refused,
// is not forwarded to the controller: the controller never sees a
// request the caller may not make. (The same calls by a super user are
// forwarded: the count sees them.)
func TestAuthorizationRefusedAdminRequestsNotForwarded(t *testing.T) {
	h := newAuthzHarness(t)
	var calls atomic.Int32
	conn := serveLogAdmin(t, h.tn.node, countingController(t, &calls), h.authz)
	admin := sluicev1.NewAdminClient(conn)
	u := newScramUser(t, "carol", auth.ScramSHA256, 4096)
	forwarded := map[string]func(c context.Context) authzOutcome{
		"AlterPartitionReassignments": func(c context.Context) authzOutcome {
			_, err := admin.AlterPartitionReassignments(c, &sluicev1.AlterPartitionReassignmentsRequest{Topic: "t", Replicas: []int32{1}, TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"ElectLeaders": func(c context.Context) authzOutcome {
			_, err := admin.ElectLeaders(c, &sluicev1.ElectLeadersRequest{TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"UnregisterBroker": func(c context.Context) authzOutcome {
			_, err := admin.UnregisterBroker(c, &sluicev1.UnregisterBrokerRequest{BrokerId: 99, TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"AlterUserScramCredentials": func(c context.Context) authzOutcome {
			_, err := admin.AlterUserScramCredentials(c, &sluicev1.AlterUserScramCredentialsRequest{
				Upsertions: []*sluicev1.ScramCredentialUpsertion{u.upsertion()}, TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"CreateTopics": func(c context.Context) authzOutcome {
			resp, err := admin.CreateTopics(c, &sluicev1.CreateTopicsRequest{TimeoutMs: 300,
				Topics: []*sluicev1.CreatableTopic{{Name: "a", NumPartitions: 1, ReplicationFactor: 1}, {Name: "b", NumPartitions: 1, ReplicationFactor: 1}}})
			if err != nil {
				return authzRequestOutcome(err)
			}
			return authzBothRefused(resp.Topics[0].ErrorCode, resp.Topics[1].ErrorCode)
		},
		"CreateAcls": func(c context.Context) authzOutcome {
			_, err := admin.CreateAcls(c, &sluicev1.CreateAclsRequest{Creations: []*sluicev1.AclBinding{authzBinding("dave")}, TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"DeleteAcls": func(c context.Context) authzOutcome {
			_, err := admin.DeleteAcls(c, &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{{Principal: "User:dave"}}, TimeoutMs: 300})
			return authzRequestOutcome(err)
		},
		"DeleteTopics": func(c context.Context) authzOutcome {
			resp, err := admin.DeleteTopics(c, &sluicev1.DeleteTopicsRequest{Names: []string{"a", "b"}, TimeoutMs: 300})
			if err != nil {
				return authzRequestOutcome(err)
			}
			return authzBothRefused(resp.Topics[0].ErrorCode, resp.Topics[1].ErrorCode)
		},
	}
	for name, call := range forwarded {
		h.setACLs(nil)
		if o := call(authzAs(t, authzUser)); !o.authorizationFailed() || calls.Load() != 0 {
			t.Errorf("%s refused: %v, and the controller got %d calls", name, o, calls.Load())
		}
		h.setACLs(nil, "User:"+authzUser)
		if o := call(authzAs(t, authzUser)); o.authorizationFailed() || calls.Load() == 0 {
			t.Errorf("%s by a super user: %v, and the controller got %d calls", name, o, calls.Load())
		}
		calls.Store(0)
	}
}

// authzBothRefused is the outcome of two items: the first's refusal if both
// are refused the same way, else NONE.
func authzBothRefused(a, b sluicev1.ErrorCode) authzOutcome {
	if a != b {
		return authzItemOutcome(sluicev1.ErrorCode_NONE, fmt.Sprintf("items answered %v and %v", a, b))
	}
	return authzItemOutcome(a, "")
}

// Metadata of all topics, or of a prefix, leaves out silently (no
// denial counted) the topics the caller may not describe, also across
// pages; named, a topic it may not describe answers
// TOPIC_AUTHORIZATION_FAILED whether or not it exists, so that its
// existence is not revealed. The brokers are always listed.
func TestAuthorizationMetadataListsOnlyDescribableTopics(t *testing.T) {
	h := newAuthzHarness(t)
	h.createTopics(t, "vis-a", "vis-b", "hid-a", "hid-b", "x1")
	h.setACLs([]auth.ACL{
		authzACL(auth.Topic("vis-"), auth.PatternPrefixed, "User:"+authzUser, auth.OpDescribe, auth.Allow),
		authzACL(auth.Topic("x1"), auth.PatternLiteral, "User:"+authzUser, auth.OpRead, auth.Allow), // READ implies DESCRIBE
		authzACL(auth.Topic("hid-"), auth.PatternPrefixed, "User:bob", auth.OpDescribe, auth.Allow),
	})
	admin := sluicev1.NewAdminClient(h.on)
	list := func(user string, req *sluicev1.MetadataRequest) (names []string, pages int) {
		t.Helper()
		for {
			resp, err := admin.Metadata(authzAs(t, user), req)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(resp.Brokers) != 1 {
				t.Errorf("brokers %v, want the node", resp.Brokers)
			}
			for _, tm := range resp.Topics {
				names = append(names, tm.Name)
			}
			if resp.NextPageToken == "" {
				return names, pages
			}
			if strings.HasPrefix(resp.NextPageToken, "hid-") {
				t.Errorf("page token %q names a topic the caller may not describe", resp.NextPageToken)
			}
			req = proto.CloneOf(req)
			req.PageToken = resp.NextPageToken
		}
	}
	before := h.denied(auth.ResourceTopic)
	for _, c := range []struct {
		user  string
		req   *sluicev1.MetadataRequest
		want  string
		pages int
	}{
		{authzUser, &sluicev1.MetadataRequest{}, "[vis-a vis-b x1]", 1},
		{authzUser, &sluicev1.MetadataRequest{ExcludePartitions: true, TopicPrefix: "vis-"}, "[vis-a vis-b]", 1},
		{authzUser, &sluicev1.MetadataRequest{TopicPrefix: "hid-"}, "[]", 1},
		{authzUser, &sluicev1.MetadataRequest{PageSize: 1}, "[vis-a vis-b x1]", 3},
		{"bob", &sluicev1.MetadataRequest{}, "[hid-a hid-b]", 1},
		{"mallory", &sluicev1.MetadataRequest{}, "[]", 1},
	} {
		if got, pages := list(c.user, c.req); fmt.Sprint(got) != c.want || pages != c.pages {
			t.Errorf("%s lists %v: %v in %d pages, want %s in %d", c.user, c.req, got, pages, c.want, c.pages)
		}
	}
	if n := h.denied(auth.ResourceTopic); n != before {
		t.Errorf("listings counted %d denials, want none", n-before)
	}
	resp, err := admin.Metadata(authzAs(t, authzUser), &sluicev1.MetadataRequest{Topics: []string{"hid-a", "hid-nope", "vis-a", "vis-nope"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tm := range resp.Topics {
		got = append(got, fmt.Sprintf("%s:%v", tm.Name, tm.ErrorCode))
	}
	if want := "[hid-a:TOPIC_AUTHORIZATION_FAILED hid-nope:TOPIC_AUTHORIZATION_FAILED vis-a:NONE vis-nope:UNKNOWN_TOPIC_OR_PARTITION]"; fmt.Sprint(got) != want {
		t.Errorf("named: %v, want %s", got, want)
	}
	if n := h.denied(auth.ResourceTopic); n != before+2 {
		t.Errorf("named topics counted %d denials, want 2", n-before)
	}
	// A super user sees every topic.
	h.setACLs(nil, "User:root")
	if got, _ := list("root", &sluicev1.MetadataRequest{}); fmt.Sprint(got) != "[hid-a hid-b vis-a vis-b x1]" {
		t.Errorf("super user lists %v", got)
	}
}

// A transactional produce needs WRITE on its transactional id, as in
// Kafka: without it the whole request is refused
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED; on a ProduceStream, that
// request's answer, and the stream goes on), before any topic is looked
// at; with it, each topic still needs WRITE. Nothing refused is appended.
func TestAuthorizationProduceTransactionalID(t *testing.T) {
	h := newAuthzHarness(t)
	h.createTopics(t, "tx-topic")
	findCoordinator(t, h.tn.conn, "az-tx")
	p := initTxnProducer(t, h.tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: "az-tx", TransactionTimeoutMs: 60_000})
	if p.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v %s", p.ErrorCode, p.ErrorMessage)
	}
	seq := int32(0)
	txnRequest := func() *sluicev1.ProduceRequest {
		var rb sluicev1.RecordBatch
		if err := proto.Unmarshal(txnBatchOf(p.ProducerId, p.ProducerEpoch, seq, "v"), &rb); err != nil {
			t.Fatal(err)
		}
		return &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 20_000, TransactionalId: "az-tx",
			Topics: []*sluicev1.TopicProduceData{{Name: "tx-topic", Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: &rb}}}}}
	}
	writeTopic := authzACL(auth.Topic("tx-topic"), auth.PatternLiteral, "User:"+authzUser, auth.OpWrite, auth.Allow)
	writeTxn := authzACL(auth.TransactionalID("az-tx"), auth.PatternLiteral, "User:"+authzUser, auth.OpWrite, auth.Allow)
	logc := sluicev1.NewLogClient(h.on)

	h.setACLs([]auth.ACL{writeTopic})
	_, err := logc.Produce(authzAs(t, authzUser), txnRequest())
	if o := authzRequestOutcome(err); o.grpc != codes.PermissionDenied || o.code != sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED ||
		!strings.Contains(o.msg, `may not write transactional id "az-tx"`) {
		t.Errorf("without WRITE on the transactional id: %v", o)
	}
	h.setACLs([]auth.ACL{writeTxn})
	resp, err := logc.Produce(authzAs(t, authzUser), txnRequest())
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED {
		t.Errorf("without WRITE on the topic: %v %v", resp, err)
	}
	if hw := h.highWatermark(t, "tx-topic"); hw != 0 {
		t.Fatalf("refused produces appended: high watermark %d", hw)
	}
	h.setACLs([]auth.ACL{writeTopic, writeTxn})
	resp, err = logc.Produce(authzAs(t, authzUser), txnRequest())
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("with both: %v %v", resp, err)
	}
	seq++

	// On a stream: the transactional request is answered its code, the
	// next (not transactional) is served.
	h.setACLs([]auth.ACL{writeTopic})
	st, err := logc.ProduceStream(authzAs(t, authzUser))
	if err != nil {
		t.Fatal(err)
	}
	for id, req := range []*sluicev1.ProduceRequest{txnRequest(), publicRequest(t, sluicev1.Acks_ACKS_ALL, "tx-topic", 0, "plain", 1)} {
		if err := st.Send(&sluicev1.ProduceStreamRequest{CorrelationId: int64(id), Request: req}); err != nil {
			t.Fatal(err)
		}
		a, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case id == 0 && a.ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
			t.Errorf("transactional request on the stream: %v", a)
		case id == 1 && (a.ErrorCode != sluicev1.ErrorCode_NONE || a.Response.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE):
			t.Errorf("plain request after it: %v", a)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("stream end: %v", err)
	}
	if hw := h.highWatermark(t, "tx-topic"); hw != 2 {
		t.Errorf("high watermark %d, want 2 (the transactional record allowed, the plain one)", hw)
	}
}

// BenchmarkProduceAuthorization measures Produce at the handler (no
// gRPC) with authorization off and on — the caller allowed by a prefixed
// ACL among 1,000 other ACLs — for a request of 1 and of 10 topics (one
// partition each, one record, acks=leader), and the check alone. The
// check is per topic of a request, never per record or partition. Run it
// with go test -run '^$' -bench ProduceAuthorization ./api/.
func BenchmarkProduceAuthorization(b *testing.B) {
	s := nodetest.StartSingle(b, b.TempDir(), nil)
	var topics []string
	create := &sluicev1.CreateTopicsRequest{}
	for i := range 10 {
		topics = append(topics, fmt.Sprintf("bench-%d", i))
		create.Topics = append(create.Topics, &sluicev1.CreatableTopic{Name: topics[i], NumPartitions: 1, ReplicationFactor: 1})
	}
	if resp, err := s.Admin.CreateTopics(context.Background(), create); err != nil || resp.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		b.Fatalf("create: %v %v", resp, err)
	}
	var acls []auth.ACL
	for i := range 1000 {
		acls = append(acls, authzACL(auth.Topic(fmt.Sprintf("t-%d", i)), auth.PatternLiteral, fmt.Sprintf("User:u%d", i), auth.OpWrite, auth.Allow))
	}
	acls = append(acls, authzACL(auth.Topic("bench-"), auth.PatternPrefixed, "User:"+authzUser, auth.OpWrite, auth.Allow))
	z := api.NewAuthz(auth.NewAuthorizer(acls, nil), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// A caller as gRPC makes it: its address too (the ACLs' host).
	c := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 50000}})
	c = auth.WithCaller(c, auth.Caller{Principal: auth.User(authzUser)})
	raw := nodetest.Batch("v", 1, 1000)
	request := func(n int) *internalv1.ProduceRequestView {
		req := &internalv1.ProduceRequestView{Acks: sluicev1.Acks_ACKS_LEADER}
		for _, topic := range topics[:n] {
			req.Topics = append(req.Topics, &internalv1.TopicProduceDataView{Name: topic,
				Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw}}})
		}
		return req
	}
	for _, n := range []int{1, 10} {
		for _, on := range []bool{false, true} {
			cfg := api.ServerConfig{Replicas: s.Node.Replicas(), Metadata: s.Node.Metadata(), Self: api.Broker{NodeID: 1}}
			name := fmt.Sprintf("topics=%d/authorization=off", n)
			if on {
				cfg.Authz = z
				name = fmt.Sprintf("topics=%d/authorization=on", n)
			}
			srv := api.NewServer(cfg)
			req := request(n)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					resp, err := srv.Produce(c, req)
					if err != nil {
						b.Fatal(err)
					}
					if p := resp.Topics[n-1].Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_NONE {
						b.Fatalf("%v %s", p.ErrorCode, p.ErrorMessage)
					}
				}
			})
		}
	}
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !z.Allowed(c, auth.OpWrite, auth.Topic("bench-0")) {
				b.Fatal("denied")
			}
		}
	})
}
