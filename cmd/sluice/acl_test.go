package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// sluice acl create, list and delete against a node, with kafka-acls'
// vocabulary: the ACLs stored are printed, and are what the broker's
// image holds; list filters by resource (literal by default, match on
// demand) and principal; delete prints what it deleted.
func TestAclCreateListDelete(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	brokers := "--brokers=" + s.Node.Addr()
	out, errOut, err := runArgs(t, "acl", "create", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "describe",
		"--topic", "orders", "--group", "billing", brokers)
	want := "RESOURCE-TYPE  NAME     PATTERN  PRINCIPAL   HOST  OPERATION  PERMISSION\n" +
		"GROUP          billing  LITERAL  User:alice  *     DESCRIBE   ALLOW\n" +
		"GROUP          billing  LITERAL  User:alice  *     READ       ALLOW\n" +
		"TOPIC          orders   LITERAL  User:alice  *     DESCRIBE   ALLOW\n" +
		"TOPIC          orders   LITERAL  User:alice  *     READ       ALLOW\n"
	if err != nil || out != want {
		t.Fatalf("create = %q, %q, %v; want\n%s", out, errOut, err, want)
	}
	if n := len(s.Node.Metadata().Image().Acls); n != 4 {
		t.Errorf("the broker holds %d ACLs, want 4", n)
	}
	// A producer with its transactional ids, idempotent; a denial from
	// one host; a prefixed consumer.
	for _, args := range [][]string{
		{"--allow-principal", "User:bob", "--producer", "--idempotent", "--topic", "orders", "--transactional-id", "tx"},
		{"--deny-principal", "User:eve", "--deny-host", "::ffff:10.0.0.7", "--operation", "ALL", "--topic", "*"},
		{"--allow-principal", "User:carol", "--consumer", "--topic", "orders-", "--group", "carol-", "--resource-pattern-type", "PREFIXED"},
	} {
		if _, errOut, err := runArgs(t, append(append([]string{"acl", "create"}, args...), brokers)...); err != nil {
			t.Fatalf("create %v: %v, %s", args, err, errOut)
		}
	}

	out, _, err = runArgs(t, "acl", "list", brokers)
	want = "RESOURCE-TYPE     NAME           PATTERN   PRINCIPAL   HOST      OPERATION         PERMISSION\n" +
		"CLUSTER           kafka-cluster  LITERAL   User:bob    *         IDEMPOTENT_WRITE  ALLOW\n" +
		"GROUP             billing        LITERAL   User:alice  *         DESCRIBE          ALLOW\n" +
		"GROUP             billing        LITERAL   User:alice  *         READ              ALLOW\n" +
		"GROUP             carol-         PREFIXED  User:carol  *         READ              ALLOW\n" +
		"TOPIC             *              LITERAL   User:eve    10.0.0.7  ALL               DENY\n" +
		"TOPIC             orders         LITERAL   User:alice  *         DESCRIBE          ALLOW\n" +
		"TOPIC             orders         LITERAL   User:alice  *         READ              ALLOW\n" +
		"TOPIC             orders         LITERAL   User:bob    *         CREATE            ALLOW\n" +
		"TOPIC             orders         LITERAL   User:bob    *         DESCRIBE          ALLOW\n" +
		"TOPIC             orders         LITERAL   User:bob    *         WRITE             ALLOW\n" +
		"TOPIC             orders-        PREFIXED  User:carol  *         DESCRIBE          ALLOW\n" +
		"TOPIC             orders-        PREFIXED  User:carol  *         READ              ALLOW\n" +
		"TRANSACTIONAL_ID  tx             LITERAL   User:bob    *         DESCRIBE          ALLOW\n" +
		"TRANSACTIONAL_ID  tx             LITERAL   User:bob    *         WRITE             ALLOW\n"
	if err != nil || out != want {
		t.Errorf("acl list =\n%s%v; want\n%s", out, err, want)
	}

	// --topic alone is the LITERAL ACLs of that name; match is every ACL
	// that applies to the topic.
	rows := func(args ...string) []output.Acl {
		t.Helper()
		out, errOut, err := runArgs(t, append(append([]string{"acl", "list", "--output", "json"}, args...), brokers)...)
		var got []output.Acl
		if jerr := json.Unmarshal([]byte(out), &got); err != nil || jerr != nil {
			t.Fatalf("acl list %v: %q, %q, %v", args, out, errOut, err)
		}
		return got
	}
	summary := func(acls []output.Acl) string {
		var out []string
		for _, a := range acls {
			out = append(out, a.Principal+" "+a.Operation+" "+a.PatternType+" "+a.ResourceName)
		}
		return strings.Join(out, ", ")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic", "orders-eu"}, ""},
		{[]string{"--topic", "orders-eu", "--resource-pattern-type", "match"},
			"User:eve ALL LITERAL *, User:carol DESCRIBE PREFIXED orders-, User:carol READ PREFIXED orders-"},
		{[]string{"--topic", "orders-", "--resource-pattern-type", "any"}, "User:carol DESCRIBE PREFIXED orders-, User:carol READ PREFIXED orders-"},
		{[]string{"--resource-pattern-type", "prefixed"}, "User:carol READ PREFIXED carol-, User:carol DESCRIBE PREFIXED orders-, User:carol READ PREFIXED orders-"},
		{[]string{"--principal", "User:bob", "--cluster"}, "User:bob IDEMPOTENT_WRITE LITERAL kafka-cluster"},
		{[]string{"--principal", "User:alice", "--principal", "User:eve"},
			"User:alice DESCRIBE LITERAL billing, User:alice READ LITERAL billing, User:eve ALL LITERAL *, User:alice DESCRIBE LITERAL orders, User:alice READ LITERAL orders"},
		{[]string{"--group", "nobody"}, ""},
	} {
		if got := summary(rows(tc.args...)); got != tc.want {
			t.Errorf("acl list %v = %s; want %s", tc.args, got, tc.want)
		}
	}
	if got := rows("--transactional-id", "tx"); !reflect.DeepEqual(got[0], output.Acl{ResourceType: "TRANSACTIONAL_ID", ResourceName: "tx",
		PatternType: "LITERAL", Principal: "User:bob", Host: "*", Operation: "DESCRIBE", Permission: "ALLOW"}) || len(got) != 2 {
		t.Errorf("acl list --transactional-id tx: %+v", got)
	}
	if out, _, err := runArgs(t, "acl", "list", "--output=json", "--group", "nobody", brokers); err != nil || out != "[]\n" {
		t.Errorf("an empty list in JSON: %q, %v", out, err)
	}

	// delete: a principal's read everywhere, then a topic's ACLs.
	out, _, err = runArgs(t, "acl", "delete", "--allow-principal", "User:alice", "--operation", "read", brokers)
	want = "RESOURCE-TYPE  NAME     PATTERN  PRINCIPAL   HOST  OPERATION  PERMISSION\n" +
		"GROUP          billing  LITERAL  User:alice  *     READ       ALLOW\n" +
		"TOPIC          orders   LITERAL  User:alice  *     READ       ALLOW\n"
	if err != nil || out != want {
		t.Errorf("delete alice's reads = %q, %v; want\n%s", out, err, want)
	}
	out, _, err = runArgs(t, "acl", "delete", "--topic", "orders", "--output", "json", brokers)
	if jerr := json.Unmarshal([]byte(out), &[]output.Acl{}); err != nil || jerr != nil || strings.Count(out, `"resource_name":"orders"`) != 4 {
		t.Errorf("delete topic orders = %q, %v", out, err)
	}
	_, errOut, err = runArgs(t, "acl", "delete", "--topic", "orders", brokers)
	if err != nil || errOut != "no ACLs\n" {
		t.Errorf("delete topic orders again: %q, %v", errOut, err)
	}
	out, _, _ = runArgs(t, "acl", "list", brokers)
	if strings.Contains(out, "orders ") || !strings.Contains(out, "billing") || strings.Count(out, "\n") != 9 {
		t.Errorf("after the deletions:\n%s", out)
	}
	// A refusal of the cluster fails the command, naming the ACL.
	_, _, err = runArgs(t, "acl", "create", "--allow-principal", "User:"+strings.Repeat("x", 1100), "--operation", "Read", "--topic", "t", brokers)
	if err == nil || !strings.Contains(err.Error(), "INVALID_REQUEST") || !strings.Contains(err.Error(), "bytes long, at most 1024") {
		t.Errorf("a principal too long: %v", err)
	}
}

