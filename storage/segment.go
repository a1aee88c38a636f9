package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
)

// segment is one .log file with its .index, .timeindex and .txnindex.
//
// Concurrency: fields marked (mu) are written only by the holder of the
// owning Log's appendMu while it also holds mu exclusively, and read by
// readers under mu shared (the appender may read them without mu). Fields
// marked (appendMu) belong to the appender alone. The files are opened on
// demand through the log's FileCache (filecache.go) and are safe for
// concurrent use; bytes below size are never rewritten.
type segment struct {
	base    int64
	path    string // .log path
	log     *segFile
	idxFile *segFile
	timeIdx *segFile
	txnIdx  *segFile

	size      int64        // (mu) bytes of complete, committed frames
	next      int64        // (mu) offset after the last batch
	index     []indexEntry // (mu) sparse offset index
	times     []timeEntry  // (mu) time index
	maxTS     int64        // (mu) largest batch max timestamp, -1 when empty
	maxTSBase int64        // (mu) base offset of the first batch holding maxTS
	aborted   []AbortedTxn // (mu) aborted-transaction index (txnindex.go)

	created  time.Time // (appendMu) age origin for segment.ms
	sinceIdx int       // (appendMu) frame bytes appended since the last index entry
	idxSize  int64     // (appendMu) bytes of .index written
	timeSize int64     // (appendMu) bytes of .timeindex written
	txnSize  int64     // (appendMu) bytes of .txnindex written
	// txnMissing: the .txnindex did not exist when the segment was
	// opened (lost, or written before Sluice had one): recovery rebuilds
	// it rather than trust an empty file.
	txnMissing bool

	// recent remembers where the last appended batches' frames start (a
	// ring of recentFrames; recentN used, recentNext the next slot), so
	// that a read of the newest batches — every follower fetch right after
	// an append — starts at its frame instead of walking frame headers
	// from the last sparse index entry, one pread each (about 25 per
	// fetch of 100-byte records at the default index interval). cut
	// forgets them; every other way a segment loses frames replaces the
	// segment. (mu)
	recent     [recentFrames]framePos
	recentN    int
	recentNext int

	// tail is a copy of the segment's newest frames, the file's bytes
	// [tailPos, size), so that a read of them — a follower's fetch right
	// after an append, a consumer at the log end — is served from memory
	// rather than by preads (two per fetch: a header peek and the frame).
	// Its bytes are never rewritten: an append that does not fit starts a
	// new buffer (appends within its capacity write past what any reader
	// saw), so readers keep slices of it without a lock. It is empty when
	// the newest frame was larger than tailMax; cut and a roll drop it.
	// (mu)
	tail    []byte
	tailPos int64

	// wbFrom is where the writeback not yet started begins
	// (startWriteback, writebackChunk). (appendMu)
	wbFrom int64
	// dropFrom is where the bytes whose page-cache pages were not yet
	// dropped begin (Options.PageCacheWindow, dropCache). (appendMu)
	dropFrom int64
}

// writeFrame writes the frame hdr+b at pos of the .log (appender only).
func (s *segment) writeFrame(hdr, b []byte, pos int64) error {
	f, err := s.log.acquire()
	if err != nil {
		return err
	}
	err = writeFrame(f, hdr, b, pos)
	s.log.release()
	s.log.markDirty()
	return err
}

// advise starts the writeback of the bytes appended since the last call
// and, with a page-cache window w > 0, drops the pages of the bytes more
// than w behind them (Options.PageCacheWindow). Appender only; advisory:
// a .log that cannot be opened now is left alone.
func (s *segment) advise(w int64) {
	f, err := s.log.acquire()
	if err != nil {
		return
	}
	defer s.log.release()
	startWriteback(f, s.wbFrom, s.size-s.wbFrom)
	s.wbFrom = s.size
	if w > 0 && s.wbFrom-w > s.dropFrom {
		dropCache(f, s.dropFrom, s.wbFrom-w-s.dropFrom)
		s.dropFrom = s.wbFrom - w
	}
}

