// Package batch reads and writes the canonical encoding of sluice.v1.RecordBatch
// (docs/record-format.md) without decoding record payloads.
//
// A canonical batch is a protobuf encoding of RecordBatch whose fields 1..11
// are always present, in field order, with fixed-width types, at the fixed
// positions below, followed by the record entries (field 12) — or, in a
// compressed batch, one compressed_records field (13) holding Kafka's
// record encoding compressed (compressed.go, decision 67). The broker
// writes this form itself; any protobuf library can decode it. Producers
// may send any valid encoding, including a "simple" batch whose
// bookkeeping the broker fills (Canonicalize, decision 43).
package batch

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"iter"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Attribute bits of RecordBatch.attributes.
const (
	AttrCompressionMask uint32 = 0x7
	AttrLogAppendTime   uint32 = 1 << 3
	AttrTransactional   uint32 = 1 << 4
	AttrControl         uint32 = 1 << 5
)

// NoProducerID marks a batch from a plain (non-idempotent) producer.
const NoProducerID int64 = -1

// Field numbers and layout of the canonical header.
const (
	fieldRecords = 12

	offBaseOffset           = 1  // after tag 0x09
	offPartitionLeaderEpoch = 10 // after tag 0x15
	offCRC                  = 15 // after tag 0x1d
	offAttributes           = 20
	offLastOffsetDelta      = 25
	offBaseTimestamp        = 30
	offMaxTimestamp         = 39
	offProducerID           = 48
	offProducerEpoch        = 57
	offBaseSequence         = 62
	offRecordCount          = 67

	// CRCStart is the first byte covered by the CRC (the attributes tag).
	CRCStart = 19
	// HeaderSize is the size of the canonical header (fields 1..11).
	HeaderSize = 71

	recordTag = byte(fieldRecords<<3 | 2)
)

// headerTags are the tag bytes of fields 1..11 and their positions.
var headerTags = [11]struct {
	pos int
	tag byte
}{
	{0, 1<<3 | 1}, {9, 2<<3 | 5}, {14, 3<<3 | 5}, {19, 4<<3 | 5}, {24, 5<<3 | 5},
	{29, 6<<3 | 1}, {38, 7<<3 | 1}, {47, 8<<3 | 1}, {56, 9<<3 | 5}, {61, 10<<3 | 5},
	{66, 11<<3 | 5},
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded header of a batch.
type Header struct {
	BaseOffset           int64
	PartitionLeaderEpoch int32
	CRC                  uint32
	Attributes           uint32
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int32
	BaseSequence         int32
	RecordCount          int32
}

// LastOffset is the offset of the batch's last record.
func (h Header) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// NextOffset is the offset just past the batch.
func (h Header) NextOffset() int64 { return h.LastOffset() + 1 }

// IsTransactional reports the transactional attribute.
func (h Header) IsTransactional() bool { return h.Attributes&AttrTransactional != 0 }

// IsControl reports the control attribute.
func (h Header) IsControl() bool { return h.Attributes&AttrControl != 0 }

// LastSequence is the sequence of the batch's last record (wrapping after
// MaxInt32), or -1 for a plain producer.
func (h Header) LastSequence() int32 {
	if h.BaseSequence < 0 {
		return -1
	}
	return int32((int64(h.BaseSequence) + int64(h.LastOffsetDelta)) % (1 << 31))
}

func corrupt(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_CORRUPT_RECORD, format, args...)
}

func invalid(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_INVALID_RECORD, format, args...)
}

