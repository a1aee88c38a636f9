package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// The log cleaner: Kafka's log compaction (cleanup.policy=compact or
// compact,delete; docs/operations.md "Compacted topics", design decision
// 38). One pass (Clean) rewrites the cleanable part of the log, keeping
// the latest record of every key:
//
//   - The cleanable part is the sealed segments wholly below the first
//     uncleanable offset: min(active segment's base, last stable offset —
//     which is at most the high watermark and at most the first offset of
//     the oldest open or unreplicated transaction —, base of the first
//     segment holding a record younger than min.compaction.lag.ms by its
//     largest timestamp).
//   - An offset map (key → offset of its latest record) is built from the
//     dirty part: from the cleaner checkpoint (the end of the last pass,
//     cleaner-offset-checkpoint) to the first uncleanable offset. Records
//     of aborted transactions and control batches never enter it.
//   - Every cleanable segment is then copied, batch by batch: a record
//     survives if it has a key, no later record of its key is in the map,
//     and it is not a tombstone (empty value) past the delete horizon.
//     Records of aborted transactions never survive; keyless records do
//     not either (the produce path refuses them for compacted topics).
//   - Offsets never move: a batch keeps its base offset, last offset delta,
//     producer id, epoch, base sequence, attributes and timestamps; its
//     surviving records keep their offset deltas (batch.Filter). A
//     compressed batch (decision 67) is decompressed, filtered the same
//     way and its survivors compressed again with its own codec, as
//     Kafka's cleaner does: a compressed topic stays compressed on disk
//     and Kafka consumers get the codec they were written with. A batch
//     left with no record is dropped, except the last batch of a producer
//     id (the producer state's LastOffset), which stays, possibly empty
//     (then uncompressed, as Kafka writes an empty batch), so
//     that the producer's state (epoch, sequence) survives a rebuild. A run
//     of dropped batches is replaced by one empty filler batch covering
//     their offsets (filler), so offsets stay contiguous from batch to
//     batch: recovery keeps checking that each base offset (not covered
//     by the CRC) follows the previous batch, followers append exactly at
//     their log end, and a read at a removed offset returns the filler
//     (no records) and then the next batch. The space a run costs is one
//     batch header.
//   - A transaction marker is dropped only when no data batch of its
//     transaction was left before it when the pass started (so a marker
//     always outlives its data: the pass that removes the last data keeps
//     the marker, a later pass removes it), its segment is past the
//     delete horizon, and it is not its producer's last batch.
//   - The delete horizon of a segment: its largest timestamp is older than
//     now - delete.retention.ms (Kafka before KIP-534 measured it by segment
//     age as well).
//   - An .txnindex entry is kept when a batch of its aborted transaction
//     survives (only possible as a producer's empty last batch).
//
// Consecutive cleaned segments whose sizes add up to at most
// segment.bytes are merged into one, based at the first one's base.
//
// Crash safety (Kafka's .cleaned/.swap protocol): a group's new segment is
// written as <base>.log.cleaned (and .index, .timeindex, .txnindex
// .cleaned), synced; <base>.swapend records the offset after the group;
// the index files, then the log, are renamed to .swap (the log's rename
// commits the swap); the segments are replaced in memory; the old files
// are deleted and the .swap files renamed to their final names. Recovery
// (recoverCleanerFiles) deletes .cleaned files (the swap did not commit)
// and completes a committed swap: deletes the old segments of [base,
// swapend) and renames the .swap files.
//
// Concurrency: Clean reads sealed segments and writes its files without
// appendMu, so appends continue; it takes appendMu to plan and for each
// swap, where it checks that the segments it read are still the log's
// (retention, truncation or Close may have changed them: the pass stops,
// its files are removed, and nothing changed). The swap holds mu
// exclusively and counts as a truncation, so a read that snapshotted an
// old segment is retried on the new ones. One Clean runs at a time per log
// (cleanMu).

const (
	cleanerCheckpointFile = "cleaner-offset-checkpoint"
	cleanedSuffix         = ".cleaned"
	swapSuffix            = ".swap"
	swapEndExt            = ".swapend"
)

