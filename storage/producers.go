package storage

import (
	"iter"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// The log's idempotent-producer state (DESIGN §9): the pure rules are in
// producerstate.go; this file keeps one ProducerState per log, checked and
// updated under appendMu on every append, snapshotted at each segment roll
// and at clean shutdown as <offset>.snapshot, and rebuilt on open and after
// truncation from the latest snapshot at or below the log end plus the
// batch headers after it. A missing or corrupt snapshot falls back to an
// older one, or to a scan of the whole log.

// loadProducers rebuilds the producer state for the recovered log, and
// with it the aborted-transaction indexes recovery could not trust, and
// publishes the first unstable offset. Called by Open before the log is
// shared.
func (l *Log) loadProducers() error {
	if l.txnRebuildFrom < 0 {
		l.producers = l.rebuildProducers(l.active().next)
	} else {
		st, err := l.rebuildTxnIndexes(l.txnRebuildFrom)
		if err != nil {
			return err
		}
		l.producers = st
	}
	l.txnRebuildFrom = -1
	l.firstUnstable = l.producerFirstUnstable()
	return nil
}

// rebuildProducers returns the producer state at offset end: the newest
// readable snapshot at or below end, then every batch header from there.
// Unreadable snapshots are deleted. The caller holds appendMu (or runs
// before the log is shared).
func (l *Log) rebuildProducers(end int64) *ProducerState {
	offsets := l.snapshotOffsets()
	for {
		at, ok := LatestSnapshotOffset(offsets, end)
		if !ok {
			break
		}
		path := filepath.Join(l.dir, SnapshotFileName(at))
		data, err := os.ReadFile(path)
		var st *ProducerState
		if err == nil {
			st, err = LoadSnapshot(data)
		}
		if err != nil {
			// Only an unreadable snapshot is discarded; a failed replay is
			// the log's problem, not the snapshot's.
			_ = os.Remove(path)
			offsets = slices.DeleteFunc(offsets, func(o int64) bool { return o == at })
			continue
		}
		l.producerErr = l.replay(st, at, end)
		st.SetMaxProducers(DefaultMaxProducers)
		return st
	}
	st := NewProducerState(DefaultMaxProducers)
	l.producerErr = l.replay(st, l.startOffset, end)
	return st
}

// ProducerStateError reports why the last rebuild of the producer state
// stopped early (a batch header in the log that cannot be replayed), or
// nil. The state then holds the batches before it: retries of later
// batches may not be recognised as duplicates. The caller logs it.
func (l *Log) ProducerStateError() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	return l.producerErr
}

// snapshotOffsets lists the offsets of the snapshot files in the log dir.
func (l *Log) snapshotOffsets() []int64 {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil
	}
	var out []int64
	for _, e := range entries {
		if off, ok := ParseSnapshotFileName(e.Name()); ok {
			out = append(out, off)
		}
	}
	slices.Sort(out)
	return out
}

// logBatch is one batch found by scanBatches.
type logBatch struct {
	seg *segment
	h   batch.Header
	// mk is the marker record of a marker (a control batch of a producer
	// id > 0); zero for other batches.
	mk markerInfo
}

// scanBatches iterates over the batches with offsets in [from, end), in
// order, reading their headers and, for markers, their one record. A
// marker whose bytes cannot be read is yielded without its record
// (mk.ok false) and the first such error is kept in *readErr.
func (l *Log) scanBatches(from, end int64, readErr *error) iter.Seq[logBatch] {
	return func(yield func(logBatch) bool) {
		for _, s := range l.segments {
			if s.next <= from || s.base >= end {
				continue
			}
			for pos := int64(0); pos < s.size; {
				h, n, err := s.peek(pos, s.size)
				if err != nil {
					break
				}
				at := pos
				pos += int64(n)
				if h.LastOffset() < from {
					continue
				}
				if h.BaseOffset >= end {
					return
				}
				lb := logBatch{seg: s, h: h}
				if h.IsControl() && h.ProducerID > 0 {
					buf := make([]byte, n)
					_, err := s.log.ReadAt(buf, at)
					if err == nil {
						var b []byte
						if b, _, err = batch.NextFrame(buf); err == nil {
							lb.mk = readMarker(b)
						}
					}
					if err != nil && *readErr == nil {
						*readErr = err
					}
				}
				if !yield(lb) {
					return
				}
			}
		}
	}
}