// writebackChunk is how many appended bytes of a segment go to the
// kernel's writeback at once (startWriteback), behind the appends.
const writebackChunk = 1 << 20

// recentFrames is how many appended frames a segment remembers: more than
// a follower trails the leader by in steady state (one fetch's batches).
const recentFrames = 16

// tailMax bounds a segment's in-memory copy of its newest frames (tail):
// more than a follower trails the leader by when records are produced one
// by one or in small batches, where the reads' system calls are a large
// part of each record's cost; large batches are read from the file.
const tailMax = 16 << 10

// keepTail adds the frame hdr+b, written at pos, to the in-memory tail;
// the caller holds mu exclusively.
func (s *segment) keepTail(pos int64, hdr, b []byte) {
	n := len(hdr) + len(b)
	if n > tailMax {
		s.dropTail()
		return
	}
	if len(s.tail) == 0 || s.tailPos+int64(len(s.tail)) != pos || len(s.tail)+n > tailMax {
		// A new buffer: readers may hold slices of the old one.
		s.tail, s.tailPos = make([]byte, 0, max(n, 4<<10)), pos
	}
	s.tail = append(append(s.tail, hdr...), b...)
}

// dropTail forgets the in-memory tail; the caller holds mu exclusively.
func (s *segment) dropTail() { s.tail, s.tailPos = nil, 0 }

// tailView returns the in-memory copy of the file's bytes [pos, size) when
// the tail holds all of them, else nil; the caller holds mu (size is the
// segment's size as of the same hold).
func (s *segment) tailView(pos, size int64) []byte {
	end := s.tailPos + int64(len(s.tail))
	if len(s.tail) == 0 || pos < s.tailPos || pos >= size || size != end {
		return nil
	}
	return s.tail[pos-s.tailPos : size-s.tailPos : size-s.tailPos]
}

// framePos is the start of a batch's frame in a segment.
type framePos struct{ base, pos int64 }

// rememberFrame records that the batch at base starts at pos; the caller
// holds mu exclusively.
func (s *segment) rememberFrame(base, pos int64) {
	s.recent[s.recentNext] = framePos{base: base, pos: pos}
	s.recentNext = (s.recentNext + 1) % recentFrames
	s.recentN = min(s.recentN+1, recentFrames)
}

// forgetFrames drops the remembered positions; the caller holds mu
// exclusively.
func (s *segment) forgetFrames() {
	s.recentN, s.recentNext = 0, 0
	s.dropTail()
}

// readStart returns where a read of offset may start its search: from,
// an index position at or before offset's frame, or a later remembered
// frame start that is still at or before it (frames are in offset order,
// so a frame whose base is <= offset starts at or before offset's frame).
// The caller holds mu.
func (s *segment) readStart(offset, from int64) int64 {
	best := from
	for _, f := range s.recent[:s.recentN] {
		if f.base <= offset && f.pos > best {
			best = f.pos
		}
	}
	return best
}

func segmentName(dir string, base int64, ext string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, ext))
}

// openSegment opens (creating if needed) the files of the segment at base
// into cache: each is opened once here, so that a failure to open one
// (EMFILE included) is this call's error, and later on demand.
// size is the .log file size; indexes are empty until loaded or scanned.
func openSegment(cache *FileCache, dir string, base int64, now time.Time) (*segment, error) {
	s := &segment{base: base, path: segmentName(dir, base, ".log"), next: base, maxTS: -1, maxTSBase: -1, created: now}
	var err error
	const flag = os.O_CREATE | os.O_RDWR
	if s.log, err = openSegFile(cache, s.path, flag); err != nil {
		return nil, err
	}
	return s.openIndexes(cache, dir, now)
}

