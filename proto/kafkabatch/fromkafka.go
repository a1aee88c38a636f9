package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Info describes a batch FromKafka converted.
type Info struct {
	// Header is the canonical batch's header, its CRC computed.
	Header batch.Header
	// Codec is the compression the producer used; the canonical batch
	// is uncompressed (compression step 1).
	Codec Codec
}

// Canonical record fields (sluice.v1.Record and Header) as tag bytes.
const (
	tagRecordEntry  = 12<<3 | 2
	tagTimestamp    = 1<<3 | 0
	tagOffsetDelta  = 2<<3 | 0
	tagKey          = 3<<3 | 2
	tagValue        = 4<<3 | 2
	tagHeader       = 5<<3 | 2
	tagHeaderKey    = 1<<3 | 2
	tagHeaderValue  = 2<<3 | 2
	canonicalAttrs  = AttrLogAppendTime | AttrTransactional | AttrControl
	producedAttrs   = canonicalAttrs | AttrCompressionMask
	convertedAttrs  = canonicalAttrs | AttrDeleteHorizon
	noProducerEpoch = -1
)

// FromKafka converts in, exactly one Kafka v2 batch as a Produce request
// carries it for a partition, into the canonical batch Sluice stores.
//
// It checks, before anything is allocated for the result: the magic
// (ErrLegacyMagic, ErrMagic), that batchLength frames exactly in
// (ErrTruncated, ErrBatchLength), the CRC-32C over attributes..end
// (ErrCRC), the attributes (ErrAttributes, ErrCodec), that recordCount
// is positive and lastOffsetDelta is recordCount - 1 and that the records
// are exactly recordCount (ErrRecordCount), numbered 0..n-1 by their
// offsetDelta (ErrOffsetDelta), with well-formed varints (ErrVarint) and
// lengths (ErrRecordFraming) and non-null UTF-8 header keys
// (ErrHeaderKey), and the size of the result against limits.MaxBytes
// (ErrTooLarge). Compressed records are decompressed first, bounded by
// limits.MaxUncompressedBytes (ErrDecompressedTooLarge, ErrDecompress).
// Errors are *errs.Error (see the sentinels for their codes).
//
// The canonical batch is what batch.Canonicalize would store for the
// same records: header fields one to one (compression bits cleared,
// producer epoch widened), max_timestamp computed from the records (at
// least base_timestamp), and a producer id <= 0 stored as -1 with epoch
// and sequence -1. Records are written as proto.Marshal writes a
// sluice.v1.Record, except that an empty key, value or header value is
// written (length 0) where a null one is left out. Record attributes are
// dropped. batch.Canonicalize returns the result unchanged and
// batch.Verify accepts it.
//
// The result is built in dst's storage when it is large enough (dst's
// contents are discarded; dst must not overlap in), else in a new slice
// of exactly the batch's size; it does not alias in.
func FromKafka(dst, in []byte, limits Limits) ([]byte, Info, error) {
	h, err := ParseHeader(in)
	if err != nil {
		return nil, Info{}, err
	}
	if end := int64(h.BatchLength) + LogOverhead; end > int64(len(in)) {
		return nil, Info{}, corrupt(ErrTruncated, "batchLength %d frames %d bytes, only %d sent", h.BatchLength, end, len(in))
	} else if end < int64(len(in)) {
		return nil, Info{}, corrupt(ErrBatchLength, "batchLength %d frames %d bytes, %d sent (one batch per partition)", h.BatchLength, end, len(in))
	}
	if c := crc32.Checksum(in[offAttributes:], castagnoli); c != h.CRC {
		return nil, Info{}, corrupt(ErrCRC, "batch CRC %08x does not match computed %08x", h.CRC, c)
	}
	if h.Attributes&^producedAttrs != 0 {
		return nil, Info{}, invalid(ErrAttributes, "attributes 0x%04x: bits 0x%04x are not for producers", uint16(h.Attributes), uint16(h.Attributes&^producedAttrs))
	}
	codec := h.Codec()
	if codec > Zstd {
		return nil, Info{}, fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's (0-4)", codec)
	}
	if h.RecordCount <= 0 || h.LastOffsetDelta != h.RecordCount-1 {
		return nil, Info{}, invalid(ErrRecordCount, "recordCount %d with lastOffsetDelta %d (a batch holds at least one record, numbered 0..recordCount-1)", h.RecordCount, h.LastOffsetDelta)
	}
	records := in[HeaderSize:]
	if codec != None {
		if records, err = decompress(records, codec, limits.maxUncompressed()); err != nil {
			return nil, Info{}, err
		}
	}
	s, err := scanRecords(records, h.BaseTimestamp)
	if err != nil {
		return nil, Info{}, err
	}
	if s.n != int(h.RecordCount) {
		return nil, Info{}, invalid(ErrRecordCount, "recordCount %d but the batch holds %d records", h.RecordCount, s.n)
	}
	if limits.MaxBytes > 0 && s.size > limits.MaxBytes {
		return nil, Info{}, fail(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, ErrTooLarge, "batch of %d bytes in canonical form exceeds max.message.bytes %d", s.size, limits.MaxBytes)
	}

	out := dst[:0]
	if cap(out) < s.size {
		out = make([]byte, 0, s.size)
	}
	out = out[:batch.HeaderSize]
	var r kafkaRecord
	for b := records; len(b) > 0; {
		n, _ := parseRecord(&r, b, 0) // checked by scanRecords
		out = appendCanonical(out, &r)
		b = b[n:]
	}
	bh := batch.Header{
		BaseOffset:           h.BaseOffset,
		PartitionLeaderEpoch: h.PartitionLeaderEpoch,
		Attributes:           uint32(uint16(h.Attributes &^ AttrCompressionMask)),
		LastOffsetDelta:      h.LastOffsetDelta,
		BaseTimestamp:        h.BaseTimestamp,
		MaxTimestamp:         s.maxTS,
		ProducerID:           h.ProducerID,
		ProducerEpoch:        int32(h.ProducerEpoch),
		BaseSequence:         h.BaseSequence,
		RecordCount:          h.RecordCount,
	}
	if bh.ProducerID <= 0 {
		// As batch.Canonicalize stores a plain producer.
		bh.ProducerID, bh.ProducerEpoch, bh.BaseSequence = batch.NoProducerID, noProducerEpoch, -1
	}
	batch.PutHeader(out, bh)
	bh.CRC = batch.ComputeCRC(out)
	binary.LittleEndian.PutUint32(out[batch.CRCStart-4:], bh.CRC)
	return out, Info{Header: bh, Codec: codec}, nil
}

