package chaos

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// aclGrants reports whether acls allow op (READ, WRITE, ...) on the
// resource of type rt (TOPIC, TRANSACTIONAL_ID, GROUP) named name: a
// binding of that type and operation, literal and equal or prefixed and
// a prefix of name. Operations are matched exactly: the test asks for
// the ones the workload's bindings grant (READ and WRITE imply DESCRIBE).
func aclGrants(acls []*sluicev1.AclBinding, rt, name, op string) bool {
	for _, a := range acls {
		if a.ResourceType.String() != "RESOURCE_TYPE_"+rt || a.Operation.String() != "ACL_OPERATION_"+op {
			continue
		}
		switch a.PatternType {
		case sluicev1.PatternType_PATTERN_TYPE_LITERAL:
			if a.ResourceName == name {
				return true
			}
		case sluicev1.PatternType_PATTERN_TYPE_PREFIXED:
			if strings.HasPrefix(name, a.ResourceName) {
				return true
			}
		}
	}
	return false
}

// User:chaos gets what the Kafka-client workload's requests need
// (docs/security.md, "What each request needs"): READ and WRITE on each
// of its topics, WRITE on every transactional id of the run (the Kafka
// producers', the Kafka copier's, the librdkafka copier's), READ on the
// Kafka copiers' groups; and no more: no binding on the cluster or for
// another principal, and none of these once the Kafka workload is off.
func TestWorkloadAclsGrantTheKafkaWorkloadExactly(t *testing.T) {
	wc := DefaultConfig().Workload
	wc.RdkCopiers = 2
	acls := workloadAcls(wc)
	for _, tp := range []string{"chaos-kafka", "chaos-kafka-2", "chaos-kafka-out", "chaos-rdk-out"} {
		if !aclGrants(acls, "TOPIC", tp, "READ") || !aclGrants(acls, "TOPIC", tp, "WRITE") {
			t.Errorf("topic %s: not READ and WRITE", tp)
		}
	}
	for _, id := range wc.transactionalIDs() {
		if !aclGrants(acls, "TRANSACTIONAL_ID", id, "WRITE") {
			t.Errorf("transactional id %s: no WRITE", id)
		}
	}
	for _, g := range []string{kafkaCopierGroup, rdkCopierGroup, copierGroupID} {
		if !aclGrants(acls, "GROUP", g, "READ") {
			t.Errorf("group %s: no READ", g)
		}
	}
	for _, a := range acls {
		if a.ResourceType == sluicev1.ResourceType_RESOURCE_TYPE_CLUSTER || a.Principal != "User:"+chaosScramUser ||
			a.Permission != sluicev1.AclPermission_ACL_PERMISSION_ALLOW {
			t.Errorf("binding %v", a)
		}
	}
	// The gRPC producers' prefix does not reach the Kafka producers' ids.
	if aclGrants(workloadAcls(WorkloadConfig{Topic: "chaos", TxnProducers: 3}), "TRANSACTIONAL_ID", "chaos-kafka-txn-1", "WRITE") {
		t.Error("chaos-txn- grants chaos-kafka-txn-1")
	}

	off := wc
	off.KafkaTxnProducers, off.KafkaConsumers, off.KafkaCopierMembers, off.RdkCopiers = 0, 0, 0, 0
	acls = workloadAcls(off)
	for _, id := range wc.transactionalIDs() {
		kafka := strings.HasPrefix(id, "chaos-kafka") || strings.HasPrefix(id, "chaos-rdk")
		if aclGrants(acls, "TRANSACTIONAL_ID", id, "WRITE") == kafka {
			t.Errorf("Kafka workload off: WRITE on transactional id %s is %v", id, !kafka)
		}
	}
	for _, g := range []string{kafkaCopierGroup, rdkCopierGroup} {
		if aclGrants(acls, "GROUP", g, "READ") {
			t.Errorf("Kafka workload off, yet READ on group %s", g)
		}
	}
	if aclGrants(acls, "TOPIC", "chaos-kafka", "READ") {
		t.Error("Kafka workload off, yet READ on topic chaos-kafka")
	}
}
