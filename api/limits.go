package api

import (
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/batch"
)

// Request limits (issue 29, docs/operations.md "Limits"). Every request on
// both gRPC listeners is checked against them before it is decoded
// (LimitRequests, limits_check.go): a request over one is refused as a
// whole with InvalidArgument and a google.rpc.ErrorInfo whose reason is
// INVALID_REQUEST, and nothing of it is decoded, answered per entry or
// acted on. Without them a 20 MB Fetch listing 10 million empty partition
// entries cost a node 8 GB, a Produce repeating one partition 30 million
// times 8.2 GB.
//
// Each bound is what a valid request can need: a topic has at most
// MaxPartitionsPerTopic partitions, a name no more bytes than a topic name
// can have, and no valid request names the same topic or partition twice.
// The counts per request are documented maxima above what one broker
// serves (the scale target is 10,000 partitions per node); a client with
// more asks in several requests. The counts are fixed rather than the
// number of topics or partitions that exist now, so that a client with
// stale metadata (a topic deleted and created again with fewer
// partitions) still gets its retriable per-partition error rather than a
// request-level refusal.
const (
	// MaxRequestTopics bounds the topics one request names: topic entries
	// (Produce, Fetch, ListOffsets, OffsetCommit, ...) and lists of topic
	// names (Metadata, CreateTopics, DeleteTopics, subscriptions).
	MaxRequestTopics = 20_000
	// MaxPartitionsPerTopic bounds the partitions one topic entry lists:
	// the most partitions a topic can have.
	MaxPartitionsPerTopic = cluster.MaxPartitions
	// MaxRequestPartitions bounds the partition entries of one request, all
	// topics together (also a replica fetch's and an
	// OffsetForLeaderEpoch's partitions).
	MaxRequestPartitions = 20_000
	// MaxRequestIDs bounds the ids one request lists: group ids,
	// transactional ids, coordinator keys, producer-id filters.
	MaxRequestIDs = 10_000
	// MaxTxnBatchEntries bounds the transactions of an AddPartitionsToTxn,
	// the markers of a WriteTxnMarkers, and the partitions of either, all
	// together. Brokers batch these per destination without splitting
	// (coordinator's brokerBatcher), so the bound is well above what
	// concurrent transactions put in one request.
	MaxTxnBatchEntries = 100_000
	// MaxReplicaList bounds a list of broker ids (a reassignment's target
	// replicas, an AlterPartition's ISR): more than any cluster has
	// brokers; the controller checks each id against the registered ones.
	MaxReplicaList = 1_000
	// MaxOfflineReplicas bounds the offline replicas one broker heartbeat
	// reports: every replica of a full node, several times over.
	MaxOfflineReplicas = 100_000
	// MaxTopicConfigs bounds one topic's config entries (CreateTopics):
	// far more than there are topic configs.
	MaxTopicConfigs = 256
	// MaxStateFilters bounds a state filter list (ListGroups,
	// ListTransactions): more than there are states.
	MaxStateFilters = 32
	// MaxRequestCredentials bounds the credential deletions, and apart
	// the upsertions, of an AlterUserScramCredentials, and the users a
	// DescribeUserScramCredentials names. An upsertion costs the
	// controller a proposal: a client with more users asks in several
	// requests.
	MaxRequestCredentials = 1_000
	// MaxRequestAcls bounds the creations of a CreateAcls and the filters
	// of a DeleteAcls. A creation costs the controller a proposal, and a
	// filter a pass over every ACL: a client with more asks in several
	// requests.
	MaxRequestAcls = 1_000
	// MaxRequestQuotaEntries bounds the entities of an
	// AlterClientQuotas: each costs the controller a proposal.
	MaxRequestQuotaEntries = 1_000
	// MaxQuotaOps bounds the ops on one entity: there are three keys.
	MaxQuotaOps = 16

	// MaxTopicNameLength bounds a topic name anywhere in a request: no
	// topic can have a longer name (a name is echoed in answers, per
	// partition for some, so a long one multiplied an answer).
	MaxTopicNameLength = cluster.MaxTopicNameLength
	// MaxAddressLength bounds a broker address (RegisterBroker): a DNS
	// name is at most 253 bytes. Addresses are echoed in leader hints,
	// per partition.
	MaxAddressLength = 512
	// MaxRequestStringBytes bounds the bytes of all the strings of one
	// request together, so that an answer echoing each of them (a name,
	// an id, and an error message naming it, cut by errs.Echo) stays well
	// below MaxMessageSize. Other strings (ids, config values, offset
	// metadata) have no bound of their own here: their owners refuse
	// those too long, per entry (a transactional id over 32,767 bytes is
	// INVALID_REQUEST for that id, a long group id INVALID_GROUP_ID).
	MaxRequestStringBytes = 16 << 20
)

