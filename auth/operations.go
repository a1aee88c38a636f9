package auth

import (
	"fmt"
	"strings"
)

// Requirement is one authorization a request needs: an operation on a
// resource, named by where the request says it (docs/security.md,
// "What each request needs").
type Requirement struct {
	Resource ResourceType
	Op       Operation
	// Of says which resources of the request: "each" (every item of that
	// type it names: refused items answer *_AUTHORIZATION_FAILED, the
	// others are served), "request" (the request as a whole: refused
	// with gRPC PERMISSION_DENIED), "filter" (listings show only the
	// items allowed), or a condition ("if transactional", ...).
	Of string
	// Alt is an alternative that also satisfies it ("" if none).
	Alt string
}

// Operations is what each public RPC needs, as Kafka requires it for the
// request it mirrors. The internal services (Controller, Replica,
// TxnBroker) are served on the internal listener to nodes only: with TLS,
// a node certificate of the cluster (decision 61) — Kafka's
// CLUSTER_ACTION. RPCs not listed need nothing (Auth, health).
var Operations = map[string][]Requirement{
	"/sluice.v1.Log/Produce": {{ResourceTopic, OpWrite, "each", ""},
		{ResourceTransactionalID, OpWrite, "if transactional", ""}},
	"/sluice.v1.Log/ProduceStream": {{ResourceTopic, OpWrite, "each", ""},
		{ResourceTransactionalID, OpWrite, "if transactional", ""}},
	"/sluice.v1.Log/Fetch":       {{ResourceTopic, OpRead, "each", ""}},
	"/sluice.v1.Log/ListOffsets": {{ResourceTopic, OpDescribe, "each", ""}},

	"/sluice.v1.Admin/Metadata":                     {{ResourceTopic, OpDescribe, "each; filter when listing all", ""}},
	"/sluice.v1.Admin/CreateTopics":                 {{ResourceTopic, OpCreate, "each", "CREATE on the cluster"}},
	"/sluice.v1.Admin/DeleteTopics":                 {{ResourceTopic, OpDelete, "each", ""}},
	"/sluice.v1.Admin/DescribeCluster":              {{ResourceCluster, OpDescribe, "request", ""}},
	"/sluice.v1.Admin/AlterPartitionReassignments":  {{ResourceCluster, OpAlter, "request", ""}},
	"/sluice.v1.Admin/ListPartitionReassignments":   {{ResourceCluster, OpDescribe, "request", ""}},
	"/sluice.v1.Admin/ElectLeaders":                 {{ResourceCluster, OpAlter, "request", ""}},
	"/sluice.v1.Admin/UnregisterBroker":             {{ResourceCluster, OpAlter, "request", ""}},
	"/sluice.v1.Admin/DescribeProducers":            {{ResourceTopic, OpRead, "each", ""}},
	"/sluice.v1.Admin/AbortTransaction":             {{ResourceCluster, OpClusterAction, "request", ""}},
	"/sluice.v1.Admin/AlterUserScramCredentials":    {{ResourceCluster, OpAlter, "request", ""}},
	"/sluice.v1.Admin/DescribeUserScramCredentials": {{ResourceCluster, OpDescribe, "request", ""}},
	"/sluice.v1.Admin/CreateAcls":                   {{ResourceCluster, OpAlter, "request", ""}},
	"/sluice.v1.Admin/DescribeAcls":                 {{ResourceCluster, OpDescribe, "request", ""}},
	"/sluice.v1.Admin/DeleteAcls":                   {{ResourceCluster, OpAlter, "request", ""}},
	// Kafka's: quotas are configs of the cluster.
	"/sluice.v1.Admin/AlterClientQuotas":    {{ResourceCluster, OpAlterConfigs, "request", ""}},
	"/sluice.v1.Admin/DescribeClientQuotas": {{ResourceCluster, OpDescribeConfigs, "request", ""}},

	"/sluice.v1.Transactions/InitProducerId": {{ResourceTransactionalID, OpWrite, "if transactional", ""},
		{ResourceCluster, OpIdempotentWrite, "if idempotent", "WRITE on any topic"}},
	"/sluice.v1.Transactions/FindCoordinator": {{ResourceTransactionalID, OpDescribe, "if a transaction coordinator", ""},
		{ResourceGroup, OpDescribe, "if a group coordinator", ""}},
	"/sluice.v1.Transactions/EndTxn": {{ResourceTransactionalID, OpWrite, "request", ""}},
	// Kafka lists a transaction's partitions only for the topics the
	// caller may describe.
	"/sluice.v1.Transactions/DescribeTransactions": {{ResourceTransactionalID, OpDescribe, "each", ""},
		{ResourceTopic, OpDescribe, "filter", ""}},
	"/sluice.v1.Transactions/ListTransactions": {{ResourceTransactionalID, OpDescribe, "filter", ""}},

	// Kafka 4 (KAFKA-18813): a heartbeat naming its subscribed topics
	// needs DESCRIBE on each, else the request is refused
	// (TOPIC_AUTHORIZATION_FAILED); a described group whose members are
	// assigned a topic the caller may not describe is answered
	// TOPIC_AUTHORIZATION_FAILED. A regex subscription resolves to the
	// matching topics the caller may describe (a filter the coordinator
	// runs; docs/design.md decision 73).
	"/sluice.v1.Groups/ConsumerGroupHeartbeat": {{ResourceGroup, OpRead, "request", ""},
		{ResourceTopic, OpDescribe, "request (each subscribed topic named); filter (a regex's matches)", ""}},
	"/sluice.v1.Groups/OffsetCommit": {{ResourceGroup, OpRead, "request", ""}, {ResourceTopic, OpRead, "each", ""}},
	"/sluice.v1.Groups/OffsetFetch": {{ResourceGroup, OpDescribe, "request", ""},
		{ResourceTopic, OpDescribe, "each; filter when listing all", ""}},
	"/sluice.v1.Groups/TxnOffsetCommit": {{ResourceTransactionalID, OpWrite, "request", ""},
		{ResourceGroup, OpRead, "request", ""}, {ResourceTopic, OpRead, "each", ""}},
	"/sluice.v1.Groups/ListGroups": {{ResourceGroup, OpDescribe, "filter", "DESCRIBE on the cluster"}},
	"/sluice.v1.Groups/DescribeGroups": {{ResourceGroup, OpDescribe, "each", ""},
		{ResourceTopic, OpDescribe, "each group (the topics it is assigned)", ""}},
	"/sluice.v1.Groups/DeleteGroups": {{ResourceGroup, OpDelete, "each", ""}},
}

// Open are the public RPCs that need no authorization.
var Open = []string{
	"/sluice.v1.Auth/SaslAuthenticate", "/sluice.v1.Auth/WhoAmI",
	"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List",
	// The API's schema (server reflection), no data.
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}

// Describe is the requirements of an RPC in words, as docs/security.md's
// table gives them ("WRITE on each topic; ...").
func Describe(reqs []Requirement) string {
	var parts []string
	for _, r := range reqs {
		s := fmt.Sprintf("%s on %s (%s)", r.Op, strings.ToLower(strings.ReplaceAll(string(r.Resource), "_", " ")), r.Of)
		if r.Alt != "" {
			s += ", or " + r.Alt
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
