package node

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/offsets"
)

func (n *Node) httpMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		resp, err := n.health.Check(r.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		im := n.cache.Image()
		fmt.Fprintf(w, "# HELP sluice_topics Number of topics.\n# TYPE sluice_topics gauge\nsluice_topics %d\n", len(im.Topics))
		fmt.Fprintf(w, "# HELP sluice_metadata_offset Metadata offset applied by this broker.\n# TYPE sluice_metadata_offset gauge\nsluice_metadata_offset %d\n", im.Offset)
		if n.replicas == nil {
			return
		}
		n.writeTxnCoordinatorMetrics(w)
		n.writeGroupCoordinatorMetrics(w)
		parts := n.replicas.Replicas()
		slices.SortFunc(parts, func(a, b *cluster.Replica) int {
			if a.Topic != b.Topic {
				if a.Topic < b.Topic {
					return -1
				}
				return 1
			}
			return int(a.Partition - b.Partition)
		})
		// Each partition's offsets are read once, so that the lag is the
		// difference of the two values shown.
		type partOffsets struct{ hw, lso int64 }
		offs := make([]partOffsets, len(parts))
		for i, part := range parts {
			offs[i].lso = part.LastStableOffset() // first: lso <= hw as both only grow
			offs[i].hw = part.HighWatermark()
		}
		gauge := func(name, help string, value func(i int, part *cluster.Replica) int64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
			for i, part := range parts {
				fmt.Fprintf(w, "%s{topic=%q,partition=\"%s\"} %d\n", name, part.Topic, strconv.Itoa(int(part.Partition)), value(i, part))
			}
		}
		gauge("sluice_log_end_offset", "Log end offset per hosted partition.",
			func(_ int, part *cluster.Replica) int64 { return part.LogEndOffset() })
		gauge("sluice_high_watermark", "High watermark per hosted partition.",
			func(i int, _ *cluster.Replica) int64 { return offs[i].hw })
		gauge("sluice_last_stable_offset", "Last stable offset per hosted partition: where read_committed consumers stop.",
			func(i int, _ *cluster.Replica) int64 { return offs[i].lso })
		gauge("sluice_lso_lag", "High watermark minus last stable offset per hosted partition: committed offsets read_committed consumers cannot read yet.",
			func(i int, _ *cluster.Replica) int64 { return max(offs[i].hw-offs[i].lso, 0) })
		gauge("sluice_open_transactions", "Transactions with data and no marker yet per hosted partition.",
			func(_ int, part *cluster.Replica) int64 { return int64(part.OpenTransactions()) })
		now := time.Now()
		gauge("sluice_oldest_open_transaction_age_ms", "Milliseconds since the oldest transaction still open in each hosted partition appended its first batch here (0 when none is open); it holds the last stable offset back.",
			func(_ int, part *cluster.Replica) int64 {
				if start, ok := part.OldestOpenTransactionStart(); ok {
					return max(now.Sub(start).Milliseconds(), 0)
				}
				return 0
			})
		// KIP-664: transactions open longer than the maximum timeout are
		// likely hanging (the log names each, see
		// cluster.ReplicaManager.LogLateTransactions).
		late := map[cluster.TopicPartition]int64{}
		for _, lt := range n.replicas.LateTransactions(now) {
			late[lt.TopicPartition]++
		}
		gauge("sluice_late_transactions", "Transactions open longer than transaction.max.timeout.ms per hosted partition: likely hanging (sluice txn find-hanging).",
			func(_ int, part *cluster.Replica) int64 { return late[part.TopicPartition] })
		fmt.Fprintf(w, "# HELP sluice_partitions_with_late_transactions Hosted partitions holding a transaction open longer than transaction.max.timeout.ms (Kafka's PartitionsWithLateTransactionsCount).\n# TYPE sluice_partitions_with_late_transactions gauge\nsluice_partitions_with_late_transactions %d\n", len(late))
		var maxActive int64
		for _, part := range parts {
			if start, ok := part.OldestOpenTransactionStart(); ok {
				maxActive = max(maxActive, now.Sub(start).Milliseconds())
			}
		}
		fmt.Fprintf(w, "# HELP sluice_max_active_transaction_duration_ms Milliseconds the longest transaction open on any hosted partition has been open (0 when none).\n# TYPE sluice_max_active_transaction_duration_ms gauge\nsluice_max_active_transaction_duration_ms %d\n", maxActive)
		gauge("sluice_producer_ids", "Producer ids with idempotence state per hosted partition.",
			func(_ int, part *cluster.Replica) int64 { return int64(part.ProducerCount()) })
		// The log cleaner (compacted topics; Kafka's LogCleaner metrics).
		cs := n.replicas.CleanerStats()
		for _, c := range []struct {
			name, typ, help string
			value           string
		}{
			{"sluice_log_cleaner_runs_total", "counter", "Cleaning passes that rewrote segments of a compacted partition.", strconv.FormatInt(cs.Runs, 10)},
			{"sluice_log_cleaner_bytes_read_total", "counter", "Segment bytes the log cleaner read and rewrote.", strconv.FormatInt(cs.BytesRead, 10)},
			{"sluice_log_cleaner_bytes_written_total", "counter", "Segment bytes the log cleaner wrote.", strconv.FormatInt(cs.BytesWritten, 10)},
			{"sluice_log_cleaner_records_removed_total", "counter", "Records the log cleaner removed (superseded keys, expired tombstones, aborted data).", strconv.FormatInt(cs.RecordsRemoved, 10)},
			{"sluice_log_cleaner_failures_total", "counter", "Cleaning passes that failed (logged).", strconv.FormatInt(cs.Failures, 10)},
			{"sluice_log_cleaner_last_duration_ms", "gauge", "Duration of the last cleaning pass.", strconv.FormatInt(cs.LastDuration.Milliseconds(), 10)},
			{"sluice_log_cleaner_max_dirty_ratio", "gauge", "Largest dirty ratio of a compacted partition at the last check.", strconv.FormatFloat(cs.MaxDirtyRatio, 'g', 4, 64)},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", c.name, c.help, c.name, c.typ, c.name, c.value)
		}
	})
	if n.cfg.FaultInjection {
		n.faults.register(mux)
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// writeTxnCoordinatorMetrics writes the transaction coordinator's gauges,
// one series per __transaction_state partition this node leads (label
// partition): open transactions (ids in Ongoing or Prepare*), pending
// markers (ids in Prepare*, whose markers are being written), and how
// long the partition's last load took.
func (n *Node) writeTxnCoordinatorMetrics(w io.Writer) {
	if n.txnCoord == nil {
		return
	}
	stats := n.txnCoord.Stats()
	gauge := func(name, help string, value func(s coordinator.PartitionStats) string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for _, s := range stats {
			fmt.Fprintf(w, "%s{partition=\"%s\"} %s\n", name, strconv.Itoa(int(s.Partition)), value(s))
		}
	}
	gauge("sluice_txn_coordinator_open_transactions", "Transactional ids with an open transaction (Ongoing, PrepareCommit, PrepareAbort) per __transaction_state partition this node coordinates.",
		func(s coordinator.PartitionStats) string { return strconv.Itoa(s.OpenTransactions) })
	gauge("sluice_txn_coordinator_pending_markers", "Transactions whose COMMIT/ABORT markers are being written (PrepareCommit, PrepareAbort) per __transaction_state partition this node coordinates.",
		func(s coordinator.PartitionStats) string { return strconv.Itoa(s.PendingMarkers) })
	gauge("sluice_txn_coordinator_loading", "1 while this node loads the __transaction_state partition it now leads, else 0.",
		func(s coordinator.PartitionStats) string {
			if s.Loading {
				return "1"
			}
			return "0"
		})
	gauge("sluice_txn_coordinator_load_seconds", "How long the last load of each __transaction_state partition this node leads took (0 while loading).",
		func(s coordinator.PartitionStats) string {
			return strconv.FormatFloat(s.LoadTime.Seconds(), 'f', -1, 64)
		})
}

// maxGroupLagSeries bounds the sluice_consumer_group_lag series one
// scrape writes (docs/operations.md): groups × partitions can be large.
const maxGroupLagSeries = 1000

// writeGroupCoordinatorMetrics writes the group coordinator's metrics:
// per __consumer_offsets partition this node leads, groups by state,
// whether it loads and how long its last load took; the rebalance count;
// and per group and partition the lag of its committed offset behind the
// partition's last stable offset, for partitions hosted on this node
// (read_committed consumers stop at the LSO, so lag to the HW would show
// aborted records and markers as lag), at most maxGroupLagSeries series.
func (n *Node) writeGroupCoordinatorMetrics(w io.Writer) {
	if n.groupCoord == nil {
		return
	}
	stats, rebalances, offs := n.groupCoord.Stats()
	fmt.Fprintf(w, "# HELP sluice_group_coordinator_groups Consumer groups per state per __consumer_offsets partition this node coordinates.\n# TYPE sluice_group_coordinator_groups gauge\n")
	for _, s := range stats {
		for _, st := range slices.Sorted(maps.Keys(s.Groups)) {
			fmt.Fprintf(w, "sluice_group_coordinator_groups{partition=\"%s\",state=%q} %d\n", strconv.Itoa(int(s.Partition)), st, s.Groups[st])
		}
	}
	fmt.Fprintf(w, "# HELP sluice_group_coordinator_loading 1 while this node loads the __consumer_offsets partition it now leads, else 0.\n# TYPE sluice_group_coordinator_loading gauge\n")
	for _, s := range stats {
		v := 0
		if s.Loading {
			v = 1
		}
		fmt.Fprintf(w, "sluice_group_coordinator_loading{partition=\"%s\"} %d\n", strconv.Itoa(int(s.Partition)), v)
	}
	fmt.Fprintf(w, "# HELP sluice_group_coordinator_load_seconds How long the last load of each __consumer_offsets partition this node leads took (0 while loading).\n# TYPE sluice_group_coordinator_load_seconds gauge\n")
	for _, s := range stats {
		fmt.Fprintf(w, "sluice_group_coordinator_load_seconds{partition=\"%s\"} %s\n", strconv.Itoa(int(s.Partition)), strconv.FormatFloat(s.LoadTime.Seconds(), 'f', -1, 64))
	}
	fmt.Fprintf(w, "# HELP sluice_group_rebalances_total Group epoch bumps (membership, subscription or metadata changes) this node has written as coordinator.\n# TYPE sluice_group_rebalances_total counter\nsluice_group_rebalances_total %d\n", rebalances)
	fmt.Fprintf(w, "# HELP sluice_consumer_group_lag Last stable offset minus the group's committed offset, per group and partition hosted on this node (at most %d series).\n# TYPE sluice_consumer_group_lag gauge\n", maxGroupLagSeries)
	series := 0
	for _, g := range offs {
		for _, tp := range slices.SortedFunc(maps.Keys(g.Offsets), func(a, b offsets.TopicPartition) int {
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
			fmt.Fprintf(w, "sluice_consumer_group_lag{group=%q,topic=%q,partition=\"%s\"} %d\n", g.Group, tp.Topic, strconv.Itoa(int(tp.Partition)), max(p.LastStableOffset()-g.Offsets[tp], 0))
		}
	}
}
