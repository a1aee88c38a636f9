package batch

import (
	"encoding/binary"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Compressed batches (decision 67, docs/record-format.md "Compressed
// batches"): attributes bits 0-2 name a codec (Kafka's numbers: 1 gzip,
// 2 snappy, 3 lz4, 4 zstd), the 71-byte header is the same as for any
// batch, and instead of field-12 record entries the body is ONE field 13,
// compressed_records: Kafka's v2 record encoding (kafkarecords),
// compressed with the codec, exactly as the producer sent it. The CRC
// covers bytes 19 to the end, the compressed bytes included.
//
// Canonicalize and Verify check a compressed batch's layout, never its
// records (they do not decompress). A producer's compressed batch is
// checked by CheckCompressed, once, on append (cluster); ForEachRecord
// and Filter decompress, bounded by kafkarecords.MaxUncompressedBytes, so
// that no stored batch can make a reader hold more.

const (
	fieldCompressedRecords = 13
	compressedTag          = byte(fieldCompressedRecords<<3 | 2)
)

// Codec is the compression codec of the batch's records (None: field-12
// record entries).
func (h Header) Codec() kafkarecords.Codec {
	return kafkarecords.Codec(h.Attributes & AttrCompressionMask)
}

// IsCompressed reports a compressed batch: its records are in field 13.
func (h Header) IsCompressed() bool { return h.Attributes&AttrCompressionMask != 0 }

// CompressedRecords returns the compressed records of canonical batch b
// (at least HeaderSize bytes, its header saying it is compressed): the
// value of its one field-13 entry, which must fill the rest of b with a
// minimal length (CORRUPT_RECORD otherwise). The result aliases b.
func CompressedRecords(b []byte) ([]byte, error) {
	rest := b[HeaderSize:]
	if len(rest) == 0 || rest[0] != compressedTag {
		return nil, corrupt("compressed batch without its compressed_records field")
	}
	v, m := protowire.ConsumeBytes(rest[1:])
	switch {
	case m < 0:
		return nil, corrupt("compressed_records overruns the batch")
	case 1+m != len(rest):
		return nil, corrupt("bytes after compressed_records")
	case m != protowire.SizeBytes(len(v)):
		return nil, corrupt("compressed_records length is not minimally encoded")
	case len(v) == 0:
		return nil, corrupt("compressed_records is empty")
	}
	return v, nil
}

// AppendCompressedRecords appends the compressed_records field holding
// comp (its tag, length and bytes) to dst: after a canonical header with
// a codec's bits, the body of a compressed batch (CompressedSize bytes in
// all).
func AppendCompressedRecords(dst, comp []byte) []byte {
	dst = append(dst, compressedTag)
	return protowire.AppendBytes(dst, comp)
}

// CompressedSize is the size of a compressed canonical batch whose
// compressed records take n bytes.
func CompressedSize(n int) int {
	return HeaderSize + 1 + protowire.SizeBytes(n)
}

// maxCompressedRecords bounds the record_count of a compressed batch:
// the smallest Kafka record takes 7 bytes uncompressed, and no batch
// decompresses to more than kafkarecords.MaxUncompressedBytes.
const maxCompressedRecords = kafkarecords.MaxUncompressedBytes / 7

// checkCompressedHeader applies the header rules of a producer's
// compressed batch (Canonicalize): a known codec, no simple produce
// (the broker cannot fill offset deltas inside compressed records), a
// record count a batch can hold, and the rules of checkHeader but the
// count of records, which only CheckCompressed sees.
func checkCompressedHeader(h *Header) error {
	if c := h.Codec(); !c.Known() {
		return errs.New(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, "compression codec %d is not one of Kafka's (1 gzip, 2 snappy, 3 lz4, 4 zstd)", c)
	}
	if h.Attributes&^(AttrCompressionMask|AttrLogAppendTime|AttrTransactional|AttrControl) != 0 {
		return invalid("unknown attribute bits 0x%x", h.Attributes)
	}
	if h.RecordCount <= 0 || h.RecordCount > maxCompressedRecords {
		return invalid("a compressed batch must state its record_count (1 to %d), got %d", maxCompressedRecords, h.RecordCount)
	}
	if h.LastOffsetDelta != h.RecordCount-1 {
		return invalid("last_offset_delta %d does not match record_count %d", h.LastOffsetDelta, h.RecordCount)
	}
	return nil
}

// canonicalizeCompressed is CanonicalizeMax for a compressed batch in
// canonical layout (header h): a CRC sent must match; its body must be
// exactly one canonically framed field 13, else the slow path re-frames
// it or says what is wrong. Patched in place.
func canonicalizeCompressed(in []byte, h Header, maxBytes int) ([]byte, Header, error) {
	if h.CRC != 0 {
		// Bytes damaged on the way are CORRUPT_RECORD before anything
		// else is said of them: in canonical layout the CRC covers
		// exactly what was sent.
		if c := ComputeCRC(in); c != h.CRC {
			return nil, h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
		}
	}
	if _, err := CompressedRecords(in); err != nil {
		return canonicalizeSlow(in, maxBytes)
	}
	if err := checkSize(len(in), maxBytes); err != nil {
		return nil, h, err
	}
	return finishCompressed(in, h)
}

// finishCompressed checks the header of compressed canonical batch b and
// its CRC (when sent), and sets the producer fields and CRC as finish
// does. max_timestamp is left as sent: CheckCompressed computes it.
func finishCompressed(b []byte, h Header) ([]byte, Header, error) {
	if h.CRC != 0 {
		if c := ComputeCRC(b); c != h.CRC {
			return nil, h, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
		}
	}
	if err := checkCompressedHeader(&h); err != nil {
		return nil, h, err
	}
	finish(b, &h, h.MaxTimestamp)
	return b, h, nil
}

// verifyCompressed is Verify's check of a compressed batch's body.
func verifyCompressed(b []byte, h Header) error {
	if c := h.Codec(); !c.Known() {
		return corrupt("compression codec %d is not one of Kafka's", c)
	}
	if _, err := CompressedRecords(b); err != nil {
		return err
	}
	if h.RecordCount <= 0 || h.LastOffsetDelta < h.RecordCount-1 {
		return corrupt("compressed batch says %d records (last offset delta %d)", h.RecordCount, h.LastOffsetDelta)
	}
	return nil
}

// CompressedCheck is what CheckCompressed learns of a batch's records.
type CompressedCheck struct {
	// Header is the batch's header with max_timestamp and CRC as
	// CheckCompressed set them.
	Header Header
	// Records are the records decompressed, in Kafka's encoding (a new
	// slice, not aliasing the batch).
	Records []byte
	// Scan says how many records there are, their largest timestamp and
	// the first without a key.
	Scan kafkarecords.Scan
}

// CheckCompressed checks the records of b, a producer's compressed batch
// as CanonicalizeMax returned it, and sets its max_timestamp (the largest
// record timestamp, at least base_timestamp, as for any batch) and CRC in
// place. It is the one check of a compressed batch's contents, whichever
// door it came through (cluster runs it on append): the records
// decompress to at most kafkarecords.MaxUncompressedBytes
// (MESSAGE_TOO_LARGE) and decode (CORRUPT_RECORD); each is well formed
// Kafka record, record i has offset delta i, header keys are non-null
// UTF-8, and there are exactly record_count of them (INVALID_RECORD).
// Errors are *errs.Error whose cause is a kafkarecords sentinel.
func CheckCompressed(b []byte) (CompressedCheck, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return CompressedCheck{}, err
	}
	comp, err := CompressedRecords(b)
	if err != nil {
		return CompressedCheck{Header: h}, err
	}
	records, err := kafkarecords.Decompress(comp, h.Codec(), kafkarecords.MaxUncompressedBytes)
	if err != nil {
		return CompressedCheck{Header: h}, err
	}
	s, err := kafkarecords.ScanRecords(records, h.BaseTimestamp)
	if err != nil {
		return CompressedCheck{Header: h}, err
	}
	if s.N != int(h.RecordCount) {
		return CompressedCheck{Header: h}, kafkarecords.Fail(sluicev1.ErrorCode_INVALID_RECORD, kafkarecords.ErrRecordCount,
			"record_count %d but the compressed records hold %d", h.RecordCount, s.N)
	}
	if h.MaxTimestamp != s.MaxTimestamp {
		h.MaxTimestamp = s.MaxTimestamp
		SetMaxTimestamp(b, s.MaxTimestamp)
		h.CRC = binary.LittleEndian.Uint32(b[offCRC:])
	}
	return CompressedCheck{Header: h, Records: records, Scan: s}, nil
}

// decompressStored returns the records of a stored compressed batch b
// (header h), uncompressed, after checking its CRC: bytes damaged at
// rest are refused (CORRUPT_RECORD) before they reach a decoder.
func decompressStored(b []byte, h Header) ([]byte, error) {
	if c := ComputeCRC(b); c != h.CRC {
		return nil, corrupt("batch CRC %08x does not match computed %08x", h.CRC, c)
	}
	comp, err := CompressedRecords(b)
	if err != nil {
		return nil, err
	}
	return kafkarecords.Decompress(comp, h.Codec(), kafkarecords.MaxUncompressedBytes)
}

// SetCodec returns canonical batch b (valid: Verify, or CheckCompressed
// for a producer's) with its records in codec: compressed with codec,
// or uncompressed into field-12 record entries for kafkarecords.None.
// records are b's records uncompressed when b is compressed
// (CompressedCheck.Records; nil: decompressed here), ignored otherwise.
// Every header field is kept but the codec bits; the CRC is recomputed.
// A batch already in codec, or one without records, is returned as it
// is. The result is a new slice (or b). Compression of records larger
// than kafkarecords.MaxUncompressedBytes is refused (MESSAGE_TOO_LARGE).
func SetCodec(b, records []byte, codec kafkarecords.Codec) ([]byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	if !codec.Known() {
		return nil, errs.New(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, "compression codec %d is not one of Kafka's", codec)
	}
	if h.Codec() == codec || h.RecordCount == 0 {
		return b, nil
	}
	if h.IsCompressed() && records == nil {
		if records, err = decompressStored(b, h); err != nil {
			return nil, err
		}
	}
	if codec == kafkarecords.None {
		// Kafka's records to canonical entries.
		s, err := scanStored(records, &h)
		if err != nil {
			return nil, err
		}
		out := make([]byte, HeaderSize, HeaderSize+s)
		out = kafkarecords.AppendCanonical(out, records)
		return finishCodec(out, h, codec), nil
	}
	if !h.IsCompressed() {
		return Compress(nil, b, codec)
	}
	return compressInto(nil, h, records, codec)
}

// Compress appends to dst canonical batch b, uncompressed (Verify
// accepts it) with at least one record, compressed with codec (not None):
// its records converted to Kafka's encoding and compressed into
// compressed_records, every header field kept but the codec bits, the
// CRC recomputed. It is what the Go client's WithCompression and a
// topic's compression.type do to an uncompressed batch. Records of more
// than kafkarecords.MaxUncompressedBytes in Kafka's encoding are refused
// (MESSAGE_TOO_LARGE): no reader would accept them.
func Compress(dst, b []byte, codec kafkarecords.Codec) ([]byte, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return dst, err
	}
	if h.IsCompressed() || h.RecordCount == 0 || codec == kafkarecords.None || !codec.Known() {
		return dst, invalid("Compress takes an uncompressed batch with records and a codec (batch codec %v, %d records, codec %v)", h.Codec(), h.RecordCount, codec)
	}
	size, _, err := kafkarecords.SizeKafka(b[HeaderSize:], h.LastOffsetDelta)
	if err != nil {
		return dst, err
	}
	if size > kafkarecords.MaxUncompressedBytes {
		return dst, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "records of %d bytes are more than a compressed batch may hold (%d)", size, kafkarecords.MaxUncompressedBytes)
	}
	buf := kafkaBuffers.Get().(*[]byte)
	defer putKafkaBuffer(buf)
	*buf = kafkarecords.AppendKafka(slices.Grow((*buf)[:0], size), b[HeaderSize:])
	return compressInto(dst, h, *buf, codec)
}

