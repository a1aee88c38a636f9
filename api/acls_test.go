package api_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Short names for the ACL enumerations.
const (
	onTopic   = sluicev1.ResourceType_RESOURCE_TYPE_TOPIC
	onGroup   = sluicev1.ResourceType_RESOURCE_TYPE_GROUP
	onCluster = sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER
	onTxnID   = sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID
	literal   = sluicev1.PatternType_PATTERN_TYPE_LITERAL
	prefixed  = sluicev1.PatternType_PATTERN_TYPE_PREFIXED
	matching  = sluicev1.PatternType_PATTERN_TYPE_MATCH
	opRead    = sluicev1.AclOperation_ACL_OPERATION_READ
	opWrite   = sluicev1.AclOperation_ACL_OPERATION_WRITE
	allow     = sluicev1.AclPermission_ACL_PERMISSION_ALLOW
	deny      = sluicev1.AclPermission_ACL_PERMISSION_DENY
)

// binding is an ACL from any host.
func binding(rt sluicev1.ResourceType, name string, pt sluicev1.PatternType, principal string, op sluicev1.AclOperation, perm sluicev1.AclPermission) *sluicev1.AclBinding {
	return &sluicev1.AclBinding{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: "*", Operation: op, Permission: perm}
}

// aclLines are ACLs as "PERMISSION PRINCIPAL OPERATION from HOST on TYPE
// PATTERN name", one per line.
func aclLines(acls []*sluicev1.AclBinding) string {
	var out []string
	for _, a := range acls {
		out = append(out, fmt.Sprintf("%s %s %s from %s on %s %s %s", strings.TrimPrefix(a.Permission.String(), "ACL_PERMISSION_"), a.Principal,
			strings.TrimPrefix(a.Operation.String(), "ACL_OPERATION_"), a.Host, strings.TrimPrefix(a.ResourceType.String(), "RESOURCE_TYPE_"),
			strings.TrimPrefix(a.PatternType.String(), "PATTERN_TYPE_"), a.ResourceName))
	}
	return strings.Join(out, "\n")
}

func (tn *testNode) describeAcls(f *sluicev1.AclBindingFilter) string {
	tn.t.Helper()
	resp, err := tn.admin.DescribeAcls(ctx(tn.t), &sluicev1.DescribeAclsRequest{Filter: f})
	if err != nil {
		tn.t.Fatal(err)
	}
	if resp.ErrorCode != sluicev1.ErrorCode_NONE {
		tn.t.Fatalf("describe %v: %v %s", f, resp.ErrorCode, resp.ErrorMessage)
	}
	return aclLines(resp.Acls)
}