// ParseHeader decodes the header of a canonical batch. It checks the
// layout, not the CRC or the records.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, corrupt("batch of %d bytes is shorter than its %d-byte header", len(b), HeaderSize)
	}
	for _, t := range headerTags {
		if b[t.pos] != t.tag {
			return Header{}, corrupt("batch header is not canonical at byte %d", t.pos)
		}
	}
	return Header{
		BaseOffset:           int64(binary.LittleEndian.Uint64(b[offBaseOffset:])),
		PartitionLeaderEpoch: int32(binary.LittleEndian.Uint32(b[offPartitionLeaderEpoch:])),
		CRC:                  binary.LittleEndian.Uint32(b[offCRC:]),
		Attributes:           binary.LittleEndian.Uint32(b[offAttributes:]),
		LastOffsetDelta:      int32(binary.LittleEndian.Uint32(b[offLastOffsetDelta:])),
		BaseTimestamp:        int64(binary.LittleEndian.Uint64(b[offBaseTimestamp:])),
		MaxTimestamp:         int64(binary.LittleEndian.Uint64(b[offMaxTimestamp:])),
		ProducerID:           int64(binary.LittleEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int32(binary.LittleEndian.Uint32(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.LittleEndian.Uint32(b[offBaseSequence:])),
		RecordCount:          int32(binary.LittleEndian.Uint32(b[offRecordCount:])),
	}, nil
}

// RecordCount reads the record count of canonical batch b (at least
// HeaderSize bytes).
func RecordCount(b []byte) int32 {
	return int32(binary.LittleEndian.Uint32(b[offRecordCount:]))
}

// PutHeader writes h as a canonical header into b[:HeaderSize], including
// h.CRC as given.
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	for _, t := range headerTags {
		b[t.pos] = t.tag
	}
	binary.LittleEndian.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	binary.LittleEndian.PutUint32(b[offPartitionLeaderEpoch:], uint32(h.PartitionLeaderEpoch))
	binary.LittleEndian.PutUint32(b[offCRC:], h.CRC)
	binary.LittleEndian.PutUint32(b[offAttributes:], h.Attributes)
	binary.LittleEndian.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	binary.LittleEndian.PutUint64(b[offBaseTimestamp:], uint64(h.BaseTimestamp))
	binary.LittleEndian.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	binary.LittleEndian.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	binary.LittleEndian.PutUint32(b[offProducerEpoch:], uint32(h.ProducerEpoch))
	binary.LittleEndian.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	binary.LittleEndian.PutUint32(b[offRecordCount:], uint32(h.RecordCount))
}

// SetBaseOffset patches the base offset of a canonical batch in place
// (not covered by the CRC).
func SetBaseOffset(b []byte, off int64) {
	binary.LittleEndian.PutUint64(b[offBaseOffset:], uint64(off))
}

// SetPartitionLeaderEpoch patches the leader epoch of a canonical batch in
// place (not covered by the CRC).
func SetPartitionLeaderEpoch(b []byte, epoch int32) {
	binary.LittleEndian.PutUint32(b[offPartitionLeaderEpoch:], uint32(epoch))
}

// SetMaxTimestamp patches the max timestamp and recomputes the CRC.
func SetMaxTimestamp(b []byte, ts int64) {
	binary.LittleEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	binary.LittleEndian.PutUint32(b[offCRC:], ComputeCRC(b))
}

// SetLogAppendTime marks a canonical batch's timestamps as the broker's
// (message.timestamp.type=LogAppendTime): the timestamp-type attribute
// set and the max timestamp ts, which is then every record's timestamp
// (the records' own deltas stay, unread); the CRC is recomputed.
func SetLogAppendTime(b []byte, ts int64) {
	a := binary.LittleEndian.Uint32(b[offAttributes:])
	binary.LittleEndian.PutUint32(b[offAttributes:], a|AttrLogAppendTime)
	SetMaxTimestamp(b, ts)
}

// ComputeCRC returns the CRC-32C of a canonical batch's covered bytes.
func ComputeCRC(b []byte) uint32 { return crc32.Checksum(b[CRCStart:], castagnoli) }

// Verify checks a canonical batch completely: layout, record framing and
// count, last offset delta at least record count - 1 (more, and no records,
// after compaction), and CRC. It is what recovery and followers run; it does not look
// inside records (the CRC vouches for them). A compressed batch must
// hold exactly one field 13 (CompressedRecords), a known codec and at
// least one record; it is not decompressed.
func Verify(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.IsCompressed() {
		if err := verifyCompressed(b, h); err != nil {
			return h, err
		}
		if c := ComputeCRC(b); c != h.CRC {
			return h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
		}
		return h, nil
	}
	n, err := countRecords(b[HeaderSize:])
	if err != nil {
		return h, err
	}
	// A stored batch may have lost records to compaction (storage's
	// cleaner): it keeps its last offset delta, so it may exceed
	// record_count - 1, and it may hold no records at all (the last batch
	// of a producer, kept for its producer state). Producers' batches get
	// the strict rule in Canonicalize.
	if n != int(h.RecordCount) || h.LastOffsetDelta < 0 || h.LastOffsetDelta < h.RecordCount-1 {
		return h, corrupt("batch says %d records (last offset delta %d) but holds %d", h.RecordCount, h.LastOffsetDelta, n)
	}
	if c := ComputeCRC(b); c != h.CRC {
		return h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
	}
	return h, nil
}

