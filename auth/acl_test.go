package auth

import (
	"fmt"
	"testing"
)

func acl(rt ResourceType, name string, pat PatternType, principal string, op Operation, perm Permission) ACL {
	return ACL{ResourceType: rt, Name: name, Pattern: pat, Principal: principal, Host: "*", Operation: op, Permission: perm}
}

// Kafka's StandardAuthorizer rules, case by case.
func TestAuthorizerRules(t *testing.T) {
	alice, bob := User("alice"), User("bob")
	a := NewAuthorizer([]ACL{
		acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpWrite, Allow),
		acl(ResourceTopic, "payments-", PatternPrefixed, "User:alice", OpRead, Allow),
		acl(ResourceTopic, "payments-secret", PatternLiteral, "User:alice", OpRead, Deny),
		acl(ResourceTopic, "*", PatternLiteral, "User:*", OpDescribe, Allow),
		acl(ResourceGroup, "etl", PatternLiteral, "User:bob", OpAll, Allow),
		acl(ResourceGroup, "etl", PatternLiteral, "User:bob", OpDelete, Deny),
		acl(ResourceTransactionalID, "tx-", PatternPrefixed, "User:bob", OpWrite, Allow),
		{ResourceType: ResourceTopic, Name: "local", Pattern: PatternLiteral, Principal: "User:bob", Host: "10.0.0.1", Operation: OpRead, Permission: Allow},
		acl(ResourceCluster, ClusterResourceName, PatternLiteral, "User:bob", OpIdempotentWrite, Allow),
	}, []string{"User:admin"})
	for _, tc := range []struct {
		p    Principal
		host string
		op   Operation
		r    Resource
		want bool
	}{
		{alice, "1.2.3.4", OpWrite, Topic("orders"), true},
		{alice, "1.2.3.4", OpRead, Topic("orders"), false},    // WRITE does not imply READ
		{alice, "1.2.3.4", OpDescribe, Topic("orders"), true}, // WRITE implies DESCRIBE (and the * ACL)
		{bob, "1.2.3.4", OpWrite, Topic("orders"), false},
		{bob, "1.2.3.4", OpDescribe, Topic("anything"), true},                           // User:* on *
		{Principal{Type: "Node", Name: "n1"}, "1.2.3.4", OpDescribe, Topic("x"), false}, // User:* is users only
		{alice, "1.2.3.4", OpRead, Topic("payments-eu"), true},
		{alice, "1.2.3.4", OpRead, Topic("payments-secret"), false}, // deny wins
		{alice, "1.2.3.4", OpRead, Topic("payments"), false},        // shorter than the prefix
		{bob, "1.2.3.4", OpRead, Group("etl"), true},                // ALL
		{bob, "1.2.3.4", OpDelete, Group("etl"), false},             // deny of one op under ALL
		{bob, "1.2.3.4", OpWrite, TransactionalID("tx-1"), true},
		{bob, "1.2.3.4", OpDescribe, TransactionalID("tx-1"), true},
		{alice, "1.2.3.4", OpWrite, TransactionalID("tx-1"), false},
		{bob, "10.0.0.1", OpRead, Topic("local"), true},
		{bob, "10.0.0.2", OpRead, Topic("local"), false},
		{bob, "1.2.3.4", OpIdempotentWrite, Cluster, true},
		{bob, "1.2.3.4", OpAlter, Cluster, false},
		{User("admin"), "1.2.3.4", OpDelete, Cluster, true}, // super user
		{Anonymous, "1.2.3.4", OpRead, Topic("orders"), false},
	} {
		if got := a.Authorize(tc.p, tc.host, tc.op, tc.r); got != tc.want {
			t.Errorf("%s from %s: %s on %v = %v, want %v", tc.p, tc.host, tc.op, tc.r, got, tc.want)
		}
	}
	if NewAuthorizer(nil, nil).Authorize(alice, "", OpDescribe, Topic("x")) {
		t.Error("no ACL: allowed")
	}
}