// segmentExts are the files of a segment, the log last (renames of a
// swap commit with the log's).
var segmentExts = []string{".index", ".timeindex", ".txnindex", ".log"}

// CleanStats describes one Clean call.
type CleanStats struct {
	// Cleaned is true when a pass ran (false: not compacted, nothing
	// cleanable, or the dirty ratio below min.cleanable.dirty.ratio).
	Cleaned bool
	// Raced is true when the pass stopped because the log changed under
	// it (retention, truncation, close); the segments swapped before stay.
	Raced bool
	// DirtyRatio is dirty bytes / cleanable bytes when Clean looked.
	DirtyRatio float64
	// FirstDirtyOffset and FirstUncleanableOffset bound the dirty part.
	FirstDirtyOffset, FirstUncleanableOffset int64
	SegmentsRead, SegmentsWritten            int
	BytesRead, BytesWritten                  int64 // .log bytes copied from and to
	RecordsRead, RecordsRemoved              int64
	BatchesRemoved                           int64
	// FillerBatches are the empty batches written in place of runs of
	// removed batches (filler).
	FillerBatches int64
	Duration      time.Duration
}

// cleanSource is one cleanable segment as the plan saw it.
type cleanSource struct {
	seg     *segment
	size    int64
	end     int64 // the next segment's base: the offsets it covers end there
	maxTS   int64
	aborted []AbortedTxn
}

// cleanPlan is what Clean decides under appendMu.
type cleanPlan struct {
	sources     []cleanSource
	firstDirty  int64
	upper       int64 // first uncleanable offset, a segment base
	aborted     map[int64][]AbortedTxn
	lastOffsets map[int64]int64 // producer id → last offset of its last batch
	horizon     int64           // tombstones and markers in segments with maxTS below it may go
	ratio       float64
	segBytes    int64
	interval    int // index.interval.bytes
}

// Clean runs one cleaning pass at now when the log is compacted and its
// dirty ratio reaches min.cleanable.dirty.ratio (see the file comment for
// the rules). It returns what it did. ErrClosed on a closed log; file
// errors are KAFKA_STORAGE_ERROR. When ctx ends the pass stops at the
// next batch or swap, removes the files of the segment it was writing and
// returns ctx.Err() (the segments swapped before stay). A pass
// interrupted by a crash leaves files that the next Open completes or
// discards.
func (l *Log) Clean(ctx context.Context, now time.Time) (st CleanStats, err error) {
	l.cleanMu.Lock()
	defer l.cleanMu.Unlock()
	began := time.Now()
	p, err := l.planClean(now)
	if err != nil || p == nil {
		return st, err
	}
	st.DirtyRatio, st.FirstDirtyOffset, st.FirstUncleanableOffset = p.ratio, p.firstDirty, p.upper
	if p.ratio < l.Config().MinCleanableDirtyRatio || p.ratio == 0 {
		return st, nil
	}
	st.Cleaned = true
	defer func() { st.Duration = time.Since(began) }()

	c := &cleaner{ctx: ctx, plan: p, stats: &st, keys: make(map[string]int64), txnSeen: make(map[int64]bool), retained: make(map[int64][]int64)}
	for _, src := range p.sources {
		if src.end > p.firstDirty {
			if err := c.mapKeys(src); err != nil {
				return l.cleanFailed(c, st, p.sources, err)
			}
		}
	}
	for _, g := range groupSources(p.sources, p.segBytes) {
		ns, err := c.writeGroup(l.files(), l.dir, g, now)
		if err != nil {
			return l.cleanFailed(c, st, g, err)
		}
		if err := ctx.Err(); err != nil {
			ns.close()
			removeCleanedFiles(l.dir, ns.base)
			return st, err
		}
		swapped, err := l.swapSegments(g, ns)
		if err != nil {
			return st, err
		}
		if !swapped {
			st.Raced = true
			return st, nil
		}
		st.SegmentsRead += len(g)
		st.SegmentsWritten++
	}
	if err := writeCheckpoint(filepath.Join(l.dir, cleanerCheckpointFile), p.upper); err != nil {
		return st, l.fileErr("checkpoint cleaner offset", OpWrite, filepath.Join(l.dir, cleanerCheckpointFile), err)
	}
	return st, nil
}

