package cluster

import (
	"errors"
	"sync"
	"time"

	"github.com/sluice-io/sluice/storage"
)

// DefaultCleanerBackoff is how often compacted partitions are checked for
// cleaning when ReplicaManagerConfig.CleanerBackoff is 0 (Kafka's
// log.cleaner.backoff.ms).
const DefaultCleanerBackoff = 15 * time.Second

// CleanerStats are the log cleaner's totals on this node since it
// started, for /metrics (Kafka's LogCleaner metrics).
type CleanerStats struct {
	Runs           int64 // passes that rewrote segments
	BytesRead      int64
	BytesWritten   int64
	RecordsRemoved int64
	Failures       int64
	// LastDuration is the duration of the last pass (Kafka's
	// time-since-last-run is what operators watch; this is the cost).
	LastDuration time.Duration
	// MaxDirtyRatio is the largest dirty ratio seen in the last check
	// over all compacted partitions (Kafka's max-dirty-percent).
	MaxDirtyRatio float64
}

// cleanerTotals accumulates CleanerStats; guarded by its mutex.
type cleanerTotals struct {
	mu sync.Mutex
	s  CleanerStats
}

// CleanLogs runs the log cleaner once over every hosted partition whose
// cleanup.policy includes compact, leader or follower alike (each replica
// cleans its own copy, as in Kafka; the cleaner only touches what is below
// its high watermark and last stable offset, so the copies stay the same
// offset for offset). Partitions run one after the other: one cleaner
// thread. Close stops a pass in progress (its partial segment is
// discarded).
func (m *ReplicaManager) CleanLogs(now time.Time) {
	maxRatio := 0.0
	for _, p := range m.healthyReplicas() {
		if m.ctx.Err() != nil {
			return // Close: a pass stops at its next batch
		}
		if !p.log.Config().Compacted() {
			continue
		}
		st, err := p.log.Clean(m.ctx, now)
		maxRatio = max(maxRatio, st.DirtyRatio)
		if err != nil {
			// A disk error took the log offline: logged once already (offline.go).
			if !errors.Is(err, storage.ErrClosed) && m.ctx.Err() == nil && !p.Offline() {
				m.log.Error("log cleaner failed", p.LogAttr(), "err", err)
				m.cleaner.mu.Lock()
				m.cleaner.s.Failures++
				m.cleaner.mu.Unlock()
			}
			continue
		}
		if !st.Cleaned {
			continue
		}
		m.cleaner.mu.Lock()
		m.cleaner.s.Runs++
		m.cleaner.s.BytesRead += st.BytesRead
		m.cleaner.s.BytesWritten += st.BytesWritten
		m.cleaner.s.RecordsRemoved += st.RecordsRemoved
		m.cleaner.s.LastDuration = st.Duration
		m.cleaner.mu.Unlock()
		m.log.Info("log cleaner cleaned", p.LogAttr(), "segments_read", st.SegmentsRead, "segments_written", st.SegmentsWritten,
			"bytes_read", st.BytesRead, "bytes_written", st.BytesWritten, "records_removed", st.RecordsRemoved,
			"dirty_ratio", st.DirtyRatio, "first_uncleanable_offset", st.FirstUncleanableOffset, "duration", st.Duration, "raced", st.Raced)
	}
	m.cleaner.mu.Lock()
	m.cleaner.s.MaxDirtyRatio = maxRatio
	m.cleaner.mu.Unlock()
}

// CleanerStats returns the cleaner's totals.
func (m *ReplicaManager) CleanerStats() CleanerStats {
	m.cleaner.mu.Lock()
	defer m.cleaner.mu.Unlock()
	return m.cleaner.s
}
