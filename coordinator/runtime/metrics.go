package runtime

import (
	"slices"
	"sync/atomic"
	"time"
)

// LatencyBuckets are the upper bounds, in seconds, of Histogram's buckets
// (an append to a replicated partition takes from well under a
// millisecond on one node to AppendTimeout when the ISR is slow).
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Histogram counts durations in LatencyBuckets; safe for concurrent use,
// lock-free. The zero value is ready.
type Histogram struct {
	counts [15]atomic.Uint64 // one per bucket, the last for +Inf
	count  atomic.Uint64
	sumNs  atomic.Int64
}

// Observe counts one duration.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	i, _ := slices.BinarySearch(LatencyBuckets, s)
	h.counts[i].Add(1)
	h.count.Add(1)
	h.sumNs.Add(int64(d))
}

// HistogramSnapshot is a Histogram's counts at one moment, in Prometheus'
// shape: Buckets maps each upper bound of LatencyBuckets to the number of
// durations at or below it (cumulative).
type HistogramSnapshot struct {
	Count   uint64
	Sum     time.Duration
	Buckets map[float64]uint64
}

// Snapshot returns h's counts (each read atomically; a concurrent Observe
// may be half counted, which a scrape tolerates).
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Count: h.count.Load(), Sum: time.Duration(h.sumNs.Load()), Buckets: make(map[float64]uint64, len(LatencyBuckets))}
	var cum uint64
	for i, b := range LatencyBuckets {
		cum += h.counts[i].Load()
		s.Buckets[b] = cum
	}
	return s
}

// PartitionStats describes one led partition, for metrics.
type PartitionStats struct {
	Partition int32
	Loading   bool
	// LoadTime is how long its load took (0 while loading).
	LoadTime time.Duration
	// QueueDepth counts the requests and timers holding or waiting for
	// one of its keys.
	QueueDepth int
}

// StatsLocked returns one PartitionStats per led partition, unsorted
// (Config.Mu held).
func (r *Runtime[S]) StatsLocked() []PartitionStats {
	out := make([]PartitionStats, 0, len(r.partitions))
	for n, s := range r.partitions {
		p := s.Base()
		out = append(out, PartitionStats{Partition: n, Loading: p.loading, LoadTime: p.loadTime, QueueDepth: p.QueueDepth()})
	}
	return out
}

// AppendLatency is the distribution of the runtime's appends' times, from
// the call to the commit or the failure.
func (r *Runtime[S]) AppendLatency() HistogramSnapshot { return r.appendLatency.Snapshot() }