// lowerCleanerCheckpoint moves the cleaner checkpoint down to offset when
// it is above (a truncation removes the cleaned part above offset; what is
// appended there later is dirty). The caller holds appendMu.
func (l *Log) lowerCleanerCheckpoint(offset int64) error {
	p := filepath.Join(l.dir, cleanerCheckpointFile)
	if v, err := readCheckpoint(p); err == nil && v > offset {
		return writeCheckpoint(p, offset)
	}
	return nil
}

// cleanFailed handles a failure to read the sources or write the new
// segment: the pass's context ending is its error; a log closed meanwhile
// is ErrClosed; sources that are no longer the log's (retention deleted,
// truncation cut them while the pass read them) make a raced pass, not an
// error; anything else is KAFKA_STORAGE_ERROR.
func (l *Log) cleanFailed(c *cleaner, st CleanStats, sources []cleanSource, err error) (CleanStats, error) {
	if ctxErr := c.ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return st, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return st, ErrClosed
	}
	for _, src := range sources {
		current := false
		for _, s := range l.segments {
			if s == src.seg {
				current = s.size == src.size
				break
			}
		}
		if !current {
			st.Raced = true
			return st, nil
		}
	}
	return st, l.fileErr("clean "+l.dir, opOf(err, OpWrite), l.dir, err)
}

// planClean computes the cleanable part and the dirty ratio; nil when there
// is nothing to clean.
func (l *Log) planClean(now time.Time) (*cleanPlan, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return nil, err
	}
	cfg := l.cfg
	if !cfg.Compacted() {
		return nil, nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	uncleanable := l.lsoLocked() // <= high watermark, <= first unstable offset
	lagLimit := now.UnixMilli() - cfg.MinCompactionLagMs
	var sources []cleanSource
	for k := 0; k+1 < len(l.segments); k++ {
		s, end := l.segments[k], l.segments[k+1].base
		if end > uncleanable || (cfg.MinCompactionLagMs > 0 && s.maxTS > lagLimit) {
			break
		}
		sources = append(sources, cleanSource{seg: s, size: s.size, end: end, maxTS: s.maxTS, aborted: s.aborted})
	}
	if len(sources) == 0 {
		return nil, nil
	}
	upper := sources[len(sources)-1].end
	firstDirty, err := readCheckpoint(filepath.Join(l.dir, cleanerCheckpointFile))
	if err != nil || firstDirty < sources[0].seg.base || firstDirty > l.active().next {
		firstDirty = sources[0].seg.base // no checkpoint, or one of another log's life
	}
	var dirty, total int64
	for _, src := range sources {
		total += src.size
		if src.end > firstDirty {
			dirty += src.size
		}
	}
	if firstDirty >= upper || dirty == 0 {
		return nil, nil
	}
	p := &cleanPlan{
		sources: sources, firstDirty: firstDirty, upper: upper,
		aborted:     make(map[int64][]AbortedTxn),
		lastOffsets: make(map[int64]int64),
		horizon:     now.UnixMilli() - cfg.DeleteRetentionMs,
		ratio:       float64(dirty) / float64(total),
		segBytes:    cfg.SegmentBytes,
		interval:    cfg.IndexIntervalBytes,
	}
	// Aborted transactions overlapping the cleanable part, with their
	// markers anywhere in the log.
	for _, t := range l.abortedLocked(sources[0].seg.base, upper) {
		p.aborted[t.ProducerID] = append(p.aborted[t.ProducerID], t)
	}
	if l.producers != nil {
		for _, e := range l.producers.Producers() {
			p.lastOffsets[e.ProducerID] = e.LastOffset
		}
	}
	return p, nil
}

// groupSources splits sources into runs of consecutive segments whose
// sizes add up to at most segBytes (a segment larger alone is a group) and
// whose offsets fit one segment's relative index.
func groupSources(sources []cleanSource, segBytes int64) [][]cleanSource {
	var out [][]cleanSource
	for i := 0; i < len(sources); {
		j, size := i+1, sources[i].size
		for j < len(sources) && size+sources[j].size <= segBytes && sources[j].end-1-sources[i].seg.base <= maxRelOffset {
			size += sources[j].size
			j++
		}
		out = append(out, sources[i:j])
		i = j
	}
	return out
}

