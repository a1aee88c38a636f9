package api

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The wire's ACL enumerations are Kafka's, and so are the controller's
// names: each value an ACL can have is the controller's constant of the
// same name, and goes there and back unchanged; the filter-only values
// (UNSPECIFIED and ANY: any; MATCH) are the controller's filter values.
func TestAclEnumerationsAreTheControllers(t *testing.T) {
	for _, e := range []struct {
		ed     protoreflect.EnumDescriptor
		prefix string
		names  []string // in the enumeration's order
	}{
		{sluicev1.ResourceType(0).Descriptor(), resourceTypePrefix, []string{string(controller.ResourceTopic), string(controller.ResourceGroup),
			string(controller.ResourceCluster), string(controller.ResourceTransactionalID)}},
		{sluicev1.PatternType(0).Descriptor(), patternTypePrefix, []string{string(controller.PatternMatch),
			string(controller.PatternLiteral), string(controller.PatternPrefixed)}},
		{sluicev1.AclOperation(0).Descriptor(), operationPrefix, []string{string(controller.OperationAll), string(controller.OperationRead),
			string(controller.OperationWrite), string(controller.OperationCreate), string(controller.OperationDelete),
			string(controller.OperationAlter), string(controller.OperationDescribe), string(controller.OperationClusterAction),
			string(controller.OperationDescribeConfigs), string(controller.OperationAlterConfigs), string(controller.OperationIdempotentWrite)}},
		{sluicev1.AclPermission(0).Descriptor(), permissionPrefix, []string{string(controller.PermissionDeny), string(controller.PermissionAllow)}},
	} {
		var got []string
		values := e.ed.Values()
		for i := range values.Len() {
			if n := values.Get(i).Number(); n > 1 { // not UNSPECIFIED nor ANY
				got = append(got, strings.TrimPrefix(string(values.Get(i).Name()), e.prefix))
			}
		}
		if !slices.Equal(got, e.names) {
			t.Errorf("%s: %v, want the controller's %v", e.ed.FullName(), got, e.names)
		}
	}

	// Every combination of the values goes there and back.
	b := &sluicev1.AclBinding{ResourceName: "n", Principal: "User:a", Host: "*"}
	for rt := sluicev1.ResourceType_RESOURCE_TYPE_TOPIC; rt <= sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID; rt++ {
		for pt := sluicev1.PatternType_PATTERN_TYPE_LITERAL; pt <= sluicev1.PatternType_PATTERN_TYPE_PREFIXED; pt++ {
			for op := sluicev1.AclOperation_ACL_OPERATION_ALL; op <= sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE; op++ {
				for perm := sluicev1.AclPermission_ACL_PERMISSION_DENY; perm <= sluicev1.AclPermission_ACL_PERMISSION_ALLOW; perm++ {
					b.ResourceType, b.PatternType, b.Operation, b.Permission = rt, pt, op, perm
					if back := aclToProto(aclFromProto(b)); !proto.Equal(back, b) {
						t.Errorf("%v came back as %v", b, back)
					}
				}
			}
		}
	}
	a := aclFromProto(&sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID, PatternType: sluicev1.PatternType_PATTERN_TYPE_PREFIXED,
		Operation: sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE, Permission: sluicev1.AclPermission_ACL_PERMISSION_DENY, Host: "::FFFF:10.1.2.3"})
	if a.ResourceType != controller.ResourceTransactionalID || a.PatternType != controller.PatternPrefixed ||
		a.Operation != controller.OperationIdempotentWrite || a.Permission != controller.PermissionDeny || a.Host != "10.1.2.3" {
		t.Errorf("aclFromProto: %+v", a)
	}
	// What no ACL can be keeps a name the controller refuses.
	a = aclFromProto(&sluicev1.AclBinding{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_ANY, PatternType: sluicev1.PatternType_PATTERN_TYPE_MATCH,
		Operation: 99, Host: "somewhere"})
	if a.ResourceType != "ANY" || a.PatternType != controller.PatternMatch || a.Operation != "99" || a.Permission != "UNSPECIFIED" || a.Host != "somewhere" {
		t.Errorf("aclFromProto of values no ACL has: %+v", a)
	}

	f := aclFilterFromProto(&sluicev1.AclBindingFilter{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_ANY,
		PatternType: sluicev1.PatternType_PATTERN_TYPE_MATCH, Operation: sluicev1.AclOperation_ACL_OPERATION_ANY, Host: "::ffff:10.0.0.1"})
	if f != (controller.AclFilter{PatternType: controller.PatternMatch, Host: "10.0.0.1"}) {
		t.Errorf("aclFilterFromProto: %+v", f)
	}
	if f := aclFilterFromProto(nil); f != (controller.AclFilter{}) {
		t.Errorf("aclFilterFromProto(nil): %+v", f)
	}
	if f := aclFilterFromProto(&sluicev1.AclBindingFilter{Permission: 7}); f.Validate() == nil {
		t.Errorf("a filter of permission 7 is valid: %+v", f)
	}
}
