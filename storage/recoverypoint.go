package storage

import (
	"errors"
	"os"
	"path/filepath"
)

// The recovery point (decision 57): every byte of the log below it is on
// disk, so recovery after a crash scans only the segments past it
// (recovery.go). As in Kafka, it advances whenever the log knows more is
// on disk — when the background fsync of a rolled segment finishes
// (syncSealed), and at every flush (flush.messages, flush.ms, Flush,
// Close) — and is lowered, durably, before a truncation removes data.
//
// It lives in memory (Log.recoveryPoint) and is checkpointed in one of
// two places:
//
//   - with Options.RecoveryPoints, the data directory's shared
//     RecoveryPointFile: the log records its value there in memory at
//     every advance, and the checkpoint's owner writes the file on an
//     interval and after closing the logs (one write for every log of the
//     directory, only when one changed);
//   - else the log's own recoveryPointFile, written at each flush (as
//     before the shared file existed; storage used alone, tests).
//
// Either way a crash restores a value at or below the true one: what was
// checkpointed was on disk when it was.

// rpStore is the shared checkpoint the log records its recovery point
// in, and its name there; nil when it writes its own file.
func (l *Log) rpStore() (*OffsetCheckpoint, string) {
	if l.ckptName == "" || l.opts.RecoveryPoints == nil {
		return nil, ""
	}
	return l.opts.RecoveryPoints, l.ckptName
}

// rpPath is where the log's recovery point is written, for errors.
func (l *Log) rpPath() string {
	if store, _ := l.rpStore(); store != nil {
		return store.Path()
	}
	return filepath.Join(l.dir, recoveryPointFile)
}

// loadRecoveryPoint returns the checkpointed recovery point (0 when there
// is none). With a shared checkpoint the log's entry there wins; a log
// without one reads its own file (written before the shared file
// existed), whose value moves to the shared file at its next Flush.
func (l *Log) loadRecoveryPoint() int64 {
	store, name := l.rpStore()
	if store != nil {
		if v, ok := store.Get(name); ok {
			return v
		}
	}
	v, err := readCheckpoint(filepath.Join(l.dir, recoveryPointFile))
	if err != nil {
		if store == nil && errors.Is(err, os.ErrNotExist) {
			l.rpWritten = 0 // no file reads as 0
		}
		return 0
	}
	if store != nil {
		store.setLegacy(name, v)
	} else {
		l.rpWritten = v
	}
	return v
}

// fitRecoveryPoint sets the recovery point of the log just recovered from
// the checkpointed value ckpt (Kafka's LogLoader does the same): after a
// clean shutdown everything is on disk, so the log end offset; otherwise
// ckpt, but never past the log end (the bytes a recovery scan verified
// may still be only in the page cache: the next roll or flush syncs
// them). A checkpoint past the recovered end is lowered durably now, so
// that no later crash trusts the bytes appended there. Open calls it
// before the log is shared.
func (l *Log) fitRecoveryPoint(ckpt int64, clean bool) error {
	end := l.active().next
	rp := min(ckpt, end)
	if clean {
		rp = end
	}
	l.recoveryPoint, l.syncsTo = rp, rp
	if ckpt > rp {
		return l.writeRecoveryPoint(rp, true)
	}
	if store, name := l.rpStore(); store != nil && rp != ckpt {
		store.Set(name, rp)
	}
	return nil
}

// writeRecoveryPoint checkpoints v, the recovery point: in memory in the
// shared checkpoint (and, if durable, flushed before returning), or in
// the log's own file unless it already holds v. The caller holds rpMu or
// runs before the log is shared.
func (l *Log) writeRecoveryPoint(v int64, durable bool) error {
	if store, name := l.rpStore(); store != nil {
		store.Set(name, v)
		if durable {
			return store.Flush(l.opts.Faults)
		}
		return nil
	}
	if l.rpWritten == v {
		return nil
	}
	path := filepath.Join(l.dir, recoveryPointFile)
	err := l.inject(OpWrite, path)
	if err == nil {
		err = writeCheckpoint(path, v)
	}
	if err != nil {
		l.rpWritten = -1 // the temp file may be all that changed; unknown
		return err
	}
	l.rpWritten = v
	return nil
}

// RecoveryPoint is the offset below which every byte of the log is known
// to be on disk; recovery after a crash scans only what is past the
// checkpointed value.
func (l *Log) RecoveryPoint() int64 {
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	return l.recoveryPoint
}

// advanceRecoveryPoint raises the recovery point to v (everything below
// it was just synced): in memory, and in the shared checkpoint if the log
// has one; a log with its own file writes it at its next flush.
func (l *Log) advanceRecoveryPoint(v int64) {
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	if v <= l.recoveryPoint {
		return
	}
	l.recoveryPoint = v
	if store, name := l.rpStore(); store != nil {
		store.Set(name, v)
	}
}

// lowerRecoveryPointLocked moves the recovery point down to v when it is
// above, durably before returning: a truncation calls it before it
// removes data, so that no crash after the cut trusts bytes appended
// later below the old value without a scan. Background fsyncs are waited
// for first (one finishing later would raise it again). The caller holds
// appendMu.
func (l *Log) lowerRecoveryPointLocked(v int64) error {
	l.sealedSyncs.Wait()
	l.syncsTo = min(l.syncsTo, v)
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	// What is written never exceeds the value in memory (only this
	// lowers it, durably); a failed write of the log's own file leaves it
	// unknown (-1), and then it is written again.
	if store, _ := l.rpStore(); l.recoveryPoint <= v && (store != nil || l.rpWritten >= 0) {
		return nil
	}
	l.recoveryPoint = min(l.recoveryPoint, v)
	return l.writeRecoveryPoint(l.recoveryPoint, true)
}

// segmentsFromLocked returns the segments that may hold bytes at or past
// offset from, in order, up to and including upTo: those a sync must
// cover to make everything below upTo's end durable once everything below
// from is. The caller holds appendMu.
func (l *Log) segmentsFromLocked(from int64, upTo *segment) []*segment {
	var out []*segment
	for _, s := range l.segments {
		if s.next > from || s.base >= from {
			out = append(out, s)
		}
		if s == upTo {
			break
		}
	}
	return out
}

// syncSegments fsyncs segs (their files written since their last fsync),
// stopping at the first failure, which takes the log offline (the error
// returned is offlineErr). A segment closed meanwhile (retention, a
// cleaner swap) has nothing left to sync; closedOK says whether that is
// fine (not for the current segments of a flush).
func (l *Log) syncSegments(segs []*segment, closedOK bool) error {
	for _, s := range segs {
		err := l.inject(OpSync, s.path)
		if err == nil {
			err = s.sync()
		}
		if err != nil && !(closedOK && errors.Is(err, os.ErrClosed)) {
			return l.fail(OpSync, s.path, err)
		}
	}
	return nil
}