// AuthorizeAny follows Kafka's authorizeByResourceType (KIP-679): an
// ALLOW of the operation (or ALL) on some pattern that no DENY covers.
func TestAuthorizeAnyRules(t *testing.T) {
	allow := func(name string, pat PatternType) ACL {
		return acl(ResourceTopic, name, pat, "User:alice", OpWrite, Allow)
	}
	deny := func(name string, pat PatternType) ACL {
		return acl(ResourceTopic, name, pat, "User:alice", OpWrite, Deny)
	}
	alice := User("alice")
	for _, tc := range []struct {
		rule string
		acls []ACL
		p    Principal
		host string
		want bool
	}{
		{"no ACL denies", nil, alice, "1.2.3.4", false},
		{"an ALLOW on a literal name allows", []ACL{allow("orders", PatternLiteral)}, alice, "1.2.3.4", true},
		{"an ALLOW on a prefix allows", []ACL{allow("orders-", PatternPrefixed)}, alice, "1.2.3.4", true},
		{"ALL counts", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpAll, Allow)}, alice, "1.2.3.4", true},
		{"User:* counts for a user", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:*", OpWrite, Allow)}, alice, "1.2.3.4", true},
		{"User:* is users only", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:*", OpWrite, Allow)},
			Principal{Type: "Node", Name: "n1"}, "1.2.3.4", false},
		{"another operation does not count", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpRead, Allow)}, alice, "1.2.3.4", false},
		{"no implied operation", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpDescribe, Allow)}, alice, "1.2.3.4", false},
		{"another resource type does not count", []ACL{acl(ResourceGroup, "orders", PatternLiteral, "User:alice", OpWrite, Allow)}, alice, "1.2.3.4", false},
		{"another principal does not count", []ACL{acl(ResourceTopic, "orders", PatternLiteral, "User:bob", OpWrite, Allow)}, alice, "1.2.3.4", false},
		{"another host does not count", []ACL{{ResourceType: ResourceTopic, Name: "orders", Pattern: PatternLiteral, Principal: "User:alice",
			Host: "10.0.0.1", Operation: OpWrite, Permission: Allow}}, alice, "10.0.0.2", false},
		{"the host's own ACL counts", []ACL{{ResourceType: ResourceTopic, Name: "orders", Pattern: PatternLiteral, Principal: "User:alice",
			Host: "10.0.0.1", Operation: OpWrite, Permission: Allow}}, alice, "10.0.0.1", true},
		{"a literal DENY on the name covers its ALLOW", []ACL{allow("orders", PatternLiteral), deny("orders", PatternLiteral)}, alice, "1.2.3.4", false},
		{"a prefixed DENY starting the name covers it", []ACL{allow("orders", PatternLiteral), deny("ord", PatternPrefixed)}, alice, "1.2.3.4", false},
		{"a prefixed DENY starting the prefix covers it", []ACL{allow("orders-", PatternPrefixed), deny("orders-", PatternPrefixed)}, alice, "1.2.3.4", false},
		{"a literal DENY under an allowed prefix leaves other names", []ACL{allow("orders-", PatternPrefixed), deny("orders-eu", PatternLiteral)}, alice, "1.2.3.4", true},
		{"a longer prefixed DENY leaves other names", []ACL{allow("orders-", PatternPrefixed), deny("orders-eu", PatternPrefixed)}, alice, "1.2.3.4", true},
		{"a DENY on another name leaves the allowed one", []ACL{allow("orders", PatternLiteral), deny("payments", PatternLiteral)}, alice, "1.2.3.4", true},
		{"one uncovered ALLOW is enough", []ACL{allow("orders", PatternLiteral), deny("orders", PatternLiteral), allow("payments", PatternLiteral)}, alice, "1.2.3.4", true},
		{"an ALLOW on * allows", []ACL{allow("*", PatternLiteral), deny("orders", PatternLiteral)}, alice, "1.2.3.4", true},
		{"a DENY on * denies", []ACL{allow("*", PatternLiteral), allow("orders", PatternLiteral), deny("*", PatternLiteral)}, alice, "1.2.3.4", false},
		{"a DENY of another operation does not cover", []ACL{allow("orders", PatternLiteral),
			acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpRead, Deny)}, alice, "1.2.3.4", true},
		{"a DENY of ALL covers", []ACL{allow("orders", PatternLiteral),
			acl(ResourceTopic, "orders", PatternLiteral, "User:alice", OpAll, Deny)}, alice, "1.2.3.4", false},
		{"a DENY to User:* covers", []ACL{allow("orders", PatternLiteral),
			acl(ResourceTopic, "orders", PatternLiteral, "User:*", OpWrite, Deny)}, alice, "1.2.3.4", false},
		{"a super user may", []ACL{deny("*", PatternLiteral)}, User("admin"), "1.2.3.4", true},
	} {
		a := NewAuthorizer(tc.acls, []string{"User:admin"})
		if got := a.AuthorizeAny(tc.p, tc.host, OpWrite, ResourceTopic); got != tc.want {
			t.Errorf("%s: AuthorizeAny(%s, WRITE, TOPIC) = %v, want %v", tc.rule, tc.p, got, tc.want)
		}
	}
}

func TestValidateACL(t *testing.T) {
	good := acl(ResourceTopic, "t", PatternLiteral, "User:alice", OpRead, Allow)
	if err := ValidateACL(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*ACL){
		func(a *ACL) { a.ResourceType = "USER" },
		func(a *ACL) { a.ResourceType = ResourceCluster },
		func(a *ACL) { a.Pattern = "MATCH" },
		func(a *ACL) { a.Pattern, a.Name = PatternPrefixed, "*" },
		func(a *ACL) { a.Name = "" },
		func(a *ACL) { a.Principal = "alice" },
		func(a *ACL) { a.Principal = "User:" },
		func(a *ACL) { a.Host = "example.com" },
		func(a *ACL) { a.Operation = "ANY" },
		func(a *ACL) { a.Permission = "ANY" },
	} {
		x := good
		bad(&x)
		if err := ValidateACL(x); err == nil {
			t.Errorf("%+v accepted", x)
		}
	}
}

// An authorization check costs map lookups, not a scan of the ACLs.
func BenchmarkAuthorize(b *testing.B) {
	var acls []ACL
	for i := range 10_000 {
		acls = append(acls, acl(ResourceTopic, fmt.Sprintf("topic-%d", i), PatternLiteral, fmt.Sprintf("User:u%d", i%100), OpWrite, Allow))
	}
	for i := range 100 {
		acls = append(acls, acl(ResourceTopic, fmt.Sprintf("team%d-", i), PatternPrefixed, fmt.Sprintf("User:u%d", i), OpRead, Allow))
	}
	a := NewAuthorizer(acls, nil)
	p := User("u42")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if !a.Authorize(p, "10.1.2.3", OpWrite, Topic("topic-4242")) {
			b.Fatal("denied")
		}
	}
}
