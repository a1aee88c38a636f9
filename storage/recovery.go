package storage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// recover loads the segments in l.dir (DESIGN §5, "Recovery after a
// crash"). Open calls it before the log is shared, so it takes no locks.
//
//   - After a clean shutdown (marker present) the indexes of sealed
//     segments are trusted; the active segment resumes from its last index
//     entry and the frames after it are verified.
//   - Otherwise every segment whose end is past the recovery point is
//     rescanned: each frame's batch must pass batch.Verify and continue the
//     offsets exactly (the cleaner keeps them contiguous: cleaner.go). The
//     first torn, corrupt or out-of-sequence frame ends the log: the
//     segment is truncated there and all later segments are deleted.
//     Scanned segments get rebuilt indexes.
//   - First of all, a segment swap of the log cleaner that a crash
//     interrupted is finished or discarded (recoverCleanerFiles).
//   - The recovery point comes from the shared checkpoint
//     (Options.RecoveryPoints) or the log's own file; Open then fits it
//     to the recovered log (fitRecoveryPoint).
//   - The log start offset comes from its checkpoint, raised to the first
//     segment base. A checkpoint past the log end offset (an interrupted
//     TruncateFullyAndStartAt) empties the log and starts it there.
func (l *Log) recover(now time.Time) (clean bool, err error) {
	marker := filepath.Join(l.dir, cleanShutdownFile)
	clean = fileExists(marker)
	// The marker describes the state at the last Close; once the log is
	// open again a crash must rescan.
	if clean {
		if err := os.Remove(marker); err != nil {
			return clean, err
		}
	}
	// Finish or discard a segment swap of the log cleaner that a crash
	// interrupted (cleaner.go) before looking at the segments.
	if err := recoverCleanerFiles(l.dir); err != nil {
		return clean, err
	}
	recoveryPoint := l.loadRecoveryPoint()
	l.recoveryPoint = recoveryPoint
	start, _ := readCheckpoint(filepath.Join(l.dir, startOffsetFile))
	bases, err := listSegments(l.dir)
	if err != nil {
		return clean, err
	}
	if len(bases) == 0 {
		s, err := createFirstSegment(l.files(), l.dir, start, now)
		if err != nil {
			return clean, err
		}
		l.segments = []*segment{s}
		l.startOffset = start
		return clean, nil
	}
	interval := l.cfg.IndexIntervalBytes
	for i, base := range bases {
		s, err := openSegment(l.files(), l.dir, base, now)
		if err != nil {
			return clean, err
		}
		l.segments = append(l.segments, s)
		last := i == len(bases)-1
		if !last && (clean || bases[i+1] <= recoveryPoint) && s.loadIndexes(bases[i+1]) {
			if !s.loadTxnIndex() {
				l.rebuildTxnFrom(base)
			}
			continue
		}
		if last && clean && s.loadIndexes(-1) {
			// Resume from the last index entry and verify the tail.
			from := len(s.index) - 1
			if from >= 0 {
				pos := int64(s.index[from].pos)
				s.rewind(from)
				end, ok, err := s.scan(pos, interval)
				if err != nil {
					return clean, err
				}
				if ok {
					s.size = end
					if !s.loadTxnIndex() {
						l.rebuildTxnFrom(base)
					}
					if err := s.truncateIndexFiles(); err != nil {
						return clean, err
					}
					continue
				}
			}
		}
		// A rescanned segment's aborted-transaction index is rebuilt
		// with the producer state (loadProducers).
		l.rebuildTxnFrom(base)
		s.rewind(0)
		end, ok, err := s.scan(0, interval)
		if err != nil {
			return clean, err
		}
		// Loaded without a scan next time, it needs its maximum as
		// its last time entry.
		if err := s.sealTimeIndex(nil); err != nil {
			return clean, err
		}
		if err := s.truncateIndexFiles(); err != nil {
			return clean, err
		}
		if ok && (last || s.next == bases[i+1]) {
			s.size = end
			continue
		}
		// Corruption, a torn tail or a gap: keep what verified, drop the
		// rest of this segment and every later one.
		if err := s.log.Truncate(end); err != nil {
			return clean, err
		}
		s.size = end
		for _, b := range bases[i+1:] {
			if err := removeSegmentFiles(l.dir, b); err != nil {
				return clean, err
			}
		}
		break
	}
	l.startOffset = start
	if first := l.segments[0].base; l.startOffset < first {
		l.startOffset = first
	}
	if end := l.active().next; l.startOffset > end {
		// Only TruncateFullyAndStartAt moves the start checkpoint past the
		// end (before deleting the segments; or corruption cut the log
		// below it): finish it, an empty log at the checkpointed start,
		// so no offset below it is ever reused.
		for _, s := range l.segments {
			if err := s.remove(); err != nil {
				return clean, err
			}
		}
		s, err := openSegment(l.files(), l.dir, l.startOffset, now)
		if err != nil {
			l.segments = nil
			return clean, err
		}
		l.segments = []*segment{s}
		if s.size != 0 {
			return clean, fmt.Errorf("stale segment file %s", s.path)
		}
		return clean, s.truncateIndexFiles()
	}
	// Retention checkpoints the start offset before deleting files; finish
	// deletions a crash interrupted (segments wholly below the start).
	for len(l.segments) > 1 && l.segments[1].base <= l.startOffset {
		if err := l.segments[0].remove(); err != nil {
			return clean, err
		}
		l.segments = l.segments[1:]
	}
	return clean, nil
}