// fieldLimit bounds one field of a request message, wherever the message
// occurs in a request. The shapes below build them.
type fieldLimit struct {
	// Max bounds the elements of a repeated (or map) field in one message.
	Max int
	// Total, if set, bounds the field's elements over the whole request.
	Total int
	// Why names Max (and Total) in a refusal: "partitions per topic".
	Why, TotalWhy string
	// Unique refuses two alike elements in one message: equal values, or
	// for message elements equal Key fields (an absent field is its zero
	// value, as the decoder has it).
	Unique bool
	Key    []protowire.Number
	// MaxLen bounds each value of a string field (0: no bound of its
	// own, only MaxRequestStringBytes).
	MaxLen int
}

// Shapes of request fields: one constructor per shape, so that a field is
// bounded the same way in every request that has it.

// topicEntries is a request's per-topic entries, each topic once (key:
// the entry's name field).
func topicEntries(name protowire.Number) fieldLimit {
	return fieldLimit{Max: MaxRequestTopics, Why: "topics per request", Unique: true, Key: []protowire.Number{name}}
}

// partitionEntries is one topic entry's per-partition entries, each
// partition once (key: the entry's partition field).
func partitionEntries(partition protowire.Number) fieldLimit {
	return fieldLimit{Max: MaxPartitionsPerTopic, Why: "partitions per topic", Total: MaxRequestPartitions, TotalWhy: "partitions per request",
		Unique: true, Key: []protowire.Number{partition}}
}

// partitionNumbers is one topic's partitions as a repeated int32, each
// once.
func partitionNumbers() fieldLimit {
	return fieldLimit{Max: MaxPartitionsPerTopic, Why: "partitions per topic", Total: MaxRequestPartitions, TotalWhy: "partitions per request", Unique: true}
}

// topicPartitionEntries is a flat list of (topic, partition) entries,
// each pair once.
func topicPartitionEntries(topic, partition protowire.Number, max int, why string) fieldLimit {
	return fieldLimit{Max: max, Why: why, Unique: true, Key: []protowire.Number{topic, partition}}
}

// topicNames is a repeated string of topic names, each once.
func topicNames() fieldLimit {
	return fieldLimit{Max: MaxRequestTopics, Why: "topics per request", Unique: true, MaxLen: MaxTopicNameLength}
}

// topicName is a string field naming a topic.
func topicName() fieldLimit { return fieldLimit{MaxLen: MaxTopicNameLength} }

// ids is a repeated string of ids (groups, transactional ids, keys), each
// once.
func ids() fieldLimit { return fieldLimit{Max: MaxRequestIDs, Why: "ids per request", Unique: true} }

// replicaList is a list of broker ids. Duplicates are the controller's to
// refuse (INVALID_REPLICA_ASSIGNMENT), with its own error.
func replicaList() fieldLimit {
	return fieldLimit{Max: MaxReplicaList, Why: "brokers per replica list"}
}

// stateFilters is a list of state names (unknown ones are answered back).
func stateFilters() fieldLimit { return fieldLimit{Max: MaxStateFilters, Why: "state filters"} }

// txnBatch is an inter-node transaction batch's entries. Entries may
// repeat: a broker's verifier merges concurrent verifications of one
// transaction, which may name one partition twice.
func txnBatch() fieldLimit {
	return fieldLimit{Max: MaxTxnBatchEntries, Why: "entries per transaction batch", Total: MaxTxnBatchEntries, TotalWhy: "entries per transaction batch"}
}