// countRecords walks field-12 entries, checking only their framing.
func countRecords(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if b[0] != recordTag {
			return 0, corrupt("unexpected field tag 0x%02x among records", b[0])
		}
		l, m := protowire.ConsumeVarint(b[1:])
		if m < 0 || l > uint64(len(b)-1-m) {
			return 0, corrupt("record entry %d overruns the batch", n)
		}
		b = b[1+m+int(l):]
		n++
	}
	return n, nil
}

// Canonicalize checks a batch as a producer sent it (any valid protobuf
// encoding of RecordBatch) and returns its canonical form with max
// timestamp and CRC computed by the broker, and its header.
//
// Rules: at least one record; record_count and
// last_offset_delta agree with the records; record i has offset_delta i;
// record and header framing is well formed and header keys are UTF-8; a
// non-zero crc must match the canonical form of what was sent. A
// producer_id <= 0 (absent on the wire) means a plain producer and is
// stored as -1 with epoch and sequence -1.
//
// Simple produce (decision 43): a batch with record_count, last_offset_delta
// and crc all 0 (absent on the wire) and every record's offset_delta 0 has
// its bookkeeping filled by the broker: record_count and last_offset_delta
// from the records, and offset_delta i written into record i (see
// appendEntry). A batch with any of the three header fields non-zero
// gets the strict rules above; a simple batch with an offset_delta other
// than 0 is refused (INVALID_RECORD), not guessed at.
//
// A compressed batch (attributes bits 0-2 name a codec; decision 67)
// holds exactly one compressed_records field (13) and no record entries
// (INVALID_RECORD otherwise), a known codec (UNSUPPORTED_COMPRESSION_TYPE
// otherwise), and its record_count and last_offset_delta must be exact
// (no simple produce). Its records are not decompressed here: its
// max_timestamp is kept as sent until CheckCompressed, which a broker
// runs next, computes it.
//
// The result may share storage with in (and in may be modified): when in is
// already canonical, it is patched in place. A simple batch of more than
// one record is copied (its records grow). Errors are *errs.Error with
// CORRUPT_RECORD, INVALID_RECORD or UNSUPPORTED_COMPRESSION_TYPE.
//
// Canonicalize sets no bound on the result's size; a broker uses
// CanonicalizeMax.
func Canonicalize(in []byte) ([]byte, Header, error) {
	return CanonicalizeMax(in, math.MaxInt)
}

// CanonicalizeMax is Canonicalize for a broker's max.message.bytes: a batch
// whose canonical form would be larger than maxBytes is refused with
// MESSAGE_TOO_LARGE before anything is allocated. The size comes from the
// scan that checks the records, so a simple batch of many small records,
// which grows when its offset deltas are filled (an empty record of 2
// bytes becomes up to 8), is refused from its scan, not after it has been
// copied (issue 29: 20 MB of empty records cost 1.5 GB of allocation).
// A record_count larger than the bytes can hold (a record entry takes at
// least 2) is refused (INVALID_RECORD) before the records are walked.
func CanonicalizeMax(in []byte, maxBytes int) ([]byte, Header, error) {
	if !isCanonicalLayout(in) {
		return canonicalizeSlow(in, maxBytes)
	}
	h, _ := ParseHeader(in)
	if h.IsCompressed() {
		return canonicalizeCompressed(in, h, maxBytes)
	}
	simple := isSimple(&h)
	if err := checkRecordCount(&h, len(in)-HeaderSize); err != nil {
		return nil, h, err
	}
	s, err := walkRecords(in[HeaderSize:], h.BaseTimestamp, simple)
	if err == errNotCanonical {
		// Valid protobuf, perhaps, but not stored as sent: the slow
		// path re-frames the entries (and reports what is wrong).
		return canonicalizeSlow(in, maxBytes)
	}
	if err != nil {
		return nil, h, err
	}
	if err := checkSize(s.size(simple), maxBytes); err != nil {
		return nil, h, err
	}
	if simple {
		if err := simpleHeader(&h, s.n); err != nil {
			return nil, h, err
		}
		out := in
		if s.n > 1 {
			// Offset deltas 1..n-1 must be written: a copy of
			// exactly the size checked above.
			out = make([]byte, HeaderSize, s.size(simple))
			copy(out, in[:HeaderSize])
			for i, rec := range canonicalEntries(in[HeaderSize:]) {
				out = appendEntry(out, rec, i, true)
			}
		}
		finish(out, &h, s.maxTS)
		return out, h, nil
	}
	if h.CRC != 0 {
		if c := ComputeCRC(in); c != h.CRC {
			return nil, h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
		}
	}
	if err := checkHeader(&h, s.n); err != nil {
		return nil, h, err
	}
	finish(in, &h, s.maxTS)
	return in, h, nil
}

