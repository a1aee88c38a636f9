package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Access control lists (issue 33; Kafka's AccessControlEntryRecord and
// RemoveAccessControlEntryRecord, read by KIP-801's StandardAuthorizer).
// The metadata log holds the ACLs, so every broker has them from its
// metadata stream, as every KRaft broker does. The authorizer (package
// auth) reads them from the broker's image (Image.AclList, rebuilt when
// Image.AclsVersion moves) and decides; this package only stores them,
// and does not import auth.
//
// An ACL is its seven fields: two ACLs with equal fields are one. (Kafka
// gives each ACL a UUID, and its controller skips the creation of an ACL
// it already holds: creating an existing ACL again is a success that
// changes nothing, here as there.) The enumerated fields are logged as
// Kafka's names ("TOPIC", "LITERAL", "READ", "ALLOW"), so the metadata log
// and its snapshots read like kafka-acls' output.
//
// The checks below are the FSM's and are kept forever for records already
// logged: RemoveAcl checks nothing but that the ACL exists, so an ACL a
// later version would refuse can still be deleted.

// ResourceType is the kind of resource an ACL is on (Kafka's names).
type ResourceType string

// The resource types an ACL can be on.
const (
	ResourceTopic           ResourceType = "TOPIC"
	ResourceGroup           ResourceType = "GROUP"
	ResourceCluster         ResourceType = "CLUSTER"
	ResourceTransactionalID ResourceType = "TRANSACTIONAL_ID"
)

// ClusterResourceName is the name of the one CLUSTER resource (Kafka's).
const ClusterResourceName = "kafka-cluster"

// PatternType is how an ACL's resource name selects resources.
type PatternType string

// The pattern types.
const (
	// PatternLiteral: the name is the resource's, or WildcardResource.
	PatternLiteral PatternType = "LITERAL"
	// PatternPrefixed: the name is a prefix of the resources' names.
	PatternPrefixed PatternType = "PREFIXED"
	// PatternMatch is an AclFilter's only (Kafka's MATCH): the ACLs that
	// apply to the resource the filter names.
	PatternMatch PatternType = "MATCH"
)

// Wildcards of Kafka's ACLs (the authorizer gives them their meaning).
const (
	// WildcardResource, LITERAL, names every resource of its type.
	WildcardResource = "*"
	// WildcardHost is every host.
	WildcardHost = "*"
	// WildcardPrincipal is every user (User:*).
	WildcardPrincipal = "User:*"
)

// AclOperation is what an ACL allows or denies (Kafka's names).
type AclOperation string

// The operations an ACL can name.
const (
	OperationAll             AclOperation = "ALL"
	OperationRead            AclOperation = "READ"
	OperationWrite           AclOperation = "WRITE"
	OperationCreate          AclOperation = "CREATE"
	OperationDelete          AclOperation = "DELETE"
	OperationAlter           AclOperation = "ALTER"
	OperationDescribe        AclOperation = "DESCRIBE"
	OperationClusterAction   AclOperation = "CLUSTER_ACTION"
	OperationDescribeConfigs AclOperation = "DESCRIBE_CONFIGS"
	OperationAlterConfigs    AclOperation = "ALTER_CONFIGS"
	OperationIdempotentWrite AclOperation = "IDEMPOTENT_WRITE"
)

// aclOperations are the operations an ACL may name, in Kafka's order.
var aclOperations = []AclOperation{OperationAll, OperationRead, OperationWrite, OperationCreate, OperationDelete,
	OperationAlter, OperationDescribe, OperationClusterAction, OperationDescribeConfigs, OperationAlterConfigs,
	OperationIdempotentWrite}

// AclPermission is whether an ACL allows or denies.
type AclPermission string

// The permissions.
const (
	PermissionAllow AclPermission = "ALLOW"
	PermissionDeny  AclPermission = "DENY"
)

// Bounds of the ACLs the metadata holds.
const (
	// MaxAcls bounds the ACLs of a cluster: every broker holds them all,
	// and every snapshot and full metadata update carries them.
	MaxAcls = 100_000
	// MaxAclDeletions bounds the ACLs one DeleteAcls deletes, all its
	// filters together (Kafka's MAX_RECORDS_PER_USER_OP): each is a
	// record.
	MaxAclDeletions = 10_000
	// MaxAclResourceNameLength bounds an ACL's resource name, in bytes:
	// well above a topic name (249) or a group id (255); a longer
	// transactional id is covered by a PREFIXED ACL.
	MaxAclResourceNameLength = 1024
	// MaxAclPrincipalLength bounds an ACL's principal, in bytes.
	MaxAclPrincipalLength = 1024
)

// Acl is one access control entry on a resource pattern (Kafka's
// AclBinding): Permission for Principal, connecting from Host, to do
// Operation on the resources of ResourceType that ResourceName and
// PatternType select. It is a comparable value: the image keeps a set of
// them.
type Acl struct {
	ResourceType ResourceType `json:"resource_type"`
	ResourceName string       `json:"resource_name"`
	PatternType  PatternType  `json:"pattern_type"`
	// Principal is TYPE:NAME: "User:alice", or WildcardPrincipal.
	Principal string `json:"principal"`
	// Host is an IP address as AclHost writes it, or WildcardHost.
	Host       string        `json:"host"`
	Operation  AclOperation  `json:"operation"`
	Permission AclPermission `json:"permission"`
}

// String writes a for logs and errors: `ALLOW User:alice READ from * on TOPIC
// LITERAL "orders"`.
func (a Acl) String() string {
	return string(a.Permission) + " " + a.Principal + " " + string(a.Operation) + " from " + a.Host +
		" on " + string(a.ResourceType) + " " + string(a.PatternType) + " " + quoteName(a.ResourceName)
}

// quoteName is a name quoted for a message, cut by errs.Echo.
func quoteName(s string) string { return fmt.Sprintf("%q", errs.Echo(s)) }

// compareAcls orders ACLs by resource (type, name, pattern type), then
// principal, host, operation and permission: AclList's order.
func compareAcls(a, b Acl) int {
	return cmp.Or(
		strings.Compare(string(a.ResourceType), string(b.ResourceType)),
		strings.Compare(a.ResourceName, b.ResourceName),
		strings.Compare(string(a.PatternType), string(b.PatternType)),
		strings.Compare(a.Principal, b.Principal),
		strings.Compare(a.Host, b.Host),
		strings.Compare(string(a.Operation), string(b.Operation)),
		strings.Compare(string(a.Permission), string(b.Permission)),
	)
}

// AclHost is the host an ACL names addr by: its IPv4 form if it is an
// IPv4-mapped IPv6 address, without a zone. The authorizer matches a
// caller's address written so.
func AclHost(addr netip.Addr) string { return addr.WithZone("").Unmap().String() }

// CanonicalAclHost is host as ACLs write it: WildcardHost, or an IP
// address as AclHost writes it ("::FFFF:10.0.0.1" is "10.0.0.1"); false
// for anything else (a name, an address with a zone, a network).
func CanonicalAclHost(host string) (string, bool) {
	if host == WildcardHost {
		return host, true
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return "", false
	}
	return AclHost(addr), true
}

// CreateAcl stores an ACL (Kafka's AccessControlEntryRecord). The FSM
// refuses an invalid ACL (INVALID_REQUEST: checkAcl) and a new one beyond
// MaxAcls (INVALID_REQUEST); an ACL already stored is accepted and
// changes nothing. (Added to version 1 as a new type: a voter or broker
// that does not know it must not apply a log that holds it.)
type CreateAcl struct {
	Acl
}

// RemoveAcl deletes an ACL (Kafka's RemoveAccessControlEntryRecord). The
// FSM refuses an ACL it does not hold (RESOURCE_NOT_FOUND). (Added to
// version 1 as a new type, as CreateAcl.)
type RemoveAcl struct {
	Acl
}

// Type implements Record.
func (CreateAcl) Type() RecordType { return TypeCreateAcl }

// Type implements Record.
func (RemoveAcl) Type() RecordType { return TypeRemoveAcl }

// AclSet is the image's set of ACLs. It is encoded in JSON as an array in
// AclList's order, so equal sets encode to equal bytes.
type AclSet map[Acl]struct{}

// MarshalJSON implements json.Marshaler.
func (s AclSet) MarshalJSON() ([]byte, error) { return json.Marshal(sortedAcls(s)) }

// UnmarshalJSON implements json.Unmarshaler.
func (s *AclSet) UnmarshalJSON(data []byte) error {
	var list []Acl
	if err := json.Unmarshal(data, &list); err != nil {
		return err
	}
	*s = make(AclSet, len(list))
	for _, a := range list {
		(*s)[a] = struct{}{}
	}
	return nil
}

func sortedAcls(s AclSet) []Acl {
	out := make([]Acl, 0, len(s))
	for a := range s {
		out = append(out, a)
	}
	slices.SortFunc(out, compareAcls)
	return out
}

// AclList returns the image's ACLs, ordered by resource (type, name,
// pattern type), principal, host, operation and permission. The slice is
// the caller's. An authorizer that indexes them rebuilds its index only
// when AclsVersion changes.
func (im *Image) AclList() []Acl { return sortedAcls(im.Acls) }

// HasAcl reports whether the image holds a.
func (im *Image) HasAcl(a Acl) bool {
	_, ok := im.Acls[a]
	return ok
}

// MatchingAcls returns the image's ACLs that f matches, in AclList's
// order. f is not validated: a filter with an unknown value matches
// nothing.
func (im *Image) MatchingAcls(f AclFilter) []Acl {
	var out []Acl
	for a := range im.Acls {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, compareAcls)
	return out
}

// AclFilter selects ACLs (Kafka's AclBindingFilter). An empty field
// matches every value of its field; a non-empty one matches only an equal
// value, except ResourceName with PatternType:
//
//   - "" (any pattern type), LITERAL or PREFIXED: the ACL's name equals it;
//   - PatternMatch: the ACLs that apply to the resource of that name: a
//     LITERAL ACL of that name or of WildcardResource, and a PREFIXED ACL
//     whose name the name starts with.
//
// Principal and Host match literally: "User:*" matches only the ACLs of
// WildcardPrincipal, not every ACL of a user.
type AclFilter struct {
	ResourceType ResourceType
	ResourceName string
	PatternType  PatternType
	Principal    string
	Host         string
	Operation    AclOperation
	Permission   AclPermission
}

// Validate refuses a filter with a value no ACL can have (an unknown
// resource type, pattern type, operation or permission): INVALID_REQUEST.
func (f AclFilter) Validate() error {
	if f.ResourceType != "" && checkResourceType(f.ResourceType) != nil {
		return invalid("resource type %q: a filter's is TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID or any", errs.Echo(string(f.ResourceType)))
	}
	if f.PatternType != "" && f.PatternType != PatternMatch && checkPatternType(f.PatternType) != nil {
		return invalid("pattern type %q: a filter's is LITERAL, PREFIXED, MATCH or any", errs.Echo(string(f.PatternType)))
	}
	if f.Operation != "" && checkOperation(f.Operation) != nil {
		return invalid("operation %q is no ACL's", errs.Echo(string(f.Operation)))
	}
	if f.Permission != "" && checkPermission(f.Permission) != nil {
		return invalid("permission %q: a filter's is ALLOW, DENY or any", errs.Echo(string(f.Permission)))
	}
	return nil
}

// Matches reports whether f selects a (Kafka's AclBindingFilter.matches).
func (f AclFilter) Matches(a Acl) bool {
	switch {
	case f.ResourceType != "" && f.ResourceType != a.ResourceType,
		f.Principal != "" && f.Principal != a.Principal,
		f.Host != "" && f.Host != a.Host,
		f.Operation != "" && f.Operation != a.Operation,
		f.Permission != "" && f.Permission != a.Permission:
		return false
	}
	if f.PatternType != PatternMatch {
		return (f.PatternType == "" || f.PatternType == a.PatternType) &&
			(f.ResourceName == "" || f.ResourceName == a.ResourceName)
	}
	if f.ResourceName == "" {
		return true
	}
	switch a.PatternType {
	case PatternLiteral:
		return a.ResourceName == f.ResourceName || a.ResourceName == WildcardResource
	case PatternPrefixed:
		return strings.HasPrefix(f.ResourceName, a.ResourceName)
	}
	return false
}

func checkResourceType(t ResourceType) error {
	switch t {
	case ResourceTopic, ResourceGroup, ResourceCluster, ResourceTransactionalID:
		return nil
	}
	return invalid("resource type %q: an ACL is on a TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID", errs.Echo(string(t)))
}

func checkPatternType(p PatternType) error {
	switch p {
	case PatternLiteral, PatternPrefixed:
		return nil
	}
	return invalid("pattern type %q: an ACL's is LITERAL or PREFIXED", errs.Echo(string(p)))
}

func checkOperation(op AclOperation) error {
	if slices.Contains(aclOperations, op) {
		return nil
	}
	return invalid("operation %q: an ACL's is one of %s", errs.Echo(string(op)), operationNames())
}

func operationNames() string {
	names := make([]string, len(aclOperations))
	for i, op := range aclOperations {
		names[i] = string(op)
	}
	return strings.Join(names, ", ")
}

func checkPermission(p AclPermission) error {
	if p == PermissionAllow || p == PermissionDeny {
		return nil
	}
	return invalid("permission %q: an ACL's is ALLOW or DENY", errs.Echo(string(p)))
}

// checkAcl is the FSM's check of an ACL to store (Kafka's
// AclControlManager.validateNewAcl, and its brokers' check of the
// CLUSTER resource's name), with bounds of its own. Errors are
// INVALID_REQUEST.
func checkAcl(a Acl) error {
	if err := checkResourceType(a.ResourceType); err != nil {
		return err
	}
	if err := checkPatternType(a.PatternType); err != nil {
		return err
	}
	switch name := a.ResourceName; {
	case name == "":
		return invalid("the resource name is empty")
	case len(name) > MaxAclResourceNameLength:
		return invalid("resource name %q is %d bytes long, at most %d", errs.Echo(name), len(name), MaxAclResourceNameLength)
	case !utf8.ValidString(name):
		return invalid("resource name %q is not UTF-8", errs.Echo(name))
	case a.ResourceType == ResourceCluster && (a.PatternType != PatternLiteral || name != ClusterResourceName):
		return invalid("the CLUSTER resource is LITERAL %q, not %s %s", ClusterResourceName, a.PatternType, quoteName(name))
	case a.PatternType == PatternPrefixed && name == WildcardResource:
		// It would select only the names that start with "*": surely
		// meant as every resource, which is LITERAL "*".
		return invalid(`PREFIXED "*" is refused: every %s is LITERAL "*"`, a.ResourceType)
	}
	if err := checkPrincipal(a.Principal); err != nil {
		return err
	}
	if h, ok := CanonicalAclHost(a.Host); !ok {
		return invalid("host %q is neither %q nor an IP address", errs.Echo(a.Host), WildcardHost)
	} else if h != a.Host {
		return invalid("host %q is written %q", a.Host, h)
	}
	if err := checkOperation(a.Operation); err != nil {
		return err
	}
	return checkPermission(a.Permission)
}

// checkPrincipal: TYPE:NAME, both non-empty (Kafka's KafkaPrincipal; the
// name may hold colons), UTF-8 without control characters.
func checkPrincipal(p string) error {
	switch i := strings.IndexByte(p, ':'); {
	case p == "":
		return invalid("the principal is empty")
	case len(p) > MaxAclPrincipalLength:
		return invalid("principal %q is %d bytes long, at most %d", errs.Echo(p), len(p), MaxAclPrincipalLength)
	case i <= 0 || i == len(p)-1:
		return invalid("principal %q is not TYPE:NAME (User:alice, or %s for every user)", errs.Echo(p), WildcardPrincipal)
	case !utf8.ValidString(p):
		return invalid("principal %q is not UTF-8", errs.Echo(p))
	}
	for _, c := range p {
		if unicode.IsControl(c) {
			return invalid("principal %q has the control character %U", errs.Echo(p), c)
		}
	}
	return nil
}

func applyCreateAcl(im *Image, r CreateAcl, offset uint64) error {
	if err := checkAcl(r.Acl); err != nil {
		return err
	}
	if im.HasAcl(r.Acl) {
		return nil // Kafka's controller skips it; here the FSM does too
	}
	if len(im.Acls) >= MaxAcls {
		return tooManyAcls(len(im.Acls))
	}
	im.Acls[r.Acl] = struct{}{}
	im.AclsVersion = offset
	return nil
}

func tooManyAcls(n int) error {
	return invalid("the cluster holds %d ACLs, the most it keeps: delete some first (PREFIXED ACLs and groups of principals cover more with fewer)", n)
}

func applyRemoveAcl(im *Image, r RemoveAcl, offset uint64) error {
	if !im.HasAcl(r.Acl) {
		return errs.New(sluicev1.ErrorCode_RESOURCE_NOT_FOUND, "no ACL %s", r.Acl)
	}
	delete(im.Acls, r.Acl)
	im.AclsVersion = offset
	return nil
}

// planAclCreations decides, from im, what CreateAcls proposes (pure).
// perAcl[i] is why acls[i] is refused (checkAcl, or MaxAcls reached by
// the ACLs before it); records holds one CreateAcl per accepted ACL that
// neither im nor an earlier entry of acls holds, and recordOf[i] is the
// index in records of the one that stores acls[i], or -1 when none does
// (refused, or already stored: a success).
func planAclCreations(im *Image, acls []Acl) (perAcl []error, records []Record, recordOf []int) {
	perAcl = make([]error, len(acls))
	recordOf = make([]int, len(acls))
	planned := map[Acl]int{}
	n := len(im.Acls)
	for i, a := range acls {
		recordOf[i] = -1
		if perAcl[i] = checkAcl(a); perAcl[i] != nil || im.HasAcl(a) {
			continue
		}
		if j, ok := planned[a]; ok {
			recordOf[i] = j
			continue
		}
		if n >= MaxAcls {
			perAcl[i] = tooManyAcls(n)
			continue
		}
		n++
		planned[a] = len(records)
		recordOf[i] = len(records)
		records = append(records, CreateAcl{Acl: a})
	}
	return perAcl, records, recordOf
}

// CreateAcls stores acls (planAclCreations on the leader's image after a
// barrier; the FSM checks each record again). perAcl[i] is acls[i]'s
// outcome: nil when the ACL is stored (already, or now), else an
// INVALID_REQUEST *errs.Error. offset is the metadata offset that holds
// every ACL stored. err is set when the call failed as a whole
// (NOT_CONTROLLER, ctx): then an ACL may or may not have been stored, as
// with Propose.
func (c *Controller) CreateAcls(ctx context.Context, acls []Acl) (perAcl []error, offset uint64, err error) {
	return c.proposePlanned(ctx, func(im *Image) ([]error, []Record, []int) { return planAclCreations(im, acls) },
		func(r Record) { c.log.Info("controller: ACL created", "acl", r.(CreateAcl).Acl.String()) })
}

// proposePlanned proposes the records plan makes from the image (under
// the proposal lock and a read barrier) and answers per item: plan
// returns each item's refusal (nil: its record, if any, decides),
// the records, and for each item the index of its record (-1: none).
// logged is called for each record applied. The offset answered is the
// image's, or the last applied record's.
func (c *Controller) proposePlanned(ctx context.Context, plan func(*Image) ([]error, []Record, []int), logged func(Record)) (perItem []error, offset uint64, err error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var recs []Record
	var recordOf []int
	if err := c.readForProposal(ctx, func(im *Image) {
		perItem, recs, recordOf = plan(im)
		offset = im.Offset
	}); err != nil {
		return nil, 0, err
	}
	if len(recs) == 0 {
		return perItem, offset, nil
	}
	applied, perRecord, err := c.proposeEach(ctx, recs)
	if err != nil {
		return nil, 0, err
	}
	for i, j := range recordOf {
		if j >= 0 {
			perItem[i] = perRecord[j]
		}
	}
	for j, r := range recs {
		if perRecord[j] == nil {
			offset = max(offset, applied[j].Offset)
			logged(r)
		}
	}
	return perItem, offset, nil
}

// AclDeletionResult is the outcome of one filter of DeleteAcls.
type AclDeletionResult struct {
	// Deleted are the ACLs the filter matched and that were deleted, in
	// AclList's order (an ACL two filters match is deleted once and
	// listed by both, as in Kafka).
	Deleted []Acl
	// Err is why the filter deleted nothing (an invalid filter), or why
	// an ACL it matched is not deleted.
	Err error
}

// planAclDeletions decides what DeleteAcls proposes (pure): acls are the
// image's ACLs in AclList's order; results[i] is filters[i]'s outcome as
// planned (its matches, or its refusal), and records one RemoveAcl per
// ACL some filter matches. More than MaxAclDeletions ACLs to delete
// refuse the whole request (INVALID_REQUEST; Kafka does the same rather
// than answer a partial deletion that is easily missed).
func planAclDeletions(acls []Acl, filters []AclFilter) (results []AclDeletionResult, records []Record, err error) {
	results = make([]AclDeletionResult, len(filters))
	planned := map[Acl]bool{}
	for i, f := range filters {
		if results[i].Err = f.Validate(); results[i].Err != nil {
			continue
		}
		for _, a := range acls {
			if !f.Matches(a) {
				continue
			}
			results[i].Deleted = append(results[i].Deleted, a)
			if !planned[a] {
				planned[a] = true
				records = append(records, RemoveAcl{Acl: a})
			}
		}
		if len(records) > MaxAclDeletions {
			return nil, nil, invalid("the filters match more than %d ACLs, the most one request deletes: narrow them, or delete in several requests", MaxAclDeletions)
		}
	}
	return results, records, nil
}

// DeleteAcls deletes the ACLs each filter matches (planAclDeletions,
// against the leader's image after a barrier). It returns one result per
// filter, in order, and the metadata offset that holds every deletion
// made. err is set when the call failed as a whole: more than
// MaxAclDeletions ACLs matched (INVALID_REQUEST: nothing deleted),
// NOT_CONTROLLER, ctx (an ACL may or may not have been deleted, as with
// Propose).
func (c *Controller) DeleteAcls(ctx context.Context, filters []AclFilter) ([]AclDeletionResult, uint64, error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var acls []Acl
	var offset uint64
	// Only the copy is made under the FSM's lock; the matching, up to
	// MaxAcls times per filter, is not. proposeMu keeps the ACLs as read.
	if err := c.readForProposal(ctx, func(im *Image) {
		acls = make([]Acl, 0, len(im.Acls))
		for a := range im.Acls {
			acls = append(acls, a)
		}
		offset = im.Offset
	}); err != nil {
		return nil, 0, err
	}
	slices.SortFunc(acls, compareAcls)
	results, recs, err := planAclDeletions(acls, filters)
	if err != nil || len(recs) == 0 {
		return results, offset, err
	}
	applied, perRecord, err := c.proposeEach(ctx, recs)
	if err != nil {
		return nil, 0, err
	}
	failed := map[Acl]error{}
	for j, r := range recs {
		a := r.(RemoveAcl).Acl
		if perRecord[j] != nil {
			failed[a] = perRecord[j]
			continue
		}
		offset = max(offset, applied[j].Offset)
		c.log.Info("controller: ACL deleted", "acl", a.String())
	}
	if len(failed) > 0 {
		for i := range results {
			r := &results[i]
			r.Deleted = slices.DeleteFunc(r.Deleted, func(a Acl) bool {
				if ferr := failed[a]; ferr != nil {
					if r.Err == nil {
						r.Err = ferr
					}
					return true
				}
				return false
			})
		}
	}
	return results, offset, nil
}
