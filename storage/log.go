package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// AppendResult describes an appended batch.
type AppendResult struct {
	BaseOffset   int64
	LastOffset   int64
	MaxTimestamp int64
}

// ReadResult is the outcome of Read.
type ReadResult struct {
	// Batches are canonical batches (frames stripped) in offset order; the
	// first may start before the requested offset. Callers must not modify
	// them.
	Batches [][]byte
	// NextOffset is the offset after the last returned batch, or the
	// requested offset when none was returned.
	NextOffset int64
}

// SegmentInfo describes one segment, for tools and tests.
type SegmentInfo struct {
	BaseOffset int64
	NextOffset int64
	Size       int64
	Path       string
}

// Log is one partition's log in a directory. It is safe for concurrent
// use: appends are serialised by mu; reads take mu shared only to find
// positions and copy bytes out of files that are only ever appended to, so
// a reader never sees a partially written batch (the committed size moves
// after the write).
type Log struct {
	dir string

	mu          sync.RWMutex // guards the following
	cfg         Config
	segments    []*segment // ascending base offsets; the last is active
	startOffset int64
	changed     chan struct{}
	unflushed   int64
	lastFlush   time.Time
	frame       []byte // append scratch buffer
	closed      bool
}

const (
	cleanShutdownFile = ".clean_shutdown"
	startOffsetFile   = "log-start-offset-checkpoint"
	recoveryPointFile = "recovery-point-offset-checkpoint"
)

var errClosed = errors.New("storage: log is closed")

// Open opens the log in dir, creating it if needed, and recovers it: after
// a clean shutdown the indexes are trusted and only the active segment's
// tail is verified; otherwise every segment past the recovery point is
// scanned, CRCs checked, a torn or corrupt tail truncated (dropping every
// later segment) and indexes rebuilt.
func Open(dir string, cfg Config, now time.Time) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &Log{dir: dir, cfg: cfg, changed: make(chan struct{}), lastFlush: now}
	if err := l.recover(now); err != nil {
		for _, s := range l.segments {
			s.close()
		}
		return nil, fmt.Errorf("recover %s: %w", dir, err)
	}
	return l, nil
}

func (l *Log) recover(now time.Time) error {
	clean := fileExists(filepath.Join(l.dir, cleanShutdownFile))
	// The marker describes the state at the last close; once we run, a
	// crash must rescan.
	if clean {
		if err := os.Remove(filepath.Join(l.dir, cleanShutdownFile)); err != nil {
			return err
		}
	}
	recoveryPoint, _ := readCheckpoint(filepath.Join(l.dir, recoveryPointFile))
	start, _ := readCheckpoint(filepath.Join(l.dir, startOffsetFile))
	bases, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	if len(bases) == 0 {
		s, err := openSegment(l.dir, start, now)
		if err != nil {
			return err
		}
		l.segments = []*segment{s}
		l.startOffset = start
		return nil
	}
	for i, base := range bases {
		s, err := openSegment(l.dir, base, now)
		if err != nil {
			return err
		}
		l.segments = append(l.segments, s)
		last := i == len(bases)-1
		trusted := !last && (clean || bases[i+1] <= recoveryPoint)
		if trusted && s.loadIndexes(bases[i+1]) {
			continue
		}
		if err := s.resetIndexes(); err != nil {
			return err
		}
		end, ok, err := s.scan(0, l.cfg.IndexIntervalBytes)
		if err != nil {
			return err
		}
		if !ok || (!last && s.next != bases[i+1]) {
			// Corruption or a gap: keep what verified and drop the rest.
			if err := s.log.Truncate(end); err != nil {
				return err
			}
			s.size = end
			for _, b := range bases[i+1:] {
				later := &segment{base: b, path: segmentName(l.dir, b, ".log")}
				if err := later.remove(); err != nil {
					return err
				}
			}
			break
		}
		s.size = end
	}
	l.startOffset = start
	if first := l.segments[0].base; l.startOffset < first {
		l.startOffset = first
	}
	if end := l.endOffsetLocked(); l.startOffset > end {
		l.startOffset = end
	}
	return nil
}

// loadIndexes loads index files of a sealed segment whose next offset is
// next; false means they must be rebuilt.
func (s *segment) loadIndexes(next int64) bool {
	idx, err := os.ReadFile(segmentName(filepath.Dir(s.path), s.base, ".index"))
	if err != nil {
		return false
	}
	tix, err := os.ReadFile(segmentName(filepath.Dir(s.path), s.base, ".timeindex"))
	if err != nil {
		return false
	}
	ie, ok := decodeIndex(idx, s.size)
	if !ok || s.size > 0 && len(ie) == 0 {
		return false
	}
	te, ok := decodeTimeIndex(tix)
	if !ok || s.size > 0 && len(te) == 0 {
		return false
	}
	s.index, s.times, s.next = ie, te, next
	if n := len(te); n > 0 {
		s.maxTS, s.maxTSBase = te[n-1].ts, s.base+int64(te[n-1].rel)
	}
	return true
}

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
		var base int64
		if _, err := fmt.Sscanf(name[:20], "%d", &base); err != nil {
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

func (l *Log) active() *segment { return l.segments[len(l.segments)-1] }

func (l *Log) endOffsetLocked() int64 { return l.active().next }

// StartOffset is the log start offset: the first offset still stored.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.startOffset
}