// requestLimits holds the bound of every repeated field, and of the
// string fields with a length bound of their own, of every request
// message of both listeners, by full field name. A repeated field missing
// here is bounded by defaultLimit; a test (TestEveryRequestFieldHasALimit)
// makes sure none is missing.
var requestLimits = map[protoreflect.FullName]fieldLimit{
	// sluice.v1.Log
	"sluice.internal.v1.ProduceRequestView.topics":       topicEntries(1), // the server decodes ProduceRequest as this view
	"sluice.internal.v1.TopicProduceDataView.name":       topicName(),
	"sluice.internal.v1.TopicProduceDataView.partitions": partitionEntries(1),
	"sluice.v1.FetchRequest.topics":                      topicEntries(1),
	"sluice.v1.FetchTopic.name":                          topicName(),
	"sluice.v1.FetchTopic.partitions":                    partitionEntries(1),
	"sluice.v1.ListOffsetsRequest.topics":                topicEntries(1),
	"sluice.v1.ListOffsetsTopic.name":                    topicName(),
	"sluice.v1.ListOffsetsTopic.partitions":              partitionEntries(1),
	// sluice.v1.Admin and sluice.v1.Transactions
	"sluice.v1.MetadataRequest.topics":                        topicNames(),
	"sluice.v1.MetadataRequest.topic_prefix":                  topicName(),
	"sluice.v1.MetadataRequest.page_token":                    topicName(), // a topic name, opaque to clients
	"sluice.v1.CreateTopicsRequest.topics":                    topicEntries(1),
	"sluice.v1.CreatableTopic.name":                           topicName(),
	"sluice.v1.CreatableTopic.configs":                        {Max: MaxTopicConfigs, Why: "configs per topic"}, // a map: keys are unique
	"sluice.v1.DeleteTopicsRequest.names":                     topicNames(),
	"sluice.v1.AlterPartitionReassignmentsRequest.topic":      topicName(),
	"sluice.v1.AlterPartitionReassignmentsRequest.replicas":   replicaList(),
	"sluice.v1.ListPartitionReassignmentsRequest.topics":      topicNames(),
	"sluice.v1.ElectLeadersRequest.topics":                    topicEntries(1),
	"sluice.v1.TopicPartitions.name":                          topicName(),
	"sluice.v1.TopicPartitions.partitions":                    partitionNumbers(),
	"sluice.v1.DescribeProducersRequest.topics":               topicEntries(1),
	"sluice.v1.DescribeProducersTopic.name":                   topicName(),
	"sluice.v1.DescribeProducersTopic.partitions":             partitionNumbers(),
	"sluice.v1.AbortTransactionRequest.topic":                 topicName(),
	"sluice.v1.FindCoordinatorRequest.keys":                   ids(),
	"sluice.v1.DescribeTransactionsRequest.transactional_ids": ids(),
	"sluice.v1.ListTransactionsRequest.state_filters":         stateFilters(),
	"sluice.v1.ListTransactionsRequest.producer_id_filters":   {Max: MaxRequestIDs, Why: "ids per request"},
	// A user or mechanism named twice is the controller's to refuse, per
	// user (INVALID_REQUEST), as are long names (UNACCEPTABLE_CREDENTIAL).
	"sluice.v1.AlterUserScramCredentialsRequest.deletions":  {Max: MaxRequestCredentials, Why: "credential deletions per request"},
	"sluice.v1.AlterUserScramCredentialsRequest.upsertions": {Max: MaxRequestCredentials, Why: "credential upsertions per request"},
	"sluice.v1.DescribeUserScramCredentialsRequest.users":   {Max: MaxRequestCredentials, Why: "users per request", Unique: true},
	// An ACL created twice is one ACL, and two filters may overlap: the
	// controller's to answer, as Kafka's does.
	"sluice.v1.CreateAclsRequest.creations": {Max: MaxRequestAcls, Why: "ACL creations per request"},
	"sluice.v1.DeleteAclsRequest.filters":   {Max: MaxRequestAcls, Why: "ACL filters per request"},
	// An entity or key named twice is the controller's to refuse.
	"sluice.v1.AlterClientQuotasRequest.entries": {Max: MaxRequestQuotaEntries, Why: "quota entities per request"},
	"sluice.v1.ClientQuotaAlteration.ops":        {Max: MaxQuotaOps, Why: "quota ops per entity"},
	// sluice.v1.Groups
	"sluice.v1.ConsumerGroupHeartbeatRequest.subscribed_topic_names": topicNames(),
	"sluice.v1.ConsumerGroupHeartbeatRequest.topic_partitions":       topicEntries(1),
	"sluice.v1.GroupTopicPartitions.topic":                           topicName(),
	"sluice.v1.GroupTopicPartitions.partitions":                      partitionNumbers(),
	"sluice.v1.OffsetCommitRequest.topics":                           topicEntries(1),
	"sluice.v1.TxnOffsetCommitRequest.topics":                        topicEntries(1),
	"sluice.v1.OffsetCommitTopic.name":                               topicName(),
	"sluice.v1.OffsetCommitTopic.partitions":                         partitionEntries(1),
	"sluice.v1.OffsetFetchRequest.topics":                            topicEntries(1),
	"sluice.v1.OffsetFetchTopic.name":                                topicName(),
	"sluice.v1.OffsetFetchTopic.partitions":                          partitionNumbers(),
	"sluice.v1.ListGroupsRequest.states_filter":                      stateFilters(),
	"sluice.v1.DescribeGroupsRequest.group_ids":                      ids(),
	"sluice.v1.DeleteGroupsRequest.group_ids":                        ids(),
	// sluice.internal.v1 (the internal listener)
	"sluice.internal.v1.RegisterBrokerRequest.address":            {MaxLen: MaxAddressLength},
	"sluice.internal.v1.RegisterBrokerRequest.internal_address":   {MaxLen: MaxAddressLength},
	"sluice.internal.v1.RegisterBrokerRequest.kafka_address":      {MaxLen: MaxAddressLength},
	"sluice.internal.v1.BrokerHeartbeatRequest.offline_replicas":  {Max: MaxOfflineReplicas, Why: "offline replicas per heartbeat"},
	"sluice.v1.OfflineReplica.topic":                              topicName(),
	"sluice.internal.v1.AlterPartitionRequest.topic":              topicName(),
	"sluice.internal.v1.AlterPartitionRequest.new_isr":            replicaList(),
	"sluice.internal.v1.ReplicaFetchRequest.partitions":           topicPartitionEntries(1, 2, MaxRequestPartitions, "partitions per request"),
	"sluice.internal.v1.ReplicaFetchRequest.forgotten":            topicPartitionEntries(1, 2, MaxRequestPartitions, "forgotten partitions per request"),
	"sluice.internal.v1.ReplicaFetchPartition.topic":              topicName(),
	"sluice.internal.v1.OffsetForLeaderEpochRequest.partitions":   topicPartitionEntries(1, 2, MaxRequestPartitions, "partitions per request"),
	"sluice.internal.v1.EpochQuery.topic":                         topicName(),
	"sluice.internal.v1.AddPartitionsToTxnRequest.transactions":   txnBatch(),
	"sluice.internal.v1.AddPartitionsToTxnTransaction.partitions": txnBatch(),
	"sluice.internal.v1.WriteTxnMarkersRequest.markers":           txnBatch(),
	// One transaction's marker: each partition once.
	"sluice.internal.v1.TxnMarker.partitions": {Max: MaxTxnBatchEntries, Why: "entries per transaction batch", Total: MaxTxnBatchEntries,
		TotalWhy: "entries per transaction batch", Unique: true, Key: []protowire.Number{1, 2}},
	"sluice.internal.v1.TxnPartition.topic": topicName(),
	// Forwarded by the Kafka door, which refuses a topic named twice
	// itself; a config named twice is the controller's to refuse, per
	// topic (INVALID_REQUEST).
	"sluice.internal.v1.ControllerAlterTopicConfigsRequest.topics": topicEntries(1),
	"sluice.internal.v1.TopicConfigAlteration.topic":               topicName(),
	"sluice.internal.v1.TopicConfigAlteration.ops":                 {Max: MaxTopicConfigs, Why: "config operations per topic"},
	"sluice.internal.v1.TopicConfigAlteration.configs":             {Max: MaxTopicConfigs, Why: "configs per topic"}, // a map: keys are unique
	"sluice.internal.v1.ControllerCreatePartitionsRequest.topics":  topicEntries(1),
	"sluice.internal.v1.PartitionCount.topic":                      topicName(),
}

