package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// sluice acl: the cluster's ACLs (issue 33), with kafka-acls.sh's
// vocabulary: --allow-principal, --deny-principal, --allow-host,
// --deny-host, --operation, --topic, --group, --transactional-id,
// --cluster, --resource-pattern-type, --producer, --consumer, --idempotent,
// --principal. Kafka's --add, --list and --remove are the create, list and
// delete commands.

const aclUsage = `usage: sluice acl COMMAND [ARGS]

Commands:
  create (--allow-principal P | --deny-principal P)... [--allow-host H]... [--deny-host H]...
         (--operation OP... | --producer [--idempotent] | --consumer)
         RESOURCE... [--resource-pattern-type literal|prefixed]
      stores an ACL for each principal, host ("*" by default), operation and
      resource; prints the ACLs stored
  list [RESOURCE]... [--resource-pattern-type any|match|literal|prefixed] [--principal P]...
      the ACLs on the resources (every ACL without one); with match, every ACL
      that applies to them
  delete (RESOURCE | --principal P | --allow-principal P | --deny-principal P)...
         [--resource-pattern-type any|match|literal|prefixed] [--operation OP]...
         [--allow-host H]... [--deny-host H]...
      deletes the ACLs the filters match and prints them (no confirmation)

RESOURCE is --topic T, --group G, --transactional-id ID or --cluster (repeatable).
OP is Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite or All (any case). A principal is TYPE:NAME (User:alice;
User:* is every user); a host is an IP address or *.

Run "sluice acl COMMAND --help" for a command's flags.
`

func (e *env) acl(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "acl", aclUsage, args, map[string]func(context.Context, []string) error{
		"create": e.aclCreate,
		"list":   e.aclList,
		"delete": e.aclDelete,
	})
}

// aclResource is a resource flag's value: a type and a name.
type aclResource struct {
	typ  sluicev1.ResourceType
	name string
}

// aclResources collects the resource flags, in the order given.
type aclResources []aclResource

// register adds --topic, --group, --transactional-id and --cluster to fs.
func (r *aclResources) register(fs *flag.FlagSet, what string) {
	for _, f := range []struct {
		name, help string
		typ        sluicev1.ResourceType
	}{
		{"topic", "a `topic` " + what + " (repeatable; * is every topic)", sluicev1.ResourceType_RESOURCE_TYPE_TOPIC},
		{"group", "a consumer `group` " + what + " (repeatable; * is every group)", sluicev1.ResourceType_RESOURCE_TYPE_GROUP},
		{"transactional-id", "a transactional `id` " + what + " (repeatable; * is every id)", sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID},
	} {
		fs.Func(f.name, f.help, func(v string) error {
			if v = strings.TrimSpace(v); v == "" {
				return errors.New("the name is empty")
			}
			*r = append(*r, aclResource{f.typ, v})
			return nil
		})
	}
	fs.BoolFunc("cluster", "the cluster "+what, func(v string) error {
		if on, err := strconv.ParseBool(v); err != nil || !on {
			return err
		}
		*r = append(*r, aclResource{sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER, controller.ClusterResourceName})
		return nil
	})
}

func (r aclResources) has(t sluicev1.ResourceType) bool {
	return slices.ContainsFunc(r, func(x aclResource) bool { return x.typ == t })
}

// patternTypes are --resource-pattern-type's values.
var patternTypes = map[string]sluicev1.PatternType{
	"literal": sluicev1.PatternType_PATTERN_TYPE_LITERAL, "prefixed": sluicev1.PatternType_PATTERN_TYPE_PREFIXED,
	"any": sluicev1.PatternType_PATTERN_TYPE_ANY, "match": sluicev1.PatternType_PATTERN_TYPE_MATCH,
}

// parsePatternType reads --resource-pattern-type among allowed (any case).
func parsePatternType(v string, allowed ...string) (sluicev1.PatternType, error) {
	if l := strings.ToLower(v); slices.Contains(allowed, l) {
		return patternTypes[l], nil
	}
	return 0, fmt.Errorf("--resource-pattern-type %q: %s", v, strings.Join(allowed, ", "))
}

