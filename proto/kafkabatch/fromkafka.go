package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Info describes a batch FromKafka converted.
type Info struct {
	// Header is the canonical batch's header, its CRC computed.
	Header batch.Header
	// Codec is the compression the producer used, which the canonical
	// batch keeps.
	Codec Codec
}

const (
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
// is positive and lastOffsetDelta is recordCount - 1 (ErrRecordCount),
// and the size of the result against limits.MaxBytes (ErrTooLarge).
// Errors are *errs.Error (see the sentinels for their codes).
//
// Uncompressed records are checked too: exactly recordCount of them
// (ErrRecordCount), numbered 0..n-1 by their offsetDelta
// (ErrOffsetDelta), with well-formed varints (ErrVarint) and lengths
// (ErrRecordFraming) and non-null UTF-8 header keys (ErrHeaderKey). They
// are written as proto.Marshal writes a sluice.v1.Record, except that an
// empty key, value or header value is written (length 0) where a null
// one is left out; record attributes are dropped; max_timestamp is
// computed from the records (at least base_timestamp). The result is
// what batch.Canonicalize would store for the same records: it returns
// it unchanged, and batch.Verify accepts it.
//
// Compressed records (decision 67) are not decompressed: the result is a
// compressed canonical batch whose compressed_records are the producer's
// bytes as sent, codec bits kept, max_timestamp as sent. The broker
// checks the records on append with batch.CheckCompressed — the same
// checks as above, bounded by kafkarecords.MaxUncompressedBytes — which
// also computes max_timestamp; batch.Canonicalize returns the result
// unchanged. limits.MaxBytes bounds the compressed size, as Kafka's
// max.message.bytes does.
//
// Header fields map one to one (producer epoch widened), and a producer
// id <= 0 is stored as -1 with epoch and sequence -1.
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
	if !codec.Known() {
		return nil, Info{}, fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's (0-4)", codec)
	}
	if h.RecordCount <= 0 || h.LastOffsetDelta != h.RecordCount-1 {
		return nil, Info{}, invalid(ErrRecordCount, "recordCount %d with lastOffsetDelta %d (a batch holds at least one record, numbered 0..recordCount-1)", h.RecordCount, h.LastOffsetDelta)
	}
	records := in[HeaderSize:]
	bh := batch.Header{
		BaseOffset:           h.BaseOffset,
		PartitionLeaderEpoch: h.PartitionLeaderEpoch,
		Attributes:           uint32(uint16(h.Attributes)),
		LastOffsetDelta:      h.LastOffsetDelta,
		BaseTimestamp:        h.BaseTimestamp,
		MaxTimestamp:         h.MaxTimestamp,
		ProducerID:           h.ProducerID,
		ProducerEpoch:        int32(h.ProducerEpoch),
		BaseSequence:         h.BaseSequence,
		RecordCount:          h.RecordCount,
	}
	if bh.ProducerID <= 0 {
		// As batch.Canonicalize stores a plain producer.
		bh.ProducerID, bh.ProducerEpoch, bh.BaseSequence = batch.NoProducerID, noProducerEpoch, -1
	}
	var out []byte
	if codec != None {
		if len(records) == 0 {
			return nil, Info{}, corrupt(ErrDecompress, "%s batch without compressed bytes", codec)
		}
		size := batch.CompressedSize(len(records))
		if err := checkMaxBytes(size, limits); err != nil {
			return nil, Info{}, err
		}
		out = sized(dst, size)
		out = batch.AppendCompressedRecords(out, records)
	} else {
		s, err := kafkarecords.ScanRecords(records, h.BaseTimestamp)
		if err != nil {
			return nil, Info{}, err
		}
		if s.N != int(h.RecordCount) {
			return nil, Info{}, invalid(ErrRecordCount, "recordCount %d but the batch holds %d records", h.RecordCount, s.N)
		}
		size := batch.HeaderSize + s.CanonicalSize
		if err := checkMaxBytes(size, limits); err != nil {
			return nil, Info{}, err
		}
		out = kafkarecords.AppendCanonical(sized(dst, size), records)
		bh.MaxTimestamp = s.MaxTimestamp
	}
	batch.PutHeader(out, bh)
	bh.CRC = batch.ComputeCRC(out)
	binary.LittleEndian.PutUint32(out[batch.CRCStart-4:], bh.CRC)
	return out, Info{Header: bh, Codec: codec}, nil
}

// checkMaxBytes refuses a canonical batch of size bytes over
// limits.MaxBytes (ErrTooLarge).
func checkMaxBytes(size int, limits Limits) error {
	if limits.MaxBytes > 0 && size > limits.MaxBytes {
		return fail(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, ErrTooLarge, "batch of %d bytes in canonical form exceeds max.message.bytes %d", size, limits.MaxBytes)
	}
	return nil
}

// sized is dst's storage, or a new slice, with room for size bytes and
// the canonical header's length.
func sized(dst []byte, size int) []byte {
	out := dst[:0]
	if cap(out) < size {
		out = make([]byte, 0, size)
	}
	return out[:batch.HeaderSize]
}
