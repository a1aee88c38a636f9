package node_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 33: an ACL created through a broker that is no controller goes to
// the active controller, is on that broker's image when the answer comes
// and reaches every broker by the metadata stream, with the same
// AclsVersion (an authorizer's cue to rebuild); a broker that restarts
// gets it back with the rest of the metadata; a deletion through another
// broker reaches them all too.
func TestAclsReachEveryBroker(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1}, true, []int32{2})
	c.StartAll()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(c.Dial(2)).CreateAcls(ctx, &sluicev1.CreateAclsRequest{Creations: []*sluicev1.AclBinding{{
		ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "orders-", PatternType: sluicev1.PatternType_PATTERN_TYPE_PREFIXED,
		Principal: "User:alice", Host: "*", Operation: sluicev1.AclOperation_ACL_OPERATION_READ, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW,
	}}})
	if err != nil || len(resp.Results) != 1 || resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create through broker 2: %v, %v", resp, err)
	}
	want := []controller.Acl{{ResourceType: controller.ResourceTopic, ResourceName: "orders-", PatternType: controller.PatternPrefixed,
		Principal: "User:alice", Host: controller.WildcardHost, Operation: controller.OperationRead, Permission: controller.PermissionAllow}}
	version := c.Node(2).Metadata().Image().AclsVersion
	aclsOn := func(id int32, want []controller.Acl) error {
		im := c.Node(id).Metadata().Image()
		if got := im.AclList(); !reflect.DeepEqual(got, want) || im.AclsVersion != version {
			return fmt.Errorf("node %d: ACLs %v at version %d, want %v at %d", id, got, im.AclsVersion, want, version)
		}
		return nil
	}
	if err := aclsOn(2, want); err != nil || version == 0 {
		t.Fatalf("when the answer came: %v (version %d)", err, version)
	}
	wait.For(t, 10*time.Second, "the ACL on broker 1", func() error { return aclsOn(1, want) })
	d, err := sluicev1.NewAdminClient(c.Dial(1)).DescribeAcls(ctx, &sluicev1.DescribeAclsRequest{Filter: &sluicev1.AclBindingFilter{
		ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "orders-eu", PatternType: sluicev1.PatternType_PATTERN_TYPE_MATCH}})
	if err != nil || len(d.Acls) != 1 || d.Acls[0].ResourceName != "orders-" || d.Acls[0].Principal != "User:alice" {
		t.Errorf("describe on broker 1: %v, %v", d, err)
	}

	if err := c.Stop(2); err != nil {
		t.Fatal(err)
	}
	c.Restart(2)
	if err := aclsOn(2, want); err != nil {
		t.Errorf("after a restart: %v", err)
	}

	del, err := sluicev1.NewAdminClient(c.Dial(1)).DeleteAcls(ctx, &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{{Principal: "User:alice"}}})
	if err != nil || len(del.FilterResults) != 1 || len(del.FilterResults[0].Deleted) != 1 {
		t.Fatalf("delete through broker 1: %v, %v", del, err)
	}
	version = c.Node(1).Metadata().Image().AclsVersion
	if err := aclsOn(1, []controller.Acl{}); err != nil {
		t.Fatalf("when the deletion's answer came: %v", err)
	}
	wait.For(t, 10*time.Second, "the deletion on broker 2", func() error { return aclsOn(2, []controller.Acl{}) })
}