// forResource is pt for resource r: the cluster is only ever the LITERAL
// kafka-cluster (which MATCH and ANY select the same way).
func forResource(r aclResource, pt sluicev1.PatternType) sluicev1.PatternType {
	if r.typ == sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER {
		return sluicev1.PatternType_PATTERN_TYPE_LITERAL
	}
	return pt
}

// aclOperations are the operations, as kafka-acls names them.
var aclOperations = []struct {
	name string
	op   sluicev1.AclOperation
}{
	{"Read", sluicev1.AclOperation_ACL_OPERATION_READ},
	{"Write", sluicev1.AclOperation_ACL_OPERATION_WRITE},
	{"Create", sluicev1.AclOperation_ACL_OPERATION_CREATE},
	{"Delete", sluicev1.AclOperation_ACL_OPERATION_DELETE},
	{"Alter", sluicev1.AclOperation_ACL_OPERATION_ALTER},
	{"Describe", sluicev1.AclOperation_ACL_OPERATION_DESCRIBE},
	{"ClusterAction", sluicev1.AclOperation_ACL_OPERATION_CLUSTER_ACTION},
	{"DescribeConfigs", sluicev1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS},
	{"AlterConfigs", sluicev1.AclOperation_ACL_OPERATION_ALTER_CONFIGS},
	{"IdempotentWrite", sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE},
	{"All", sluicev1.AclOperation_ACL_OPERATION_ALL},
}

// parseOperation reads an operation in any case, with or without
// underscores: Read, DescribeConfigs, DESCRIBE_CONFIGS, describe-configs.
func parseOperation(v string) (sluicev1.AclOperation, error) {
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(v))
	for _, o := range aclOperations {
		if strings.ToLower(o.name) == norm {
			return o.op, nil
		}
	}
	names := make([]string, len(aclOperations))
	for i, o := range aclOperations {
		names[i] = o.name
	}
	return 0, fmt.Errorf("--operation %q is none of %s", v, strings.Join(names, ", "))
}

func operationName(op sluicev1.AclOperation) string {
	for _, o := range aclOperations {
		if o.op == op {
			return o.name
		}
	}
	return op.String()
}

// supportedOperations are the operations that mean something on each
// resource type besides All (Kafka's AclEntry.supportedOperations, which
// kafka-acls checks too).
var supportedOperations = map[sluicev1.ResourceType][]sluicev1.AclOperation{
	sluicev1.ResourceType_RESOURCE_TYPE_TOPIC: {sluicev1.AclOperation_ACL_OPERATION_READ, sluicev1.AclOperation_ACL_OPERATION_WRITE,
		sluicev1.AclOperation_ACL_OPERATION_CREATE, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE, sluicev1.AclOperation_ACL_OPERATION_DELETE,
		sluicev1.AclOperation_ACL_OPERATION_ALTER, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS, sluicev1.AclOperation_ACL_OPERATION_ALTER_CONFIGS},
	sluicev1.ResourceType_RESOURCE_TYPE_GROUP: {sluicev1.AclOperation_ACL_OPERATION_READ, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE,
		sluicev1.AclOperation_ACL_OPERATION_DELETE},
	sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER: {sluicev1.AclOperation_ACL_OPERATION_CREATE, sluicev1.AclOperation_ACL_OPERATION_CLUSTER_ACTION,
		sluicev1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS, sluicev1.AclOperation_ACL_OPERATION_ALTER_CONFIGS,
		sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE, sluicev1.AclOperation_ACL_OPERATION_ALTER, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE},
	sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID: {sluicev1.AclOperation_ACL_OPERATION_DESCRIBE, sluicev1.AclOperation_ACL_OPERATION_WRITE},
}

func checkSupported(r aclResource, op sluicev1.AclOperation) error {
	ops := supportedOperations[r.typ]
	if op == sluicev1.AclOperation_ACL_OPERATION_ALL || slices.Contains(ops, op) {
		return nil
	}
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = operationName(o)
	}
	return fmt.Errorf("--operation %s means nothing on a %s: %s supports %s and All", operationName(op), kafkaName(r.typ), kafkaName(r.typ), strings.Join(names, ", "))
}

