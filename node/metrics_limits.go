package node

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/storage"
)

// limitsCollector is the prometheus.Collector of the node's resource
// limits (issue 29; docs/operations.md, "Limits"): the listeners'
// connections and refusals, and the storage operations that ran out of
// file descriptors. Like stateCollector it holds no state; Collect reads
// counters the node's parts keep and may run concurrently with anything.
type limitsCollector struct {
	n *Node

	connections, maxConnections, refused *prometheus.Desc
	storageFDExhausted                   *prometheus.Desc
	// The process's segment-file cache (storage.DefaultFileCache,
	// decision 50): shared by every log of the process.
	filesOpen, filesBudget, fileOpens, fileEvictions *prometheus.Desc
}

func newLimitsCollector(n *Node) *limitsCollector {
	listener := []string{"listener"}
	return &limitsCollector{
		n: n,
		connections: prometheus.NewDesc("sluice_listener_connections",
			"Connections open on the listener (client, internal, http, kafka).", listener, nil),
		maxConnections: prometheus.NewDesc("sluice_listener_max_connections",
			"The listener's connection limit (--max-connections, --internal-max-connections, --http-max-connections, --kafka-max-connections).", listener, nil),
		refused: prometheus.NewDesc("sluice_listener_connections_refused_total",
			"Connections reset as soon as accepted because the listener was at its limit (reason max_connections) or their IP address at its own (max_connections_per_ip).",
			[]string{"listener", "reason"}, nil),
		storageFDExhausted: prometheus.NewDesc("sluice_storage_fd_exhausted_total",
			"Partition log operations (appends, segment rolls, checkpoints, reads, log opens) that failed because the process or the system was out of file descriptors (EMFILE, ENFILE). The partition stays online and the operation is retried; the log says which limit was reached.",
			nil, nil),
		filesOpen: prometheus.NewDesc("sluice_storage_segment_files_open",
			"Segment files (.log, .index, .timeindex, .txnindex) the process holds open through its file cache; may exceed the budget by the files in use at that instant (docs/design.md decision 50).",
			nil, nil),
		filesBudget: prometheus.NewDesc("sluice_storage_segment_files_budget",
			"The file cache's budget of open segment files: a quarter of the open-files limit.",
			nil, nil),
		fileOpens: prometheus.NewDesc("sluice_storage_segment_file_opens_total",
			"Segment files opened by the file cache, first opens and reopens after an eviction.",
			nil, nil),
		fileEvictions: prometheus.NewDesc("sluice_storage_segment_file_evictions_total",
			"Segment files the file cache closed to stay within its budget; a rate close to the read rate means the budget is too small for the partitions read.",
			nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connections, c.maxConnections, c.refused, c.storageFDExhausted,
		c.filesOpen, c.filesBudget, c.fileOpens, c.fileEvictions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.n.limited {
		if l == nil {
			continue // no HTTP or Kafka listener, or not started
		}
		name := l.kind.String()
		gauge(ch, c.connections, float64(l.connections()), name)
		gauge(ch, c.maxConnections, float64(l.limit.Max), name)
		constMetric(ch, c.refused, prometheus.CounterValue, float64(l.refusedMax.Load()), name, refusedMax)
		constMetric(ch, c.refused, prometheus.CounterValue, float64(l.refusedPerIP.Load()), name, refusedPerIP)
	}
	if r := c.n.replicas; r != nil {
		constMetric(ch, c.storageFDExhausted, prometheus.CounterValue, float64(r.ResourceErrors()))
	}
	fc := storage.DefaultFileCache()
	gauge(ch, c.filesOpen, float64(fc.Open()))
	gauge(ch, c.filesBudget, float64(fc.Budget()))
	constMetric(ch, c.fileOpens, prometheus.CounterValue, float64(fc.Opens()))
	constMetric(ch, c.fileEvictions, prometheus.CounterValue, float64(fc.Evictions()))
}