// Issue 33, through a node: ACLs are created by the Admin RPC (an ACL
// created twice, or again, is one ACL), held by the broker's image when
// the answer comes, described by filter (Kafka's: ANY, MATCH, literal
// fields), and deleted by filter, each filter answered with the ACLs it
// deleted.
func TestAclsCreatedDescribedAndDeleted(t *testing.T) {
	tn := startNode(t, t.TempDir())
	eve := binding(onTopic, "orders", literal, "User:eve", opRead, deny)
	eve.Host = "::ffff:10.0.0.7" // written 10.0.0.7
	creations := []*sluicev1.AclBinding{
		binding(onTopic, "orders", literal, "User:alice", opRead, allow),
		binding(onTopic, "orders-", prefixed, "User:alice", opRead, allow),
		binding(onTopic, "*", literal, "User:bob", opWrite, allow),
		eve,
		binding(onGroup, "billing", literal, "User:alice", opRead, allow),
		binding(onCluster, "kafka-cluster", literal, "User:admin", sluicev1.AclOperation_ACL_OPERATION_ALTER, allow),
		binding(onTxnID, "tx-", prefixed, "User:bob", sluicev1.AclOperation_ACL_OPERATION_DESCRIBE, allow),
		binding(onTopic, "orders", literal, "User:alice", opRead, allow), // twice in one request
	}
	resp, err := tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{Creations: creations})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(creations) {
		t.Fatalf("%d results for %d creations", len(resp.Results), len(creations))
	}
	for i, r := range resp.Results {
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Errorf("creation %d: %v %s", i, r.ErrorCode, r.ErrorMessage)
		}
	}
	im := tn.node.Metadata().Image()
	if len(im.Acls) != 7 || !im.HasAcl(controller.Acl{ResourceType: controller.ResourceTopic, ResourceName: "orders", PatternType: controller.PatternLiteral,
		Principal: "User:eve", Host: "10.0.0.7", Operation: controller.OperationRead, Permission: controller.PermissionDeny}) {
		t.Errorf("the broker's image when the answer came: %v", im.AclList())
	}
	// Created again: a success, nothing new.
	if resp, err := tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{Creations: creations[:1]}); err != nil ||
		resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE || len(tn.node.Metadata().Image().Acls) != 7 {
		t.Errorf("created again: %v, %v", resp, err)
	}

	all := "ALLOW User:admin ALTER from * on CLUSTER LITERAL kafka-cluster\n" +
		"ALLOW User:alice READ from * on GROUP LITERAL billing\n" +
		"ALLOW User:bob WRITE from * on TOPIC LITERAL *\n" +
		"ALLOW User:alice READ from * on TOPIC LITERAL orders\n" +
		"DENY User:eve READ from 10.0.0.7 on TOPIC LITERAL orders\n" +
		"ALLOW User:alice READ from * on TOPIC PREFIXED orders-\n" +
		"ALLOW User:bob DESCRIBE from * on TRANSACTIONAL_ID PREFIXED tx-"
	for _, tc := range []struct {
		name   string
		filter *sluicev1.AclBindingFilter
		want   string
	}{
		{"no filter", nil, all},
		{"the empty filter", &sluicev1.AclBindingFilter{}, all},
		{"ANY everywhere", &sluicev1.AclBindingFilter{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_ANY, PatternType: sluicev1.PatternType_PATTERN_TYPE_ANY,
			Operation: sluicev1.AclOperation_ACL_OPERATION_ANY, Permission: sluicev1.AclPermission_ACL_PERMISSION_ANY}, all},
		{"a resource type", &sluicev1.AclBindingFilter{ResourceType: onGroup}, "ALLOW User:alice READ from * on GROUP LITERAL billing"},
		{"MATCH: what applies to topic orders-eu", &sluicev1.AclBindingFilter{ResourceType: onTopic, ResourceName: "orders-eu", PatternType: matching},
			"ALLOW User:bob WRITE from * on TOPIC LITERAL *\nALLOW User:alice READ from * on TOPIC PREFIXED orders-"},
		{"MATCH: what applies to topic orders", &sluicev1.AclBindingFilter{ResourceType: onTopic, ResourceName: "orders", PatternType: matching},
			"ALLOW User:bob WRITE from * on TOPIC LITERAL *\nALLOW User:alice READ from * on TOPIC LITERAL orders\nDENY User:eve READ from 10.0.0.7 on TOPIC LITERAL orders"},
		{"a name with any pattern type is the name", &sluicev1.AclBindingFilter{ResourceName: "orders-"},
			"ALLOW User:alice READ from * on TOPIC PREFIXED orders-"},
		{"LITERAL and a name", &sluicev1.AclBindingFilter{ResourceName: "orders-", PatternType: literal}, ""},
		{"a principal", &sluicev1.AclBindingFilter{Principal: "User:bob"},
			"ALLOW User:bob WRITE from * on TOPIC LITERAL *\nALLOW User:bob DESCRIBE from * on TRANSACTIONAL_ID PREFIXED tx-"},
		{"a host, written another way", &sluicev1.AclBindingFilter{Host: "::FFFF:10.0.0.7"}, "DENY User:eve READ from 10.0.0.7 on TOPIC LITERAL orders"},
		{"an operation and a permission", &sluicev1.AclBindingFilter{Operation: opRead, Permission: allow},
			"ALLOW User:alice READ from * on GROUP LITERAL billing\nALLOW User:alice READ from * on TOPIC LITERAL orders\nALLOW User:alice READ from * on TOPIC PREFIXED orders-"},
	} {
		if got := tn.describeAcls(tc.filter); got != tc.want {
			t.Errorf("%s: described\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}

	// Deleting: each filter answered with what it matched; an ACL two
	// filters matching is in both answers.
	del, err := tn.admin.DeleteAcls(ctx(t), &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{
		{Principal: "User:alice", ResourceType: onTopic},
		{ResourceName: "orders", PatternType: matching, Permission: allow},
		{Principal: "User:nobody"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ALLOW User:alice READ from * on TOPIC LITERAL orders\nALLOW User:alice READ from * on TOPIC PREFIXED orders-",
		"ALLOW User:bob WRITE from * on TOPIC LITERAL *\nALLOW User:alice READ from * on TOPIC LITERAL orders",
		"",
	}
	if len(del.FilterResults) != len(want) {
		t.Fatalf("%d filter results, want %d", len(del.FilterResults), len(want))
	}
	for i, r := range del.FilterResults {
		if r.ErrorCode != sluicev1.ErrorCode_NONE || aclLines(r.Deleted) != want[i] {
			t.Errorf("filter %d: %v %s, deleted\n%s\nwant\n%s", i, r.ErrorCode, r.ErrorMessage, aclLines(r.Deleted), want[i])
		}
	}
	// The broker's image no longer holds them when the answer comes.
	if got := aclLines(aclsOf(tn.node.Metadata().Image())); got != "ALLOW User:admin ALTER from * on CLUSTER LITERAL kafka-cluster\n"+
		"ALLOW User:alice READ from * on GROUP LITERAL billing\nDENY User:eve READ from 10.0.0.7 on TOPIC LITERAL orders\n"+
		"ALLOW User:bob DESCRIBE from * on TRANSACTIONAL_ID PREFIXED tx-" {
		t.Errorf("the broker's ACLs after the deletion:\n%s", got)
	}
	if del, err := tn.admin.DeleteAcls(ctx(t), &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{{}}}); err != nil || len(del.FilterResults[0].Deleted) != 4 {
		t.Fatalf("delete everything: %v, %v", del, err)
	}
	if got := tn.describeAcls(nil); got != "" {
		t.Errorf("described after deleting everything:\n%s", got)
	}
	// Empty requests do nothing.
	if resp, err := tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{}); err != nil || len(resp.Results) != 0 {
		t.Errorf("empty creation: %v, %v", resp, err)
	}
	if resp, err := tn.admin.DeleteAcls(ctx(t), &sluicev1.DeleteAclsRequest{}); err != nil || len(resp.FilterResults) != 0 {
		t.Errorf("empty deletion: %v, %v", resp, err)
	}
}

// aclsOf is im's ACLs as the wire has them.
func aclsOf(im *controller.Image) []*sluicev1.AclBinding {
	var out []*sluicev1.AclBinding
	for _, a := range im.AclList() {
		b := &sluicev1.AclBinding{ResourceName: a.ResourceName, Principal: a.Principal, Host: a.Host,
			ResourceType: sluicev1.ResourceType(sluicev1.ResourceType_value["RESOURCE_TYPE_"+string(a.ResourceType)]),
			PatternType:  sluicev1.PatternType(sluicev1.PatternType_value["PATTERN_TYPE_"+string(a.PatternType)]),
			Operation:    sluicev1.AclOperation(sluicev1.AclOperation_value["ACL_OPERATION_"+string(a.Operation)]),
			Permission:   sluicev1.AclPermission(sluicev1.AclPermission_value["ACL_PERMISSION_"+string(a.Permission)])}
		out = append(out, b)
	}
	return out
}

// Each creation of a request is answered for itself: a field out of its
// domain is INVALID_REQUEST with the reason, and nothing of it is stored;
// the others are.
func TestAclCreationsRefusedPerItem(t *testing.T) {
	tn := startNode(t, t.TempDir())
	ok := func() *sluicev1.AclBinding { return binding(onTopic, "orders", literal, "User:alice", opRead, allow) }
	edit := func(f func(b *sluicev1.AclBinding)) *sluicev1.AclBinding {
		b := ok()
		f(b)
		return b
	}
	cases := []struct {
		b    *sluicev1.AclBinding
		says string // "" for accepted
	}{
		{edit(func(b *sluicev1.AclBinding) { b.ResourceType = sluicev1.ResourceType_RESOURCE_TYPE_ANY }), `resource type "ANY"`},
		{edit(func(b *sluicev1.AclBinding) { b.ResourceType = 0 }), `resource type "UNSPECIFIED"`},
		{edit(func(b *sluicev1.AclBinding) { b.ResourceType = 42 }), `resource type "42"`},
		{edit(func(b *sluicev1.AclBinding) { b.PatternType = matching }), `pattern type "MATCH": an ACL's is LITERAL or PREFIXED`},
		{edit(func(b *sluicev1.AclBinding) { b.PatternType = sluicev1.PatternType_PATTERN_TYPE_ANY }), `pattern type "ANY"`},
		{edit(func(b *sluicev1.AclBinding) { b.ResourceName = "" }), "the resource name is empty"},
		{edit(func(b *sluicev1.AclBinding) { b.ResourceName, b.PatternType = "*", prefixed }), `PREFIXED "*" is refused`},
		{edit(func(b *sluicev1.AclBinding) { b.ResourceType = onCluster }), `the CLUSTER resource is LITERAL "kafka-cluster"`},
		{edit(func(b *sluicev1.AclBinding) { b.Principal = "alice" }), `principal "alice" is not TYPE:NAME`},
		{edit(func(b *sluicev1.AclBinding) { b.Principal = "" }), "the principal is empty"},
		{edit(func(b *sluicev1.AclBinding) { b.Host = "" }), `host "" is neither "*" nor an IP address`},
		{edit(func(b *sluicev1.AclBinding) { b.Host = "db.example" }), `host "db.example" is neither "*" nor an IP address`},
		{edit(func(b *sluicev1.AclBinding) { b.Operation = sluicev1.AclOperation_ACL_OPERATION_ANY }), `operation "ANY"`},
		{edit(func(b *sluicev1.AclBinding) { b.Operation = 0 }), `operation "UNSPECIFIED"`},
		{edit(func(b *sluicev1.AclBinding) { b.Permission = sluicev1.AclPermission_ACL_PERMISSION_ANY }), `permission "ANY": an ACL's is ALLOW or DENY`},
		{edit(func(b *sluicev1.AclBinding) {
			b.ResourceName = strings.Repeat("n", controller.MaxAclResourceNameLength+1)
		}), "bytes long, at most 1024"},
		{ok(), ""},
		{edit(func(b *sluicev1.AclBinding) { b.Host = "2001:DB8::1" }), ""}, // stored as 2001:db8::1
	}
	req := &sluicev1.CreateAclsRequest{}
	for _, c := range cases {
		req.Creations = append(req.Creations, c.b)
	}
	resp, err := tn.admin.CreateAcls(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Results) != len(cases) {
		t.Fatalf("%d results, want %d", len(resp.Results), len(cases))
	}
	for i, c := range cases {
		r := resp.Results[i]
		want := sluicev1.ErrorCode_INVALID_REQUEST
		if c.says == "" {
			want = sluicev1.ErrorCode_NONE
		}
		if r.ErrorCode != want || !strings.Contains(r.ErrorMessage, c.says) {
			t.Errorf("creation %d (%v): %v %q; want %v saying %q", i, c.b, r.ErrorCode, r.ErrorMessage, want, c.says)
		}
	}
	want := "ALLOW User:alice READ from * on TOPIC LITERAL orders\nALLOW User:alice READ from 2001:db8::1 on TOPIC LITERAL orders"
	if got := tn.describeAcls(nil); got != want {
		t.Errorf("stored:\n%s\nwant\n%s", got, want)
	}
	if got := aclLines(aclsOf(tn.node.Controller().Image())); got != want {
		t.Errorf("on the controller:\n%s", got)
	}
}

// A filter with a value no ACL can have is refused: in DescribeAcls'
// answer, and alone among DeleteAcls' filters. A negative timeout is a
// malformed request.
func TestAclFiltersRefused(t *testing.T) {
	tn := startNode(t, t.TempDir())
	if resp, err := tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{Creations: []*sluicev1.AclBinding{
		binding(onTopic, "orders", literal, "User:alice", opRead, allow)}}); err != nil || resp.Results[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create: %v, %v", resp, err)
	}
	for _, f := range []*sluicev1.AclBindingFilter{{ResourceType: 9}, {PatternType: 9}, {Operation: 99}, {Permission: 4}} {
		resp, err := tn.admin.DescribeAcls(ctx(t), &sluicev1.DescribeAclsRequest{Filter: f})
		if err != nil || resp.ErrorCode != sluicev1.ErrorCode_INVALID_REQUEST || len(resp.Acls) != 0 {
			t.Errorf("describe %v: %v, %v", f, resp, err)
		}
	}
	del, err := tn.admin.DeleteAcls(ctx(t), &sluicev1.DeleteAclsRequest{Filters: []*sluicev1.AclBindingFilter{{Operation: 99}, {Principal: "User:alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := del.FilterResults[0]; r.ErrorCode != sluicev1.ErrorCode_INVALID_REQUEST || !strings.Contains(r.ErrorMessage, `operation "99"`) {
		t.Errorf("the invalid filter: %v %q", r.ErrorCode, r.ErrorMessage)
	}
	if r := del.FilterResults[1]; r.ErrorCode != sluicev1.ErrorCode_NONE || len(r.Deleted) != 1 {
		t.Errorf("the valid filter: %v", r)
	}
	for name, call := range map[string]func() error{
		"create": func() error {
			_, err := tn.admin.CreateAcls(ctx(t), &sluicev1.CreateAclsRequest{TimeoutMs: -1, Creations: []*sluicev1.AclBinding{{}}})
			return err
		},
		"delete": func() error {
			_, err := tn.admin.DeleteAcls(ctx(t), &sluicev1.DeleteAclsRequest{TimeoutMs: -1, Filters: []*sluicev1.AclBindingFilter{{}}})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.InvalidArgument || errorReason(err) != "INVALID_REQUEST" {
			t.Errorf("%s with a negative timeout: %v", name, err)
		}
	}
	if len(tn.node.Metadata().Image().Acls) != 0 {
		t.Errorf("ACLs left: %v", tn.node.Metadata().Image().AclList())
	}
}