// replay applies the log's batches in [from, end) to st (ReplayBatches,
// with the markers' coordinator epochs). The caller holds appendMu (or
// runs before the log is shared).
func (l *Log) replay(st *ProducerState, from, end int64) error {
	var readErr error
	return ReplayBatches(st, func(yield func(ReplayBatch) bool) {
		for lb := range l.scanBatches(from, end, &readErr) {
			if !yield(ReplayBatch{Header: lb.h, CoordinatorEpoch: lb.mk.epoch()}) {
				return
			}
		}
	})
}

// writeProducerSnapshot writes the state as of the log end offset. The
// caller holds appendMu.
func (l *Log) writeProducerSnapshot() error {
	if l.producers == nil {
		return nil
	}
	end := l.active().next
	if err := WriteFileAtomic(filepath.Join(l.dir, SnapshotFileName(end)), l.producers.Snapshot()); err != nil {
		return err
	}
	l.deleteStaleSnapshots()
	return nil
}

// deleteStaleSnapshots removes snapshots no rebuild can use any more.
func (l *Log) deleteStaleSnapshots() {
	for _, off := range StaleSnapshots(l.snapshotOffsets(), l.startOffset, l.active().next) {
		_ = os.Remove(filepath.Join(l.dir, SnapshotFileName(off)))
	}
}

// producersTruncated brings the producer state in line with a log
// truncated to end: snapshots above it are deleted, then the state is cut
// in place when that is exact or rebuilt otherwise; full (the log was
// emptied and restarted) forgets every producer. The caller holds
// appendMu.
func (l *Log) producersTruncated(end int64, full bool) {
	for _, off := range l.snapshotOffsets() {
		if off > end || full {
			_ = os.Remove(filepath.Join(l.dir, SnapshotFileName(off)))
		}
	}
	if full {
		// No marker of the old log is left.
		defer l.publishTxnState(math.MinInt64)
	} else {
		defer l.publishTxnState(end)
	}
	if full {
		// Nothing of the old log is left to remember.
		l.producers = NewProducerState(DefaultMaxProducers)
		return
	}
	if l.producers != nil && l.producers.TruncateTo(end) {
		return
	}
	l.producers = l.rebuildProducers(end)
}

// checkProducer applies the idempotence rules to a batch a producer sent
// (Append): an error to refuse it, or a duplicate decision. The caller
// holds appendMu.
func (l *Log) checkProducer(h batch.Header) (BatchInfo, Decision, error) {
	return l.checkProducerVersion(h, false)
}

// checkProducerVersion is checkProducer for a batch whose producer
// speaks transaction version 1 when tv1 (BatchInfo.TV1).
func (l *Log) checkProducerVersion(h batch.Header, tv1 bool) (BatchInfo, Decision, error) {
	info, err := BatchInfoFromHeader(h)
	if err != nil || info.ProducerID <= 0 {
		return info, Decision{}, err
	}
	info.TV1 = tv1 && info.IsTransactional
	d, err := l.producers.Check(info)
	return info, d, err
}

// updateProducer records an appended batch (mk: its marker record, if a
// marker) appended at now. The caller holds appendMu.
func (l *Log) updateProducer(h batch.Header, mk markerInfo, now time.Time) {
	info, err := BatchInfoFromHeader(h)
	if err != nil || info.ProducerID <= 0 {
		return
	}
	info.CoordinatorEpoch = mk.epoch()
	info.AppendTime = now.UnixMilli()
	l.producers.Update(info, h.BaseOffset, h.LastOffset(), h.MaxTimestamp)
}

// ExpireProducers drops producers idle for expiration
// (producer.id.expiration.ms) and returns how many.
func (l *Log) ExpireProducers(now time.Time, expiration time.Duration) int {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed || l.producers == nil {
		return 0
	}
	return l.producers.ExpireBefore(now, expiration)
}

// ProducerCount is the number of producer ids with state in this log.
func (l *Log) ProducerCount() int {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.producers == nil {
		return 0
	}
	return l.producers.Len()
}

// OpenTransactions is the number of transactions open in this log: data
// of a producer id appended and its marker not yet (the producer state's
// OpenTxnCount). A transaction whose marker is appended but not yet below
// the high watermark is not counted, though it still holds the last
// stable offset.
func (l *Log) OpenTransactions() int {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.producers == nil {
		return 0
	}
	return l.producers.OpenTxnCount()
}

// Producer returns the state of one producer id, for tests and tools.
func (l *Log) Producer(id int64) (ProducerEntry, bool) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.producers == nil {
		return ProducerEntry{}, false
	}
	return l.producers.Producer(id)
}

// Producers returns a copy of every producer id with state in this log,
// by producer id (ProducerState.Producers): for DescribeProducers.
func (l *Log) Producers() []ProducerEntry {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.producers == nil {
		return nil
	}
	return l.producers.Producers()
}
