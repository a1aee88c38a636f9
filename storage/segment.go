package storage

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// segment is one .log file with its indexes. Its fields are guarded by
// the owning Log's mu; the file handles are safe for concurrent ReadAt.
type segment struct {
	base    int64
	path    string // .log path
	log     *os.File
	idxFile *os.File
	timeIdx *os.File

	size      int64 // bytes of complete frames
	next      int64 // offset after the last batch
	index     []indexEntry
	times     []timeEntry
	maxTS     int64 // largest batch max timestamp, -1 when empty
	maxTSBase int64 // base offset of the batch holding maxTS
	created   time.Time
	sinceIdx  int // bytes appended since the last index entry
}

func segmentName(dir string, base int64, ext string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, ext))
}

// openSegment opens (creating if needed) the files of the segment at base.
func openSegment(dir string, base int64, now time.Time) (*segment, error) {
	s := &segment{base: base, path: segmentName(dir, base, ".log"), next: base, maxTS: -1, maxTSBase: -1, created: now}
	var err error
	if s.log, err = os.OpenFile(s.path, os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		return nil, err
	}
	if s.idxFile, err = os.OpenFile(segmentName(dir, base, ".index"), os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		s.close()
		return nil, err
	}
	if s.timeIdx, err = os.OpenFile(segmentName(dir, base, ".timeindex"), os.O_CREATE|os.O_RDWR, 0o644); err != nil {
		s.close()
		return nil, err
	}
	st, err := s.log.Stat()
	if err != nil {
		s.close()
		return nil, err
	}
	s.size = st.Size()
	if !st.ModTime().IsZero() && s.size > 0 {
		s.created = st.ModTime()
	}
	return s, nil
}

