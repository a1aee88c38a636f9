package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// acl is an ACL from any host.
func acl(rt ResourceType, name string, pt PatternType, principal string, op AclOperation, perm AclPermission) Acl {
	return Acl{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: WildcardHost, Operation: op, Permission: perm}
}

// withAcl returns a after edit.
func withAcl(a Acl, edit func(*Acl)) Acl {
	edit(&a)
	return a
}

// Some ACLs: alice reads topic orders and the topics orders-*, bob writes
// every topic, eve may not read orders from one host, the admins alter
// the cluster.
var (
	aliceReadsOrders   = acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OperationRead, PermissionAllow)
	aliceReadsPrefixed = acl(ResourceTopic, "orders-", PatternPrefixed, "User:alice", OperationRead, PermissionAllow)
	bobWritesAll       = acl(ResourceTopic, WildcardResource, PatternLiteral, "User:bob", OperationWrite, PermissionAllow)
	eveDenied          = withAcl(acl(ResourceTopic, "orders", PatternLiteral, "User:eve", OperationRead, PermissionDeny),
		func(a *Acl) { a.Host = "10.0.0.7" })
	adminsAlter  = acl(ResourceCluster, ClusterResourceName, PatternLiteral, "Group:admins", OperationAlter, PermissionAllow)
	aliceInGroup = acl(ResourceGroup, "billing", PatternLiteral, "User:alice", OperationRead, PermissionAllow)
)

func someAcls() []Acl {
	return []Acl{aliceReadsOrders, aliceReadsPrefixed, bobWritesAll, eveDenied, adminsAlter, aliceInGroup}
}

func createAcls(acls ...Acl) []Record {
	out := make([]Record, len(acls))
	for i, a := range acls {
		out[i] = CreateAcl{Acl: a}
	}
	return out
}