// EndOffset is the log end offset: the offset the next record will get.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.endOffsetLocked()
}

// Changed returns a channel closed at the next append, truncation or
// retention change.
func (l *Log) Changed() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.changed
}

func (l *Log) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Append assigns the next offsets to canonical batch b (already validated,
// CRC set), stamps leaderEpoch, and writes it. b is owned by the log after
// the call. A batch over max.message.bytes is refused with
// MESSAGE_TOO_LARGE and nothing is written.
func (l *Log) Append(b []byte, leaderEpoch int32, now time.Time) (AppendResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return AppendResult{}, errClosed
	}
	if len(b) > int(l.cfg.MaxMessageBytes) {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d", len(b), l.cfg.MaxMessageBytes)
	}
	batch.SetBaseOffset(b, l.endOffsetLocked())
	batch.SetPartitionLeaderEpoch(b, leaderEpoch)
	return l.appendLocked(b, now)
}

// AppendVerbatim appends a batch that already carries its offsets and
// leader epoch (a follower's copy of the leader's bytes). Its base offset
// must equal the log end offset and it must pass batch.Verify.
func (l *Log) AppendVerbatim(b []byte, now time.Time) (AppendResult, error) {
	h, err := batch.Verify(b)
	if err != nil {
		return AppendResult{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return AppendResult{}, errClosed
	}
	if end := l.endOffsetLocked(); h.BaseOffset != end {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "batch base offset %d is not the log end offset %d", h.BaseOffset, end)
	}
	return l.appendLocked(b, now)
}

func (l *Log) appendLocked(b []byte, now time.Time) (AppendResult, error) {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return AppendResult{}, err
	}
	frameSize := int64(batch.FrameSize(len(b)))
	s := l.active()
	if s.size > 0 && (s.size+frameSize > l.cfg.SegmentBytes || now.Sub(s.created) >= time.Duration(l.cfg.SegmentMs)*time.Millisecond) {
		if s, err = l.rollLocked(now); err != nil {
			return AppendResult{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "roll segment: %v", err)
		}
	}
	l.frame = batch.AppendFrame(l.frame[:0], b)
	if _, err := s.log.WriteAt(l.frame, s.size); err != nil {
		_ = s.log.Truncate(s.size)
		return AppendResult{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "write %s: %v", s.path, err)
	}
	if cap(l.frame) > 4<<20 {
		l.frame = nil // do not pin a huge buffer
	}
	if err := s.track(h, s.size, int(frameSize), l.cfg.IndexIntervalBytes); err != nil {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "write index of %s: %v", s.path, err)
	}
	s.size += frameSize
	l.unflushed += int64(h.RecordCount)
	if (l.cfg.FlushMessages > 0 && l.unflushed >= l.cfg.FlushMessages) || (l.cfg.FlushMs > 0 && now.Sub(l.lastFlush) >= time.Duration(l.cfg.FlushMs)*time.Millisecond) {
		if err := l.flushLocked(now); err != nil {
			return AppendResult{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "flush: %v", err)
		}
	}
	l.notifyLocked()
	return AppendResult{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), MaxTimestamp: h.MaxTimestamp}, nil
}

// rollLocked seals the active segment and starts a new one at the log end
// offset.
func (l *Log) rollLocked(now time.Time) (*segment, error) {
	old := l.active()
	if err := old.log.Sync(); err != nil {
		return nil, err
	}
	_ = old.idxFile.Sync()
	_ = old.timeIdx.Sync()
	s, err := openSegment(l.dir, old.next, now)
	if err != nil {
		return nil, err
	}
	s.created = now
	l.segments = append(l.segments, s)
	return s, nil
}