// cleaner is the state of one pass.
type cleaner struct {
	ctx   context.Context // ends the pass early (checked every batch)
	plan  *cleanPlan
	stats *CleanStats
	keys  map[string]int64 // offset map: key → offset of its latest record
	// txnSeen: producer ids with a transactional data batch read since
	// their last marker in this pass.
	txnSeen map[int64]bool
	// retained: base offsets of the transactional data batches written,
	// by producer id (for the .txnindex entries kept).
	retained map[int64][]int64
	buf      []byte
}

// aborted reports whether the transactional data batch of producer pid at
// base belongs to an aborted transaction.
func (c *cleaner) aborted(pid, base int64) bool {
	for _, t := range c.plan.aborted[pid] {
		if t.FirstOffset <= base && base <= t.LastOffset {
			return true
		}
	}
	return false
}

// forEachBatch calls fn with every batch of src (a canonical batch valid
// until fn returns) in file order, stopping with ctx.Err() when ctx ends.
func forEachBatch(ctx context.Context, src cleanSource, fn func(h batch.Header, b []byte) error) error {
	r := bufio.NewReaderSize(io.NewSectionReader(src.seg.log, 0, src.size), 1<<20)
	var buf []byte
	for pos := int64(0); pos < src.size; {
		head, _ := r.Peek(maxPeek)
		_, n, err := peekFrame(head, src.size-pos)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", src.seg.path, pos, err)
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		f := buf[:n]
		if _, err := io.ReadFull(r, f); err != nil {
			return fmt.Errorf("%s:%d: %w", src.seg.path, pos, err)
		}
		b, _, err := batch.NextFrame(f)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", src.seg.path, pos, err)
		}
		h, err := batch.ParseHeader(b)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", src.seg.path, pos, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(h, b); err != nil {
			return err
		}
		pos += int64(n)
	}
	return nil
}

// mapKeys adds the keyed records of src at or after the first dirty offset
// to the offset map, leaving out control batches and aborted transactions.
func (c *cleaner) mapKeys(src cleanSource) error {
	return forEachBatch(c.ctx, src, func(h batch.Header, b []byte) error {
		if h.IsControl() || h.LastOffset() < c.plan.firstDirty || h.RecordCount == 0 {
			return nil
		}
		if h.IsTransactional() && h.ProducerID > 0 && c.aborted(h.ProducerID, h.BaseOffset) {
			return nil
		}
		return batch.ForEachRecord(b, func(r batch.Record) error {
			if len(r.Key) > 0 && r.Offset >= c.plan.firstDirty {
				if cur, ok := c.keys[string(r.Key)]; !ok || r.Offset > cur {
					c.keys[string(r.Key)] = r.Offset
				}
			}
			return nil
		})
	})
}

