package storage

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// The aborted-transaction index (DESIGN §5, §10): Kafka's TransactionIndex.
// Each segment's .txnindex lists, in the order their ABORT markers were
// appended, the transactions whose ABORT marker is in that segment. A
// read_committed read uses it to leave out the batches of aborted
// transactions (Log.ReadCommitted) without decoding a single record.
//
// File: <base>.txnindex beside the segment's .log, an append-only array of
// 32-byte little-endian entries (docs/record-format.md):
//
//	off size
//	0   8    producer id
//	8   8    first offset of the transaction
//	16  8    last offset: the offset of its ABORT marker
//	24  8    last stable offset right after the abort
//
// Kafka's entry (TransactionIndex.AbortedTxn) holds the same four values
// after a 2-byte version, big-endian; ours follows the other index files
// (little-endian, no version: the file is rebuilt from the log when it
// does not verify). Entries are appended when an ABORT marker is appended
// (leader: AppendControl; follower: AppendVerbatim) and rebuilt from the
// log by recovery for every rescanned segment; truncation cuts them with
// their markers and retention deletes them with their segment.

// AbortedTxn is one entry of the aborted-transaction index: producer
// ProducerID's transaction of offsets [FirstOffset, LastOffset] was
// aborted, LastOffset being its ABORT marker. LastStableOffset is the
// partition's last stable offset right after the abort, not counting the
// high watermark: the first offset of the oldest transaction of another
// producer then open, or LastOffset+1 (Kafka's
// ProducerStateManager.lastStableOffset(completedTxn)). A reader of
// offsets below LastStableOffset knows that every aborted transaction
// overlapping them has its entry in this segment or an earlier one.
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64
	LastStableOffset int64
}

// TxnIndexEntrySize is the size of one .txnindex entry in bytes.
const TxnIndexEntrySize = 32

func encodeAbortedTxn(t AbortedTxn) []byte {
	var b [TxnIndexEntrySize]byte
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(t.ProducerID))
	le.PutUint64(b[8:], uint64(t.FirstOffset))
	le.PutUint64(b[16:], uint64(t.LastOffset))
	le.PutUint64(b[24:], uint64(t.LastStableOffset))
	return b[:]
}

// TxnIndexError is why DecodeTxnIndex stopped: the entry at byte Position
// of the file is torn (the file ends inside it) or implausible.
type TxnIndexError struct {
	Position int64
	Reason   string
}

func (e *TxnIndexError) Error() string {
	return fmt.Sprintf("position %d: %s", e.Position, e.Reason)
}

// DecodeTxnIndex parses the .txnindex of the segment of base offset base,
// for recovery and for tools (sluice dump-log). It returns the entries
// before the first one that is torn (the file is not a whole number of
// entries) or implausible (producer id <= 0, marker below base or not
// after the previous one, first offset negative or not before the marker,
// last stable offset negative or above marker+1), and then a
// *TxnIndexError naming that entry's byte position; err is nil when every
// entry verifies. It reads data only.
func DecodeTxnIndex(data []byte, base int64) ([]AbortedTxn, error) {
	le := binary.LittleEndian
	out := make([]AbortedTxn, 0, len(data)/TxnIndexEntrySize)
	for i := 0; i < len(data); i += TxnIndexEntrySize {
		if len(data)-i < TxnIndexEntrySize {
			return out, &TxnIndexError{int64(i), fmt.Sprintf("torn entry: %d trailing bytes, an entry is %d", len(data)-i, TxnIndexEntrySize)}
		}
		t := AbortedTxn{
			ProducerID:       int64(le.Uint64(data[i:])),
			FirstOffset:      int64(le.Uint64(data[i+8:])),
			LastOffset:       int64(le.Uint64(data[i+16:])),
			LastStableOffset: int64(le.Uint64(data[i+24:])),
		}
		bad := ""
		switch {
		case t.ProducerID <= 0:
			bad = "producer id is not positive"
		case t.LastOffset < base:
			bad = fmt.Sprintf("last offset is below the segment's base offset %d", base)
		case t.FirstOffset < 0 || t.FirstOffset >= t.LastOffset:
			bad = "first offset is negative or not before the last offset"
		case t.LastStableOffset < 0 || t.LastStableOffset > t.LastOffset+1:
			bad = "last stable offset is negative or above last offset + 1"
		case len(out) > 0 && t.LastOffset <= out[len(out)-1].LastOffset:
			bad = fmt.Sprintf("last offset is not after the previous entry's %d", out[len(out)-1].LastOffset)
		}
		if bad != "" {
			return out, &TxnIndexError{int64(i), fmt.Sprintf("implausible entry {producer id %d, first offset %d, last offset %d, last stable offset %d}: %s",
				t.ProducerID, t.FirstOffset, t.LastOffset, t.LastStableOffset, bad)}
		}
		out = append(out, t)
	}
	return out, nil
}

// decodeTxnIndex parses a .txnindex of a segment holding offsets [base,
// next). ok is false when DecodeTxnIndex finds a problem or a marker is
// at or after next: then the index is rebuilt.
func decodeTxnIndex(data []byte, base, next int64) ([]AbortedTxn, bool) {
	out, err := DecodeTxnIndex(data, base)
	if err != nil || len(out) > 0 && out[len(out)-1].LastOffset >= next {
		return nil, false
	}
	return out, true
}

// loadTxnIndex loads the segment's .txnindex once its next offset is
// known; false means it must be rebuilt: it does not verify, or it was
// missing from a segment holding batches (deleted, or the segment predates
// the index), since an empty file would claim no transaction aborted
// there.
func (s *segment) loadTxnIndex() bool {
	if s.txnMissing && s.size > 0 {
		return false
	}
	data, err := os.ReadFile(segmentName(filepath.Dir(s.path), s.base, ".txnindex"))
	if err != nil {
		return false
	}
	ents, ok := decodeTxnIndex(data, s.base, s.next)
	if !ok {
		return false
	}
	s.aborted, s.txnSize = ents, int64(len(data))
	return true
}

// writeAborted appends entry t to the .txnindex file (appender only; the
// in-memory copy is published with apply's lock).
func (s *segment) writeAborted(t AbortedTxn) error {
	if _, err := s.txnIdx.WriteAt(encodeAbortedTxn(t), s.txnSize); err != nil {
		return err
	}
	s.txnSize += TxnIndexEntrySize
	return nil
}

// cutAborted drops the entries whose marker is at or after offset (they
// are truncated with their markers). The caller holds appendMu and mu;
// truncateIndexFiles cuts the file.
func (s *segment) cutAborted(offset int64) {
	k := sort.Search(len(s.aborted), func(i int) bool { return s.aborted[i].LastOffset >= offset })
	s.aborted = s.aborted[:k:k]
	s.txnSize = int64(k) * TxnIndexEntrySize
}

// collectAborted appends to out the entries of s overlapping [from, to):
// LastOffset >= from and FirstOffset < to. done reports that an entry's
// last stable offset reached to, so no later segment can hold an aborted
// transaction overlapping the range (Kafka's TxnIndexSearchResult
// isComplete). The caller holds mu shared.
func (s *segment) collectAborted(out []AbortedTxn, from, to int64) (_ []AbortedTxn, done bool) {
	for _, t := range s.aborted {
		if t.LastOffset >= from && t.FirstOffset < to {
			out = append(out, t)
		}
		if t.LastStableOffset >= to {
			return out, true
		}
	}
	return out, false
}