// rebuildTxnFrom notes that the aborted-transaction indexes from the
// segment at base on must be rebuilt (see loadProducers).
func (l *Log) rebuildTxnFrom(base int64) {
	if l.txnRebuildFrom < 0 || base < l.txnRebuildFrom {
		l.txnRebuildFrom = base
	}
}

// loadIndexes loads the index files of a segment whose next offset is next
// (-1 when unknown: the active segment). It checks the files are plausible
// (whole entries, increasing, within the log) and that the first and last
// offset entries point at frames of the offsets they claim; false means
// they must be rebuilt by a scan.
func (s *segment) loadIndexes(next int64) bool {
	dir := filepath.Dir(s.path)
	idx, err := os.ReadFile(segmentName(dir, s.base, ".index"))
	if err != nil {
		return false
	}
	tix, err := os.ReadFile(segmentName(dir, s.base, ".timeindex"))
	if err != nil {
		return false
	}
	ie, ok := decodeIndex(idx, s.size)
	if !ok || (s.size > 0) != (len(ie) > 0) {
		return false
	}
	te, ok := decodeTimeIndex(tix)
	if !ok || (s.size > 0) != (len(te) > 0) {
		return false
	}
	if len(ie) > 0 {
		if ie[0].rel != 0 || ie[0].pos != 0 {
			return false
		}
		for _, e := range []indexEntry{ie[0], ie[len(ie)-1]} {
			h, _, err := s.peek(int64(e.pos), s.size)
			if err != nil || h.BaseOffset != s.base+int64(e.rel) {
				return false
			}
		}
	}
	if next >= 0 && len(te) > 0 && s.base+int64(te[len(te)-1].rel) >= next {
		return false
	}
	if len(te) > 0 {
		// The first and last time entries must name batches with exactly
		// their timestamps (a zero-filled file is otherwise plausible).
		for _, e := range []timeEntry{te[0], te[len(te)-1]} {
			if !s.timeEntryMatches(ie, e) {
				return false
			}
		}
	}
	s.index, s.times = ie, te
	s.idxSize, s.timeSize = int64(len(idx)), int64(len(tix))
	if next >= 0 {
		s.next = next
	}
	if n := len(te); n > 0 {
		s.maxTS, s.maxTSBase = te[n-1].ts, s.base+int64(te[n-1].rel)
	}
	return true
}

