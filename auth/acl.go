package auth

import (
	"fmt"
	"net/netip"
	"strings"
)

// ResourceType is the kind of resource an ACL is on (Kafka's names).
type ResourceType string

// Resource types.
const (
	ResourceTopic           ResourceType = "TOPIC"
	ResourceGroup           ResourceType = "GROUP"
	ResourceCluster         ResourceType = "CLUSTER"
	ResourceTransactionalID ResourceType = "TRANSACTIONAL_ID"
)

// ClusterResourceName is the one cluster resource's name, as in Kafka.
const ClusterResourceName = "kafka-cluster"

// PatternType is how an ACL's name matches resources.
type PatternType string

// Pattern types.
const (
	PatternLiteral  PatternType = "LITERAL"  // the name, or "*" for all
	PatternPrefixed PatternType = "PREFIXED" // names starting with it
)

// Operation is what an ACL allows or denies (Kafka's AclOperation).
type Operation string

// Operations.
const (
	OpAll             Operation = "ALL"
	OpRead            Operation = "READ"
	OpWrite           Operation = "WRITE"
	OpCreate          Operation = "CREATE"
	OpDelete          Operation = "DELETE"
	OpAlter           Operation = "ALTER"
	OpDescribe        Operation = "DESCRIBE"
	OpClusterAction   Operation = "CLUSTER_ACTION"
	OpDescribeConfigs Operation = "DESCRIBE_CONFIGS"
	OpAlterConfigs    Operation = "ALTER_CONFIGS"
	OpIdempotentWrite Operation = "IDEMPOTENT_WRITE"
)

// Permission is whether an ACL allows or denies.
type Permission string

// Permissions.
const (
	Allow Permission = "ALLOW"
	Deny  Permission = "DENY"
)

// WildcardPrincipal in an ACL matches every User principal.
const WildcardPrincipal = "User:*"

// WildcardHost in an ACL matches every host.
const WildcardHost = "*"

// ACL is one access control entry on a resource pattern.
type ACL struct {
	ResourceType ResourceType
	Name         string
	Pattern      PatternType
	Principal    string // TYPE:NAME, or User:*
	Host         string // an IP address, or *
	Operation    Operation
	Permission   Permission
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s on %s %s:%s from %s (%s)", a.Permission, a.Operation, strings.ToLower(string(a.ResourceType)),
		strings.ToLower(string(a.Pattern)), a.Name, a.Host, a.Principal)
}

// implied are the operations an allowed operation implies (Kafka:
// READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
// DESCRIBE_CONFIGS).
var implied = map[Operation][]Operation{
	OpDescribe:        {OpRead, OpWrite, OpDelete, OpAlter},
	OpDescribeConfigs: {OpAlterConfigs},
}

// Resource is one resource a request acts on.
type Resource struct {
	Type ResourceType
	Name string
}

// Cluster is the cluster resource.
var Cluster = Resource{Type: ResourceCluster, Name: ClusterResourceName}

// Topic, Group and TransactionalID name resources.
func Topic(name string) Resource { return Resource{Type: ResourceTopic, Name: name} }
func Group(name string) Resource { return Resource{Type: ResourceGroup, Name: name} }
func TransactionalID(name string) Resource {
	return Resource{Type: ResourceTransactionalID, Name: name}
}

// Authorizer decides from an index of ACLs (Kafka's StandardAuthorizer
// rules): super users may do anything; otherwise a DENY that matches
// wins, then an ALLOW that matches (or implies the operation) allows; no
// match denies. An ACL matches a request when its resource type is the
// resource's, its pattern matches the name (literal equal, literal "*",
// or prefixed by it), its principal is the caller's (or User:* for a
// user) and its host the caller's address (or *). Immutable: build a new
// one when the ACLs change. Safe for concurrent use.
type Authorizer struct {
	super map[string]bool
	// by resource type: literal names (and "*") and prefixes.
	literal  map[ResourceType]map[string][]ACL
	prefixed map[ResourceType]map[string][]ACL
	// prefixLens are the distinct lengths of the prefixes of a type, so
	// a lookup tries only those.
	prefixLens map[ResourceType][]int
	count      int
}