// recordScan is what walking a batch's Kafka records learns.
type recordScan struct {
	n     int   // records
	size  int   // the canonical batch's size, header included
	maxTS int64 // largest record timestamp, at least the base timestamp
}

// scanRecords checks every record of b (the uncompressed records of a
// batch with base timestamp baseTS) and sizes their canonical form.
func scanRecords(b []byte, baseTS int64) (recordScan, error) {
	s := recordScan{size: batch.HeaderSize, maxTS: baseTS}
	for len(b) > 0 {
		var r kafkaRecord
		n, err := parseRecord(&r, b, s.n)
		if err != nil {
			return s, err
		}
		if int64(r.offsetDelta) != int64(s.n) {
			return s, invalid(ErrOffsetDelta, "record %d has offsetDelta %d", s.n, r.offsetDelta)
		}
		s.maxTS = max(s.maxTS, baseTS+r.timestampDelta)
		s.size += 1 + uvarintSize(uint64(r.canonicalSize)) + r.canonicalSize
		s.n++
		b = b[n:]
	}
	return s, nil
}

// kafkaRecord is a parsed Kafka record; its slices alias the batch. A nil
// key, value or header value is null; a present one is never nil.
type kafkaRecord struct {
	timestampDelta int64
	offsetDelta    int32
	key, value     []byte
	headerCount    int
	headers        []byte // the headers as Kafka encodes them, after the count
	canonicalSize  int    // size of the canonical Record message
}

// parseRecord parses and checks the Kafka record at the start of b (the
// i-th of its batch, for messages) into r and returns its size.
func parseRecord(r *kafkaRecord, b []byte, i int) (int, error) {
	l, n, err := readVarint(b)
	if err != nil {
		return 0, recordErr(err, i, "length")
	}
	r.canonicalSize = 0
	if l < 0 || int64(l) > int64(len(b)-n) {
		return 0, corrupt(ErrRecordFraming, "record %d: length %d overruns the %d bytes left", i, l, len(b)-n)
	}
	body := b[n : n+int(l)]
	size := n + int(l)
	if len(body) == 0 {
		return 0, corrupt(ErrRecordFraming, "record %d is empty", i)
	}
	p := 1 // attributes: unused by Kafka, dropped
	var k int
	if r.timestampDelta, k, err = readVarlong(body[p:]); err != nil {
		return 0, recordErr(err, i, "timestampDelta")
	}
	p += k
	if r.offsetDelta, k, err = readVarint(body[p:]); err != nil {
		return 0, recordErr(err, i, "offsetDelta")
	}
	p += k
	if r.key, k, err = readNullable(body[p:], i, "key"); err != nil {
		return 0, err
	}
	p += k
	if r.value, k, err = readNullable(body[p:], i, "value"); err != nil {
		return 0, err
	}
	p += k
	c, k, err := readVarint(body[p:])
	if err != nil {
		return 0, recordErr(err, i, "header count")
	}
	if c < 0 {
		return 0, corrupt(ErrRecordFraming, "record %d: header count %d", i, c)
	}
	p += k
	r.headerCount, r.headers = int(c), body[p:]
	cs := 0
	if r.timestampDelta != 0 {
		cs += 1 + varintSize(r.timestampDelta)
	}
	if r.offsetDelta != 0 {
		cs += 1 + varintSize(int64(r.offsetDelta))
	}
	if r.key != nil {
		cs += 1 + uvarintSize(uint64(len(r.key))) + len(r.key)
	}
	if r.value != nil {
		cs += 1 + uvarintSize(uint64(len(r.value))) + len(r.value)
	}
	for j := 0; j < r.headerCount; j++ {
		kl, k, err := readVarint(body[p:])
		if err != nil {
			return 0, recordErr(err, i, "header key length")
		}
		p += k
		switch {
		case kl == -1:
			return 0, invalid(ErrHeaderKey, "record %d: header %d has a null key", i, j)
		case kl < 0 || int64(kl) > int64(len(body)-p):
			return 0, corrupt(ErrRecordFraming, "record %d: header %d key length %d overruns the record", i, j, kl)
		}
		if !utf8.Valid(body[p : p+int(kl)]) {
			return 0, invalid(ErrHeaderKey, "record %d: header %d key is not UTF-8", i, j)
		}
		p += int(kl)
		v, k, err := readNullable(body[p:], i, "header value")
		if err != nil {
			return 0, err
		}
		p += k
		cs += 1 + sizedField(canonicalHeaderSize(int(kl), v))
	}
	if p != len(body) {
		return 0, corrupt(ErrRecordFraming, "record %d: length %d, but its fields take %d", i, l, p)
	}
	r.canonicalSize = cs
	return size, nil
}

