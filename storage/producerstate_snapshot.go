package storage

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"strings"
)

// Producer-state snapshots: the state as of an offset, written at segment
// roll (DESIGN §5) so that recovery replays only the log after it.
//
// File: <offset>.snapshot in the partition directory, the offset in 20
// digits like segment names (Kafka's LogFileUtils.producerSnapshotFile),
// where offset is the log end offset the state covers: it reflects every
// batch below offset and none at or above it.
//
// Format version 2, little-endian like the canonical batch header:
//
//	off  size
//	0    4    magic "SLPS"
//	4    2    version (2)
//	6    4    CRC-32C (Castagnoli) of bytes [10, end)
//	10   4    producer count n
//	14   ...  n producers, ascending producer id, each:
//	          8 producer id, 2 epoch, 1 flags (bit 0: complete, see
//	          producerEntry), 1 batch count k (<= 5), 8 last timestamp,
//	          8 first offset of the open transaction (-1: none),
//	          8 last offset applied,
//	          4 coordinator epoch of the last marker (-1: none),
//	          8 start time of the open transaction (ms; -1: none),
//	          then k batches oldest first, each: 4 first sequence,
//	          4 last sequence, 8 first offset, 8 last offset,
//	          8 max timestamp.
//
// Version 1 is the same without the coordinator epoch and the start time
// (the 12 bytes before the batches). It is still read: its producers have
// no coordinator epoch (the next marker sets it) and an open
// transaction's start is taken from its first batch's max timestamp when
// that batch is remembered, else from the last timestamp. Snapshot writes
// version 2 only.
//
// Kafka's snapshot (ProducerStateManager.writeSnapshot: version int16, CRC-32C
// of the entries, then per producer only the last batch) is the model; this
// one keeps all 5 remembered batches, so a retry of any of them is still
// found a duplicate after a restart, and the completeness flag used by
// TruncateTo. The body is deterministic: equal states give equal bytes.

// ErrCorruptProducerSnapshot is wrapped by every LoadSnapshot error: a bad
// magic, an unknown version, a CRC mismatch, a truncated or over-long body,
// or values no state can hold. The caller discards the file and rebuilds
// from the log (Kafka's CorruptSnapshotException, handled the same way in
// ProducerStateManager.loadFromSnapshot).
var ErrCorruptProducerSnapshot = errors.New("storage: corrupt producer-state snapshot")

const (
	producerSnapshotMagic   = "SLPS"
	producerSnapshotVersion = 2
	producerSnapshotHeader  = 14 // magic, version, CRC, count
	producerSnapshotEntryV1 = 8 + 2 + 1 + 1 + 8 + 8 + 8
	producerSnapshotEntry   = producerSnapshotEntryV1 + 4 + 8
	producerSnapshotBatch   = 4 + 4 + 8 + 8 + 8
	producerSnapshotSuffix  = ".snapshot"

	snapshotFlagComplete = 1
)

var producerSnapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// Snapshot encodes the state in format version 2. The result is the
// caller's; s is unchanged. Write it durably (WriteFileAtomic) as
// SnapshotFileName(offset) where offset is the log end offset of the state.
func (s *ProducerState) Snapshot() []byte {
	entries := s.sortedEntries()
	size := producerSnapshotHeader
	for _, e := range entries {
		size += producerSnapshotEntry + len(e.batches)*producerSnapshotBatch
	}
	b := make([]byte, producerSnapshotHeader, size)
	copy(b, producerSnapshotMagic)
	binary.LittleEndian.PutUint16(b[4:], producerSnapshotVersion)
	binary.LittleEndian.PutUint32(b[10:], uint32(len(entries)))
	le := binary.LittleEndian
	for _, e := range entries {
		var flags byte
		if e.complete {
			flags |= snapshotFlagComplete
		}
		b = le.AppendUint64(b, uint64(e.id))
		b = le.AppendUint16(b, uint16(e.epoch))
		b = append(b, flags, byte(len(e.batches)))
		b = le.AppendUint64(b, uint64(e.lastTimestamp))
		b = le.AppendUint64(b, uint64(e.txnFirstOffset))
		b = le.AppendUint64(b, uint64(e.lastOffset))
		b = le.AppendUint32(b, uint32(e.coordinatorEpoch))
		b = le.AppendUint64(b, uint64(e.txnStartTime))
		for _, m := range e.batches {
			b = le.AppendUint32(b, uint32(m.FirstSeq))
			b = le.AppendUint32(b, uint32(m.LastSeq))
			b = le.AppendUint64(b, uint64(m.FirstOffset))
			b = le.AppendUint64(b, uint64(m.LastOffset))
			b = le.AppendUint64(b, uint64(m.MaxTimestamp))
		}
	}
	le.PutUint32(b[6:], crc32.Checksum(b[10:], producerSnapshotCRC))
	return b
}

func corruptSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptProducerSnapshot, fmt.Sprintf(format, args...))
}

// LoadSnapshot decodes a snapshot written by Snapshot, in format version
// 2 or 1 (see the format above). Any error wraps
// ErrCorruptProducerSnapshot, and then nothing of data is trusted. The
// state returned has no bound on producer ids (call SetMaxProducers) and
// keeps producers that have expired since the snapshot was written (call
// ExpireBefore; Kafka drops them while loading). data is not retained.
func LoadSnapshot(data []byte) (*ProducerState, error) {
	if len(data) < producerSnapshotHeader {
		return nil, corruptSnapshot("%d bytes is shorter than the %d-byte header", len(data), producerSnapshotHeader)
	}
	if string(data[:4]) != producerSnapshotMagic {
		return nil, corruptSnapshot("bad magic %q", data[:4])
	}
	le := binary.LittleEndian
	version := le.Uint16(data[4:])
	entrySize := int64(producerSnapshotEntry)
	switch version {
	case producerSnapshotVersion:
	case 1:
		entrySize = producerSnapshotEntryV1
	default:
		return nil, corruptSnapshot("unknown version %d (this broker reads 1 and %d)", version, producerSnapshotVersion)
	}
	if want, got := le.Uint32(data[6:]), crc32.Checksum(data[10:], producerSnapshotCRC); want != got {
		return nil, corruptSnapshot("CRC %08x does not match computed %08x", want, got)
	}
	n := int64(le.Uint32(data[10:]))
	p := data[producerSnapshotHeader:]
	if n*entrySize > int64(len(p)) {
		return nil, corruptSnapshot("%d producers cannot fit in %d bytes", n, len(p))
	}
	s := NewProducerState(0)
	prev := int64(0)
	for i := int64(0); i < n; i++ {
		if int64(len(p)) < entrySize {
			return nil, corruptSnapshot("producer %d of %d is truncated", i, n)
		}
		e := &producerEntry{
			id:               int64(le.Uint64(p[0:])),
			epoch:            int16(le.Uint16(p[8:])),
			lastTimestamp:    int64(le.Uint64(p[12:])),
			txnFirstOffset:   int64(le.Uint64(p[20:])),
			lastOffset:       int64(le.Uint64(p[28:])),
			coordinatorEpoch: NoCoordinatorEpoch,
			txnStartTime:     -1,
		}
		if version >= 2 {
			e.coordinatorEpoch = int32(le.Uint32(p[36:]))
			e.txnStartTime = int64(le.Uint64(p[40:]))
		}
		flags, k := p[10], int(p[11])
		p = p[entrySize:]
		if flags&^snapshotFlagComplete != 0 {
			return nil, corruptSnapshot("producer %d has unknown flags 0x%02x", e.id, flags)
		}
		e.complete = flags&snapshotFlagComplete != 0
		if k > ProducerBatchesRetained || len(p) < k*producerSnapshotBatch {
			return nil, corruptSnapshot("producer %d: %d batches (max %d, %d bytes left)", e.id, k, ProducerBatchesRetained, len(p))
		}
		e.batches = make([]BatchMetadata, k, ProducerBatchesRetained)
		for j := range e.batches {
			e.batches[j] = BatchMetadata{
				FirstSeq:     int32(le.Uint32(p[0:])),
				LastSeq:      int32(le.Uint32(p[4:])),
				FirstOffset:  int64(le.Uint64(p[8:])),
				LastOffset:   int64(le.Uint64(p[16:])),
				MaxTimestamp: int64(le.Uint64(p[24:])),
			}
			p = p[producerSnapshotBatch:]
		}
		if version == 1 && e.txnFirstOffset >= 0 {
			e.txnStartTime = v1TxnStart(e)
		}
		if err := validSnapshotEntry(e, prev); err != nil {
			return nil, err
		}
		prev = e.id
		s.producers[e.id] = e
		s.setTxn(e, e.txnFirstOffset, e.txnStartTime)
		heap.Push(&s.byAge, e)
	}
	if len(p) != 0 {
		return nil, corruptSnapshot("%d bytes after the last producer", len(p))
	}
	return s, nil
}

