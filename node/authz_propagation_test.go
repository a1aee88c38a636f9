package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// An ACL change is in force on every broker once the metadata that holds
// it reaches it: measured (logged, not asserted) from the answer to the
// change to the last of three brokers applying it, and from an ACL's
// deletion to the refusal of a running producer's next request.
func TestACLChangeReachesEveryBroker(t *testing.T) {
	p := newPKI(t)
	for i := 1; i <= 3; i++ {
		p.Node(fmt.Sprintf("node%d", i), auth.DefaultClusterName, p.CA)
	}
	p.Client("admin", p.CA, time.Time{})
	p.Client("bob", p.CA, time.Time{})
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(id int32, cfg *node.Config) {
		p.UseTLS(cfg, fmt.Sprintf("node%d", id))
		cfg.ClientAuth = "require"
		cfg.Authorizer = node.AuthorizerACL
		cfg.SuperUsers = []string{"User:admin"}
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+)$/$1/`
	})
	c.StartAll()
	cx := ctx(t)
	admin, err := client.New([]string{c.Node(1).Addr()}, client.WithTLS(p.ClientTLS("admin")))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(cx, "orders", 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	c.WaitTopic("orders", 1)
	binding := &sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "orders",
		PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL, Principal: "User:bob", Host: "*",
		Operation: sluicev1.AclOperation_ACL_OPERATION_WRITE, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
	want := controller.Acl{ResourceType: "TOPIC", ResourceName: "orders", PatternType: "LITERAL", Principal: "User:bob", Host: "*",
		Operation: "WRITE", Permission: "ALLOW"}
	start := time.Now()
	if errs, err := admin.CreateAcls(cx, []*sluicev1.AclBinding{binding}); err != nil || errs[0] != nil {
		t.Fatalf("create: %v %v", err, errs)
	}
	answered := time.Since(start)
	wait.For(t, 10*time.Second, "the ACL on every broker", func() error {
		for id, n := range c.Nodes() {
			if !n.Metadata().Image().HasAcl(want) {
				return fmt.Errorf("node %d lacks it", id)
			}
		}
		return nil
	})
	t.Logf("ACL created: answered after %v, on every broker after %v", answered, time.Since(start))

	bob, err := client.New([]string{c.Node(2).Addr()}, client.WithTLS(p.ClientTLS("bob")), client.WithRequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	pr, err := bob.NewProducer(client.WithAcks(client.AcksAll), client.WithDeliveryTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if _, err := pr.SendSync(cx, client.Record{Topic: "orders", Value: []byte("allowed")}); err != nil {
		t.Fatalf("bob with WRITE: %v", err)
	}
	// Deleted under the running producer: its next request is refused.
	start = time.Now()
	if _, err := admin.DeleteAcls(cx, []*sluicev1.AclBindingFilter{{ResourceType: binding.ResourceType, ResourceName: "orders",
		PatternType: binding.PatternType, Principal: "User:bob"}}); err != nil {
		t.Fatal(err)
	}
	var refused time.Duration
	wait.For(t, 10*time.Second, "bob's produce refused", func() error {
		_, err := pr.SendSync(cx, client.Record{Topic: "orders", Value: []byte("after")})
		if err == nil {
			return errors.New("still allowed")
		}
		if !strings.Contains(err.Error(), "TOPIC_AUTHORIZATION_FAILED") {
			t.Fatalf("bob after the deletion: %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
		refused = time.Since(start)
		return nil
	})
	t.Logf("ACL deleted: the producer's next request refused after %v", refused)
}
