// Package output holds the documents the sluice CLI prints with
// --output json (and bench's summary): the CLI fills them, and the
// end-to-end suites decode them with the same types, so the JSON shape has
// one definition. docs/operations.md documents every field; keep the two
// in step.
package output

// Cluster is "cluster status --output json": one object, keys always
// present, lists never null. docs/operations.md documents every field; keep
// the two in step.
type Cluster struct {
	// Connection is how the CLI is connected: absent when the broker does
	// not answer WhoAmI (an older version).
	Connection     *Connection `json:"connection,omitempty"`
	ClusterID      string      `json:"cluster_id"`
	NodeID         int32       `json:"node_id"`
	MetadataOffset uint64      `json:"metadata_offset"`
	// ControllerLeader is 0 when no leader is known.
	ControllerLeader int32 `json:"controller_leader"`
	// Voters are the voters' node ids, ascending.
	Voters []int32 `json:"voters"`
	// Quorum is one entry per voter, in the order of Voters.
	Quorum []Voter `json:"quorum"`
	// Brokers are ascending by id.
	Brokers                   []Broker `json:"brokers"`
	OfflinePartitions         int32    `json:"offline_partitions"`
	UnderReplicatedPartitions int32    `json:"under_replicated_partitions"`
	// Topics and Partitions count the cluster's; UnderMinISRPartitions and
	// AtMinISRPartitions its partitions with fewer in-sync replicas than
	// their topic's min.insync.replicas, and with exactly that many.
	Topics                int32 `json:"topics"`
	Partitions            int32 `json:"partitions"`
	UnderMinISRPartitions int32 `json:"under_min_isr_partitions"`
	AtMinISRPartitions    int32 `json:"at_min_isr_partitions"`
}

// Voter is one controller voter in Cluster.Quorum.
type Voter struct {
	ID           int32  `json:"id"`
	RaftAddress  string `json:"raft_address"`
	Address      string `json:"address"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	LastLogIndex uint64 `json:"last_log_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Broker is one registered broker in Cluster.Brokers.
type Broker struct {
	ID               int32  `json:"id"`
	Address          string `json:"address"`
	Rack             string `json:"rack"`
	Epoch            int64  `json:"epoch"`
	Fenced           bool   `json:"fenced"`
	LeaderPartitions int32  `json:"leader_partitions"`
	// OfflineReplicas are its replicas whose logs failed on its disk
	// (docs/operations.md, "A failed disk"), at most
	// --offline-replicas-limit of them; [] when none.
	OfflineReplicas []OfflineReplica `json:"offline_replicas"`
	// Replicas are the partition replicas assigned to it, OutOfSyncReplicas
	// those of them out of their ISR, OfflineReplicaCount all of its
	// offline replicas (OfflineReplicas lists the first ones).
	Replicas            int32 `json:"replicas"`
	OutOfSyncReplicas   int32 `json:"out_of_sync_replicas"`
	OfflineReplicaCount int32 `json:"offline_replica_count"`
}

// OfflineReplica is one replica in Broker.OfflineReplicas.
type OfflineReplica struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Path is the partition's log directory on the broker.
	Path string `json:"path"`
	// Error is the failure: operation, file and OS error.
	Error string `json:"error"`
}