// timeEntryMatches reports whether the batch at e.rel (found from the
// offset index idx) has max timestamp e.ts.
func (s *segment) timeEntryMatches(idx []indexEntry, e timeEntry) bool {
	want := s.base + int64(e.rel)
	for pos := lookupIndex(idx, e.rel); pos < s.size; {
		h, n, err := s.peek(pos, s.size)
		if err != nil || h.BaseOffset > want {
			return false
		}
		if h.BaseOffset == want {
			return h.MaxTimestamp == e.ts
		}
		pos += int64(n)
	}
	return false
}

// rewind prepares a scan from the batch of index entry from: it keeps the
// offset entries before it and the time entries for earlier batches (0
// resets everything).
func (s *segment) rewind(from int) {
	if from <= 0 {
		s.index, s.times = nil, nil
		s.maxTS, s.maxTSBase, s.next = -1, -1, s.base
	} else {
		rel := s.index[from].rel
		s.index = s.index[:from]
		k := sort.Search(len(s.times), func(i int) bool { return s.times[i].rel >= rel })
		s.times = s.times[:k]
		s.maxTS, s.maxTSBase = -1, -1
		if k > 0 {
			s.maxTS, s.maxTSBase = s.times[k-1].ts, s.base+int64(s.times[k-1].rel)
		}
		s.next = s.base + int64(rel)
	}
	s.idxSize = int64(len(s.index)) * indexEntrySize
	s.timeSize = int64(len(s.times)) * timeIndexEntrySize
	s.sinceIdx = 1 << 62 // index the first scanned batch
}

// truncateIndexFiles cuts stale entries after a scan rewrote the indexes
// (or a truncation cut them).
func (s *segment) truncateIndexFiles() error {
	if err := s.idxFile.Truncate(s.idxSize); err != nil {
		return err
	}
	if err := s.txnIdx.Truncate(s.txnSize); err != nil {
		return err
	}
	return s.timeIdx.Truncate(s.timeSize)
}

// scan reads frames from pos to the end of the file, verifying each batch
// (layout, framing, CRC, and base offset == s.next), and indexes them. It
// stops at the first bad or torn frame and returns the end of the last
// good frame and whether the whole rest of the file was good.
func (s *segment) scan(pos int64, intervalBytes int) (end int64, clean bool, err error) {
	st, err := s.log.Stat()
	if err != nil {
		return pos, false, err
	}
	fileSize := st.Size()
	r := bufio.NewReaderSize(io.NewSectionReader(s.log, pos, fileSize-pos), 1<<20)
	var buf []byte
	s.size = pos
	for pos < fileSize {
		head, _ := r.Peek(maxPeek)
		_, frameLen, err := peekFrame(head, fileSize-pos)
		if err != nil {
			return pos, false, nil
		}
		if cap(buf) < frameLen {
			buf = make([]byte, frameLen)
		}
		f := buf[:frameLen]
		if _, err := io.ReadFull(r, f); err != nil {
			return pos, false, nil
		}
		b, n, err := batch.NextFrame(f)
		if err != nil || n != frameLen {
			return pos, false, nil
		}
		h, err := batch.Verify(b)
		if err != nil || h.BaseOffset != s.next || h.LastOffset()-s.base > maxRelOffset {
			return pos, false, nil
		}
		e := s.plan(h, pos, intervalBytes)
		if err := s.writeEntries(e); err != nil {
			return pos, false, err
		}
		s.apply(h, frameLen, e) // advances s.size to the end of this frame
		pos += int64(frameLen)
	}
	return pos, true, nil
}

// maxRelOffset is the largest offset delta from a segment's base that its
// uint32 index entries can hold.
const maxRelOffset = 1<<32 - 1

func listSegments(dir string) ([]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var bases []int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".log") || len(name) != 24 {
			continue
		}
		base, err := strconv.ParseInt(name[:20], 10, 64)
		if err != nil || base < 0 {
			continue
		}
		bases = append(bases, base)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// errRecover wraps recovery failures with the directory.
func errRecover(dir string, err error) error {
	return fmt.Errorf("storage: recover %s: %w", dir, err)
}
