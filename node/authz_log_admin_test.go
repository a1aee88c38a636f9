package node_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// With --authorizer acl, the Log and Admin services of a node authorize
// the principal its client listener found (here a client certificate's
// CN): a super user may do everything; a user no ACL allows, and an
// anonymous caller, are refused per topic (TOPIC_AUTHORIZATION_FAILED)
// or per request (PERMISSION_DENIED) and see no topic in a listing,
// though they see the brokers; each denial is counted. Also through the
// client library, which gives up at once (not retriable). Then the ACLs
// the super user creates through the client API decide.
func TestAuthorizerOnTheLogAndAdminServices(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	p.Client("admin", p.CA, time.Time{})
	p.Client("alice", p.CA, time.Time{})
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.UseTLS(cfg, "node1")
		cfg.ClientAuth = "request"
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+)$/$1/`
		cfg.Authorizer = node.AuthorizerACL
		cfg.SuperUsers = []string{"User:admin"}
		cfg.HTTPListen = "127.0.0.1:0"
	})
	dial := func(cert string) *grpc.ClientConn {
		cfg := p.ClientTLS(cert)
		cfg.ServerName = "localhost"
		cc, err := grpc.NewClient(s.Node.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	cx := ctx(t)
	admin := dial("admin")
	created, err := sluicev1.NewAdminClient(admin).CreateTopics(cx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t", NumPartitions: 1, ReplicationFactor: 1}}})
	if err != nil || created.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("a super user creates a topic: %v %v", created, err)
	}
	produced, err := sluicev1.NewLogClient(admin).Produce(cx, publicRequest(t, sluicev1.Acks_ACKS_ALL, "t", 0, "v", 1))
	if err != nil || produced.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("a super user produces: %v %v", produced, err)
	}
	if _, err := sluicev1.NewAdminClient(admin).DescribeCluster(cx, &sluicev1.DescribeClusterRequest{}); err != nil {
		t.Fatalf("a super user describes the cluster: %v", err)
	}

	for _, who := range []struct{ name, cert string }{{"User:alice", "alice"}, {"User:ANONYMOUS", ""}} {
		conn := dial(who.cert)
		logc, adminc := sluicev1.NewLogClient(conn), sluicev1.NewAdminClient(conn)
		pr, err := logc.Produce(cx, publicRequest(t, sluicev1.Acks_ACKS_ALL, "t", 0, "x", 1))
		if err != nil || pr.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED ||
			!strings.Contains(pr.Topics[0].Partitions[0].ErrorMessage, who.name+` may not write topic "t"`) {
			t.Errorf("%s produces: %v %v", who.name, pr, err)
		}
		fr, err := logc.Fetch(cx, &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: "t", Partitions: []*sluicev1.FetchPartition{{Partition: 0, CurrentLeaderEpoch: -1}}}}})
		if err != nil || fr.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED || len(fr.Topics[0].Partitions[0].Batches) != 0 {
			t.Errorf("%s fetches: %v %v", who.name, fr, err)
		}
		md, err := adminc.Metadata(cx, &sluicev1.MetadataRequest{})
		if err != nil || len(md.Topics) != 0 || len(md.Brokers) != 1 {
			t.Errorf("%s lists topics: %v %v; want the broker and no topic", who.name, md, err)
		}
		ct, err := adminc.CreateTopics(cx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "u", NumPartitions: 1, ReplicationFactor: 1}}})
		if err != nil || ct.Topics[0].ErrorCode != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED {
			t.Errorf("%s creates a topic: %v %v", who.name, ct, err)
		}
		_, err = adminc.DescribeCluster(cx, &sluicev1.DescribeClusterRequest{})
		if e, _ := errs.FromStatus(err); status.Code(err) != codes.PermissionDenied || errs.Code(e) != sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED {
			t.Errorf("%s describes the cluster: %v", who.name, err)
		}
	}

	alice, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("alice")), client.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	pr, err := alice.NewProducer(client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	start := time.Now()
	if _, err := pr.SendSync(cx, client.Record{Topic: "t", Value: []byte("by alice")}); err == nil || !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("alice's producer: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	} else if d := time.Since(start); d > 3*time.Second {
		t.Errorf("alice's producer gave up after %v: a refusal is not retriable", d)
	}

	wait.For(t, 5*time.Second, "the denials counted", func() error {
		_, body := httpGet(t, s.Node.HTTPAddr(), "/metrics")
		for _, want := range []string{`sluice_authorization_denials_total{resource_type="topic"}`, `sluice_authorization_denials_total{resource_type="cluster"}`} {
			if !strings.Contains(body, want) {
				return errString("no " + want)
			}
		}
		return nil
	})

	// ACLs created through the client API by the super user are in force
	// when CreateAcls returns, and a deletion ends them: alice writes
	// topic t from her host, reads topics by a prefix (but a DENY
	// from every host wins on t-secret), describes the cluster; an ACL
	// for another host does not apply.
	adminc, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("admin")))
	if err != nil {
		t.Fatal(err)
	}
	defer adminc.Close()
	binding := func(rt sluicev1.ResourceType, name string, pattern sluicev1.PatternType, host string, op sluicev1.AclOperation, perm sluicev1.AclPermission) *sluicev1.AclBinding {
		return &sluicev1.AclBinding{ResourceType: rt, ResourceName: name, PatternType: pattern, Principal: "User:alice", Host: host, Operation: op, Permission: perm}
	}
	topic, cluster := sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER
	literal, prefixed := sluicev1.PatternType_PATTERN_TYPE_LITERAL, sluicev1.PatternType_PATTERN_TYPE_PREFIXED
	allow, deny := sluicev1.AclPermission_ACL_PERMISSION_ALLOW, sluicev1.AclPermission_ACL_PERMISSION_DENY
	if _, err := sluicev1.NewAdminClient(admin).CreateTopics(cx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "t-secret", NumPartitions: 1, ReplicationFactor: 1}}}); err != nil {
		t.Fatal(err)
	}
	results, err := adminc.CreateAcls(cx, []*sluicev1.AclBinding{
		binding(topic, "t", literal, "127.0.0.1", sluicev1.AclOperation_ACL_OPERATION_WRITE, allow),
		binding(topic, "t", prefixed, "*", sluicev1.AclOperation_ACL_OPERATION_READ, allow),
		binding(topic, "t-secret", literal, "*", sluicev1.AclOperation_ACL_OPERATION_READ, deny),
		binding(cluster, "kafka-cluster", literal, "*", sluicev1.AclOperation_ACL_OPERATION_DESCRIBE, allow),
		binding(cluster, "kafka-cluster", literal, "10.9.9.9", sluicev1.AclOperation_ACL_OPERATION_ALTER, allow),
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range results {
		if e != nil {
			t.Fatalf("ACL %d: %v", i, e)
		}
	}
	conn := dial("alice")
	logc, adminAlice := sluicev1.NewLogClient(conn), sluicev1.NewAdminClient(conn)
	if pr, err := logc.Produce(cx, publicRequest(t, sluicev1.Acks_ACKS_ALL, "t", 0, "a", 1)); err != nil || pr.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Errorf("alice produces with WRITE: %v %v", pr, err)
	}
	fetch := func(name string) sluicev1.ErrorCode {
		fr, err := logc.Fetch(cx, &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: name, Partitions: []*sluicev1.FetchPartition{{Partition: 0, CurrentLeaderEpoch: -1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return fr.Topics[0].Partitions[0].ErrorCode
	}
	if c := fetch("t"); c != sluicev1.ErrorCode_NONE {
		t.Errorf("alice fetches t with a prefixed READ: %v", c)
	}
	if c := fetch("t-secret"); c != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED {
		t.Errorf("alice fetches t-secret, READ denied: %v", c)
	}
	if md, err := adminAlice.Metadata(cx, &sluicev1.MetadataRequest{}); err != nil || len(md.Topics) != 2 || md.Topics[0].Name != "t" || md.Topics[1].Name != "t-secret" {
		t.Errorf("alice lists the topics she may describe (READ, WRITE imply it; a DENY of READ does not deny DESCRIBE): %v %v", md, err)
	}
	if _, err := adminAlice.DescribeCluster(cx, &sluicev1.DescribeClusterRequest{}); err != nil {
		t.Errorf("alice describes the cluster: %v", err)
	}
	if _, err := adminAlice.ElectLeaders(cx, &sluicev1.ElectLeadersRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("alice elects leaders with ALTER from another host only: %v", err)
	}
	if _, err := adminc.DeleteAcls(cx, []*sluicev1.AclBindingFilter{{ResourceType: topic, ResourceName: "t", PatternType: prefixed}}); err != nil {
		t.Fatal(err)
	}
	if c := fetch("t"); c != sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED {
		t.Errorf("alice fetches t once the READ is deleted: %v", c)
	}
}