// Partition is one partition in "topic describe --output json".
// AddingReplicas and RemovingReplicas are [] unless a reassignment runs.
// HighWatermark and LastStableOffset are the leader's (ListOffsets LATEST
// under read_uncommitted and read_committed), null when it did not answer
// in time.
type Partition struct {
	Partition        int32   `json:"partition"`
	Leader           int32   `json:"leader"`
	LeaderEpoch      int32   `json:"leader_epoch"`
	Replicas         []int32 `json:"replicas"`
	ISR              []int32 `json:"isr"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
	HighWatermark    *int64  `json:"high_watermark"`
	LastStableOffset *int64  `json:"last_stable_offset"`
}

// Topic is "topic describe NAME --output json"; every other form of
// topic describe prints a JSON array of them. With a partition filter
// (--under-replicated-partitions, ...) Partitions holds only the
// partitions it selects.
type Topic struct {
	Name       string            `json:"name"`
	Partitions []Partition       `json:"partitions"`
	Configs    map[string]string `json:"configs"`
}

// TopicListing is one entry of "topic list --output json" (a JSON array
// by name, [] when there is none): the topic's counts over all its
// partitions.
type TopicListing struct {
	Name              string `json:"name"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int32  `json:"replication_factor"`
	MinInsyncReplicas int32  `json:"min_insync_replicas"`
	// Internal marks Sluice's own topics (__consumer_offsets,
	// __transaction_state).
	Internal                  bool  `json:"internal"`
	UnderReplicatedPartitions int32 `json:"under_replicated_partitions"`
	UnderMinISRPartitions     int32 `json:"under_min_isr_partitions"`
	AtMinISRPartitions        int32 `json:"at_min_isr_partitions"`
	UnavailablePartitions     int32 `json:"unavailable_partitions"`
}

// BenchResult is the final summary of a benchmark.
type BenchResult struct {
	Mode          string  `json:"mode"`
	Topic         string  `json:"topic"`
	Records       int64   `json:"records"`
	RecordSize    int     `json:"record_size,omitempty"`
	Bytes         int64   `json:"bytes"`
	Seconds       float64 `json:"seconds"`
	RecordsPerSec float64 `json:"records_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"`
	LatencyWhat   string  `json:"latency"`
	LatencyP50Ms  float64 `json:"latency_p50_ms"`
	LatencyP99Ms  float64 `json:"latency_p99_ms"`
	LatencyP999Ms float64 `json:"latency_p999_ms"`
	LatencyMeanMs float64 `json:"latency_mean_ms"`
	Errors        int64   `json:"errors"`
	// ThrottledRequests are the answers a client quota throttled (absent
	// when none was); ThrottleTotalMs and ThrottleMaxMs their throttle
	// times' sum and largest.
	ThrottledRequests int64   `json:"throttled_requests,omitempty"`
	ThrottleTotalMs   float64 `json:"throttle_total_ms,omitempty"`
	ThrottleMaxMs     float64 `json:"throttle_max_ms,omitempty"`
}

// TransactionListing is one entry of "txn list --output json" (a JSON
// array, sorted by transactional id, [] when there is none).
// docs/transactions.md documents every field; keep the two in step.
// DurationMs is how long the open transaction has been open, -1 when none
// is open.
type TransactionListing struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	State           string `json:"state"`
	DurationMs      int64  `json:"duration_ms"`
}

// Transaction is one entry of "txn describe --output json" (a JSON array
// in the order of the ids asked; docs/transactions.md documents every
// field). Error is "" when the coordinator
// answered, else the error code and message (the other fields are then
// zero). Times are milliseconds since the Unix epoch, -1 when unknown;
// the producer ids are -1 when none; Topics is [] when the transaction
// holds no partition.
type Transaction struct {
	TransactionalID        string     `json:"transactional_id"`
	Error                  string     `json:"error"`
	State                  string     `json:"state"`
	ProducerID             int64      `json:"producer_id"`
	ProducerEpoch          int32      `json:"producer_epoch"`
	LastProducerEpoch      int32      `json:"last_producer_epoch"`
	PreviousProducerID     int64      `json:"previous_producer_id"`
	NextProducerID         int64      `json:"next_producer_id"`
	TransactionTimeoutMs   int32      `json:"transaction_timeout_ms"`
	TransactionStartTimeMs int64      `json:"transaction_start_time_ms"`
	LastUpdateTimeMs       int64      `json:"last_update_time_ms"`
	CoordinatorEpoch       int32      `json:"coordinator_epoch"`
	Topics                 []TxnTopic `json:"topics"`
	// History is present with --history only: every record of the id in
	// its __transaction_state partition, in log order.
	History []TxnHistoryEntry `json:"history,omitempty"`
	// Markers is present with --history when the history ends with a
	// Complete* record: where the markers of that transaction landed.
	Markers []TxnMarker `json:"markers,omitempty"`
}