// compressInto appends to dst the compressed canonical batch of header
// h (its codec bits replaced by codec, its CRC computed) holding
// records, Kafka-encoded and uncompressed, and returns the extended
// slice.
func compressInto(dst []byte, h Header, records []byte, codec kafkarecords.Codec) ([]byte, error) {
	start := len(dst)
	// The compressed records usually take far less than the records;
	// the first guess leaves room for a 4x ratio.
	dst = slices.Grow(dst, HeaderSize+12+len(records)/4)
	dst = dst[:start+HeaderSize]
	comp, err := kafkarecords.Compress(dst[len(dst):], records, codec)
	if err != nil {
		return dst[:start], err
	}
	// The length's varint goes before the compressed bytes: shift them
	// once their size is known.
	n := len(comp)
	entry := 1 + protowire.SizeVarint(uint64(n))
	dst = slices.Grow(dst, entry+n)
	dst = dst[:start+HeaderSize+entry+n]
	copy(dst[start+HeaderSize+entry:], comp)
	dst[start+HeaderSize] = compressedTag
	protowire.AppendVarint(dst[start+HeaderSize+1:start+HeaderSize+1], uint64(n))
	finishCodec(dst[start:], h, codec)
	return dst, nil
}

// finishCodec writes header h with codec's bits into b and its CRC.
func finishCodec(b []byte, h Header, codec kafkarecords.Codec) []byte {
	h.Attributes = h.Attributes&^AttrCompressionMask | uint32(codec)
	PutHeader(b, h)
	binary.LittleEndian.PutUint32(b[offCRC:], ComputeCRC(b))
	return b
}

