package storage

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Truncation: a follower removing the suffix where its log diverges from
// the leader's (KIP-101/279), or starting over at the leader's log start.
//
// Crash safety of TruncateTo. The steps are ordered so that one step
// decides the outcome, and a crash before it recovers the log untruncated
// and after it truncated:
//
//  1. the high-watermark checkpoint is lowered to offset (if above), the
//     leader-epoch checkpoint truncated, and the recovery-point checkpoint
//     lowered to offset (if above). Each is safe on the untruncated log: a
//     lower high watermark or recovery point only costs work, and an epoch
//     checkpoint missing the entries of batches still present is detected
//     and rebuilt by Open.
//  2. the segment holding offset is cut (.log truncated) and fsynced: the
//     deciding step. From here recovery finds that segment ending at offset
//     while the next one starts later (the recovery point is at most
//     offset, so it rescans it instead of trusting its indexes) and drops
//     every later segment as it does after a torn write.
//  3. its .index and .timeindex are cut, and the later segments are deleted,
//     the last first; then the recovery point is set to offset.

// TruncateTo removes every batch holding offsets >= offset, leaving the
// log appendable at offset. offset must be in [StartOffset, EndOffset]
// (else OFFSET_OUT_OF_RANGE) and a batch boundary, that is the base offset
// of a stored batch or EndOffset (else INVALID_REQUEST); on these errors
// nothing changes. It deletes the segments after the one holding offset,
// cuts that one (log and indexes), drops the epoch-cache entries starting
// at or after offset (also when offset is EndOffset), lowers the high
// watermark to offset if it was above, and wakes Changed waiters. Reads
// racing with it either see the old log or are retried on the new one.
// File errors are KAFKA_STORAGE_ERROR.
func (l *Log) TruncateTo(offset int64) (err error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	var changed bool // the segments were cut
	defer func() {
		// A checkpoint after the cut that found no file descriptor
		// (resource.go) leaves the log online and cut: its producer
		// state must follow.
		if (err == nil || changed && IsResourceError(err)) && !l.closed {
			l.producersTruncated(l.active().next, false)
		}
	}()
	if l.closed {
		return ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return err
	}
	start, end := l.startOffset, l.active().next
	if offset < start || offset > end {
		return errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, "truncation offset %d is outside the log [%d, %d]", offset, start, end)
	}
	seg, pos := len(l.segments)-1, l.active().size
	if offset < end {
		i, p, ok := l.locate(offset)
		if !ok {
			return storageErr("truncate to %d: no batch found holding it", offset)
		}
		h, _, err := l.segments[i].peek(p, l.segments[i].size)
		if err != nil {
			return l.fileErr(fmt.Sprintf("truncate to %d: read %s", offset, l.segments[i].path), OpRead, l.segments[i].path, err)
		}
		if h.BaseOffset != offset {
			return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "truncation offset %d is inside the batch [%d, %d]", offset, h.BaseOffset, h.LastOffset())
		}
		seg, pos = i, p
	}

	if err := l.lowerHighWatermarkLocked(offset); err != nil {
		return l.fileErr("checkpoint high watermark", OpWrite, l.hwPath(), err)
	}
	l.crashPoint("high watermark lowered")
	epochs, epochsChanged := l.epochs.truncateFromEnd(offset)
	if epochsChanged {
		if err := l.writeEpochs(epochs); err != nil {
			return l.fileErr("checkpoint leader epochs", OpWrite, filepath.Join(l.dir, epochCheckpointFile), err)
		}
		l.crashPoint("epochs truncated")
	}
	if offset == end {
		if epochsChanged {
			l.mu.Lock()
			l.epochs = epochs
			l.notifyLocked()
			l.mu.Unlock()
		}
		return nil
	}
	if l.RecoveryPoint() > offset {
		if err := l.lowerRecoveryPointLocked(offset); err != nil {
			return l.fileErr("checkpoint recovery point", OpWrite, l.rpPath(), err)
		}
		l.crashPoint("recovery point lowered")
	}

	if err := l.lowerCleanerCheckpoint(offset); err != nil {
		return l.fileErr("checkpoint cleaner offset", OpWrite, filepath.Join(l.dir, cleanerCheckpointFile), err)
	}

	// Readers snapshot segment state under mu and read files without it:
	// holding mu across the cut means no reader snapshots a half-cut log,
	// and the generation tells readers already in flight to retry.
	l.mu.Lock()
	l.truncations++
	cut, err := l.cutLocked(seg, pos, offset)
	changed = cut
	if cut {
		l.epochs = epochs
		l.notifyLocked()
	}
	l.mu.Unlock()
	if err != nil {
		return l.fileErr(fmt.Sprintf("truncate to %d", offset), OpTruncate, l.dir, err)
	}
	l.crashPoint("cut done")
	// The recovery point was lowered to the cut before it, if above; it
	// is not raised to it (the bytes between it and the cut may not be
	// synced).
	return nil
}