// TxnMarker is where the marker of a transaction's partition landed
// ("txn describe --history"): Offset is -1 when it cannot be told any
// more (Note says why: the producer wrote to the partition since, or the
// partition's leader did not answer).
type TxnMarker struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Note      string `json:"note"`
}

// TxnHistoryEntry is one __transaction_state record of a transactional
// id ("txn describe --history"): the state it moved to, with the fields
// that record carries. Partitions is [] in Empty and Complete*; Dead is a
// tombstone (the other fields -1).
type TxnHistoryEntry struct {
	Offset            int64      `json:"offset"`
	TimestampMs       int64      `json:"timestamp_ms"`
	State             string     `json:"state"`
	ProducerID        int64      `json:"producer_id"`
	ProducerEpoch     int32      `json:"producer_epoch"`
	LastProducerEpoch int32      `json:"last_producer_epoch"`
	TimeoutMs         int32      `json:"timeout_ms"`
	Topics            []TxnTopic `json:"topics"`
	StartTimeMs       int64      `json:"start_time_ms"`
	UpdateTimeMs      int64      `json:"update_time_ms"`
}

// TxnTopic is a topic of Transaction.Topics with the transaction's
// partitions of it, ascending.
type TxnTopic struct {
	Name       string  `json:"name"`
	Partitions []int32 `json:"partitions"`
}

// Producer is one entry of "txn describe-producers --output json" (a JSON
// array by producer id): the producer state of a partition's leader.
// The -1 values mean none (no sequence remembered, no marker yet, no open
// transaction).
type Producer struct {
	ProducerID            int64 `json:"producer_id"`
	ProducerEpoch         int32 `json:"producer_epoch"`
	LastSequence          int32 `json:"last_sequence"`
	LastTimestampMs       int64 `json:"last_timestamp_ms"`
	CoordinatorEpoch      int32 `json:"coordinator_epoch"`
	CurrentTxnStartOffset int64 `json:"current_txn_start_offset"`
	CurrentTxnStartTimeMs int64 `json:"current_txn_start_time_ms"`
	CurrentTxnDurationMs  int64 `json:"current_txn_duration_ms"`
	LastOffset            int64 `json:"last_offset"`
}

// HangingTransaction is one entry of "txn find-hanging --output json" (a
// JSON array by topic, partition, producer id). TransactionalID is "" when
// no coordinator knows the producer id; Reason says why it is hanging.
type HangingTransaction struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	Leader           int32  `json:"leader"`
	ProducerID       int64  `json:"producer_id"`
	ProducerEpoch    int32  `json:"producer_epoch"`
	CoordinatorEpoch int32  `json:"coordinator_epoch"`
	StartOffset      int64  `json:"start_offset"`
	StartTimeMs      int64  `json:"start_time_ms"`
	DurationMs       int64  `json:"duration_ms"`
	TransactionalID  string `json:"transactional_id"`
	Reason           string `json:"reason"`
}

// AbortedTransaction is "txn abort --output json".
type AbortedTransaction struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int32  `json:"producer_epoch"`
	MarkerOffset  int64  `json:"marker_offset"`
}

// ElectedLeader is one entry of "cluster elect-leaders --output json" (a
// JSON array): a partition whose leader moved to its preferred replica.
type ElectedLeader struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Leader    int32  `json:"leader"`
}

// Connection is the CLI's connection as a broker sees it (WhoAmI).
type Connection struct {
	Principal              string `json:"principal"`
	AuthenticatedBy        string `json:"authenticated_by"`
	TLS                    bool   `json:"tls"`
	TLSVersion             string `json:"tls_version,omitempty"`
	NodeID                 int32  `json:"node_id"`
	AuthenticationRequired bool   `json:"authentication_required"`
	// Listeners: how the answering broker's listeners are secured.
	Listeners []ListenerSecurity `json:"listeners,omitempty"`
}

// ListenerSecurity is how one listener is secured.
type ListenerSecurity struct {
	Name       string `json:"name"`
	Encrypted  bool   `json:"encrypted"`
	ClientAuth string `json:"client_auth"`
	// SaslMechanisms: the kafka listener's (none: no SASL).
	SaslMechanisms []string `json:"sasl_mechanisms,omitempty"`
}
