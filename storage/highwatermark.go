package storage

import (
	"path/filepath"
	"strconv"
	"strings"
)

// The high watermark as storage keeps it: one number per log, persisted
// in high-watermark-checkpoint. Storage only clamps and persists it; the
// rules that move it (minimum log end offset of the ISR on a leader, the
// leader's value on a follower) live in cluster/.

const highWatermarkFile = "high-watermark-checkpoint"

// HighWatermark is the offset below which the log is known to be
// committed (replicated to the ISR). It is within [StartOffset,
// EndOffset].
func (l *Log) HighWatermark() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.hw
}

// SetHighWatermark advances the high watermark to hw clamped to
// [StartOffset, EndOffset]. A value at or below the current one changes
// nothing: the high watermark moves backwards only through TruncateTo or
// TruncateFullyAndStartAt below it. An advance wakes Changed waiters
// (consumer fetches wait for it, not for appends), not DataChanged ones.
// It does not write the checkpoint; see CheckpointHighWatermark. No-op on
// a closed log.
func (l *Log) SetHighWatermark(hw int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	hw = min(max(hw, l.startOffset), l.active().next)
	if hw > l.hw {
		l.hw = hw
		l.replicatedLocked() // the last stable offset may move too
		l.notifyWatermarkLocked()
	}
}

// hwStore is the shared checkpoint the log records its high watermark
// in, and its name there; nil when it writes its own file.
func (l *Log) hwStore() (*OffsetCheckpoint, string) {
	if l.ckptName == "" || l.opts.HighWatermarks == nil {
		return nil, ""
	}
	return l.opts.HighWatermarks, l.ckptName
}

// sharedCheckpointName is the name under which the log in dir records
// its values in the shared checkpoints: dir's name when it is
// "topic-partition" (the checkpoint's lines are "topic partition
// offset"), else "" (the log keeps a file of its own).
func sharedCheckpointName(dir string) string {
	name := filepath.Base(dir)
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || strings.ContainsAny(name, " \t\n") {
		return ""
	}
	if p, err := strconv.ParseInt(name[i+1:], 10, 32); err != nil || p < 0 || strconv.FormatInt(p, 10) != name[i+1:] {
		return ""
	}
	return name
}

// CheckpointHighWatermark records the current high watermark: in the
// shared checkpoint when the log has one (Options.HighWatermarks; memory
// only, its owner's Flush writes it), else durably in the log's own
// high-watermark-checkpoint. Callers run it periodically (Close also
// does); after a crash Open restores the last written value, clamped to
// the recovered log. It may run concurrently with every other method.
func (l *Log) CheckpointHighWatermark() error {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.RLock()
	hw, closed := l.hw, l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return err
	}
	if store, name := l.hwStore(); store != nil {
		store.Set(name, hw)
		return nil
	}
	path := filepath.Join(l.dir, highWatermarkFile)
	err := l.inject(OpWrite, path)
	if err == nil {
		err = writeCheckpoint(path, hw)
	}
	if err != nil {
		// A checkpoint that cannot be written is a disk failure like any
		// other (failure.go): often the first sign of a full disk. Out of
		// file descriptors it is not (resource.go): the old checkpoint
		// stays and the next one tries again.
		return l.fail(OpWrite, path, err)
	}
	return nil
}

// lowerHighWatermarkLocked moves the high watermark down to hw when it is
// above, writing the checkpoint first so that no later crash restores a
// value past data about to be removed. The caller holds appendMu.
func (l *Log) lowerHighWatermarkLocked(hw int64) error {
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.RLock()
	cur := l.hw
	l.mu.RUnlock()
	if cur <= hw {
		return nil
	}
	if store, name := l.hwStore(); store != nil {
		store.Set(name, hw)
		if err := store.Flush(l.opts.Faults); err != nil {
			return err
		}
	} else if err := writeCheckpoint(filepath.Join(l.dir, highWatermarkFile), hw); err != nil {
		return err
	}
	l.mu.Lock()
	l.hw = hw
	l.mu.Unlock()
	return nil
}

// loadHighWatermark sets l.hw when the log opens, after recover: the
// checkpoint clamped to [log start, log end]; a missing or unreadable one
// means the log start offset.
//
// With a shared checkpoint the log's entry there wins; a log without one
// (written before the shared file existed) reads its own file, and the
// value moves to the shared file at its next Flush.
func (l *Log) loadHighWatermark() {
	var hw int64
	store, name := l.hwStore()
	if store != nil {
		var ok bool
		if hw, ok = store.Get(name); !ok {
			var err error
			if hw, err = readCheckpoint(filepath.Join(l.dir, highWatermarkFile)); err == nil {
				store.setLegacy(name, hw)
			}
		}
	} else {
		hw, _ = readCheckpoint(filepath.Join(l.dir, highWatermarkFile)) // 0 when missing
	}
	l.hw = min(max(hw, l.startOffset), l.active().next)
}

// hwPath is where the log's high watermark is written, for errors.
func (l *Log) hwPath() string {
	if store, _ := l.hwStore(); store != nil {
		return store.Path()
	}
	return filepath.Join(l.dir, highWatermarkFile)
}
