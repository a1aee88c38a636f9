package e2e

// The CLI's --output json documents, as the suites read them (they mirror
// the types of cmd/sluice, which a test of another package cannot import:
// the JSON is the contract).

// clusterJSON is "sluice cluster status".
type clusterJSON struct {
	ClusterID                 string       `json:"cluster_id"`
	NodeID                    int32        `json:"node_id"`
	MetadataOffset            uint64       `json:"metadata_offset"`
	ControllerLeader          int32        `json:"controller_leader"`
	Voters                    []int32      `json:"voters"`
	Quorum                    []voterJSON  `json:"quorum"`
	Brokers                   []brokerJSON `json:"brokers"`
	OfflinePartitions         int32        `json:"offline_partitions"`
	UnderReplicatedPartitions int32        `json:"under_replicated_partitions"`
}

// voterJSON is one controller voter of clusterJSON.
type voterJSON struct {
	ID           int32  `json:"id"`
	RaftAddress  string `json:"raft_address"`
	Address      string `json:"address"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	LastLogIndex uint64 `json:"last_log_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// brokerJSON is one broker of clusterJSON.
type brokerJSON struct {
	ID               int32  `json:"id"`
	Address          string `json:"address"`
	Rack             string `json:"rack"`
	Epoch            int64  `json:"epoch"`
	Fenced           bool   `json:"fenced"`
	LeaderPartitions int32  `json:"leader_partitions"`
}

// topicJSON is "sluice topic describe".
type topicJSON struct {
	Name       string            `json:"name"`
	Partitions []partitionJSON   `json:"partitions"`
	Configs    map[string]string `json:"configs"`
}

// partitionJSON is one partition of topicJSON.
type partitionJSON struct {
	Partition        int32   `json:"partition"`
	Leader           int32   `json:"leader"`
	LeaderEpoch      int32   `json:"leader_epoch"`
	Replicas         []int32 `json:"replicas"`
	ISR              []int32 `json:"isr"`
	AddingReplicas   []int32 `json:"adding_replicas"`
	RemovingReplicas []int32 `json:"removing_replicas"`
}

// benchResult is the summary of "sluice bench".
type benchResult struct {
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
}