// minRecordEntry is the smallest record entry: its tag and a zero length
// (an empty Record).
const minRecordEntry = 2

// checkRecordCount refuses a record_count that recordBytes of record
// entries cannot hold (INVALID_RECORD), before they are walked. A simple
// batch (record_count 0) always passes: its count comes from the walk.
func checkRecordCount(h *Header, recordBytes int) error {
	if most := recordBytes / minRecordEntry; int64(h.RecordCount) > int64(most) {
		return invalid("record_count %d is more than the %d bytes of records can hold (at most %d)", h.RecordCount, recordBytes, most)
	}
	return nil
}

// checkSize refuses a canonical batch of size bytes over maxBytes
// (MESSAGE_TOO_LARGE).
func checkSize(size, maxBytes int) error {
	if size > maxBytes {
		return errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes in canonical form exceeds max.message.bytes %d", size, maxBytes)
	}
	return nil
}

func isCanonicalLayout(b []byte) bool {
	if len(b) < HeaderSize {
		return false
	}
	for _, t := range headerTags {
		if b[t.pos] != t.tag {
			return false
		}
	}
	return true
}

// checkHeader applies the header rules of an uncompressed batch shared
// by both paths (checkCompressedHeader those of a compressed one).
func checkHeader(h *Header, n int) error {
	if h.Attributes&^(AttrCompressionMask|AttrLogAppendTime|AttrTransactional|AttrControl) != 0 {
		return invalid("unknown attribute bits 0x%x", h.Attributes)
	}
	if n == 0 {
		return invalid("batch holds no records")
	}
	if int(h.RecordCount) != n {
		return invalid("record_count %d does not match the %d records sent", h.RecordCount, n)
	}
	if int(h.LastOffsetDelta) != n-1 {
		return invalid("last_offset_delta %d does not match the %d records sent", h.LastOffsetDelta, n)
	}
	return nil
}

// finish sets the broker-computed fields and the CRC.
func finish(b []byte, h *Header, maxTS int64) {
	if h.ProducerID <= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = NoProducerID, -1, -1
	}
	h.MaxTimestamp = maxTS
	PutHeader(b, *h)
	h.CRC = ComputeCRC(b)
	binary.LittleEndian.PutUint32(b[offCRC:], h.CRC)
}

// errNotCanonical means the bytes after a canonical header are not only
// canonically framed record entries (tag byte 0x62, minimal length
// varint): an overlong tag or length, or another field after the records.
// Such input may still be a valid RecordBatch; Canonicalize then takes the
// slow path, which re-frames the entries. Verify accepts only the 0x62 tag,
// so the fast path must never store another framing.
var errNotCanonical = errors.New("batch: records are not canonically framed")

// recordScan is what walking a batch's record entries learns, without
// copying them: enough to refuse the batch, or to allocate its canonical
// form once at its exact size.
type recordScan struct {
	maxTS int64 // largest record timestamp, at least the base timestamp
	n     int   // records
	// framed is the size of the entries canonically framed, as sent;
	// filled (counted for a simple batch only) their size with record i's
	// offset_delta set to i (any offset_delta field sent dropped), as
	// appendEntry writes them.
	framed, filled int
}