func (s *segment) close() error {
	var first error
	for _, f := range []*os.File{s.log, s.idxFile, s.timeIdx} {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (s *segment) remove() error {
	s.close()
	var first error
	for _, ext := range []string{".log", ".index", ".timeindex"} {
		if err := os.Remove(segmentName(filepath.Dir(s.path), s.base, ext)); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

// track updates the in-memory indexes for a batch written at pos, and
// appends the new index entries to the index files.
func (s *segment) track(h batch.Header, pos int64, frameLen int, intervalBytes int) error {
	rel := uint32(h.BaseOffset - s.base)
	if len(s.index) == 0 || s.sinceIdx >= intervalBytes {
		e := indexEntry{rel: rel, pos: uint32(pos)}
		s.index = append(s.index, e)
		s.sinceIdx = 0
		if s.idxFile != nil {
			if _, err := s.idxFile.Write(encodeIndex(e)); err != nil {
				return err
			}
		}
	}
	s.sinceIdx += frameLen
	if h.MaxTimestamp > s.maxTS {
		s.maxTS, s.maxTSBase = h.MaxTimestamp, h.BaseOffset
		e := timeEntry{ts: h.MaxTimestamp, rel: rel}
		s.times = append(s.times, e)
		if s.timeIdx != nil {
			if _, err := s.timeIdx.Write(encodeTimeIndex(e)); err != nil {
				return err
			}
		}
	}
	s.next = h.NextOffset()
	return nil
}

// resetIndexes empties the in-memory and on-disk indexes (before a scan
// rebuilds them).
func (s *segment) resetIndexes() error {
	s.index, s.times, s.sinceIdx = nil, nil, 0
	s.maxTS, s.maxTSBase, s.next = -1, -1, s.base
	for _, f := range []*os.File{s.idxFile, s.timeIdx} {
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	return nil
}

// scan reads frames from pos, verifying each batch (CRC, layout, offset
// continuity), and indexes them. It stops at the first bad or torn frame
// and returns the position of the end of the last good frame and whether
// the whole file was good.
func (s *segment) scan(pos int64, intervalBytes int) (end int64, clean bool, err error) {
	st, err := s.log.Stat()
	if err != nil {
		return pos, false, err
	}
	fileSize := st.Size()
	r := bufio.NewReaderSize(io.NewSectionReader(s.log, pos, fileSize-pos), 1<<20)
	var hdr [11]byte
	buf := make([]byte, 0, 64<<10)
	for pos < fileSize {
		// Frame: tag, varint length, batch.
		n, _ := io.ReadFull(r, hdr[:1])
		if n == 0 || hdr[0] != batch.FrameTag {
			return pos, false, nil
		}
		var length uint64
		var lenBytes int
		for shift := uint(0); ; shift += 7 {
			c, err := r.ReadByte()
			if err != nil || shift > 63 {
				return pos, false, nil
			}
			lenBytes++
			length |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
		}
		if length > MaxMessageBytesLimit*2 || pos+1+int64(lenBytes)+int64(length) > fileSize {
			return pos, false, nil
		}
		if cap(buf) < int(length) {
			buf = make([]byte, length)
		}
		b := buf[:length]
		if _, err := io.ReadFull(r, b); err != nil {
			return pos, false, nil
		}
		h, err := batch.Verify(b)
		if err != nil || h.BaseOffset != s.next {
			return pos, false, nil
		}
		frameLen := 1 + lenBytes + int(length)
		if err := s.track(h, pos, frameLen, intervalBytes); err != nil {
			return pos, false, err
		}
		pos += int64(frameLen)
	}
	return pos, true, nil
}

// readFrames reads whole frames starting at pos that hold offsets >=
// offset and start below maxOffset, up to maxBytes of frames (the first
// wanted batch always whole). size is the committed size snapshot.
func (s *segment) readFrames(pos, size, offset int64, maxBytes int, maxOffset int64) ([][]byte, int64, error) {
	want := int64(maxBytes) + 8<<10 // slack for batches below offset
	if want > size-pos {
		want = size - pos
	}
	if want <= 0 {
		return nil, offset, nil
	}
	buf := make([]byte, want)
	if _, err := s.log.ReadAt(buf, pos); err != nil && !errors.Is(err, io.EOF) {
		return nil, offset, err
	}
	var out [][]byte
	total := 0
	next := offset
	for len(buf) > 0 {
		b, n, err := batch.NextFrame(buf)
		if errors.Is(err, batch.ErrShortFrame) {
			if len(out) > 0 || len(buf) == 0 {
				break
			}
			// The first wanted batch is larger than the buffer: read it whole.
			l, m := frameLen(buf)
			if m <= 0 || pos+int64(l) > size {
				return nil, offset, fmt.Errorf("storage: torn frame at %s:%d", s.path, pos)
			}
			big := make([]byte, l)
			if _, err := s.log.ReadAt(big, pos); err != nil && !errors.Is(err, io.EOF) {
				return nil, offset, err
			}
			buf = big
			continue
		}
		if err != nil {
			return nil, offset, fmt.Errorf("storage: bad frame at %s:%d: %w", s.path, pos, err)
		}
		h, err := batch.ParseHeader(b)
		if err != nil {
			return nil, offset, err
		}
		if h.BaseOffset >= maxOffset {
			break
		}
		if h.LastOffset() >= offset {
			if len(out) > 0 && total+n > maxBytes {
				break
			}
			out = append(out, b)
			total += n
			next = h.NextOffset()
		}
		buf = buf[n:]
		pos += int64(n)
	}
	return out, next, nil
}

// frameLen returns the total frame length from its start, and the number
// of header bytes (<= 0 if the length is not readable).
func frameLen(b []byte) (int, int) {
	if len(b) < 2 {
		return 0, 0
	}
	var l uint64
	for i, shift := 1, uint(0); i < len(b) && i < 11; i, shift = i+1, shift+7 {
		l |= uint64(b[i]&0x7f) << shift
		if b[i] < 0x80 {
			return 1 + i + int(l), i + 1
		}
	}
	return 0, 0
}