// Read returns whole batches holding offsets >= offset whose base offset
// is below maxOffset (the high watermark), at most maxBytes of frames
// except that the first batch is always returned whole. Reading at the
// end (or at/after maxOffset) returns no batches. An offset outside
// [StartOffset, EndOffset] is OFFSET_OUT_OF_RANGE.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ReadResult{}, errClosed
	}
	end := l.endOffsetLocked()
	if offset < l.startOffset || offset > end {
		start := l.startOffset
		l.mu.RUnlock()
		return ReadResult{}, errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, "offset %d is outside the log [%d, %d]", offset, start, end)
	}
	if offset == end || offset >= maxOffset {
		l.mu.RUnlock()
		return ReadResult{NextOffset: offset}, nil
	}
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	if i < 0 {
		i = 0
	}
	s := l.segments[i]
	for s.next <= offset && i+1 < len(l.segments) {
		i++
		s = l.segments[i]
	}
	pos := lookupIndex(s.index, uint32(offset-s.base))
	size := s.size
	l.mu.RUnlock()

	batches, next, err := s.readFrames(pos, size, offset, maxBytes, maxOffset)
	if err != nil {
		if l.StartOffset() > offset {
			return ReadResult{}, errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, "offset %d was deleted by retention", offset)
		}
		return ReadResult{}, errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "read: %v", err)
	}
	return ReadResult{Batches: batches, NextOffset: next}, nil
}

// OffsetForTimestamp returns the first offset whose record timestamp is
// >= ts, with that record's timestamp; found is false when no record is.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	l.mu.RLock()
	var seg *segment
	var rel uint32
	for _, s := range l.segments {
		if s.maxTS >= ts {
			seg = s
			rel, _ = lookupTime(s.times, ts)
			break
		}
	}
	if seg == nil {
		l.mu.RUnlock()
		return -1, -1, false, nil
	}
	start := seg.base + int64(rel)
	if start < l.startOffset {
		start = l.startOffset
	}
	l.mu.RUnlock()
	res, err := l.Read(start, 1, 1<<62)
	if err != nil {
		return -1, -1, false, err
	}
	for _, b := range res.Batches {
		h, _ := batch.ParseHeader(b)
		if h.MaxTimestamp < ts {
			continue
		}
		stop := errors.New("found")
		err := batch.ForEachRecord(b, func(r batch.Record) error {
			if r.Offset >= start && r.Timestamp >= ts {
				offset, timestamp, found = r.Offset, r.Timestamp, true
				return stop
			}
			return nil
		})
		if found {
			return offset, timestamp, true, nil
		}
		if err != nil {
			return -1, -1, false, err
		}
	}
	return -1, -1, false, nil
}

// MaxTimestampOffset returns the offset and timestamp of the record with
// the largest timestamp, or (-1, -1) when the log is empty.
func (l *Log) MaxTimestampOffset() (offset, timestamp int64) {
	l.mu.RLock()
	var best *segment
	for _, s := range l.segments {
		if s.maxTS >= 0 && (best == nil || s.maxTS > best.maxTS) {
			best = s
		}
	}
	if best == nil {
		l.mu.RUnlock()
		return -1, -1
	}
	base, maxTS := best.maxTSBase, best.maxTS
	l.mu.RUnlock()
	res, err := l.Read(base, 1, 1<<62)
	if err != nil || len(res.Batches) == 0 {
		return -1, -1
	}
	offset = -1
	_ = batch.ForEachRecord(res.Batches[0], func(r batch.Record) error {
		if r.Timestamp == maxTS && offset < 0 {
			offset = r.Offset
		}
		return nil
	})
	return offset, maxTS
}

// SetConfig replaces the configuration (applies to later appends).
func (l *Log) SetConfig(cfg Config) {
	l.mu.Lock()
	l.cfg = cfg
	l.mu.Unlock()
}

// Flush fsyncs the active segment and its indexes and checkpoints the
// recovery point.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errClosed
	}
	return l.flushLocked(time.Now())
}

func (l *Log) flushLocked(now time.Time) error {
	s := l.active()
	for _, f := range []interface{ Sync() error }{s.log, s.idxFile, s.timeIdx} {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	l.unflushed, l.lastFlush = 0, now
	return writeCheckpoint(filepath.Join(l.dir, recoveryPointFile), l.endOffsetLocked())
}

// Close flushes, writes the clean-shutdown marker and closes the files.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	err := l.flushLocked(time.Now())
	if err == nil {
		err = writeCheckpoint(filepath.Join(l.dir, startOffsetFile), l.startOffset)
	}
	if err == nil {
		err = writeCheckpoint(filepath.Join(l.dir, cleanShutdownFile), l.endOffsetLocked())
	}
	for _, s := range l.segments {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	l.closed = true
	l.notifyLocked()
	return err
}

// Delete closes the log and removes its directory.
func (l *Log) Delete() error {
	l.mu.Lock()
	for _, s := range l.segments {
		s.close()
	}
	l.closed = true
	l.notifyLocked()
	l.mu.Unlock()
	return os.RemoveAll(l.dir)
}

// Segments describes the segments in offset order.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, 0, len(l.segments))
	for _, s := range l.segments {
		out = append(out, SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Size: s.size, Path: s.path})
	}
	return out
}

// Size is the total size of the segment files.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segments {
		n += s.size
	}
	return n
}