// The ACL records are logged with Kafka's names for their enumerations,
// and read back equal.
func TestAclRecordsRoundTrip(t *testing.T) {
	data, err := EncodeRecord(CreateAcl{Acl: eveDenied})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"CreateAcl","version":1,"resource_type":"TOPIC","resource_name":"orders","pattern_type":"LITERAL",` +
		`"principal":"User:eve","host":"10.0.0.7","operation":"READ","permission":"DENY"}`
	if string(data) != want {
		t.Errorf("encoding %s, want %s", data, want)
	}
	for _, rec := range []Record{CreateAcl{Acl: aliceReadsPrefixed}, RemoveAcl{Acl: adminsAlter}} {
		data, err := EncodeRecord(rec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRecord(data)
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Errorf("round trip of %s = %#v, %v; want %#v", data, got, err, rec)
		}
	}
	data, _ = EncodeRecord(RemoveAcl{Acl: adminsAlter})
	if want := `{"type":"RemoveAcl","version":1,"resource_type":"CLUSTER","resource_name":"kafka-cluster","pattern_type":"LITERAL",` +
		`"principal":"Group:admins","host":"*","operation":"ALTER","permission":"ALLOW"}`; string(data) != want {
		t.Errorf("encoding %s, want %s", data, want)
	}
}

// The FSM stores a valid ACL, accepts one it holds without a change,
// removes one it holds, and refuses every other record with its code,
// leaving the image as it was.
func TestApplyAclRules(t *testing.T) {
	edited := func(edit func(*Acl)) Record { return CreateAcl{Acl: withAcl(aliceReadsOrders, edit)} }
	cases := []struct {
		name string
		rec  Record
		code sluicev1.ErrorCode // NONE = accepted
		// changes: the record changes the ACLs (and so their version).
		changes bool
	}{
		{name: "a new ACL", rec: edited(func(a *Acl) { a.ResourceName = "payments" }), changes: true},
		{name: "an ACL held already changes nothing", rec: CreateAcl{Acl: aliceReadsOrders}},
		{name: "the same ACL denying is another ACL", rec: edited(func(a *Acl) { a.Permission = PermissionDeny }), changes: true},
		{name: "a GROUP", rec: edited(func(a *Acl) { a.ResourceType = ResourceGroup }), changes: true},
		{name: "a TRANSACTIONAL_ID, PREFIXED", rec: edited(func(a *Acl) { a.ResourceType, a.PatternType = ResourceTransactionalID, PatternPrefixed }), changes: true},
		{name: "LITERAL *", rec: edited(func(a *Acl) { a.ResourceName = WildcardResource }), changes: true},
		{name: "every user", rec: edited(func(a *Acl) { a.Principal = WildcardPrincipal }), changes: true},
		{name: "a principal name with a colon", rec: edited(func(a *Acl) { a.Principal = "User:CN=a:b" }), changes: true},
		{name: "another principal type", rec: edited(func(a *Acl) { a.Principal = "Group:ops" }), changes: true},
		{name: "an IPv6 host", rec: edited(func(a *Acl) { a.Host = "2001:db8::1" }), changes: true},
		{name: "a long name", rec: edited(func(a *Acl) { a.ResourceName = strings.Repeat("n", MaxAclResourceNameLength) }), changes: true},
		{name: "each operation", rec: edited(func(a *Acl) { a.Operation = OperationIdempotentWrite }), changes: true},
		{name: "the removal of an ACL held", rec: RemoveAcl{Acl: bobWritesAll}, changes: true},

		{name: "no resource type", rec: edited(func(a *Acl) { a.ResourceType = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "resource type ANY", rec: edited(func(a *Acl) { a.ResourceType = "ANY" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a resource type in lower case", rec: edited(func(a *Acl) { a.ResourceType = "topic" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a resource type Sluice has not", rec: edited(func(a *Acl) { a.ResourceType = "DELEGATION_TOKEN" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "pattern type MATCH", rec: edited(func(a *Acl) { a.PatternType = PatternMatch }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "pattern type ANY", rec: edited(func(a *Acl) { a.PatternType = "ANY" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "no pattern type", rec: edited(func(a *Acl) { a.PatternType = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an empty name", rec: edited(func(a *Acl) { a.ResourceName = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an empty prefix", rec: edited(func(a *Acl) { a.ResourceName, a.PatternType = "", PatternPrefixed }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "PREFIXED *", rec: edited(func(a *Acl) { a.ResourceName, a.PatternType = "*", PatternPrefixed }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a name too long", rec: edited(func(a *Acl) { a.ResourceName = strings.Repeat("n", MaxAclResourceNameLength+1) }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a name that is not UTF-8", rec: edited(func(a *Acl) { a.ResourceName = "o\xff" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a CLUSTER of another name", rec: edited(func(a *Acl) { a.ResourceType = ResourceCluster }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a CLUSTER *", rec: edited(func(a *Acl) { a.ResourceType, a.ResourceName = ResourceCluster, "*" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a PREFIXED CLUSTER", rec: CreateAcl{Acl: acl(ResourceCluster, "kafka", PatternPrefixed, "User:a", OperationAlter, PermissionAllow)},
			code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "no principal", rec: edited(func(a *Acl) { a.Principal = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a principal without a type", rec: edited(func(a *Acl) { a.Principal = "alice" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a principal with an empty type", rec: edited(func(a *Acl) { a.Principal = ":alice" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a principal with an empty name", rec: edited(func(a *Acl) { a.Principal = "User:" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a principal with a newline", rec: edited(func(a *Acl) { a.Principal = "User:al\nice" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a principal too long", rec: edited(func(a *Acl) { a.Principal = "User:" + strings.Repeat("a", MaxAclPrincipalLength) }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "no host", rec: edited(func(a *Acl) { a.Host = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a host name", rec: edited(func(a *Acl) { a.Host = "localhost" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "a network", rec: edited(func(a *Acl) { a.Host = "10.0.0.0/8" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an address with a zone", rec: edited(func(a *Acl) { a.Host = "fe80::1%eth0" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an IPv4-mapped address", rec: edited(func(a *Acl) { a.Host = "::ffff:10.0.0.1" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an address in upper case", rec: edited(func(a *Acl) { a.Host = "2001:DB8::1" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "no operation", rec: edited(func(a *Acl) { a.Operation = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "operation ANY", rec: edited(func(a *Acl) { a.Operation = "ANY" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "an operation in Kafka's CLI spelling", rec: edited(func(a *Acl) { a.Operation = "Read" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "no permission", rec: edited(func(a *Acl) { a.Permission = "" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "permission ANY", rec: edited(func(a *Acl) { a.Permission = "ANY" }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "the removal of an ACL not held", rec: RemoveAcl{Acl: withAcl(bobWritesAll, func(a *Acl) { a.Host = "10.0.0.1" })},
			code: sluicev1.ErrorCode_RESOURCE_NOT_FOUND},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, createAcls(someAcls()...)...)
			before := im.Clone()
			_, err := Apply(im, tc.rec, im.Offset+1)
			if got := errs.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if tc.code != sluicev1.ErrorCode_NONE {
				if !reflect.DeepEqual(im, before) {
					t.Errorf("a refused record changed the image")
				}
				return
			}
			a, created := recordAcl(tc.rec)
			if im.HasAcl(a) != created {
				t.Errorf("after %s the image holds the ACL: %v", tc.rec.Type(), im.HasAcl(a))
			}
			switch {
			case tc.changes && (im.AclsVersion != im.Offset || reflect.DeepEqual(im.Acls, before.Acls)):
				t.Errorf("ACLs version %d at offset %d: want the ACLs changed at this offset", im.AclsVersion, im.Offset)
			case !tc.changes && (im.AclsVersion != before.AclsVersion || !reflect.DeepEqual(im.Acls, before.Acls)):
				t.Errorf("ACLs version %d, was %d: want nothing changed", im.AclsVersion, before.AclsVersion)
			}
			// What was applied survives a snapshot.
			data, err := EncodeSnapshot(im)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im) {
				t.Errorf("snapshot round trip: %+v, %v", back, err)
			}
		})
	}
}

// recordAcl is r's ACL, and whether r creates it.
func recordAcl(r Record) (Acl, bool) {
	switch r := r.(type) {
	case CreateAcl:
		return r.Acl, true
	case RemoveAcl:
		return r.Acl, false
	}
	panic(fmt.Sprintf("%T is no ACL record", r))
}

// The refusals say what is wrong, in words an operator can act on.
func TestAclRefusalsSayWhy(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Acl)
		says string
	}{
		{func(a *Acl) { a.ResourceType = "ANY" }, `resource type "ANY": an ACL is on a TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID`},
		{func(a *Acl) { a.PatternType = PatternMatch }, `pattern type "MATCH": an ACL's is LITERAL or PREFIXED`},
		{func(a *Acl) { a.ResourceType = ResourceCluster }, `the CLUSTER resource is LITERAL "kafka-cluster", not LITERAL "orders"`},
		{func(a *Acl) { a.ResourceName, a.PatternType = "*", PatternPrefixed }, `PREFIXED "*" is refused: every TOPIC is LITERAL "*"`},
		{func(a *Acl) { a.Principal = "alice" }, `principal "alice" is not TYPE:NAME (User:alice, or User:* for every user)`},
		{func(a *Acl) { a.Host = "db.example" }, `host "db.example" is neither "*" nor an IP address`},
		{func(a *Acl) { a.Host = "::FFFF:10.0.0.1" }, `host "::FFFF:10.0.0.1" is written "10.0.0.1"`},
		{func(a *Acl) { a.Operation = "ANY" }, `operation "ANY": an ACL's is one of ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE`},
		{func(a *Acl) { a.Permission = "" }, `permission "": an ACL's is ALLOW or DENY`},
	} {
		a := withAcl(aliceReadsOrders, tc.edit)
		if err := checkAcl(a); err == nil || errs.Message(err) != tc.says {
			t.Errorf("%v: %v; want %q", a, err, tc.says)
		}
	}
}

