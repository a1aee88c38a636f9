package storage

import (
	"encoding/binary"
	"sort"
)

// Index files are append-only arrays of fixed-size little-endian entries.
// They are a cache: recovery rebuilds them from the .log when they are
// missing or inconsistent.
const (
	indexEntrySize     = 8  // relative offset uint32, position uint32
	timeIndexEntrySize = 12 // max timestamp int64, relative offset uint32
)

// indexEntry maps the base offset of a batch (relative to the segment base)
// to the file position of its frame.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry records that the batch at rel is the first whose max timestamp
// reached ts.
type timeEntry struct {
	ts  int64
	rel uint32
}

func encodeIndex(e indexEntry) []byte {
	var b [indexEntrySize]byte
	binary.LittleEndian.PutUint32(b[0:], e.rel)
	binary.LittleEndian.PutUint32(b[4:], e.pos)
	return b[:]
}

func encodeTimeIndex(e timeEntry) []byte {
	var b [timeIndexEntrySize]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(e.ts))
	binary.LittleEndian.PutUint32(b[8:], e.rel)
	return b[:]
}

// decodeIndex parses index bytes; ok is false if they are not a valid,
// strictly increasing index for a log of logSize bytes.
func decodeIndex(data []byte, logSize int64) ([]indexEntry, bool) {
	if len(data)%indexEntrySize != 0 {
		return nil, false
	}
	out := make([]indexEntry, 0, len(data)/indexEntrySize)
	for i := 0; i < len(data); i += indexEntrySize {
		e := indexEntry{binary.LittleEndian.Uint32(data[i:]), binary.LittleEndian.Uint32(data[i+4:])}
		if int64(e.pos) >= logSize {
			return nil, false
		}
		if n := len(out); n > 0 && (e.rel <= out[n-1].rel || e.pos <= out[n-1].pos) {
			return nil, false
		}
		out = append(out, e)
	}
	return out, true
}

func decodeTimeIndex(data []byte) ([]timeEntry, bool) {
	if len(data)%timeIndexEntrySize != 0 {
		return nil, false
	}
	out := make([]timeEntry, 0, len(data)/timeIndexEntrySize)
	for i := 0; i < len(data); i += timeIndexEntrySize {
		e := timeEntry{int64(binary.LittleEndian.Uint64(data[i:])), binary.LittleEndian.Uint32(data[i+8:])}
		if n := len(out); n > 0 && (e.ts <= out[n-1].ts || e.rel < out[n-1].rel) {
			return nil, false
		}
		out = append(out, e)
	}
	return out, true
}

// lookupIndex returns the position of the last indexed batch whose
// relative base offset is <= rel (0 when none).
func lookupIndex(idx []indexEntry, rel uint32) int64 {
	i := sort.Search(len(idx), func(i int) bool { return idx[i].rel > rel })
	if i == 0 {
		return 0
	}
	return int64(idx[i-1].pos)
}

// lookupTime returns the relative offset from which to scan for the first
// record with timestamp >= ts. Entries are sparse (segment.plan): each
// says the running maximum reached ts at batch rel, and every batch up to
// where an entry was written is no newer than it. So every batch up to the
// last entry below ts is older than ts, and the scan starts at that
// entry's batch (the segment's first batch when there is none).
func lookupTime(tidx []timeEntry, ts int64) uint32 {
	i := sort.Search(len(tidx), func(i int) bool { return tidx[i].ts >= ts })
	if i == 0 {
		return 0
	}
	return tidx[i-1].rel
}