// add checks the value rec of record entry s.n and counts it. Record i
// must have offset_delta i, or 0 when simple (a simple-produce batch,
// whose deltas the broker fills).
func (s *recordScan) add(rec []byte, baseTS int64, simple bool) error {
	tsDelta, offDelta, deltaBytes, err := checkRecord(rec)
	if err != nil {
		return err
	}
	if simple && offDelta != 0 {
		return invalid("record %d has offset_delta %d in a batch with record_count 0 (simple produce: leave every offset_delta 0, or fill record_count, last_offset_delta and every offset_delta)", s.n, offDelta)
	}
	if !simple && int(offDelta) != s.n {
		return invalid("record %d has offset_delta %d", s.n, offDelta)
	}
	s.maxTS = max(s.maxTS, baseTS+tsDelta)
	s.framed += 1 + protowire.SizeBytes(len(rec))
	if simple {
		s.filled += 1 + protowire.SizeBytes(filledSize(len(rec), deltaBytes, s.n))
	}
	s.n++
	return nil
}

// size is the size of the canonical batch the scanned records make: a
// simple batch of more than one record gets its offset deltas filled; any
// other keeps its records as sent.
func (s *recordScan) size(simple bool) int {
	if simple && s.n > 1 {
		return HeaderSize + s.filled
	}
	return HeaderSize + s.framed
}

// filledSize is the size of record i, of size bytes of which deltaBytes
// are offset_delta fields, once appendEntry has filled its delta.
func filledSize(size, deltaBytes, i int) int {
	size -= deltaBytes
	if i > 0 {
		size += 1 + protowire.SizeVarint(protowire.EncodeZigZag(int64(i)))
	}
	return size
}

// walkRecords checks every record entry of b, which must be canonically
// framed (else errNotCanonical), and returns what the scan learnt.
func walkRecords(b []byte, baseTS int64, simple bool) (recordScan, error) {
	s := recordScan{maxTS: baseTS}
	for len(b) > 0 {
		if b[0] != recordTag {
			return s, errNotCanonical
		}
		rec, m := protowire.ConsumeBytes(b[1:])
		if m < 0 {
			return s, corrupt("record entry %d overruns the batch", s.n)
		}
		if m != protowire.SizeBytes(len(rec)) {
			return s, errNotCanonical
		}
		if err := s.add(rec, baseTS, simple); err != nil {
			return s, err
		}
		b = b[1+m:]
	}
	return s, nil
}

// canonicalEntries yields the index and value of each record entry of b,
// canonically framed entries that walkRecords has checked.
func canonicalEntries(b []byte) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		for i := 0; len(b) > 0; i++ {
			rec, m := protowire.ConsumeBytes(b[1:])
			if !yield(i, rec) {
				return
			}
			b = b[1+m:]
		}
	}
}

// checkRecord validates one encoded Record and returns its deltas and the
// bytes its offset_delta fields take (tags included).
func checkRecord(b []byte) (tsDelta int64, offDelta int32, deltaBytes int, err error) {
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return 0, 0, 0, corrupt("malformed record field tag")
		}
		b = b[m:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return 0, 0, 0, corrupt("malformed record timestamp_delta")
			}
			tsDelta = protowire.DecodeZigZag(v)
			b = b[k:]
		case num == 2 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return 0, 0, 0, corrupt("malformed record offset_delta")
			}
			d := protowire.DecodeZigZag(v & 0xffffffff)
			offDelta = int32(d)
			deltaBytes += m + k
			b = b[k:]
		case (num == 3 || num == 4) && typ == protowire.BytesType:
			_, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return 0, 0, 0, corrupt("record key or value overruns the record")
			}
			b = b[k:]
		case num == 5 && typ == protowire.BytesType:
			h, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return 0, 0, 0, corrupt("record header overruns the record")
			}
			if err := checkHeaderEntry(h); err != nil {
				return 0, 0, 0, err
			}
			b = b[k:]
		default:
			return 0, 0, 0, invalid("unexpected record field %d (wire type %d)", num, typ)
		}
	}
	return tsDelta, offDelta, deltaBytes, nil
}

func checkHeaderEntry(b []byte) error {
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 || typ != protowire.BytesType || (num != 1 && num != 2) {
			return invalid("malformed record header")
		}
		v, k := protowire.ConsumeBytes(b[m:])
		if k < 0 {
			return corrupt("record header overruns the record")
		}
		if num == 1 && !utf8.Valid(v) {
			return invalid("record header key is not UTF-8")
		}
		b = b[m+k:]
	}
	return nil
}