// crashPoint calls the test hook, if any, between two steps of a
// truncation whose files a crash could leave as they are now.
func (l *Log) crashPoint(step string) {
	if l.truncateHook != nil {
		l.truncateHook(step)
	}
}

// cutLocked truncates segment seg at file position pos (the frame of the
// batch at offset, or its size) and drops the later segments, in the
// order the crash-safety note above requires. cut is false when nothing
// changed (the .log truncation itself failed); once the .log is cut the
// in-memory log follows it even if a later step fails. The caller holds
// appendMu and mu exclusively.
func (l *Log) cutLocked(seg int, pos, offset int64) (cut bool, err error) {
	s := l.segments[seg]
	if err := s.log.Truncate(pos); err != nil {
		return false, err
	}
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	keep(s.log.Sync())
	l.crashPoint("log cut")
	keep(s.cut(pos, offset))
	keep(s.truncateIndexFiles())
	keep(s.idxFile.Sync())
	keep(s.timeIdx.Sync())
	l.crashPoint("indexes cut")
	later := l.segments[seg+1:]
	for i := len(later) - 1; i >= 0; i-- {
		keep(later[i].remove())
		l.crashPoint("later segment deleted")
	}
	l.segments = slices.Clip(l.segments[:seg+1])
	return true, err
}

// cut drops the in-memory index and time-index entries of batches at or
// after offset, whose frame starts at pos, and makes the segment end
// there. The .log file must already be truncated; truncateIndexFiles
// cuts the index files after it. The caller holds appendMu and mu. The
// error is a failed read of the kept tail's headers (for its maximum
// timestamp); the cut is done all the same.
func (s *segment) cut(pos, offset int64) error {
	rel := uint32(offset - s.base)
	k := sort.Search(len(s.index), func(i int) bool { return s.index[i].rel >= rel })
	s.index = s.index[:k]
	s.cutAborted(offset)
	t := sort.Search(len(s.times), func(i int) bool { return s.times[i].rel >= rel })
	s.times = s.times[:t]
	// The time index tracks the running maximum up to each offset-index
	// entry it was written at (segment.plan): the kept batches' maximum
	// is its last kept entry's or that of a batch after the last kept
	// offset-index entry, whose headers are read here.
	s.maxTS, s.maxTSBase = -1, -1
	if t > 0 {
		s.maxTS, s.maxTSBase = s.times[t-1].ts, s.base+int64(s.times[t-1].rel)
	}
	from := int64(0)
	if k > 0 {
		from = int64(s.index[k-1].pos)
	}
	var readErr error
	for from < pos {
		h, n, err := s.peek(from, pos)
		if err != nil {
			readErr = err
			break
		}
		if h.MaxTimestamp > s.maxTS {
			s.maxTS, s.maxTSBase = h.MaxTimestamp, h.BaseOffset
		}
		from += int64(n)
	}
	s.idxSize = int64(k) * indexEntrySize
	s.timeSize = int64(t) * timeIndexEntrySize
	s.sinceIdx = 0
	if k > 0 {
		s.sinceIdx = int(pos - int64(s.index[k-1].pos))
	}
	s.size, s.next = pos, offset
	s.wbFrom = min(s.wbFrom, pos)
	s.dropFrom = min(s.dropFrom, pos)
	s.forgetFrames()
	return readErr
}