// What the cluster would refuse, and what cannot be meant, is refused
// before a broker is contacted, naming the flags.
func TestAclCreateRefusesBadFlags(t *testing.T) {
	nowhere := "--brokers=127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--operation", "Read", "--topic", "t"}, "give the principals: --allow-principal P or --deny-principal P"},
		{[]string{"--allow-principal", "User:a", "--operation", "Read"}, "give the resources"},
		{[]string{"--allow-principal", "User:a", "--topic", "t"}, "give the operations: --operation OP (or --producer, --consumer)"},
		{[]string{"--allow-principal", "alice", "--operation", "Read", "--topic", "t"}, `--allow-principal "alice": a principal is TYPE:NAME`},
		{[]string{"--deny-principal", "User:", "--operation", "Read", "--topic", "t"}, `--deny-principal "User:"`},
		{[]string{"--allow-principal", "User:a", "--allow-host", "db.example", "--operation", "Read", "--topic", "t"}, `--allow-host "db.example": a host is an IP address, or * for any`},
		{[]string{"--allow-principal", "User:a", "--deny-host", "10.0.0.1", "--operation", "Read", "--topic", "t"}, "--deny-host needs --deny-principal"},
		{[]string{"--allow-principal", "User:a", "--operation", "Reed", "--topic", "t"}, `--operation "Reed" is none of Read, Write, Create`},
		{[]string{"--allow-principal", "User:a", "--operation", "Any", "--topic", "t"}, `--operation "Any"`},
		{[]string{"--allow-principal", "User:a", "--operation", "Write", "--group", "g"}, "--operation Write means nothing on a GROUP: GROUP supports Read, Describe, Delete and All"},
		{[]string{"--allow-principal", "User:a", "--operation", "Read", "--cluster"}, "--operation Read means nothing on a CLUSTER"},
		{[]string{"--allow-principal", "User:a", "--operation", "Read", "--topic", "t", "--resource-pattern-type", "match"}, `--resource-pattern-type "match": literal, prefixed`},
		{[]string{"--allow-principal", "User:a", "--producer", "--operation", "Read", "--topic", "t"}, "give no --operation"},
		{[]string{"--allow-principal", "User:a", "--deny-principal", "User:b", "--consumer", "--topic", "t", "--group", "g"}, "give no --deny-principal"},
		{[]string{"--allow-principal", "User:a", "--producer", "--group", "g"}, "--producer needs a --topic"},
		{[]string{"--allow-principal", "User:a", "--consumer", "--topic", "t"}, "--consumer needs a --topic and a --group"},
		{[]string{"--allow-principal", "User:a", "--idempotent", "--operation", "Read", "--topic", "t"}, "--idempotent goes with --producer"},
		{[]string{"--allow-principal", "User:a", "--producer", "--topic", "t", "--group", "g"}, "--group: --producer and --consumer set no operation on a GROUP"},
	} {
		_, _, err := runArgs(t, append([]string{"acl", "create", nowhere}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"delete"}, "give a resource (--topic, --group, --transactional-id, --cluster) or a principal"},
		{[]string{"delete", "--operation", "Read"}, "nothing deletes every ACL at once"},
		{[]string{"delete", "--principal", "bob"}, `--principal "bob": a principal is TYPE:NAME`},
		{[]string{"delete", "--topic", "t", "--resource-pattern-type", "glob"}, `--resource-pattern-type "glob": any, match, literal, prefixed`},
		{[]string{"list", "--principal", "User"}, `--principal "User": a principal is TYPE:NAME`},
	} {
		_, _, err := runArgs(t, append(append([]string{"acl"}, tc.args...), nowhere)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// --producer and --consumer are Kafka's sets of operations; a principal
// given twice, or two roles naming one operation, make one ACL.
func TestAclCreationsOfRoles(t *testing.T) {
	res := aclResources{{sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, "t"}, {sluicev1.ResourceType_RESOURCE_TYPE_GROUP, "g"},
		{sluicev1.ResourceType_RESOURCE_TYPE_TRANSACTIONAL_ID, "x"}}
	prs := aclPrincipals{allow: multiFlag{"User:a", "User:a"}}
	got, err := creations(res, prs, nil, true, true, true, "literal")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, b := range got {
		lines = append(lines, describeBinding(b))
	}
	want := []string{
		`ALLOW User:a WRITE from * on TOPIC LITERAL "t"`,
		`ALLOW User:a DESCRIBE from * on TOPIC LITERAL "t"`,
		`ALLOW User:a CREATE from * on TOPIC LITERAL "t"`,
		`ALLOW User:a READ from * on TOPIC LITERAL "t"`,
		`ALLOW User:a READ from * on GROUP LITERAL "g"`,
		`ALLOW User:a WRITE from * on TRANSACTIONAL_ID LITERAL "x"`,
		`ALLOW User:a DESCRIBE from * on TRANSACTIONAL_ID LITERAL "x"`,
		`ALLOW User:a IDEMPOTENT_WRITE from * on CLUSTER LITERAL "kafka-cluster"`,
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("creations:\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// Prefixed: the cluster stays the LITERAL kafka-cluster.
	got, err = creations(aclResources{{sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, "t-"}, {sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER, "kafka-cluster"}},
		aclPrincipals{deny: multiFlag{"User:b"}, denyHosts: multiFlag{"10.0.0.1", "::1"}}, []string{"alter_configs", "describe-configs"}, false, false, false, "prefixed")
	if err != nil || len(got) != 8 || got[0].PatternType != sluicev1.PatternType_PATTERN_TYPE_PREFIXED ||
		got[7].PatternType != sluicev1.PatternType_PATTERN_TYPE_LITERAL || got[7].Host != "::1" || got[7].Operation != sluicev1.AclOperation_ACL_OPERATION_DESCRIBE_CONFIGS {
		t.Errorf("prefixed denials: %v, %v", got, err)
	}
	for in, want := range map[string]sluicev1.AclOperation{"Read": sluicev1.AclOperation_ACL_OPERATION_READ, "CLUSTER_ACTION": sluicev1.AclOperation_ACL_OPERATION_CLUSTER_ACTION,
		"idempotentwrite": sluicev1.AclOperation_ACL_OPERATION_IDEMPOTENT_WRITE, "All": sluicev1.AclOperation_ACL_OPERATION_ALL} {
		if got, err := parseOperation(in); err != nil || got != want {
			t.Errorf("parseOperation(%q) = %v, %v", in, got, err)
		}
	}
}

// A missing or unknown acl command and a positional argument are usage
// errors (exit 2) before any broker is contacted; help lists the
// commands.
func TestAclCommandUsage(t *testing.T) {
	nowhere := "--brokers=127.0.0.1:1"
	for _, args := range [][]string{
		{"acl"},
		{"acl", "bogus"},
		{"acl", "create", "orders", "--allow-principal", "User:a", "--operation", "Read", nowhere},
		{"acl", "list", "orders", nowhere},
		{"acl", "delete", "--topic", "t", "--force", nowhere},
		{"acl", "create", "--allow-principal", "User:a", "--operation", "Read", "--topic", "", nowhere},
	} {
		out, _, err := runArgs(t, args...)
		if !errors.Is(err, errUsage) || out != "" {
			t.Errorf("%q: %v, stdout %q; want a usage error", args, err, out)
		}
	}
	out, _, err := runArgs(t, "help")
	for _, cmd := range []string{"acl create (--allow-principal P", "acl list [RESOURCE]...", "acl delete (RESOURCE | --principal P)..."} {
		if err != nil || !strings.Contains(out, cmd) {
			t.Errorf("help does not list %q: %v", cmd, err)
		}
	}
}