// canonicalizeSlow handles any field order and encoding by rebuilding the
// batch: header re-encoded, record entries copied byte for byte (or with
// their offset deltas filled, for a simple batch). It reads in three
// times — header and framing, then records, then the copy — so that
// nothing is allocated before the batch has been checked and its
// canonical size compared with maxBytes.
func canonicalizeSlow(in []byte, maxBytes int) ([]byte, Header, error) {
	h, crcGiven, recordBytes, compressed, err := parseSlow(in)
	if err != nil {
		return nil, h, err
	}
	if h.IsCompressed() || compressed != nil {
		return canonicalizeSlowCompressed(in, h, recordBytes, compressed, maxBytes)
	}
	simple := isSimple(&h)
	if err := checkRecordCount(&h, recordBytes); err != nil {
		return nil, h, err
	}
	s := recordScan{maxTS: h.BaseTimestamp}
	for rec := range slowEntries(in) {
		if err := s.add(rec, h.BaseTimestamp, simple); err != nil {
			return nil, h, err
		}
	}
	if err := checkSize(s.size(simple), maxBytes); err != nil {
		return nil, h, err
	}
	if simple {
		if err := simpleHeader(&h, s.n); err != nil {
			return nil, h, err
		}
	}
	fill := simple && s.n > 1
	out := make([]byte, HeaderSize, s.size(simple))
	i := 0
	for rec := range slowEntries(in) {
		out = appendEntry(out, rec, i, fill)
		i++
	}
	PutHeader(out, h)
	if simple {
		finish(out, &h, s.maxTS)
		return out, h, nil
	}
	if crcGiven {
		if c := ComputeCRC(out); c != h.CRC {
			return nil, h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
		}
	}
	if err := checkHeader(&h, s.n); err != nil {
		return nil, h, err
	}
	finish(out, &h, s.maxTS)
	return out, h, nil
}

// parseSlow reads the header fields of a batch in any field order and
// encoding and checks the framing of every field, records included; it
// returns the header, whether a non-zero crc was sent, the bytes of
// the record entries' values, and the compressed_records field (field
// 13; a repeated one is INVALID_RECORD).
func parseSlow(in []byte) (h Header, crcGiven bool, recordBytes int, compressed []byte, err error) {
	b := in
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return h, false, 0, nil, corrupt("malformed field tag in batch")
		}
		b = b[m:]
		var k int
		switch {
		case typ == protowire.Fixed64Type && (num == 1 || num == 6 || num == 7 || num == 8):
			var v uint64
			v, k = protowire.ConsumeFixed64(b)
			switch num {
			case 1:
				h.BaseOffset = int64(v)
			case 6:
				h.BaseTimestamp = int64(v)
			case 7:
				h.MaxTimestamp = int64(v)
			case 8:
				h.ProducerID = int64(v)
			}
		case typ == protowire.Fixed32Type && num >= 2 && num <= 11 && num != 6 && num != 7 && num != 8:
			var v uint32
			v, k = protowire.ConsumeFixed32(b)
			switch num {
			case 2:
				h.PartitionLeaderEpoch = int32(v)
			case 3:
				h.CRC, crcGiven = v, v != 0
			case 4:
				h.Attributes = v
			case 5:
				h.LastOffsetDelta = int32(v)
			case 9:
				h.ProducerEpoch = int32(v)
			case 10:
				h.BaseSequence = int32(v)
			case 11:
				h.RecordCount = int32(v)
			}
		case typ == protowire.BytesType && num == fieldRecords:
			var v []byte
			v, k = protowire.ConsumeBytes(b)
			// Counted at their smallest framing, so that
			// checkRecordCount's minimum entry holds.
			recordBytes += 1 + protowire.SizeBytes(len(v))
		case typ == protowire.BytesType && num == fieldCompressedRecords:
			var v []byte
			v, k = protowire.ConsumeBytes(b)
			if k >= 0 && compressed != nil {
				return h, false, 0, nil, invalid("compressed_records sent more than once")
			}
			if v == nil {
				v = []byte{} // present, even empty
			}
			compressed = v
		case typ > protowire.Fixed32Type || typ == protowire.StartGroupType || typ == protowire.EndGroupType:
			return h, false, 0, nil, corrupt("malformed batch: wire type %d", typ)
		default:
			return h, false, 0, nil, invalid("unexpected batch field %d (wire type %d)", num, typ)
		}
		if k < 0 {
			return h, false, 0, nil, corrupt("batch field %d overruns the batch", num)
		}
		b = b[k:]
	}
	return h, crcGiven, recordBytes, compressed, nil
}