// recordErr names the record and field of a varint error.
func recordErr(err error, i int, field string) error {
	return corrupt(ErrVarint, "record %d: %s: %s", i, field, errs.Message(err))
}

// readNullable reads a varint length and that many bytes (nil for -1)
// from the start of b.
func readNullable(b []byte, i int, field string) ([]byte, int, error) {
	if len(b) > 0 && b[0] < 0x80 && b[0]&1 == 0 && int(b[0]>>1) < len(b) {
		// A length under 64 that fits.
		end := 1 + int(b[0]>>1)
		return b[1:end:end], end, nil
	}
	return readNullableSlow(b, i, field)
}

func readNullableSlow(b []byte, i int, field string) ([]byte, int, error) {
	l, n, err := readVarint(b)
	if err != nil {
		return nil, 0, recordErr(err, i, field+" length")
	}
	switch {
	case l == -1:
		return nil, n, nil
	case l < 0 || int64(l) > int64(len(b)-n):
		return nil, 0, corrupt(ErrRecordFraming, "record %d: %s length %d overruns the record", i, field, l)
	}
	return b[n : n+int(l) : n+int(l)], n + int(l), nil
}

// canonicalHeaderSize is the size of a canonical Header message with a
// key of keyLen bytes (absent when empty) and value v (absent when nil).
func canonicalHeaderSize(keyLen int, v []byte) int {
	s := 0
	if keyLen > 0 {
		s += 1 + sizedField(keyLen)
	}
	if v != nil {
		s += 1 + sizedField(len(v))
	}
	return s
}

// sizedField is the size of a length-delimited field's length and bytes.
func sizedField(n int) int { return uvarintSize(uint64(n)) + n }

// appendCanonical appends r (checked by parseRecord) as a canonical
// record entry: tag, length, and the Record as proto.Marshal writes it,
// with a present empty key, value or header value kept.
func appendCanonical(out []byte, r *kafkaRecord) []byte {
	out = append(out, tagRecordEntry)
	out = appendUvarint(out, uint64(r.canonicalSize))
	if r.timestampDelta != 0 {
		out = append(out, tagTimestamp)
		out = appendVarint(out, r.timestampDelta)
	}
	if r.offsetDelta != 0 {
		out = append(out, tagOffsetDelta)
		out = appendVarint(out, int64(r.offsetDelta))
	}
	if r.key != nil {
		out = append(out, tagKey)
		out = appendUvarint(out, uint64(len(r.key)))
		out = append(out, r.key...)
	}
	if r.value != nil {
		out = append(out, tagValue)
		out = appendUvarint(out, uint64(len(r.value)))
		out = append(out, r.value...)
	}
	h := r.headers
	for range r.headerCount {
		kl, n, _ := readVarint(h)
		key := h[n : n+int(kl)]
		h = h[n+int(kl):]
		v, n, _ := readNullable(h, 0, "")
		h = h[n:]
		out = append(out, tagHeader)
		out = appendUvarint(out, uint64(canonicalHeaderSize(len(key), v)))
		if len(key) > 0 {
			out = append(out, tagHeaderKey)
			out = appendUvarint(out, uint64(len(key)))
			out = append(out, key...)
		}
		if v != nil {
			out = append(out, tagHeaderValue)
			out = appendUvarint(out, uint64(len(v)))
			out = append(out, v...)
		}
	}
	return out
}
