package node

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/runtime"
)

// maxGroupLagSeries bounds the sluice_consumer_group_lag series one
// scrape writes (docs/operations.md): groups × partitions can be large.
const maxGroupLagSeries = 1000

// raftStates are the values of sluice_raft_state's label state
// (controller.QuorumState.State).
var raftStates = []string{"leader", "follower", "candidate", "shutdown"}

// stateCollector is the prometheus.Collector of the state a scrape reads
// from the node's parts: the metadata image, the hosted partitions'
// offsets and transactions, the coordinators' statistics and the
// controller's Raft state. It holds no state itself; Collect reads each
// part once per scrape and may run concurrently with anything (every
// accessor it calls is safe for concurrent use).
type stateCollector struct {
	n *Node

	topics, metadataOffset *prometheus.Desc

	// Per hosted partition (labels topic, partition).
	logStartOffset, logEndOffset, logSize, highWatermark, lastStableOffset, lsoLag *prometheus.Desc
	openTxns, oldestOpenTxnAge, lateTxns, producerIDs                              *prometheus.Desc
	partitionsWithLateTxns, maxActiveTxnDuration                                   *prometheus.Desc

	// Partition health from the metadata image, for partitions this
	// broker leads; offline partitions from the active controller.
	underReplicated, partitionUnderReplicated, underMinISR, partitionUnderMinISR, offline *prometheus.Desc

	// Controller (controller voters only).
	activeController, raftState, raftTerm, raftLastLogIndex, raftCommitIndex, raftAppliedIndex *prometheus.Desc

	// Transaction coordinator (label partition of __transaction_state).
	txnOpen, txnPendingMarkers, txnLoading, txnLoadSeconds, txnSkippedRecords *prometheus.Desc
	txnQueueDepth, txnAppendSeconds, groupQueueDepth, groupAppendSeconds      *prometheus.Desc
	// Group coordinator.
	groups, groupLoading, groupLoadSeconds, rebalances, groupLag, groupSkippedRecords *prometheus.Desc
	// The log cleaner (compacted topics; Kafka's LogCleaner metrics).
	cleanerRuns, cleanerBytesRead, cleanerBytesWritten, cleanerRecordsRemoved, cleanerFailures *prometheus.Desc
	cleanerLastDuration, cleanerMaxDirtyRatio                                                  *prometheus.Desc
	// Replicas offline on this broker after a disk error (decision 42).
	storageFailed *prometheus.Desc
	// Followers' replica fetch sessions held by this broker as a leader.
	fetchSessions, fetchRescanFound *prometheus.Desc
}

var partitionLabels = []string{"topic", "partition"}