// checkPrincipal refuses what the cluster would refuse for every ACL of
// it: a principal is TYPE:NAME.
func checkPrincipal(flagName, p string) error {
	if i := strings.IndexByte(p, ':'); i <= 0 || i == len(p)-1 {
		return fmt.Errorf("--%s %q: a principal is TYPE:NAME (User:alice, or User:* for every user)", flagName, p)
	}
	return nil
}

// checkHosts writes hosts as the cluster keeps them: * or IP addresses.
func checkHosts(flagName string, hosts []string) ([]string, error) {
	out := make([]string, len(hosts))
	for i, h := range hosts {
		c, ok := controller.CanonicalAclHost(strings.TrimSpace(h))
		if !ok {
			return nil, fmt.Errorf("--%s %q: a host is an IP address, or * for any", flagName, h)
		}
		out[i] = c
	}
	return out, nil
}

// kafkaName is an enumeration value as Kafka names it: TOPIC, LITERAL,
// READ, ALLOW.
func kafkaName(v interface{ String() string }) string {
	s := v.String()
	for _, p := range []string{"RESOURCE_TYPE_", "PATTERN_TYPE_", "ACL_OPERATION_", "ACL_PERMISSION_"} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// aclPrincipals are the principal flags of create and delete.
type aclPrincipals struct {
	allow, deny, allowHosts, denyHosts multiFlag
}

func (p *aclPrincipals) register(fs *flag.FlagSet, create bool) {
	hostDefault := " (default: any host)"
	if create {
		hostDefault = " (default *: every host)"
	}
	fs.Var(&p.allow, "allow-principal", "a principal the ACLs allow, `TYPE:NAME` (repeatable)")
	fs.Var(&p.deny, "deny-principal", "a principal the ACLs deny, `TYPE:NAME` (repeatable)")
	fs.Var(&p.allowHosts, "allow-host", "an IP `address` --allow-principal connects from (repeatable)"+hostDefault)
	fs.Var(&p.denyHosts, "deny-host", "an IP `address` --deny-principal is denied from (repeatable)"+hostDefault)
}

// entry is a principal, its host and permission.
type entry struct {
	principal, host string
	permission      sluicev1.AclPermission
}

// entries are the (principal, host, permission) of the flags: every
// allowed principal from every --allow-host, then every denied one from
// every --deny-host; anyHost is the host when none is given.
func (p *aclPrincipals) entries(anyHost string) ([]entry, error) {
	if len(p.allowHosts) > 0 && len(p.allow) == 0 {
		return nil, errors.New("--allow-host needs --allow-principal")
	}
	if len(p.denyHosts) > 0 && len(p.deny) == 0 {
		return nil, errors.New("--deny-host needs --deny-principal")
	}
	var out []entry
	for _, side := range []struct {
		flag, hostFlag    string
		principals, hosts []string
		perm              sluicev1.AclPermission
	}{
		{"allow-principal", "allow-host", p.allow, p.allowHosts, sluicev1.AclPermission_ACL_PERMISSION_ALLOW},
		{"deny-principal", "deny-host", p.deny, p.denyHosts, sluicev1.AclPermission_ACL_PERMISSION_DENY},
	} {
		hosts, err := checkHosts(side.hostFlag, side.hosts)
		if err != nil {
			return nil, err
		}
		if len(hosts) == 0 {
			hosts = []string{anyHost}
		}
		for _, pr := range side.principals {
			if err := checkPrincipal(side.flag, pr); err != nil {
				return nil, err
			}
			for _, h := range hosts {
				out = append(out, entry{pr, h, side.perm})
			}
		}
	}
	return out, nil
}

func (e *env) aclCreate(ctx context.Context, args []string) error {
	fs := e.newFlags("acl create", "acl create (--allow-principal P | --deny-principal P)... [--allow-host H]... [--deny-host H]...\n"+
		"                  (--operation OP... | --producer [--idempotent] | --consumer)\n"+
		"                  (--topic T | --group G | --transactional-id ID | --cluster)... [--resource-pattern-type literal|prefixed]\n\n"+
		"Stores an ACL for each principal, each of its hosts (* by default), each operation and each resource\n"+
		"(Kafka's kafka-acls --add), and prints the ACLs stored. An ACL stored already is stored once.\n"+
		"--producer is Write, Describe and Create on the topics, Write and Describe on the transactional ids,\n"+
		"and with --idempotent IdempotentWrite on the cluster; --consumer is Read and Describe on the topics\n"+
		"and Read on the groups.")
	var res aclResources
	res.register(fs, "the ACLs are on")
	var prs aclPrincipals
	prs.register(fs, true)
	var ops multiFlag
	fs.Var(&ops, "operation", "an `operation` the ACLs allow or deny (repeatable): Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All")
	producer := fs.Bool("producer", false, "the operations a producer needs on the topics (and transactional ids)")
	idempotent := fs.Bool("idempotent", false, "with --producer: IdempotentWrite on the cluster too")
	consumer := fs.Bool("consumer", false, "the operations a consumer needs on the topics and groups")
	pattern := fs.String("resource-pattern-type", "literal", "literal (the names are the resources' names) or prefixed (the names are prefixes)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	bindings, err := creations(res, prs, ops, *producer, *idempotent, *consumer, *pattern)
	if err != nil {
		return fmt.Errorf("acl create: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	var created []*sluicev1.AclBinding
	var refused []string
	for chunk := range slices.Chunk(bindings, maxAclsPerRequest) {
		results, err := c.CreateAcls(ctx, chunk)
		if err != nil {
			return fmt.Errorf("acl create: %w", err)
		}
		for i, rerr := range results {
			if rerr != nil {
				refused = append(refused, fmt.Sprintf("%s: %v", describeBinding(chunk[i]), rerr))
				continue
			}
			created = append(created, chunk[i])
		}
	}
	if err := e.printAcls(created); err != nil {
		return err
	}
	if len(refused) > 0 {
		return fmt.Errorf("acl create: refused:\n  %s", strings.Join(refused, "\n  "))
	}
	return nil
}

// maxAclsPerRequest is the most creations or filters one request carries
// (api.MaxRequestAcls).
const maxAclsPerRequest = 1000

// creations are the ACLs the create flags describe, each once, in the
// order of the flags: resources, then principals and hosts, then
// operations.
func creations(res aclResources, prs aclPrincipals, ops []string, producer, idempotent, consumer bool, pattern string) ([]*sluicev1.AclBinding, error) {
	pt, err := parsePatternType(pattern, "literal", "prefixed")
	if err != nil {
		return nil, err
	}
	entries, err := prs.entries(controller.WildcardHost)
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, errors.New("give the principals: --allow-principal P or --deny-principal P")
	}
	if len(res) == 0 {
		return nil, errors.New("give the resources: --topic T, --group G, --transactional-id ID or --cluster")
	}
	role := producer || consumer
	var opsOf func(r aclResource) []sluicev1.AclOperation
	switch {
	case role && len(ops) > 0:
		return nil, errors.New("--producer and --consumer choose the operations: give no --operation")
	case role && len(prs.deny) > 0:
		return nil, errors.New("--producer and --consumer allow: give no --deny-principal")
	case idempotent && !producer:
		return nil, errors.New("--idempotent goes with --producer")
	case producer && !res.has(sluicev1.ResourceType_RESOURCE_TYPE_TOPIC):
		return nil, errors.New("--producer needs a --topic")
	case consumer && (!res.has(sluicev1.ResourceType_RESOURCE_TYPE_TOPIC) || !res.has(sluicev1.ResourceType_RESOURCE_TYPE_GROUP)):
		return nil, errors.New("--consumer needs a --topic and a --group")
	case role:
		// Kafka's kafka-acls --producer and --consumer.
		if idempotent {
			res = append(res, aclResource{sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER, controller.ClusterResourceName})
		}
		opsOf = func(r aclResource) []sluicev1.AclOperation {
			return roleOperations(r.typ, producer, idempotent, consumer)
		}
	case len(ops) == 0:
		return nil, errors.New("give the operations: --operation OP (or --producer, --consumer)")
	default:
		parsed := make([]sluicev1.AclOperation, len(ops))
		for i, o := range ops {
			if parsed[i], err = parseOperation(o); err != nil {
				return nil, err
			}
		}
		opsOf = func(aclResource) []sluicev1.AclOperation { return parsed }
	}
	var out []*sluicev1.AclBinding
	seen := map[string]bool{}
	for _, r := range res {
		rops := opsOf(r)
		if len(rops) == 0 {
			return nil, fmt.Errorf("--%s: --producer and --consumer set no operation on a %s", resourceFlag(r.typ), kafkaName(r.typ))
		}
		for _, en := range entries {
			for _, op := range rops {
				if err := checkSupported(r, op); err != nil {
					return nil, err
				}
				b := &sluicev1.AclBinding{ResourceType: r.typ, ResourceName: r.name, PatternType: forResource(r, pt),
					Principal: en.principal, Host: en.host, Operation: op, Permission: en.permission}
				if k := describeBinding(b); !seen[k] {
					seen[k] = true
					out = append(out, b)
				}
			}
		}
	}
	return out, nil
}

// roleOperations are what --producer (and --idempotent) and --consumer
// allow on a resource of type t (Kafka's AclCommand).
func roleOperations(t sluicev1.ResourceType, producer, idempotent, consumer bool) []sluicev1.AclOperation {
	var ops []sluicev1.AclOperation
	add := func(on bool, more ...sluicev1.AclOperation) {
		for _, op := range more {
			if on && !slices.Contains(ops, op) {
				ops = append(ops, op)
			}
		}
	}
	switch t {
	case sluicev1.ResourceType_RESOURCE_TYPE_TOPIC:
		add(producer, sluicev1.AclOperation_ACL_OPERATION_WRITE, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE, sluicev1.AclOperation_ACL_OPERATION_CREATE)
		add(consumer, sluicev1.AclOperation_ACL_OPERATION_READ, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE)
	case sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID:
		add(producer, sluicev1.AclOperation_ACL_OPERATION_WRITE, sluicev1.AclOperation_ACL_OPERATION_DESCRIBE)
	case sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER:
		add(idempotent, sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE)
	case sluicev1.ResourceType_RESOURCE_TYPE_GROUP:
		add(consumer, sluicev1.AclOperation_ACL_OPERATION_READ)
	}
	return ops
}

func resourceFlag(t sluicev1.ResourceType) string {
	return strings.ReplaceAll(strings.ToLower(kafkaName(t)), "_", "-")
}

// describeBinding is an ACL on one line: `ALLOW User:alice READ from * on
// TOPIC LITERAL "orders"`.
func describeBinding(b *sluicev1.AclBinding) string {
	return fmt.Sprintf("%s %s %s from %s on %s %s %q", kafkaName(b.Permission), b.Principal, kafkaName(b.Operation), b.Host,
		kafkaName(b.ResourceType), kafkaName(b.PatternType), b.ResourceName)
}

// resourceFilters are the resource parts of list's and delete's filters:
// one per resource, of pattern type pattern (literal if ""), or one for
// any resource when none is given (of pattern type pattern, any if "").
func resourceFilters(res aclResources, pattern string) ([]*sluicev1.AclBindingFilter, error) {
	pt := sluicev1.PatternType_PATTERN_TYPE_LITERAL
	if len(res) == 0 {
		pt = sluicev1.PatternType_PATTERN_TYPE_ANY
	}
	if pattern != "" {
		var err error
		if pt, err = parsePatternType(pattern, "any", "match", "literal", "prefixed"); err != nil {
			return nil, err
		}
	}
	if len(res) == 0 {
		return []*sluicev1.AclBindingFilter{{PatternType: pt}}, nil
	}
	out := make([]*sluicev1.AclBindingFilter, len(res))
	for i, r := range res {
		out[i] = &sluicev1.AclBindingFilter{ResourceType: r.typ, ResourceName: r.name, PatternType: forResource(r, pt)}
	}
	return out, nil
}

const patternFilterHelp = "literal: the ACLs whose resource name is the name given; prefixed: whose prefix it is; any: either;\n" +
	"match: every ACL that applies to the resource (LITERAL ones of its name or *, PREFIXED ones it starts with)\n" +
	"(default: literal with a resource, any without)"

func (e *env) aclList(ctx context.Context, args []string) error {
	fs := e.newFlags("acl list", "acl list [--topic T | --group G | --transactional-id ID | --cluster]... [--resource-pattern-type any|match|literal|prefixed]\n"+
		"                [--principal P]...\n\n"+
		"Lists the ACLs on the resources (Kafka's kafka-acls --list), or every ACL without one: resource type,\n"+
		"name, pattern type, principal, host, operation and permission, ordered by resource then principal.")
	var res aclResources
	res.register(fs, "whose ACLs to list")
	pattern := fs.String("resource-pattern-type", "", patternFilterHelp)
	var principals multiFlag
	fs.Var(&principals, "principal", "only the ACLs of this principal, `TYPE:NAME` (repeatable; User:* is the ACLs for every user)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	filters, err := resourceFilters(res, *pattern)
	if err == nil {
		filters, err = withPrincipals(filters, principals)
	}
	if err != nil {
		return fmt.Errorf("acl list: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	var acls []*sluicev1.AclBinding
	for _, f := range filters {
		got, err := c.DescribeAcls(ctx, f)
		if err != nil {
			return fmt.Errorf("acl list: %w", err)
		}
		acls = append(acls, got...)
	}
	return e.printAcls(acls)
}

// withPrincipals is filters once per principal (filters themselves when
// none is given).
func withPrincipals(filters []*sluicev1.AclBindingFilter, principals []string) ([]*sluicev1.AclBindingFilter, error) {
	if len(principals) == 0 {
		return filters, nil
	}
	var out []*sluicev1.AclBindingFilter
	for _, p := range principals {
		if err := checkPrincipal("principal", p); err != nil {
			return nil, err
		}
		for _, f := range filters {
			out = append(out, &sluicev1.AclBindingFilter{ResourceType: f.ResourceType, ResourceName: f.ResourceName, PatternType: f.PatternType, Principal: p})
		}
	}
	return out, nil
}

func (e *env) aclDelete(ctx context.Context, args []string) error {
	fs := e.newFlags("acl delete", "acl delete (--topic T | --group G | --transactional-id ID | --cluster | --principal P | --allow-principal P | --deny-principal P)...\n"+
		"                  [--resource-pattern-type any|match|literal|prefixed] [--operation OP]... [--allow-host H]... [--deny-host H]...\n\n"+
		"Deletes the ACLs the filters match (Kafka's kafka-acls --remove, without its prompt) and prints them.\n"+
		"A filter is a resource (or any) with a principal (--principal: either permission; --allow-principal,\n"+
		"--deny-principal: that permission, from --allow-host, --deny-host if given) or any, with an operation\n"+
		"or any. A resource or a principal is required: nothing deletes every ACL at once.")
	var res aclResources
	res.register(fs, "whose ACLs to delete")
	var prs aclPrincipals
	prs.register(fs, false)
	var principals, ops multiFlag
	fs.Var(&principals, "principal", "delete the ACLs of this principal, `TYPE:NAME`, allowing or denying (repeatable)")
	fs.Var(&ops, "operation", "delete only the ACLs of this `operation` (repeatable; default any)")
	pattern := fs.String("resource-pattern-type", "", patternFilterHelp)
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	filters, err := deletionFilters(res, prs, principals, ops, *pattern)
	if err != nil {
		return fmt.Errorf("acl delete: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	results, err := c.DeleteAcls(ctx, filters)
	if err != nil {
		return fmt.Errorf("acl delete: %w", err)
	}
	var deleted []*sluicev1.AclBinding
	var failed []string
	for _, r := range results {
		deleted = append(deleted, r.Acls...)
		if r.Err != nil {
			failed = append(failed, r.Err.Error())
		}
	}
	if err := e.printAcls(deleted); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("acl delete: %s", strings.Join(failed, "; "))
	}
	return nil
}

// deletionFilters are delete's filters: every resource filter with every
// entry filter and every operation.
func deletionFilters(res aclResources, prs aclPrincipals, principals, ops []string, pattern string) ([]*sluicev1.AclBindingFilter, error) {
	if len(res) == 0 && len(principals) == 0 && len(prs.allow) == 0 && len(prs.deny) == 0 {
		return nil, errors.New("give a resource (--topic, --group, --transactional-id, --cluster) or a principal " +
			"(--principal, --allow-principal, --deny-principal): nothing deletes every ACL at once")
	}
	resources, err := resourceFilters(res, pattern)
	if err != nil {
		return nil, err
	}
	entries, err := prs.entries("") // no host: any
	if err != nil {
		return nil, err
	}
	for _, p := range principals {
		if err := checkPrincipal("principal", p); err != nil {
			return nil, err
		}
		entries = append(entries, entry{principal: p})
	}
	if len(entries) == 0 {
		entries = []entry{{}}
	}
	operations := []sluicev1.AclOperation{sluicev1.AclOperation_ACL_OPERATION_ANY}
	if len(ops) > 0 {
		operations = operations[:0]
		for _, o := range ops {
			op, err := parseOperation(o)
			if err != nil {
				return nil, err
			}
			operations = append(operations, op)
		}
	}
	var out []*sluicev1.AclBindingFilter
	for _, r := range resources {
		for _, en := range entries {
			for _, op := range operations {
				out = append(out, &sluicev1.AclBindingFilter{ResourceType: r.ResourceType, ResourceName: r.ResourceName, PatternType: r.PatternType,
					Principal: en.principal, Host: en.host, Operation: op, Permission: en.permission})
			}
		}
	}
	if len(out) > maxAclsPerRequest {
		return nil, fmt.Errorf("the flags make %d filters, more than the %d of a request: delete in several commands", len(out), maxAclsPerRequest)
	}
	return out, nil
}

// printAcls prints acls, each once, ordered as the cluster orders them:
// a table, or with --output json an array of output.Acl ([] when none).
func (e *env) printAcls(acls []*sluicev1.AclBinding) error {
	rows := aclRows(acls)
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(e.stderr, "no ACLs")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE-TYPE\tNAME\tPATTERN\tPRINCIPAL\tHOST\tOPERATION\tPERMISSION")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ResourceType, r.ResourceName, r.PatternType, r.Principal, r.Host, r.Operation, r.Permission)
	}
	return tw.Flush()
}

// aclRows are acls with Kafka's names, each once, ordered by resource
// (type, name, pattern type), principal, host, operation and permission.
func aclRows(acls []*sluicev1.AclBinding) []output.Acl {
	rows := make([]output.Acl, 0, len(acls))
	seen := make(map[output.Acl]bool, len(acls))
	for _, b := range acls {
		r := output.Acl{ResourceType: kafkaName(b.ResourceType), ResourceName: b.ResourceName, PatternType: kafkaName(b.PatternType),
			Principal: b.Principal, Host: b.Host, Operation: kafkaName(b.Operation), Permission: kafkaName(b.Permission)}
		if !seen[r] {
			seen[r] = true
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b output.Acl) int {
		return cmp.Or(cmp.Compare(a.ResourceType, b.ResourceType), cmp.Compare(a.ResourceName, b.ResourceName),
			cmp.Compare(a.PatternType, b.PatternType), cmp.Compare(a.Principal, b.Principal), cmp.Compare(a.Host, b.Host),
			cmp.Compare(a.Operation, b.Operation), cmp.Compare(a.Permission, b.Permission))
	})
	return rows
}