// NewAuthorizer indexes acls; superUsers are principals (User:admin)
// allowed everything.
func NewAuthorizer(acls []ACL, superUsers []string) *Authorizer {
	a := &Authorizer{super: map[string]bool{}, literal: map[ResourceType]map[string][]ACL{},
		prefixed: map[ResourceType]map[string][]ACL{}, prefixLens: map[ResourceType][]int{}, count: len(acls)}
	for _, s := range superUsers {
		a.super[s] = true
	}
	lens := map[ResourceType]map[int]bool{}
	for _, acl := range acls {
		m := a.literal
		if acl.Pattern == PatternPrefixed {
			m = a.prefixed
			if lens[acl.ResourceType] == nil {
				lens[acl.ResourceType] = map[int]bool{}
			}
			lens[acl.ResourceType][len(acl.Name)] = true
		}
		if m[acl.ResourceType] == nil {
			m[acl.ResourceType] = map[string][]ACL{}
		}
		m[acl.ResourceType][acl.Name] = append(m[acl.ResourceType][acl.Name], acl)
	}
	for t, ls := range lens {
		for l := range ls {
			a.prefixLens[t] = append(a.prefixLens[t], l)
		}
	}
	return a
}

// Len is the number of ACLs indexed.
func (a *Authorizer) Len() int { return a.count }

// IsSuperUser reports whether p is a configured super user.
func (a *Authorizer) IsSuperUser(p Principal) bool { return a.super[p.String()] }

// Authorize reports whether p, calling from host (an IP address, "" if
// unknown), may do op on r.
func (a *Authorizer) Authorize(p Principal, host string, op Operation, r Resource) bool {
	if a.super[p.String()] {
		return true
	}
	principal := p.String()
	allowed := false
	check := func(acls []ACL) bool { // false: a DENY matched
		for _, acl := range acls {
			if acl.Principal != principal && !(acl.Principal == WildcardPrincipal && p.Type == UserType) {
				continue
			}
			if acl.Host != WildcardHost && acl.Host != host {
				continue
			}
			if acl.Permission == Deny {
				if acl.Operation == op || acl.Operation == OpAll {
					return false
				}
				continue
			}
			if !allowed && allows(acl.Operation, op) {
				allowed = true
			}
		}
		return true
	}
	if lit := a.literal[r.Type]; lit != nil {
		if !check(lit[r.Name]) || !check(lit["*"]) {
			return false
		}
	}
	if pre := a.prefixed[r.Type]; pre != nil {
		for _, l := range a.prefixLens[r.Type] {
			if l <= len(r.Name) && !check(pre[r.Name[:l]]) {
				return false
			}
		}
	}
	return allowed
}