// The hosts of ACLs are written one way, so that the authorizer can
// compare a caller's address (AclHost) as a string.
func TestCanonicalAclHost(t *testing.T) {
	for in, want := range map[string]string{
		"*": "*", "10.0.0.1": "10.0.0.1", "::ffff:10.0.0.1": "10.0.0.1", "2001:DB8::1": "2001:db8::1", "2001:db8:0:0:0:0:0:1": "2001:db8::1",
		"": "", "localhost": "", "10.0.0.0/8": "", "fe80::1%eth0": "", "010.0.0.1": "", " 10.0.0.1": "",
	} {
		got, ok := CanonicalAclHost(in)
		if got != want || ok != (want != "") {
			t.Errorf("CanonicalAclHost(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if got := AclHost(netip.MustParseAddr("::ffff:192.168.1.2").WithZone("eth0")); got != "192.168.1.2" {
		t.Errorf("AclHost of a mapped address with a zone: %q", got)
	}
}

// No more than MaxAcls ACLs are stored; an ACL held already is still a
// success, and a removal makes room.
func TestApplyCreateAclBeyondMaxAcls(t *testing.T) {
	im := NewImage()
	for i := range MaxAcls {
		im.Acls[acl(ResourceTopic, fmt.Sprint("t", i), PatternLiteral, "User:u", OperationRead, PermissionAllow)] = struct{}{}
	}
	im.Offset = 1
	held := acl(ResourceTopic, "t0", PatternLiteral, "User:u", OperationRead, PermissionAllow)
	extra := acl(ResourceTopic, "extra", PatternLiteral, "User:u", OperationRead, PermissionAllow)
	_, err := Apply(im, CreateAcl{Acl: extra}, 2)
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST || !strings.Contains(err.Error(), "the cluster holds 100000 ACLs, the most it keeps") {
		t.Errorf("ACL %d: %v", MaxAcls+1, err)
	}
	if _, err := Apply(im, CreateAcl{Acl: held}, 3); err != nil {
		t.Errorf("an ACL held, at the bound: %v", err)
	}
	perAcl, records, _ := planAclCreations(im, []Acl{held, extra})
	if perAcl[0] != nil || errs.Code(perAcl[1]) != sluicev1.ErrorCode_INVALID_REQUEST || len(records) != 0 {
		t.Errorf("plan at the bound: %v, %d records", perAcl, len(records))
	}
	if _, err := Apply(im, RemoveAcl{Acl: held}, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(im, CreateAcl{Acl: extra}, 5); err != nil || len(im.Acls) != MaxAcls {
		t.Errorf("after a removal: %v, %d ACLs", err, len(im.Acls))
	}
}

// Clone copies the ACLs; a snapshot holds them as a sorted array (so
// equal images encode to equal bytes) with their version, and a cluster
// without ACLs has neither key.
func TestAclsInClonesAndSnapshots(t *testing.T) {
	im := build(t, createAcls(someAcls()...)...)
	c := im.Clone()
	if !reflect.DeepEqual(c, im) || c.AclsVersion != uint64(len(someAcls())) {
		t.Fatalf("the clone differs, or the version %d is not the last creation's offset", c.AclsVersion)
	}
	delete(c.Acls, aliceReadsOrders)
	c.Acls[acl(ResourceTopic, "x", PatternLiteral, "User:m", OperationAll, PermissionAllow)] = struct{}{}
	if !im.HasAcl(aliceReadsOrders) || len(im.Acls) != len(someAcls()) {
		t.Error("changing the clone changed the image")
	}
	if z := (&Image{}).Clone(); z.Acls == nil || len(z.Acls) != 0 {
		t.Errorf("clone of a zero image: ACLs %v", z.Acls)
	}

	data, err := EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Image struct {
			Acls        []Acl  `json:"acls"`
			AclsVersion uint64 `json:"acls_version"`
		} `json:"image"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Image.Acls, im.AclList()) || f.Image.AclsVersion != im.AclsVersion {
		t.Errorf("snapshot ACLs %v (version %d), want %v (version %d)", f.Image.Acls, f.Image.AclsVersion, im.AclList(), im.AclsVersion)
	}
	// Built in another order, the same ACLs encode to the same bytes.
	other := build(t, createAcls(aliceInGroup, adminsAlter, eveDenied, bobWritesAll, aliceReadsPrefixed, aliceReadsOrders)...)
	if data2, _ := EncodeSnapshot(other); string(data2) != string(data) {
		t.Errorf("the same ACLs encode differently:\n%s\n%s", data, data2)
	}
	if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im) {
		t.Errorf("round trip: %v", err)
	}

	data, _ = EncodeSnapshot(build(t, withTopic()...))
	if strings.Contains(string(data), `"acls`) {
		t.Errorf("snapshot %s names ACLs", data)
	}
}

// AclList orders by resource, then principal, host, operation, permission.
func TestAclListOrder(t *testing.T) {
	im := build(t, createAcls(someAcls()...)...)
	var got []string
	for _, a := range im.AclList() {
		got = append(got, a.String())
	}
	want := []string{
		`ALLOW Group:admins ALTER from * on CLUSTER LITERAL "kafka-cluster"`,
		`ALLOW User:alice READ from * on GROUP LITERAL "billing"`,
		`ALLOW User:bob WRITE from * on TOPIC LITERAL "*"`,
		`ALLOW User:alice READ from * on TOPIC LITERAL "orders"`,
		`DENY User:eve READ from 10.0.0.7 on TOPIC LITERAL "orders"`,
		`ALLOW User:alice READ from * on TOPIC PREFIXED "orders-"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AclList:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Kafka's AclBindingFilter.matches: an empty field matches anything; a
// name with MATCH matches the ACLs that apply to that resource; with any
// other pattern type it must be equal.
func TestAclFilterMatches(t *testing.T) {
	prefixedAll := acl(ResourceTopic, "o", PatternPrefixed, "User:*", OperationAll, PermissionAllow)
	all := []Acl{aliceReadsOrders, aliceReadsPrefixed, bobWritesAll, eveDenied, adminsAlter, aliceInGroup, prefixedAll}
	cases := []struct {
		name   string
		filter AclFilter
		want   []Acl
	}{
		{"the empty filter matches every ACL", AclFilter{}, all},
		{"a resource type", AclFilter{ResourceType: ResourceGroup}, []Acl{aliceInGroup}},
		{"a name with any pattern type is equal", AclFilter{ResourceName: "orders"}, []Acl{aliceReadsOrders, eveDenied}},
		{"LITERAL and a name", AclFilter{ResourceName: "orders-", PatternType: PatternLiteral}, nil},
		{"PREFIXED and a name", AclFilter{ResourceName: "orders-", PatternType: PatternPrefixed}, []Acl{aliceReadsPrefixed}},
		{"PREFIXED alone", AclFilter{PatternType: PatternPrefixed}, []Acl{aliceReadsPrefixed, prefixedAll}},
		{"LITERAL * is the wildcard ACL only", AclFilter{ResourceName: "*", PatternType: PatternLiteral}, []Acl{bobWritesAll}},
		{"MATCH: literal, wildcard and prefixes of the name", AclFilter{ResourceType: ResourceTopic, ResourceName: "orders-eu", PatternType: PatternMatch},
			[]Acl{aliceReadsPrefixed, bobWritesAll, prefixedAll}},
		{"MATCH of the literal name", AclFilter{ResourceType: ResourceTopic, ResourceName: "orders", PatternType: PatternMatch},
			[]Acl{aliceReadsOrders, bobWritesAll, eveDenied, prefixedAll}},
		{"MATCH of any resource type", AclFilter{ResourceName: "orders", PatternType: PatternMatch},
			[]Acl{aliceReadsOrders, bobWritesAll, eveDenied, prefixedAll}},
		{"MATCH without a name matches everything", AclFilter{PatternType: PatternMatch}, all},
		{"MATCH of the cluster", AclFilter{ResourceType: ResourceCluster, ResourceName: ClusterResourceName, PatternType: PatternMatch}, []Acl{adminsAlter}},
		{"MATCH and a principal", AclFilter{ResourceName: "orders", PatternType: PatternMatch, Principal: "User:alice"}, []Acl{aliceReadsOrders}},
		{"a principal is literal: User:* is not every user's", AclFilter{Principal: "User:*"}, []Acl{prefixedAll}},
		{"a host is literal", AclFilter{Host: "10.0.0.7"}, []Acl{eveDenied}},
		{"host * is the ACLs from any host", AclFilter{Host: "*", Principal: "User:eve"}, nil},
		{"an operation is literal: READ is not ALL", AclFilter{Operation: OperationRead, ResourceType: ResourceTopic}, []Acl{aliceReadsOrders, aliceReadsPrefixed, eveDenied}},
		{"ALL is the ACLs of ALL", AclFilter{Operation: OperationAll}, []Acl{prefixedAll}},
		{"a permission", AclFilter{Permission: PermissionDeny}, []Acl{eveDenied}},
		{"every field", AclFilter{ResourceType: ResourceTopic, ResourceName: "orders", PatternType: PatternLiteral, Principal: "User:eve",
			Host: "10.0.0.7", Operation: OperationRead, Permission: PermissionDeny}, []Acl{eveDenied}},
		{"one field off", AclFilter{ResourceType: ResourceTopic, ResourceName: "orders", PatternType: PatternLiteral, Principal: "User:eve",
			Host: "10.0.0.7", Operation: OperationRead, Permission: PermissionAllow}, nil},
		{"an unknown value matches nothing", AclFilter{ResourceType: "USER"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []Acl
			for _, a := range all {
				if tc.filter.Matches(a) {
					got = append(got, a)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%+v matches\n%v\nwant\n%v", tc.filter, got, tc.want)
			}
		})
	}
}

// A filter value that no ACL can have is refused; ANY is the empty value.
func TestAclFilterValidate(t *testing.T) {
	for _, f := range []AclFilter{{}, {PatternType: PatternMatch}, {ResourceType: ResourceCluster, PatternType: PatternLiteral},
		{Operation: OperationAll, Permission: PermissionDeny}, {Principal: "whatever", Host: "anything"}} {
		if err := f.Validate(); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
	for _, f := range []AclFilter{{ResourceType: "ANY"}, {ResourceType: "USER"}, {PatternType: "ANY"}, {PatternType: "GLOB"},
		{Operation: "ANY"}, {Operation: "read"}, {Permission: "MAYBE"}} {
		if err := f.Validate(); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
			t.Errorf("%+v: %v; want INVALID_REQUEST", f, err)
		}
	}
}

// planAclCreations: an ACL held, or named twice, is one record at most;
// a refusal is the ACL's alone.
func TestPlanAclCreations(t *testing.T) {
	im := build(t, createAcls(aliceReadsOrders)...)
	bad := withAcl(bobWritesAll, func(a *Acl) { a.Principal = "bob" })
	perAcl, records, recordOf := planAclCreations(im, []Acl{aliceReadsOrders, bobWritesAll, bad, eveDenied, bobWritesAll})
	var codes []sluicev1.ErrorCode
	for _, err := range perAcl {
		codes = append(codes, errs.Code(err))
	}
	ok, invalidReq := sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_INVALID_REQUEST
	if !reflect.DeepEqual(codes, []sluicev1.ErrorCode{ok, ok, invalidReq, ok, ok}) ||
		!reflect.DeepEqual(records, createAcls(bobWritesAll, eveDenied)) || !reflect.DeepEqual(recordOf, []int{-1, 0, -1, 1, 0}) {
		t.Errorf("plan: %v, %v, %v", codes, records, recordOf)
	}
	if perAcl, records, _ := planAclCreations(im, nil); len(perAcl) != 0 || len(records) != 0 {
		t.Errorf("plan of nothing: %v, %v", perAcl, records)
	}
}

// planAclDeletions: each filter lists what it matches; an ACL two filters
// match is removed once; an invalid filter is refused alone; more than
// MaxAclDeletions refuse the request.
func TestPlanAclDeletions(t *testing.T) {
	acls := build(t, createAcls(someAcls()...)...).AclList()
	results, records, err := planAclDeletions(acls, []AclFilter{
		{Principal: "User:alice", ResourceType: ResourceTopic},
		{Operation: "ANY"},
		{ResourceName: "orders", PatternType: PatternMatch, Permission: PermissionAllow},
		{Principal: "User:nobody"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 || !reflect.DeepEqual(results[0].Deleted, []Acl{aliceReadsOrders, aliceReadsPrefixed}) ||
		errs.Code(results[1].Err) != sluicev1.ErrorCode_INVALID_REQUEST || results[1].Deleted != nil ||
		!reflect.DeepEqual(results[2].Deleted, []Acl{bobWritesAll, aliceReadsOrders}) ||
		results[3].Deleted != nil || results[3].Err != nil {
		t.Errorf("results %+v", results)
	}
	want := []Record{RemoveAcl{Acl: aliceReadsOrders}, RemoveAcl{Acl: aliceReadsPrefixed}, RemoveAcl{Acl: bobWritesAll}}
	if !reflect.DeepEqual(records, want) {
		t.Errorf("records %v, want %v", records, want)
	}

	many := make([]Acl, MaxAclDeletions+1)
	for i := range many {
		many[i] = acl(ResourceTopic, fmt.Sprintf("t%05d", i), PatternLiteral, "User:u", OperationRead, PermissionAllow)
	}
	if _, _, err := planAclDeletions(many[:MaxAclDeletions], []AclFilter{{}}); err != nil {
		t.Errorf("%d deletions: %v", MaxAclDeletions, err)
	}
	_, _, err = planAclDeletions(many, []AclFilter{{ResourceName: "t00000"}, {}})
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST || !strings.Contains(err.Error(), "more than 10000 ACLs") {
		t.Errorf("%d deletions: %v", len(many), err)
	}
}

// Through a running single-voter controller: ACLs created (one invalid,
// one already held, one named twice), then deleted by filters; each
// outcome answered, the offsets returned hold the changes.
func TestControllerCreateAndDeleteAcls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads, cluster bootstrapped", func() error {
		if im := c.Image(); !c.IsLeader() || im.ClusterID == "" || len(im.Features) != len(SupportedFeatures) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	bad := withAcl(eveDenied, func(a *Acl) { a.Host = "somewhere" })
	perAcl, offset, err := c.CreateAcls(ctx, append(someAcls(), bad, aliceReadsOrders))
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range perAcl {
		if want := i == len(someAcls()); (err != nil) != want {
			t.Errorf("creation %d: %v", i, err)
		}
	}
	im := c.Image()
	if offset == 0 || offset > im.Offset || !reflect.DeepEqual(im.AclList(), build(t, createAcls(someAcls()...)...).AclList()) ||
		im.AclsVersion != offset {
		t.Fatalf("offset %d (image at %d, ACLs version %d), ACLs %v", offset, im.Offset, im.AclsVersion, im.AclList())
	}
	// Created again: nothing proposed, the image's offset returned.
	if perAcl, again, err := c.CreateAcls(ctx, []Acl{aliceReadsOrders}); err != nil || perAcl[0] != nil || again != c.Image().Offset {
		t.Errorf("create again: %v, offset %d (image at %d), %v", perAcl, again, c.Image().Offset, err)
	}

	results, offset, err := c.DeleteAcls(ctx, []AclFilter{{Principal: "User:alice"}, {PatternType: "BAD"}, {ResourceType: ResourceTopic, Permission: PermissionAllow}})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 3 || len(results[0].Deleted) != 3 || results[1].Err == nil || len(results[2].Deleted) != 3 {
		t.Fatalf("results %+v", results)
	}
	im = c.Image()
	if offset != im.Offset || !reflect.DeepEqual(im.AclList(), []Acl{adminsAlter, eveDenied}) || im.AclsVersion != offset {
		t.Errorf("after the deletions: offset %d (image at %d, version %d), ACLs %v", offset, im.Offset, im.AclsVersion, im.AclList())
	}
	// Nothing matched: nothing proposed.
	results, again, err := c.DeleteAcls(ctx, []AclFilter{{Principal: "User:alice"}})
	if err != nil || len(results[0].Deleted) != 0 || again != offset {
		t.Errorf("delete again: %+v, offset %d (was %d), %v", results, again, offset, err)
	}
}