// createFirstSegment starts a new, empty log's first segment at base:
// its log file is created now, its index files (empty) at their first
// use. A new log thus costs one file creation instead of four, which is
// most of creating thousands of partitions (issue 31). Crash safety is
// unchanged: the active segment is always scanned at an unclean open, its
// missing indexes rebuilt from it (and a missing transaction index from
// it, the log's only segment, or the first of several: nothing before
// it), and a rolled segment's files are created by its sync at the latest
// (segFile.Sync of a created file) before the recovery point passes it.
func createFirstSegment(cache *FileCache, dir string, base int64, now time.Time) (*segment, error) {
	s := &segment{base: base, path: segmentName(dir, base, ".log"), next: base, maxTS: -1, maxTSBase: -1, created: now}
	var err error
	const flag = os.O_CREATE | os.O_RDWR
	if s.log, err = openSegFile(cache, s.path, flag); err != nil {
		return nil, err
	}
	s.idxFile = newSegFile(cache, segmentName(dir, base, ".index"), flag)
	s.timeIdx = newSegFile(cache, segmentName(dir, base, ".timeindex"), flag)
	s.txnIdx = newSegFile(cache, segmentName(dir, base, ".txnindex"), flag)
	return s, nil
}

// openIndexes opens (creating) s's index files and reads its log file's
// size and age; on failure s is closed.
func (s *segment) openIndexes(cache *FileCache, dir string, now time.Time) (*segment, error) {
	var err error
	base := s.base
	const flag = os.O_CREATE | os.O_RDWR
	if s.idxFile, err = openSegFile(cache, segmentName(dir, base, ".index"), flag); err != nil {
		s.close()
		return nil, err
	}
	if s.timeIdx, err = openSegFile(cache, segmentName(dir, base, ".timeindex"), flag); err != nil {
		s.close()
		return nil, err
	}
	txnPath := segmentName(dir, base, ".txnindex")
	s.txnMissing = !fileExists(txnPath)
	if s.txnIdx, err = openSegFile(cache, txnPath, flag); err != nil {
		s.close()
		return nil, err
	}
	st, err := s.log.Stat()
	if err != nil {
		s.close()
		return nil, err
	}
	s.size = st.Size()
	if s.size > 0 {
		// A reopened segment ages from its first batch's timestamp (as
		// Kafka does), else from the file's modification time; both are
		// at or after the first append, so a segment never rolls early.
		s.created = st.ModTime()
		if h, _, err := s.peek(0, s.size); err == nil && h.MaxTimestamp > 0 && h.MaxTimestamp <= now.UnixMilli() {
			s.created = time.UnixMilli(h.MaxTimestamp)
		}
	}
	return s, nil
}

// close closes the segment's files for good (segFile.close): later
// operations on them fail with os.ErrClosed.
func (s *segment) close() error {
	var first error
	for _, f := range s.files() {
		if err := f.close(); err != nil && first == nil && !errors.Is(err, os.ErrClosed) {
			first = err
		}
	}
	return first
}