// writeGroup writes the cleaned copy of the segments of g as one new
// segment in .cleaned files, synced, and returns it (its files open, its
// in-memory indexes set, next = the offset after the group).
func (c *cleaner) writeGroup(cache *FileCache, dir string, g []cleanSource, now time.Time) (*segment, error) {
	base := g[0].seg.base
	ns, err := createCleanedSegment(cache, dir, base, now)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*segment, error) {
		ns.close()
		removeCleanedFiles(dir, base)
		return nil, err
	}
	// At explicit offsets: the file may be closed and reopened by the
	// FileCache between two writes, which would reset a file position.
	w := bufio.NewWriterSize(io.NewOffsetWriter(ns.log, 0), 1<<20)
	write := func(out []byte) error {
		oh, err := batch.ParseHeader(out)
		if err != nil {
			return err
		}
		var fh [batch.MaxFrameHeader]byte
		frame := batch.AppendFrameHeader(fh[:0], len(out))
		e := ns.plan(oh, ns.size, c.plan.interval)
		if _, err := w.Write(frame); err != nil {
			return err
		}
		if _, err := w.Write(out); err != nil {
			return err
		}
		if err := ns.writeEntries(e); err != nil {
			return err
		}
		ns.apply(oh, len(frame)+len(out), e)
		return nil
	}
	var gap filler
	flush := func() error {
		if !gap.open {
			return nil
		}
		gap.open = false
		c.stats.FillerBatches++
		return write(gap.batch())
	}
	var kept []AbortedTxn
	for _, src := range g {
		c.stats.BytesRead += src.size
		pastHorizon := src.maxTS < c.plan.horizon
		err := forEachBatch(c.ctx, src, func(h batch.Header, b []byte) error {
			c.stats.RecordsRead += int64(h.RecordCount)
			out, keep, err := c.cleanBatch(h, b, pastHorizon)
			if err != nil {
				return err
			}
			if !keep {
				c.stats.BatchesRemoved++
				c.stats.RecordsRemoved += int64(h.RecordCount)
				if gap.open && !gap.extends(h) {
					if err := flush(); err != nil {
						return err
					}
				}
				gap.add(h)
				return nil
			}
			if err := flush(); err != nil {
				return err
			}
			c.stats.RecordsRemoved += int64(h.RecordCount - batch.RecordCount(out))
			return write(out)
		})
		if err != nil {
			return fail(err)
		}
		for _, t := range src.aborted {
			if c.batchRetained(t) {
				kept = append(kept, t)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	for _, t := range kept {
		if err := ns.writeAborted(t); err != nil {
			return fail(err)
		}
		ns.aborted = append(ns.aborted, t)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := ns.sealTimeIndex(nil); err != nil {
		return fail(err)
	}
	if err := ns.sync(); err != nil {
		return fail(err)
	}
	c.stats.BytesWritten += ns.size
	ns.next = g[len(g)-1].end
	return ns, nil
}

// cleanBatch decides one batch: the bytes to write (b itself or a filtered
// copy in c.buf) and whether it is written at all.
func (c *cleaner) cleanBatch(h batch.Header, b []byte, pastHorizon bool) ([]byte, bool, error) {
	lastOff, known := c.plan.lastOffsets[h.ProducerID]
	last := h.ProducerID > 0 && known && lastOff == h.LastOffset()
	if h.IsControl() {
		if h.ProducerID <= 0 {
			return b, true, nil
		}
		mk := readMarker(b)
		if !mk.ok {
			return b, true, nil
		}
		dataLeft := c.txnSeen[h.ProducerID]
		delete(c.txnSeen, h.ProducerID)
		// A marker outlives its transaction's data and the delete horizon.
		return b, dataLeft || !pastHorizon || last, nil
	}
	abortedTxn := false
	if h.IsTransactional() && h.ProducerID > 0 {
		c.txnSeen[h.ProducerID] = true
		abortedTxn = c.aborted(h.ProducerID, h.BaseOffset)
	}
	out, n, err := batch.Filter(c.buf[:0], b, func(r batch.Record) bool {
		if abortedTxn || len(r.Key) == 0 {
			return false
		}
		if latest, ok := c.keys[string(r.Key)]; ok && r.Offset < latest {
			return false
		}
		// A tombstone (no value) outlives the delete horizon.
		return len(r.Value) > 0 || !pastHorizon
	})
	c.buf = out[:0]
	if err != nil {
		return nil, false, err
	}
	if n == 0 && !last {
		return nil, false, nil
	}
	if h.IsTransactional() && h.ProducerID > 0 {
		c.retained[h.ProducerID] = append(c.retained[h.ProducerID], h.BaseOffset)
	}
	return out, true, nil
}

// batchRetained reports whether a batch of aborted transaction t was
// written: then its .txnindex entry stays with it.
func (c *cleaner) batchRetained(t AbortedTxn) bool {
	for _, base := range c.retained[t.ProducerID] {
		if t.FirstOffset <= base && base <= t.LastOffset {
			return true
		}
	}
	return false
}

// createCleanedSegment creates the empty .cleaned files of a segment at
// base, in cache. Its path is the final .log name (what it will be once
// swapped); its files are renamed through their segFiles (swapSegments).
func createCleanedSegment(cache *FileCache, dir string, base int64, now time.Time) (*segment, error) {
	removeCleanedFiles(dir, base)
	s := &segment{base: base, path: segmentName(dir, base, ".log"), next: base, maxTS: -1, maxTSBase: -1, created: now}
	open := func(ext string) (*segFile, error) {
		return openSegFile(cache, segmentName(dir, base, ext)+cleanedSuffix, os.O_CREATE|os.O_TRUNC|os.O_RDWR)
	}
	var err error
	if s.log, err = open(".log"); err == nil {
		if s.idxFile, err = open(".index"); err == nil {
			if s.timeIdx, err = open(".timeindex"); err == nil {
				s.txnIdx, err = open(".txnindex")
			}
		}
	}
	if err != nil {
		s.close()
		removeCleanedFiles(dir, base)
		return nil, err
	}
	return s, nil
}

func removeCleanedFiles(dir string, base int64) {
	for _, ext := range segmentExts {
		_ = os.Remove(segmentName(dir, base, ext) + cleanedSuffix)
	}
}

// swapSegments replaces the segments of g with ns (written by writeGroup)
// if they are still the log's; false (ns discarded) when the log changed
// under the pass. See the file comment for the steps.
func (l *Log) swapSegments(g []cleanSource, ns *segment) (bool, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	base := g[0].seg.base
	discard := func() {
		ns.close()
		removeCleanedFiles(l.dir, base)
	}
	at := -1
	for i, s := range l.segments {
		if s == g[0].seg {
			at = i
			break
		}
	}
	ok := !l.closed && at >= 0 && at+len(g) < len(l.segments)
	for k := 0; ok && k < len(g); k++ {
		s := l.segments[at+k]
		ok = s == g[k].seg && s.size == g[k].size
	}
	if ok {
		ok = l.segments[at+len(g)].base == g[len(g)-1].end
	}
	if !ok {
		discard()
		return false, nil
	}
	l.cleanCrashPoint("cleaned written")
	// Commit: the group's end, then the .swap names, the log's last.
	end := g[len(g)-1].end
	if err := writeCheckpoint(segmentName(l.dir, base, swapEndExt), end); err != nil {
		discard()
		return false, storageErr("clean: write %s: %v", swapEndExt, err)
	}
	for _, ext := range segmentExts {
		p := segmentName(l.dir, base, ext)
		// Through the segFile, which reopens the file by its new name.
		if err := ns.file(ext).rename(p + swapSuffix); err != nil {
			discard()
			_ = os.Remove(segmentName(l.dir, base, swapEndExt))
			for _, e := range segmentExts {
				_ = os.Remove(segmentName(l.dir, base, e) + swapSuffix)
			}
			return false, storageErr("clean: rename %s: %v", p, err)
		}
		l.cleanCrashPoint("renamed to " + ext + swapSuffix)
	}
	syncDir(l.dir)

	l.mu.Lock()
	l.truncations++ // readers of the old segments retry on the new one
	segs := make([]*segment, 0, len(l.segments)-len(g)+1)
	segs = append(segs, l.segments[:at]...)
	segs = append(segs, ns)
	segs = append(segs, l.segments[at+len(g):]...)
	l.segments = segs
	l.notifyLocked()
	l.mu.Unlock()

	var first error
	for _, src := range g {
		src.seg.close()
		if err := removeSegmentFiles(l.dir, src.seg.base); err != nil && first == nil {
			first = err
		}
	}
	l.cleanCrashPoint("old segments deleted")
	if first == nil {
		first = finishSwap(l.dir, base, ns, l.cleanCrashPoint)
	}
	if first != nil {
		// The next Open completes the swap from the files.
		return true, storageErr("clean: swap segment %d: %v", base, first)
	}
	return true, nil
}

// cleanCrashPoint calls the test hook, if any, between two steps of a
// swap whose files a crash could leave as they are now.
func (l *Log) cleanCrashPoint(step string) {
	if l.swapHook != nil {
		l.swapHook(step)
	}
}

// finishSwap renames the .swap files of the segment at base to their
// final names (the log last) and removes its .swapend; crashPoint (may be
// nil) runs after each rename. ns, when not nil, is the open segment
// whose files these are: they are renamed through it, so that it reopens
// them by their final names (filecache.go).
func finishSwap(dir string, base int64, ns *segment, crashPoint func(string)) error {
	for _, ext := range segmentExts {
		p := segmentName(dir, base, ext)
		rename := os.Rename
		if ns != nil {
			rename = func(_, newPath string) error { return ns.file(ext).rename(newPath) }
		}
		if err := rename(p+swapSuffix, p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if crashPoint != nil {
			crashPoint("renamed " + ext + swapSuffix + " to " + ext)
		}
	}
	syncDir(dir)
	if err := os.Remove(segmentName(dir, base, swapEndExt)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// recoverCleanerFiles finishes or discards what a crash left of a swap
// (Open, before the segments are listed): .cleaned files are deleted (the
// swap had not committed); a .log.swap committed its swap: the old
// segments of [base, swapend) are deleted and the .swap files renamed
// (Kafka's LogLoader does the same). .swap index files without their
// .log.swap belong to an uncommitted swap and are deleted, as is a
// .swapend (or its temporary file) without one.
func recoverCleanerFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var swaps []int64
	var strays []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, cleanedSuffix):
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		case strings.HasSuffix(name, ".log"+swapSuffix):
			base, err := strconv.ParseInt(strings.TrimSuffix(name, ".log"+swapSuffix), 10, 64)
			if err != nil {
				return fmt.Errorf("unexpected swap file %s", name)
			}
			swaps = append(swaps, base)
		case strings.HasSuffix(name, swapSuffix) || strings.HasSuffix(name, swapEndExt) || strings.HasSuffix(name, swapEndExt+".tmp"):
			strays = append(strays, name)
		}
	}
	for _, base := range swaps {
		end, err := readCheckpoint(segmentName(dir, base, swapEndExt))
		if err != nil || end <= base {
			return fmt.Errorf("swap of segment %d has no valid %s: %v", base, swapEndExt, err)
		}
		bases, err := listSegments(dir)
		if err != nil {
			return err
		}
		for _, b := range bases {
			if b >= base && b < end {
				if err := removeSegmentFiles(dir, b); err != nil {
					return err
				}
			}
		}
		if err := finishSwap(dir, base, nil, nil); err != nil {
			return err
		}
	}
	// What is left belongs to no committed swap (a finished swap renamed
	// or removed its own files).
	for _, name := range strays {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// filler is a run of removed batches that the cleaner replaces with one
// empty batch covering their offsets, so that offsets stay contiguous
// between batches (recovery and followers rely on it: a base offset is not
// covered by the CRC, and continuity is what catches a damaged one). It
// has no producer (id -1), no records, the leader epoch of the batches it
// replaces (a run stops where the epoch changes, so the leader-epoch cache
// still matches the log) and their largest timestamp (so the segment's
// largest timestamp, which retention and the delete horizon read, does not
// move).
type filler struct {
	open       bool
	base, last int64
	epoch      int32
	maxTS      int64
	buf        [batch.HeaderSize]byte
}

// extends reports whether removed batch h can join the open run.
func (f *filler) extends(h batch.Header) bool {
	return h.BaseOffset == f.last+1 && h.PartitionLeaderEpoch == f.epoch && h.LastOffset()-f.base <= math.MaxInt32
}

// add appends removed batch h to the run, opening one if needed.
func (f *filler) add(h batch.Header) {
	if !f.open {
		f.open, f.base, f.epoch, f.maxTS = true, h.BaseOffset, h.PartitionLeaderEpoch, h.MaxTimestamp
	}
	f.last = h.LastOffset()
	f.maxTS = max(f.maxTS, h.MaxTimestamp)
}

// batch encodes the run's empty batch (valid until the next call).
func (f *filler) batch() []byte {
	h := batch.Header{
		BaseOffset: f.base, PartitionLeaderEpoch: f.epoch,
		LastOffsetDelta: int32(f.last - f.base),
		BaseTimestamp:   f.maxTS, MaxTimestamp: f.maxTS,
		ProducerID: batch.NoProducerID, ProducerEpoch: -1, BaseSequence: -1,
	}
	b := f.buf[:]
	batch.PutHeader(b, h)
	h.CRC = batch.ComputeCRC(b)
	batch.PutHeader(b, h)
	return b
}