// canonicalizeSlowCompressed is canonicalizeSlow for a batch that is
// compressed or carries compressed_records: both or neither, and no
// record entries beside them. compressed is field 13 as parseSlow found
// it (nil: absent).
func canonicalizeSlowCompressed(in []byte, h Header, recordBytes int, compressed []byte, maxBytes int) ([]byte, Header, error) {
	switch {
	case !h.IsCompressed():
		return nil, h, invalid("compressed_records in a batch whose attributes name no codec")
	case recordBytes > 0:
		return nil, h, invalid("a compressed batch carries its records in compressed_records only, not in records")
	case len(compressed) == 0:
		return nil, h, invalid("a compressed batch (codec %d) without compressed_records", h.Codec())
	}
	size := CompressedSize(len(compressed))
	if err := checkSize(size, maxBytes); err != nil {
		return nil, h, err
	}
	out := make([]byte, HeaderSize, size)
	out = AppendCompressedRecords(out, compressed)
	PutHeader(out, h)
	return finishCompressed(out, h)
}

// slowEntries yields the value of each record entry (field 12) of in, a
// batch in any field order whose framing parseSlow has checked.
func slowEntries(in []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for b := in; len(b) > 0; {
			num, typ, m := protowire.ConsumeTag(b)
			k := protowire.ConsumeFieldValue(num, typ, b[m:])
			if num == fieldRecords && typ == protowire.BytesType {
				rec, _ := protowire.ConsumeBytes(b[m:])
				if !yield(rec) {
					return
				}
			}
			b = b[m+k:]
		}
	}
}

// isSimple reports a simple-produce header (decision 43): record_count,
// last_offset_delta and crc all 0. The CRC covers the bookkeeping the
// broker would fill, so a producer that computes a CRC must fill the rest
// too.
func isSimple(h *Header) bool {
	return h.RecordCount == 0 && h.LastOffsetDelta == 0 && h.CRC == 0
}

// simpleHeader fills a simple-produce batch's record_count and
// last_offset_delta from its n records (checked by recordScan.add with
// simple set) and applies the header rules, before its records are
// copied. A batch of one record is then patched in place (offset_delta 0
// is already right); one of more is rebuilt with appendEntry.
func simpleHeader(h *Header, n int) error {
	h.RecordCount, h.LastOffsetDelta = int32(n), int32(n-1)
	return checkHeader(h, n)
}

// appendEntry appends record entry i, whose value is rec (a record that
// checkRecord has accepted), canonically framed. With fill (a simple
// batch, every offset_delta 0) it writes offset_delta i into the record:
// any offset_delta field present (an explicit 0) is dropped and one is
// inserted before the first field numbered above 2, so a record encoded
// in field order (what protobuf encoders write) comes out as proto.Marshal
// would encode it with the delta set. Its size is what recordScan.add
// counted in filled.
func appendEntry(out, rec []byte, i int, fill bool) []byte {
	out = append(out, recordTag)
	if !fill {
		return protowire.AppendBytes(out, rec)
	}
	deltaBytes := 0
	for r := rec; len(r) > 0; {
		num, typ, k := protowire.ConsumeTag(r)
		k += protowire.ConsumeFieldValue(num, typ, r[k:])
		if num == 2 {
			deltaBytes += k
		}
		r = r[k:]
	}
	out = protowire.AppendVarint(out, uint64(filledSize(len(rec), deltaBytes, i)))
	done := i == 0 // record 0 keeps offset_delta 0, i.e. absent
	for r := rec; len(r) > 0; {
		num, typ, k := protowire.ConsumeTag(r)
		k += protowire.ConsumeFieldValue(num, typ, r[k:])
		if num == 2 {
			r = r[k:]
			continue
		}
		if num > 2 && !done {
			out = appendOffsetDelta(out, i)
			done = true
		}
		out = append(out, r[:k]...)
		r = r[k:]
	}
	if !done {
		out = appendOffsetDelta(out, i)
	}
	return out
}

func appendOffsetDelta(b []byte, i int) []byte {
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, protowire.EncodeZigZag(int64(i)))
}
