package storage

import "path/filepath"

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

// CheckpointHighWatermark durably writes the current high watermark to
// high-watermark-checkpoint. Callers run it periodically (Close also
// does); after a crash Open restores the last checkpointed value, clamped
// to the recovered log. It may run concurrently with every other method.
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
	if err := writeCheckpoint(filepath.Join(l.dir, highWatermarkFile), hw); err != nil {
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
func (l *Log) loadHighWatermark() {
	hw, _ := readCheckpoint(filepath.Join(l.dir, highWatermarkFile)) // 0 when missing
	l.hw = min(max(hw, l.startOffset), l.active().next)
}