func newStateCollector(n *Node) *stateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &stateCollector{
		fetchSessions:         d("sluice_replica_fetch_sessions", "Followers' replica fetch sessions this broker holds as a leader (one per follower broker fetching from it)."),
		fetchRescanFound:      d("sluice_replica_fetch_rescan_found_total", "Follower partitions a fetcher's periodic rescan found changed with no mark of it (fetched late; 0 unless a change was missed)."),
		cleanerRuns:           d("sluice_log_cleaner_runs_total", "Cleaning passes that rewrote segments of a compacted partition."),
		cleanerBytesRead:      d("sluice_log_cleaner_bytes_read_total", "Segment bytes the log cleaner read and rewrote."),
		cleanerBytesWritten:   d("sluice_log_cleaner_bytes_written_total", "Segment bytes the log cleaner wrote."),
		cleanerRecordsRemoved: d("sluice_log_cleaner_records_removed_total", "Records the log cleaner removed (superseded keys, expired tombstones, aborted data)."),
		cleanerFailures:       d("sluice_log_cleaner_failures_total", "Cleaning passes that failed (logged)."),
		cleanerLastDuration:   d("sluice_log_cleaner_last_duration_seconds", "Duration of the last cleaning pass."),
		cleanerMaxDirtyRatio:  d("sluice_log_cleaner_max_dirty_ratio", "Largest dirty ratio of a compacted partition at the last check."),
		storageFailed: d("sluice_storage_failed_partitions",
			"Partition replicas offline on this broker after a disk error (a write, fsync, read or segment roll failed, or the log could not be opened); they stay offline until the broker restarts with a healthy directory. /readyz names them."),
		n:              n,
		topics:         d("sluice_topics", "Number of topics."),
		metadataOffset: d("sluice_metadata_offset", "Metadata offset applied by this broker."),

		logStartOffset:   d("sluice_log_start_offset", "Log start offset per hosted partition (the first offset retention kept).", partitionLabels...),
		logEndOffset:     d("sluice_log_end_offset", "Log end offset per hosted partition.", partitionLabels...),
		logSize:          d("sluice_log_size_bytes", "Bytes of the log's segment .log files (indexes and snapshots not counted) per hosted partition.", partitionLabels...),
		highWatermark:    d("sluice_high_watermark", "High watermark per hosted partition.", partitionLabels...),
		lastStableOffset: d("sluice_last_stable_offset", "Last stable offset per hosted partition: where read_committed consumers stop.", partitionLabels...),
		lsoLag:           d("sluice_lso_lag", "High watermark minus last stable offset per hosted partition: committed offsets read_committed consumers cannot read yet.", partitionLabels...),
		openTxns:         d("sluice_open_transactions", "Transactions with data and no marker yet per hosted partition.", partitionLabels...),
		oldestOpenTxnAge: d("sluice_oldest_open_transaction_age_ms", "Milliseconds since the oldest transaction still open in each hosted partition appended its first batch here (0 when none is open); it holds the last stable offset back.", partitionLabels...),
		lateTxns:         d("sluice_late_transactions", "Transactions open longer than transaction.max.timeout.ms per hosted partition: likely hanging (sluice txn find-hanging).", partitionLabels...),
		producerIDs:      d("sluice_producer_ids", "Producer ids with idempotence state per hosted partition.", partitionLabels...),
		partitionsWithLateTxns: d("sluice_partitions_with_late_transactions",
			"Hosted partitions holding a transaction open longer than transaction.max.timeout.ms (Kafka's PartitionsWithLateTransactionsCount)."),
		maxActiveTxnDuration: d("sluice_max_active_transaction_duration_ms",
			"Milliseconds the longest transaction open on any hosted partition has been open (0 when none)."),

		underReplicated: d("sluice_under_replicated_partitions",
			"Partitions this broker leads with a replica out of the ISR, per this broker's metadata image (replicas a reassignment is still adding do not count)."),
		partitionUnderReplicated: d("sluice_partition_under_replicated",
			"1 if the partition, which this broker leads, has a replica out of the ISR, else 0.", partitionLabels...),
		underMinISR: d("sluice_under_min_isr_partitions",
			"Partitions this broker leads whose ISR is smaller than the topic's min.insync.replicas: acks=all produce fails with NOT_ENOUGH_REPLICAS."),
		partitionUnderMinISR: d("sluice_partition_under_min_isr",
			"1 if the partition, which this broker leads, has fewer in-sync replicas than min.insync.replicas, else 0.", partitionLabels...),
		offline: d("sluice_offline_partitions",
			"Partitions without a leader in the whole cluster, reported by the active controller (0 on the other controller voters; absent on broker-only nodes)."),

		activeController: d("sluice_active_controller", "1 on the controller voter that is the Raft leader (the active controller), else 0; absent on broker-only nodes."),
		raftState:        d("sluice_raft_state", "1 for this controller voter's current Raft state (label state: leader, follower, candidate, shutdown), 0 for the others.", "state"),
		raftTerm:         d("sluice_raft_term", "This controller voter's current Raft term."),
		raftLastLogIndex: d("sluice_raft_last_log_index", "Index of the last entry in this controller voter's Raft log."),
		raftCommitIndex:  d("sluice_raft_commit_index", "Highest Raft log index this controller voter knows to be committed."),
		raftAppliedIndex: d("sluice_raft_applied_index", "Highest Raft log index this controller voter has applied to its metadata image."),

		txnOpen: d("sluice_txn_coordinator_open_transactions",
			"Transactional ids with an open transaction (Ongoing, PrepareCommit, PrepareAbort) per __transaction_state partition this node coordinates.", "partition"),
		txnPendingMarkers: d("sluice_txn_coordinator_pending_markers",
			"Transactions whose COMMIT/ABORT markers are being written (PrepareCommit, PrepareAbort) per __transaction_state partition this node coordinates.", "partition"),
		txnLoading: d("sluice_txn_coordinator_loading",
			"1 while this node loads the __transaction_state partition it now leads, else 0.", "partition"),
		txnLoadSeconds: d("sluice_txn_coordinator_load_seconds",
			"How long the last load of each __transaction_state partition this node leads took (0 while loading).", "partition"),
		txnQueueDepth: d("sluice_txn_coordinator_queue_depth",
			"Requests and timers holding or waiting for a transactional id, per __transaction_state partition this node coordinates (one per id with a transition in flight; a waiting AddPartitions retries rather than queues).", "partition"),
		txnAppendSeconds: d("sluice_txn_coordinator_append_seconds",
			"Time of the transaction coordinator's appends to __transaction_state, from the call to the commit (replicated to the ISR) or the failure."),
		groupQueueDepth: d("sluice_group_coordinator_queue_depth",
			"Requests and timers holding or waiting for a group (and producers' transactional offset commits), per __consumer_offsets partition this node coordinates.", "partition"),
		groupAppendSeconds: d("sluice_group_coordinator_append_seconds",
			"Time of the group coordinator's appends to __consumer_offsets (group epochs, offset commits, deletions; not transactional offset commits), from the call to the commit or the failure."),
		txnSkippedRecords: d("sluice_txn_coordinator_skipped_records_total",
			"Corrupt __transaction_state records this node's loads skipped (logged with partition, offset and reason); a record skipped by several loads counts each time."),

		groups: d("sluice_group_coordinator_groups",
			"Consumer groups per state per __consumer_offsets partition this node coordinates.", "partition", "state"),
		groupLoading: d("sluice_group_coordinator_loading",
			"1 while this node loads the __consumer_offsets partition it now leads, else 0.", "partition"),
		groupLoadSeconds: d("sluice_group_coordinator_load_seconds",
			"How long the last load of each __consumer_offsets partition this node leads took (0 while loading).", "partition"),
		groupSkippedRecords: d("sluice_group_coordinator_skipped_records_total",
			"__consumer_offsets records this node's loads could not decode and skipped (logged with partition, offset and reason); a record skipped by several loads counts each time."),
		rebalances: d("sluice_group_rebalances_total",
			"Group epoch bumps (membership, subscription or metadata changes) and classic group generations this node has written as coordinator."),
		groupLag: d("sluice_consumer_group_lag",
			"Last stable offset minus the group's committed offset, per group and partition hosted on this node (at most "+strconv.Itoa(maxGroupLagSeries)+" series).",
			"group", "topic", "partition"),
	}
}

