package storage

import (
	"path/filepath"
	"time"
)

// EnforceRetention deletes whole segments, oldest first, while the oldest
// is past retention.ms (its newest record older than now - retention.ms)
// or the log is over retention.bytes without it. The active segment is
// never deleted. The log start offset moves to the first remaining
// segment and is checkpointed. It returns how many segments were deleted.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, errClosed
	}
	var total int64
	for _, s := range l.segments {
		total += s.size
	}
	deleted := 0
	for len(l.segments) > 1 {
		s := l.segments[0]
		byTime := l.cfg.RetentionMs >= 0 && s.maxTS >= 0 && s.maxTS < now.UnixMilli()-l.cfg.RetentionMs
		bySize := l.cfg.RetentionBytes >= 0 && total-s.size >= l.cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		// Advance the start offset durably before the files go, so a crash
		// in between never exposes offsets that are about to vanish.
		next := l.segments[1].base
		if next > l.startOffset {
			if err := writeCheckpoint(filepath.Join(l.dir, startOffsetFile), next); err != nil {
				return deleted, err
			}
			l.startOffset = next
		}
		l.segments = l.segments[1:]
		total -= s.size
		if err := s.remove(); err != nil {
			return deleted, err
		}
		deleted++
	}
	if deleted > 0 {
		l.notifyLocked()
	}
	return deleted, nil
}