// TruncateFullyAndStartAt deletes every segment and leaves an empty log
// whose start and end offset are offset (>= 0, else INVALID_REQUEST): for
// a follower whose log end is below the leader's log start. The epoch
// cache is emptied and the high watermark set to offset; Changed waiters
// wake. File errors are KAFKA_STORAGE_ERROR; when the new segment cannot
// be created the old log is kept.
//
// Crash safety: first the high watermark is lowered (if above offset),
// the epoch checkpoint emptied, the log-start checkpoint set to offset and
// the recovery point to 0 (a crash now rescans every segment); then the
// new segment is created at offset and the old ones deleted, the last
// first. A crash recovers:
//   - offset past the old log end: the old log before the start
//     checkpoint is written, the new empty log after (Open resets a log
//     whose start checkpoint exceeds its end to an empty one there);
//   - offset below the old log start: the old log before the new segment
//     exists, the new empty log after (the gap after the new segment drops
//     the old ones);
//   - offset inside the old log: the old log before the start checkpoint,
//     after it the batches at or after offset of the segments not yet
//     deleted, with the start offset at or above offset: a valid log that
//     a follower then truncates again.
func (l *Log) TruncateFullyAndStartAt(offset int64) (err error) {
	if offset < 0 {
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "log start offset %d is negative", offset)
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	var changed bool // the segments were replaced
	defer func() {
		// As in TruncateTo: a resource error after the replacement
		// leaves the log online and replaced.
		if (err == nil || changed && IsResourceError(err)) && !l.closed {
			l.producersTruncated(l.active().next, true)
		}
	}()
	if l.closed {
		return ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return err
	}
	if err := l.lowerHighWatermarkLocked(offset); err != nil {
		return l.fileErr("checkpoint high watermark", OpWrite, l.hwPath(), err)
	}
	l.crashPoint("high watermark lowered")
	if err := l.writeEpochs(epochCache{}); err != nil {
		return l.fileErr("checkpoint leader epochs", OpWrite, filepath.Join(l.dir, epochCheckpointFile), err)
	}
	l.crashPoint("epochs emptied")
	if err := l.lowerCleanerCheckpoint(offset); err != nil {
		return l.fileErr("checkpoint cleaner offset", OpWrite, filepath.Join(l.dir, cleanerCheckpointFile), err)
	}
	if err := writeCheckpoint(filepath.Join(l.dir, startOffsetFile), offset); err != nil {
		return l.fileErr("checkpoint log start offset", OpWrite, filepath.Join(l.dir, startOffsetFile), err)
	}
	l.crashPoint("start offset moved")
	if err := l.lowerRecoveryPointLocked(0); err != nil {
		return l.fileErr("checkpoint recovery point", OpWrite, l.rpPath(), err)
	}
	l.crashPoint("recovery point reset")

	// The new segment: an old one at exactly this base is reused (cut to
	// nothing), otherwise a new file is created before anything is
	// deleted, so a failure leaves the old log in place.
	reuse := -1
	for i, s := range l.segments {
		if s.base == offset {
			reuse = i
		}
	}
	var fresh *segment
	if reuse < 0 {
		// segment.ms counts from the first append into an empty segment,
		// so its creation time does not matter.
		s, err := openSegment(l.files(), l.dir, offset, time.Time{})
		if err == nil && s.size != 0 {
			err = s.log.Truncate(0) // a stale file nobody lists
			s.size = 0
		}
		if err == nil {
			err = s.truncateIndexFiles()
		}
		if err != nil {
			if s != nil {
				s.close()
			}
			return l.fileErr(fmt.Sprintf("create segment at %d", offset), OpRoll, segmentName(l.dir, offset, ".log"), err)
		}
		fresh = s
		l.crashPoint("new segment created")
	}

	l.mu.Lock()
	l.truncations++
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	if reuse >= 0 {
		fresh = l.segments[reuse]
		keep(fresh.log.Truncate(0))
		keep(fresh.log.Sync())
		keep(fresh.cut(0, offset))
		keep(fresh.truncateIndexFiles())
		l.crashPoint("segment at offset emptied")
	}
	for i := len(l.segments) - 1; i >= 0; i-- {
		if i != reuse {
			keep(l.segments[i].remove())
			l.crashPoint("old segment deleted")
		}
	}
	l.segments = []*segment{fresh}
	changed = true
	l.startOffset = offset
	l.epochs = epochCache{}
	l.hw = offset
	l.notifyLocked()
	l.mu.Unlock()

	if err != nil {
		return l.fileErr(fmt.Sprintf("start log at %d", offset), OpTruncate, l.dir, err)
	}
	l.crashPoint("segments replaced")
	// Nothing is below the new start: the next checkpoint may say so.
	l.syncsTo = max(l.syncsTo, offset)
	l.advanceRecoveryPoint(offset)
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	if store, name := l.hwStore(); store != nil {
		// Memory: a crash before the next flush restores an older value,
		// which Open clamps up to the new log start.
		store.Set(name, offset)
		return nil
	}
	if err := writeCheckpoint(filepath.Join(l.dir, highWatermarkFile), offset); err != nil {
		return l.fileErr("checkpoint high watermark", OpWrite, l.hwPath(), err)
	}
	return nil
}
