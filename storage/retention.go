package storage

import (
	"path/filepath"
	"time"
)

// EnforceRetention deletes whole segments, oldest first, while the oldest
// is past retention.ms (its newest record's timestamp is older than now -
// retention.ms) or the log without it would still hold at least
// retention.bytes (Kafka's rule). The active segment is never deleted, and
// retention never rolls it (rolling happens on append). The log start
// offset moves to the first remaining segment's base and is checkpointed
// before any file is removed, so a crash in between never exposes offsets
// that are about to vanish. The leader-epoch cache is trimmed to the new
// start (entries wholly below it dropped, the first kept one moved up to
// it). Only segments wholly below the high watermark are deleted:
// retention never removes records that are not committed yet. It returns
// how many segments were deleted. Reads racing with a deletion get
// OFFSET_OUT_OF_RANGE. With cleanup.policy=compact alone nothing is
// deleted (the cleaner bounds the log, cleaner.go); compact,delete applies
// both.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return 0, err
	}
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	l.mu.RLock()
	hw := l.hw
	l.mu.RUnlock()
	deleted, epochsTrimmed := 0, false
	for len(l.segments) > 1 {
		s := l.segments[0]
		if l.segments[1].base > hw {
			// Some of its records are not committed yet (a follower may
			// still need them): only segments wholly below the high
			// watermark are deleted, as in Kafka.
			break
		}
		if !l.cfg.Deletes() {
			// cleanup.policy=compact: the cleaner, not retention, bounds
			// the log.
			break
		}
		byTime := l.cfg.RetentionMs >= 0 && s.maxTS >= 0 && s.maxTS < now.UnixMilli()-l.cfg.RetentionMs
		bySize := l.cfg.RetentionBytes >= 0 && total-s.size >= l.cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		next := l.segments[1].base
		if next > l.startOffset {
			if err := writeCheckpoint(filepath.Join(l.dir, startOffsetFile), next); err != nil {
				return deleted, l.fileErr("checkpoint log start offset", OpWrite, filepath.Join(l.dir, startOffsetFile), err)
			}
		}
		l.mu.Lock()
		if next > l.startOffset {
			l.startOffset = next // <= hw: only segments below it go
			var trimmed bool
			l.epochs, trimmed = l.epochs.truncateFromStart(next)
			epochsTrimmed = epochsTrimmed || trimmed
		}
		l.segments = l.segments[1:]
		l.notifyLocked()
		l.mu.Unlock()
		total -= s.size
		deleted++
		if err := s.remove(); err != nil {
			return deleted, l.fileErr("delete segment "+s.path, OpTruncate, s.path, err)
		}
	}
	if deleted > 0 {
		l.deleteStaleSnapshots()
	}
	if epochsTrimmed {
		// The checkpoint may lag: Open trims it to the start offset again.
		if err := l.writeEpochs(l.epochs); err != nil {
			return deleted, l.fileErr("checkpoint leader epochs", OpWrite, filepath.Join(l.dir, epochCheckpointFile), err)
		}
	}
	return deleted, nil
}
