package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Through a node: ACLs created (a refusal is the ACL's own
// *errs.Error), described by filter, deleted by filter with what each
// filter deleted.
func TestAclsThroughANode(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := &sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "orders", PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL,
		Principal: "User:alice", Host: "*", Operation: sluicev1.AclOperation_ACL_OPERATION_READ, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
	group := &sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_GROUP, ResourceName: "g", PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL,
		Principal: "User:alice", Host: "*", Operation: sluicev1.AclOperation_ACL_OPERATION_READ, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
	bad := &sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: "orders", PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL,
		Principal: "alice", Host: "*", Operation: sluicev1.AclOperation_ACL_OPERATION_READ, Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}
	res, err := c.CreateAcls(ctx, []*sluicev1.AclBinding{read, bad, group})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0] != nil || errs.Code(res[1]) != sluicev1.ErrorCode_INVALID_REQUEST || res[2] != nil {
		t.Fatalf("create: %v", res)
	}
	acls, err := c.DescribeAcls(ctx, &sluicev1.AclBindingFilter{ResourceName: "orders", PatternType: sluicev1.PatternType_PATTERN_TYPE_MATCH})
	if err != nil || len(acls) != 1 || acls[0].Principal != "User:alice" || acls[0].ResourceType != sluicev1.ResourceType_RESOURCE_TYPE_TOPIC {
		t.Errorf("describe what applies to orders: %v, %v", acls, err)
	}
	if acls, err := c.DescribeAcls(ctx, nil); err != nil || len(acls) != 2 {
		t.Errorf("describe all: %v, %v", acls, err)
	}
	if _, err := c.DescribeAcls(ctx, &sluicev1.AclBindingFilter{Operation: 99}); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Errorf("describe with operation 99: %v; want INVALID_REQUEST", err)
	}
	deleted, err := c.DeleteAcls(ctx, []*sluicev1.AclBindingFilter{{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_GROUP}, {Permission: 9}})
	if err != nil || len(deleted) != 2 || len(deleted[0].Acls) != 1 || deleted[0].Acls[0].ResourceName != "g" || deleted[0].Err != nil ||
		errs.Code(deleted[1].Err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("delete: %+v, %v", deleted, err)
	}
	if acls, err := c.DescribeAcls(ctx, nil); err != nil || len(acls) != 1 || acls[0].ResourceName != "orders" {
		t.Errorf("describe after the deletion: %v, %v", acls, err)
	}
}