// defaultLimit bounds a repeated field missing from requestLimits.
var defaultLimit = fieldLimit{Max: MaxRequestPartitions, Why: "entries per list"}

// Answers are bounded too: never built larger than gRPC sends
// (MaxMessageSize). A fetch answer is its batches (bounded by the
// request's max bytes, cut to batchBudget) and an entry per partition of
// at most answerPartitionOverhead bytes besides them.
const (
	// maxAnswerErrorMessage bounds a per-partition error message of a
	// fetch answer (cutMessage).
	maxAnswerErrorMessage = 512
	// answerPartitionOverhead bounds a fetch answer's partition entry
	// without its batches: offsets and codes, the error message, a leader
	// hint with its address, the framing.
	answerPartitionOverhead = 128 + maxAnswerErrorMessage + MaxAddressLength
	// answerHeadroom is kept free of batches in every fetch answer.
	answerHeadroom = 1 << 20
)

// batchBudget is the batch bytes a fetch answer can carry when its
// entries, without their batches, take up to overhead bytes: what is left
// of MaxMessageSize, less the framing of each batch (up to 6 bytes for a
// batch of at least batch.HeaderSize). With the request limits this is
// above the largest batch (storage.MaxMessageBytesLimit), which the first
// partition with data answers whatever the budget.
func batchBudget(overhead int) int {
	room := MaxMessageSize - answerHeadroom - overhead
	return max(room/(batch.HeaderSize+6)*batch.HeaderSize, 1)
}

// cutMessage is msg cut to maxAnswerErrorMessage bytes (at a UTF-8
// boundary) for a per-partition answer.
func cutMessage(msg string) string {
	if len(msg) <= maxAnswerErrorMessage {
		return msg
	}
	const more = "…"
	cut := maxAnswerErrorMessage - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// maxRequestConcurrency bounds the goroutines one request runs at once
// (forEachConcurrently): a WriteTxnMarkers of 100,000 partitions waits on
// 256 replications at a time, not on 100,000 goroutines.
const maxRequestConcurrency = 256

// forEachConcurrently calls f(i) for every i in [0, n), on at most
// maxRequestConcurrency goroutines at once, and returns once every call
// has returned.
func forEachConcurrently(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var g goroutine.Group
	for range min(n, maxRequestConcurrency) {
		g.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	g.Wait()
}