// v1TxnStart is the best start time a version 1 snapshot gives for e's
// open transaction: its first batch's max timestamp if remembered, else
// the producer's last timestamp.
func v1TxnStart(e *producerEntry) int64 {
	for _, m := range e.batches {
		if m.FirstOffset == e.txnFirstOffset {
			return m.MaxTimestamp
		}
	}
	return e.lastTimestamp
}

// validSnapshotEntry checks what every state built by Update holds, so a
// snapshot with a valid CRC but wrong contents (a bug, another format) is
// refused rather than loaded.
func validSnapshotEntry(e *producerEntry, prev int64) error {
	switch {
	case e.id <= prev:
		return corruptSnapshot("producer %d after %d: ids must be positive and ascending", e.id, prev)
	case e.epoch < 0:
		return corruptSnapshot("producer %d has epoch %d", e.id, e.epoch)
	case e.txnFirstOffset < -1:
		return corruptSnapshot("producer %d has transaction first offset %d", e.id, e.txnFirstOffset)
	case e.coordinatorEpoch < NoCoordinatorEpoch:
		return corruptSnapshot("producer %d has coordinator epoch %d", e.id, e.coordinatorEpoch)
	case (e.txnFirstOffset < 0) != (e.txnStartTime == -1):
		return corruptSnapshot("producer %d has transaction first offset %d but start time %d", e.id, e.txnFirstOffset, e.txnStartTime)
	}
	last := int64(-1)
	for _, m := range e.batches {
		if m.FirstSeq < 0 || m.LastSeq < 0 || m.FirstOffset <= last || m.LastOffset < m.FirstOffset {
			return corruptSnapshot("producer %d has batch seq %d..%d at offsets %d..%d after offset %d", e.id, m.FirstSeq, m.LastSeq, m.FirstOffset, m.LastOffset, last)
		}
		last = m.LastOffset
	}
	if e.lastOffset < last {
		return corruptSnapshot("producer %d: last offset %d is below its last batch's %d", e.id, e.lastOffset, last)
	}
	return nil
}

// SnapshotFileName is the name of the snapshot of the state at log end
// offset offset (>= 0): 20 digits and ".snapshot".
func SnapshotFileName(offset int64) string {
	return fmt.Sprintf("%020d%s", offset, producerSnapshotSuffix)
}

// ParseSnapshotFileName returns the offset of a name made by
// SnapshotFileName (a base name, no directory). Anything else, such as the
// ".snapshot.tmp" left by an interrupted WriteFileAtomic, is false.
func ParseSnapshotFileName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, producerSnapshotSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	off, err := strconv.ParseInt(digits, 10, 64)
	if err != nil { // beyond MaxInt64
		return 0, false
	}
	return off, true
}

// LatestSnapshotOffset is the largest of the snapshot offsets that is <= x:
// the snapshot to rebuild the state at x from (see Replay). ok is false
// when there is none; the rebuild then starts from an empty state at the
// log start offset.
func LatestSnapshotOffset(offsets []int64, x int64) (offset int64, ok bool) {
	offset = math.MinInt64
	for _, o := range offsets {
		if o <= x && o > offset {
			offset, ok = o, true
		}
	}
	if !ok {
		return 0, false
	}
	return offset, true
}

// StaleSnapshots returns the snapshot offsets to delete for a log holding
// [logStartOffset, logEndOffset): those above the log end, which describe
// batches truncated away (Kafka's truncateAndReload removes them), and
// those below the log start, whose replay would need deleted batches
// (Kafka deletes the snapshots of deleted segments). A snapshot at exactly
// the log start is kept, unlike Kafka's truncateAndReload (which also drops
// offset == logStartOffset): it is the complete state at the log start,
// including producers whose batches retention has deleted, so a restart
// still knows them. Moving the log start changes nothing in the in-memory
// state: Kafka 4 keeps producers until they expire
// (ProducerStateManager.onLogStartOffsetIncremented; truncateAndReload: "do
// not remove producer state from the map").
func StaleSnapshots(offsets []int64, logStartOffset, logEndOffset int64) []int64 {
	var out []int64
	for _, o := range offsets {
		if o < logStartOffset || o > logEndOffset {
			out = append(out, o)
		}
	}
	return out
}