// Describe implements prometheus.Collector: every family Collect may
// send (Collect sends only those that apply to this node's roles).
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.topics, c.metadataOffset,
		c.logStartOffset, c.logEndOffset, c.logSize, c.highWatermark, c.lastStableOffset, c.lsoLag,
		c.openTxns, c.oldestOpenTxnAge, c.lateTxns, c.producerIDs, c.partitionsWithLateTxns, c.maxActiveTxnDuration,
		c.underReplicated, c.partitionUnderReplicated, c.underMinISR, c.partitionUnderMinISR, c.offline,
		c.activeController, c.raftState, c.raftTerm, c.raftLastLogIndex, c.raftCommitIndex, c.raftAppliedIndex,
		c.txnOpen, c.txnPendingMarkers, c.txnLoading, c.txnLoadSeconds, c.txnSkippedRecords,
		c.txnQueueDepth, c.txnAppendSeconds, c.groupQueueDepth, c.groupAppendSeconds,
		c.groups, c.groupLoading, c.groupLoadSeconds, c.rebalances, c.groupLag, c.groupSkippedRecords,
		c.cleanerRuns, c.cleanerBytesRead, c.cleanerBytesWritten, c.cleanerRecordsRemoved, c.cleanerFailures,
		c.cleanerLastDuration, c.cleanerMaxDirtyRatio, c.storageFailed, c.fetchSessions, c.fetchRescanFound,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	im := n.cache.Image()
	gauge(ch, c.topics, float64(len(im.Topics)))
	gauge(ch, c.metadataOffset, float64(im.Offset))
	c.collectController(ch)
	if n.replicas == nil {
		return
	}
	gauge(ch, c.storageFailed, float64(len(n.replicas.OfflineReplicas())))
	gauge(ch, c.fetchSessions, float64(n.replicas.FetchSessions()))
	constMetric(ch, c.fetchRescanFound, prometheus.CounterValue, float64(n.replicas.FetchRescanFound()))
	now := time.Now()
	c.collectPartitions(ch, now)
	c.collectPartitionHealth(ch, im)
	c.collectTxnCoordinator(ch)
	c.collectGroupCoordinator(ch)
	c.collectCleaner(ch)
}