// files are the segment's files, .log first; nil ones (a segment whose
// open failed part way) are left out.
func (s *segment) files() []*segFile {
	out := make([]*segFile, 0, 4)
	for _, f := range [...]*segFile{s.log, s.idxFile, s.timeIdx, s.txnIdx} {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// file is the segment's file with extension ext (one of segmentExts).
func (s *segment) file(ext string) *segFile {
	switch ext {
	case ".log":
		return s.log
	case ".index":
		return s.idxFile
	case ".timeindex":
		return s.timeIdx
	case ".txnindex":
		return s.txnIdx
	}
	panic("storage: no segment file " + ext)
}

// sync fsyncs the segment's files written since their last fsync.
func (s *segment) sync() error {
	for _, f := range s.files() {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// remove closes and deletes the segment's files.
func (s *segment) remove() error {
	s.close()
	return removeSegmentFiles(filepath.Dir(s.path), s.base)
}

func removeSegmentFiles(dir string, base int64) error {
	var first error
	for _, ext := range []string{".log", ".index", ".timeindex", ".txnindex"} {
		if err := os.Remove(segmentName(dir, base, ext)); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// maxPeek is the largest frame prefix holding a whole batch header: tag,
// a varint length of at most 5 bytes, the canonical header.
const maxPeek = 1 + 5 + batch.HeaderSize

// peek reads the header of the frame at pos (the file holds limit valid
// bytes) and returns it with the frame's total size. It reads at most
// maxPeek bytes.
func (s *segment) peek(pos, limit int64) (batch.Header, int, error) {
	var buf [maxPeek]byte
	n := int64(len(buf))
	if limit-pos < n {
		n = limit - pos
	}
	if n <= 0 {
		return batch.Header{}, 0, batch.ErrShortFrame
	}
	if _, err := s.log.ReadAt(buf[:n], pos); err != nil && !errors.Is(err, io.EOF) {
		return batch.Header{}, 0, err
	}
	return peekFrame(buf[:n], limit-pos)
}

// peekFrame parses a frame prefix p of a region holding avail bytes.
func peekFrame(p []byte, avail int64) (batch.Header, int, error) {
	if len(p) == 0 {
		return batch.Header{}, 0, batch.ErrShortFrame
	}
	if p[0] != batch.FrameTag {
		return batch.Header{}, 0, fmt.Errorf("storage: frame tag 0x%02x", p[0])
	}
	l, m := protowire.ConsumeVarint(p[1:])
	if m < 0 {
		return batch.Header{}, 0, batch.ErrShortFrame
	}
	if l > MaxMessageBytesLimit*2 {
		return batch.Header{}, 0, fmt.Errorf("storage: frame length %d too large", l)
	}
	total := 1 + m + int(l)
	if int64(total) > avail {
		return batch.Header{}, 0, batch.ErrShortFrame
	}
	hb := p[1+m:]
	if len(hb) > int(l) {
		hb = hb[:l]
	}
	h, err := batch.ParseHeader(hb)
	return h, total, err
}

// entries are the index updates one appended batch causes.
type entries struct {
	idx     indexEntry
	addIdx  bool
	time    timeEntry
	addTime bool
}

// plan computes the index entries for batch h written at pos. Only the
// appender calls it.
//
// The time index is as sparse as the offset index (Kafka's rule): where
// an offset-index entry goes, a time entry for the running maximum goes
// too if the maximum grew since the last time entry. (One entry per
// batch whose timestamp was new cost a write per append — nearly every
// append — and 12 bytes per batch on disk and in memory.) The segment's
// exact maximum is kept in memory (maxTS) and written as a last entry
// when the segment is sealed (sealTimeIndex), so a sealed segment's last
// entry is its maximum.
func (s *segment) plan(h batch.Header, pos int64, intervalBytes int) entries {
	var e entries
	rel := uint32(h.BaseOffset - s.base)
	if len(s.index) == 0 || s.sinceIdx >= intervalBytes {
		e.idx, e.addIdx = indexEntry{rel: rel, pos: uint32(pos)}, true
		maxTS, maxBase := s.maxTS, s.maxTSBase
		if h.MaxTimestamp > maxTS {
			maxTS, maxBase = h.MaxTimestamp, h.BaseOffset
		}
		e.time, e.addTime = s.timeEntryFor(maxTS, maxBase)
	}
	return e
}

// timeEntryFor is the time entry recording that the running maximum
// reached ts at the batch at base, if that is more than the last entry
// says.
func (s *segment) timeEntryFor(ts, base int64) (timeEntry, bool) {
	last := int64(-1)
	if n := len(s.times); n > 0 {
		last = s.times[n-1].ts
	}
	if ts <= last {
		return timeEntry{}, false
	}
	return timeEntry{ts: ts, rel: uint32(base - s.base)}, true
}

// sealTimeIndex writes the time entry of the segment's maximum timestamp
// if the last entry does not already say it: before a segment is synced
// for good (a roll, a cleaned copy) or after a recovery scan, since a
// segment loaded without a scan takes its maximum from its last entry.
// The appender calls it; mu (nil for a segment no reader sees yet) is
// held for the in-memory update.
func (s *segment) sealTimeIndex(mu sync.Locker) error {
	te, ok := s.timeEntryFor(s.maxTS, s.maxTSBase)
	if !ok {
		return nil
	}
	if err := s.writeEntries(entries{time: te, addTime: true}); err != nil {
		return err
	}
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	s.times = append(s.times, te)
	return nil
}

// writeEntries appends planned entries to the index files (appender only,
// no lock needed: readers use the in-memory copies).
func (s *segment) writeEntries(e entries) error {
	if e.addIdx {
		if _, err := s.idxFile.WriteAt(encodeIndex(e.idx), s.idxSize); err != nil {
			return err
		}
		s.idxSize += indexEntrySize
	}
	if e.addTime {
		if _, err := s.timeIdx.WriteAt(encodeTimeIndex(e.time), s.timeSize); err != nil {
			return err
		}
		s.timeSize += timeIndexEntrySize
	}
	return nil
}

// apply publishes a written batch of frameLen bytes: the caller holds
// appendMu and mu exclusively.
func (s *segment) apply(h batch.Header, frameLen int, e entries) {
	if e.addIdx {
		s.index = append(s.index, e.idx)
		s.sinceIdx = 0
	}
	s.sinceIdx += frameLen
	s.rememberFrame(h.BaseOffset, s.size)
	if e.addTime {
		s.times = append(s.times, e.time)
	}
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSBase = h.MaxTimestamp, h.BaseOffset
	}
	s.size += int64(frameLen)
	s.next = h.NextOffset()
}

// readFrames returns whole frames of this segment holding offsets >=
// offset with base offsets below maxOffset, starting the search at pos (an
// index position at or before the wanted batch) and reading no further
// than size (the committed size snapshot). The first wanted batch is
// returned whole; further ones only while the frame total stays within
// maxBytes. The returned slices share one buffer the frames are read into
// (from alloc, or allocated when alloc is nil), or, when mem is the
// in-memory copy of [pos, size) (tailView), are slices of it.
func (s *segment) readFrames(pos, size, offset int64, maxBytes int, maxOffset int64, mem []byte, alloc func(int) []byte) ([][]byte, int64, error) {
	// Skip the batches between the index entry and offset by reading only
	// their headers.
	first := 0
	memPos := pos // the file position of mem[0]
	for {
		if pos >= size {
			return nil, offset, nil
		}
		var h batch.Header
		var n int
		var err error
		if mem != nil {
			h, n, err = peekFrame(mem[pos-memPos:], size-pos)
		} else {
			h, n, err = s.peek(pos, size)
		}
		if err != nil {
			return nil, offset, fmt.Errorf("storage: bad frame at %s:%d: %w", s.path, pos, err)
		}
		if h.BaseOffset >= maxOffset {
			return nil, offset, nil
		}
		if h.LastOffset() >= offset {
			first = n
			break
		}
		pos += int64(n)
	}
	want := int64(max(first, maxBytes))
	if want > size-pos {
		want = size - pos
	}
	var buf []byte
	if mem != nil {
		buf = mem[pos-memPos : pos-memPos+want]
	} else {
		if alloc != nil {
			buf = alloc(int(want))[:want]
		} else {
			buf = make([]byte, want)
		}
		n, err := s.log.ReadAt(buf, pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, offset, err
		}
		// A short read (the file truncated under the read, which Read
		// then retries) leaves the rest of an alloc buffer as it was:
		// only what was read is parsed.
		buf = buf[:n]
	}
	var out [][]byte
	total := 0
	next := offset
	for len(buf) > 0 {
		b, n, err := batch.NextFrame(buf)
		if errors.Is(err, batch.ErrShortFrame) && len(out) > 0 {
			break // the next frame does not fit in maxBytes
		}
		if err != nil {
			return nil, offset, fmt.Errorf("storage: bad frame at %s:%d: %w", s.path, pos, err)
		}
		h, err := batch.ParseHeader(b)
		if err != nil {
			return nil, offset, fmt.Errorf("storage: bad batch at %s:%d: %w", s.path, pos, err)
		}
		if h.BaseOffset >= maxOffset || (len(out) > 0 && total+n > maxBytes) {
			break
		}
		out = append(out, b[:len(b):len(b)])
		total += n
		next = h.NextOffset()
		buf = buf[n:]
		pos += int64(n)
	}
	return out, next, nil
}