// AuthorizeAny reports whether p, calling from host, may do op on at
// least one resource of type t: Kafka's authorizeByResourceType
// (KIP-679), which InitProducerId uses to let a producer with WRITE on
// some topic be idempotent without IDEMPOTENT_WRITE on the cluster.
//
// The rules are Kafka's, over the ACLs of type t whose principal (or
// User:* for a user) and host (or *) match and whose operation is op or
// ALL (no implied operations):
//   - a super user may;
//   - a DENY on the literal "*" denies;
//   - an ALLOW on the literal "*" allows;
//   - an ALLOW on a literal name allows unless a DENY on that literal name,
//     or a prefixed DENY whose prefix starts the name, covers it;
//   - an ALLOW on a prefix allows unless a prefixed DENY whose prefix
//     starts that prefix (it covers every name the ALLOW does) covers it;
//   - otherwise it denies.
//
// Like Kafka's, it reads the ACLs, not the resources that exist: an
// ALLOW on the literal "orders" counts with no topic "orders", and
// DENYs on some names under an allowed prefix do not cancel it (other
// names under it remain allowed). It walks every ACL of type t: meant
// for rare requests (InitProducerId), not per record.
func (a *Authorizer) AuthorizeAny(p Principal, host string, op Operation, t ResourceType) bool {
	if a.super[p.String()] {
		return true
	}
	principal := p.String()
	matches := func(acl ACL) bool {
		return (acl.Principal == principal || acl.Principal == WildcardPrincipal && p.Type == UserType) &&
			(acl.Host == WildcardHost || acl.Host == host) && (acl.Operation == op || acl.Operation == OpAll)
	}
	deniedLiteral := map[string]bool{}
	deniedPrefixes := map[string]bool{}
	var allowLiteral, allowPrefixed []string
	wildcardAllow := false
	for name, acls := range a.literal[t] {
		for _, acl := range acls {
			if !matches(acl) {
				continue
			}
			switch {
			case acl.Permission == Deny && name == "*":
				return false
			case acl.Permission == Deny:
				deniedLiteral[name] = true
			case name == "*":
				wildcardAllow = true
			default:
				allowLiteral = append(allowLiteral, name)
			}
		}
	}
	for prefix, acls := range a.prefixed[t] {
		for _, acl := range acls {
			if !matches(acl) {
				continue
			}
			if acl.Permission == Deny {
				deniedPrefixes[prefix] = true
			} else {
				allowPrefixed = append(allowPrefixed, prefix)
			}
		}
	}
	if wildcardAllow {
		return true
	}
	// coveredByPrefix: a prefixed DENY's prefix starts name.
	coveredByPrefix := func(name string) bool {
		for i := 1; i <= len(name); i++ {
			if deniedPrefixes[name[:i]] {
				return true
			}
		}
		return false
	}
	for _, name := range allowLiteral {
		if !deniedLiteral[name] && !coveredByPrefix(name) {
			return true
		}
	}
	for _, prefix := range allowPrefixed {
		if !coveredByPrefix(prefix) {
			return true
		}
	}
	return false
}

// allows reports whether an ALLOW of have permits want.
func allows(have, want Operation) bool {
	if have == want || have == OpAll {
		return true
	}
	for _, op := range implied[want] {
		if op == have {
			return true
		}
	}
	return false
}

// ValidateACL checks that acl could be stored.
func ValidateACL(acl ACL) error {
	switch acl.ResourceType {
	case ResourceTopic, ResourceGroup, ResourceTransactionalID:
	case ResourceCluster:
		if acl.Name != ClusterResourceName || acl.Pattern != PatternLiteral {
			return fmt.Errorf("a cluster ACL is on the literal resource %q", ClusterResourceName)
		}
	default:
		return fmt.Errorf("resource type %q: want TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID", acl.ResourceType)
	}
	switch acl.Pattern {
	case PatternLiteral:
		if acl.Name == "" {
			return fmt.Errorf("a literal ACL names a resource (or *)")
		}
	case PatternPrefixed:
		if acl.Name == "" || acl.Name == "*" {
			return fmt.Errorf("a prefixed ACL's prefix must be a non-empty name (for every resource: literal *)")
		}
	default:
		return fmt.Errorf("pattern type %q: want LITERAL or PREFIXED", acl.Pattern)
	}
	typ, name, ok := strings.Cut(acl.Principal, ":")
	if !ok || typ == "" || name == "" {
		return fmt.Errorf("principal %q: want TYPE:NAME (User:alice, User:*)", acl.Principal)
	}
	if acl.Host != WildcardHost {
		if _, err := netip.ParseAddr(acl.Host); err != nil {
			return fmt.Errorf("host %q: want an IP address or *", acl.Host)
		}
	}
	switch acl.Operation {
	case OpAll, OpRead, OpWrite, OpCreate, OpDelete, OpAlter, OpDescribe, OpClusterAction, OpDescribeConfigs, OpAlterConfigs, OpIdempotentWrite:
	default:
		return fmt.Errorf("operation %q is not one an ACL can name", acl.Operation)
	}
	if acl.Permission != Allow && acl.Permission != Deny {
		return fmt.Errorf("permission %q: want ALLOW or DENY", acl.Permission)
	}
	return nil
}
