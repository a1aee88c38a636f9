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
// that are about to vanish. It returns how many segments were deleted.
// Reads racing with a deletion get OFFSET_OUT_OF_RANGE.
func (l *Log) EnforceRetention(now time.Time) (int, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return 0, ErrClosed
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
		next := l.segments[1].base
		if next > l.startOffset {
			if err := writeCheckpoint(filepath.Join(l.dir, startOffsetFile), next); err != nil {
				return deleted, storageErr("checkpoint log start offset: %v", err)
			}
		}
		l.mu.Lock()
		if next > l.startOffset {
			l.startOffset = next
		}
		l.segments = l.segments[1:]
		l.notifyLocked()
		l.mu.Unlock()
		total -= s.size
		deleted++
		if err := s.remove(); err != nil {
			return deleted, storageErr("delete segment %s: %v", s.path, err)
		}
	}
	return deleted, nil
}