// scanStored checks the Kafka-encoded records of a stored batch with
// header h (offset deltas increasing within the last offset delta, as
// many records as its record_count) and returns the size of their
// canonical record entries.
func scanStored(records []byte, h *Header) (int, error) {
	size, n := 0, 0
	prev := int64(-1)
	var r kafkarecords.Record
	for b := records; len(b) > 0; n++ {
		k, err := kafkarecords.ParseRecord(&r, b, n)
		if err != nil {
			return 0, err
		}
		if int64(r.OffsetDelta) <= prev || r.OffsetDelta > h.LastOffsetDelta {
			return 0, corrupt("record offset_delta %d after %d (last offset delta %d)", r.OffsetDelta, prev, h.LastOffsetDelta)
		}
		prev = int64(r.OffsetDelta)
		size += kafkarecords.CanonicalEntrySize(&r)
		b = b[k:]
	}
	if n != int(h.RecordCount) {
		return 0, corrupt("batch says %d records but its compressed records hold %d", h.RecordCount, n)
	}
	return size, nil
}

// kafkaBuffers hold the Kafka-encoded records of a batch being
// compressed; buffers larger than maxPooledBuffer are left to the
// collector, so that one large batch does not keep its buffer for good.
var kafkaBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuffer = 4 << 20

func putKafkaBuffer(buf *[]byte) {
	if cap(*buf) <= maxPooledBuffer {
		*buf = (*buf)[:0]
		kafkaBuffers.Put(buf)
	}
}