// collectCleaner sends the log cleaner's totals.
func (c *stateCollector) collectCleaner(ch chan<- prometheus.Metric) {
	cs := c.n.replicas.CleanerStats()
	for _, m := range []struct {
		d *prometheus.Desc
		v int64
	}{{c.cleanerRuns, cs.Runs}, {c.cleanerBytesRead, cs.BytesRead}, {c.cleanerBytesWritten, cs.BytesWritten},
		{c.cleanerRecordsRemoved, cs.RecordsRemoved}, {c.cleanerFailures, cs.Failures}} {
		constMetric(ch, m.d, prometheus.CounterValue, float64(m.v))
	}
	gauge(ch, c.cleanerLastDuration, cs.LastDuration.Seconds())
	gauge(ch, c.cleanerMaxDirtyRatio, cs.MaxDirtyRatio)
}

// gauge sends one gauge sample of d. A bad label value (not UTF-8) fails
// that series alone, reported by the handler: a panic here would end the
// process (the registry collects in goroutines of its own).
func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	constMetric(ch, d, prometheus.GaugeValue, v, labels...)
}

// constMetric sends one sample of d, or an invalid metric carrying the
// error.
func constMetric(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func partitionLabel(p int32) string { return strconv.Itoa(int(p)) }

// collectPartitions sends the per hosted partition offsets, sizes and
// transaction gauges.
func (c *stateCollector) collectPartitions(ch chan<- prometheus.Metric, now time.Time) {
	n := c.n
	late := map[cluster.TopicPartition]int{}
	// KIP-664: transactions open longer than the maximum timeout are
	// likely hanging (the log names each, see
	// cluster.ReplicaManager.LogLateTransactions).
	for _, lt := range n.replicas.LateTransactions(now) {
		late[lt.TopicPartition]++
	}
	var maxActive int64
	for _, part := range n.replicas.Replicas() {
		l := []string{part.Topic, partitionLabel(part.Partition)}
		// Each partition's offsets are read once, so that the lag is the
		// difference of the two values shown; the LSO first: lso <= hw
		// as both only grow.
		lso := part.LastStableOffset()
		hw := part.HighWatermark()
		gauge(ch, c.logStartOffset, float64(part.LogStartOffset()), l...)
		gauge(ch, c.logEndOffset, float64(part.LogEndOffset()), l...)
		gauge(ch, c.logSize, float64(part.Size()), l...)
		gauge(ch, c.highWatermark, float64(hw), l...)
		gauge(ch, c.lastStableOffset, float64(lso), l...)
		gauge(ch, c.lsoLag, float64(max(hw-lso, 0)), l...)
		gauge(ch, c.openTxns, float64(part.OpenTransactions()), l...)
		var age int64
		if start, ok := part.OldestOpenTransactionStart(); ok {
			age = max(now.Sub(start).Milliseconds(), 0)
			maxActive = max(maxActive, age)
		}
		gauge(ch, c.oldestOpenTxnAge, float64(age), l...)
		gauge(ch, c.lateTxns, float64(late[part.TopicPartition]), l...)
		gauge(ch, c.producerIDs, float64(part.ProducerCount()), l...)
	}
	gauge(ch, c.partitionsWithLateTxns, float64(len(late)))
	gauge(ch, c.maxActiveTxnDuration, float64(maxActive))
}

// collectPartitionHealth sends the under-replicated and under-min-ISR
// gauges of the partitions this broker leads according to its metadata
// image im (as Kafka, each leader reports its own partitions: summed over
// brokers, each partition counts once). min.insync.replicas is the hosted
// replica's topic config; a led partition not hosted yet is skipped.
func (c *stateCollector) collectPartitionHealth(ch chan<- prometheus.Metric, im *controller.Image) {
	n := c.n
	self := n.cfg.NodeID
	var under, underMin int
	for name, t := range im.Topics {
		for i, p := range t.Partitions {
			if p.Leader != self {
				continue
			}
			l := []string{name, partitionLabel(int32(i))}
			ur := p.UnderReplicated()
			if ur {
				under++
			}
			gauge(ch, c.partitionUnderReplicated, boolValue(ur), l...)
			r, err := n.replicas.Replica(name, int32(i))
			if err != nil {
				continue
			}
			um := int32(len(p.ISR)) < r.Config().MinInsyncReplicas
			if um {
				underMin++
			}
			gauge(ch, c.partitionUnderMinISR, boolValue(um), l...)
		}
	}
	gauge(ch, c.underReplicated, float64(under))
	gauge(ch, c.underMinISR, float64(underMin))
}

// collectController sends the controller voter's Raft gauges and, on the
// active controller, the cluster's offline partitions (from its own
// image: every voter's image may lag, the leader's is the reference).
func (c *stateCollector) collectController(ch chan<- prometheus.Metric) {
	ctl := c.n.ctl
	if ctl == nil {
		return
	}
	q := ctl.QuorumState()
	leader := q.State == "leader"
	gauge(ch, c.activeController, boolValue(leader))
	for _, s := range raftStates {
		gauge(ch, c.raftState, boolValue(q.State == s), s)
	}
	gauge(ch, c.raftTerm, float64(q.Term))
	gauge(ch, c.raftLastLogIndex, float64(q.LastLogIndex))
	gauge(ch, c.raftCommitIndex, float64(q.CommitIndex))
	gauge(ch, c.raftAppliedIndex, float64(q.AppliedIndex))
	offline := 0
	if leader {
		for _, t := range ctl.Image().Topics {
			for _, p := range t.Partitions {
				if p.Leader == controller.NoLeader {
					offline++
				}
			}
		}
	}
	gauge(ch, c.offline, float64(offline))
}

// collectTxnCoordinator sends the transaction coordinator's gauges, one
// series per __transaction_state partition this node leads (label
// partition): open transactions (ids in Ongoing or Prepare*), pending
// markers (ids in Prepare*, whose markers are being written), and how
// long the partition's last load took.
func (c *stateCollector) collectTxnCoordinator(ch chan<- prometheus.Metric) {
	if c.n.txnCoord == nil {
		return
	}
	constMetric(ch, c.txnSkippedRecords, prometheus.CounterValue, float64(c.n.txnCoord.SkippedRecords()))
	for _, s := range c.n.txnCoord.Stats() {
		p := partitionLabel(s.Partition)
		gauge(ch, c.txnOpen, float64(s.OpenTransactions), p)
		gauge(ch, c.txnPendingMarkers, float64(s.PendingMarkers), p)
		gauge(ch, c.txnLoading, boolValue(s.Loading), p)
		gauge(ch, c.txnLoadSeconds, s.LoadTime.Seconds(), p)
		gauge(ch, c.txnQueueDepth, float64(s.QueueDepth), p)
	}
	histogram(ch, c.txnAppendSeconds, c.n.txnCoord.AppendLatency())
}

// histogram sends one runtime.HistogramSnapshot as a Prometheus histogram.
func histogram(ch chan<- prometheus.Metric, d *prometheus.Desc, h runtime.HistogramSnapshot) {
	m, err := prometheus.NewConstHistogram(d, h.Count, h.Sum.Seconds(), h.Buckets)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

// collectGroupCoordinator sends the group coordinator's metrics: per
// __consumer_offsets partition this node leads, groups by state, whether
// it loads and how long its last load took; the rebalance count; and per
// group and partition the lag of its committed offset behind the
// partition's last stable offset, for partitions hosted on this node
// (read_committed consumers stop at the LSO, so lag to the HW would show
// aborted records and markers as lag), at most maxGroupLagSeries series.
func (c *stateCollector) collectGroupCoordinator(ch chan<- prometheus.Metric) {
	n := c.n
	if n.groupCoord == nil {
		return
	}
	stats, rebalances, offs := n.groupCoord.Stats()
	for _, s := range stats {
		p := partitionLabel(s.Partition)
		for st, count := range s.Groups {
			gauge(ch, c.groups, float64(count), p, st)
		}
		gauge(ch, c.groupLoading, boolValue(s.Loading), p)
		gauge(ch, c.groupLoadSeconds, s.LoadTime.Seconds(), p)
		gauge(ch, c.groupQueueDepth, float64(s.QueueDepth), p)
	}
	histogram(ch, c.groupAppendSeconds, n.groupCoord.AppendLatency())
	constMetric(ch, c.rebalances, prometheus.CounterValue, float64(rebalances))
	constMetric(ch, c.groupSkippedRecords, prometheus.CounterValue, float64(n.groupCoord.SkippedRecords()))
	series := 0
	for _, g := range offs {
		// Sorted, so that the series kept under the bound are the same
		// from one scrape to the next.
		for _, tp := range slices.SortedFunc(maps.Keys(g.Offsets), func(a, b group.TopicPartition) int {
			if a.Topic != b.Topic {
				return strings.Compare(a.Topic, b.Topic)
			}
			return int(a.Partition - b.Partition)
		}) {
			if series >= maxGroupLagSeries {
				return
			}
			p, err := n.replicas.Replica(tp.Topic, tp.Partition)
			if err != nil {
				continue
			}
			series++
			gauge(ch, c.groupLag, float64(max(p.LastStableOffset()-g.Offsets[tp], 0)), g.Group, tp.Topic, partitionLabel(tp.Partition))
		}
	}
}
