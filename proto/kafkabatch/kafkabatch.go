// Package kafkabatch converts between Kafka's v2 record batch (magic 2,
// KIP-98) and Sluice's canonical batch (proto/batch, docs/record-format.md
// "Kafka record batches", decision 65). It is pure: no I/O, no clock, no
// goroutines.
//
// The Kafka door converts at its edge: FromKafka turns the batch of a
// Kafka Produce request into the canonical batch the broker stores, and
// AppendKafka turns a stored canonical batch back into Kafka's bytes for a
// Kafka Fetch answer. gRPC clients see no change.
//
// Header fields map one to one (the producer epoch is Kafka's int16 in a
// sfixed32). Records map field by field, and Kafka's null keys, values
// and header values (length -1) survive: null is the canonical field
// absent, empty is the field present with length 0. Record attributes
// (an int8 Kafka does not use) are accepted and dropped; AppendKafka
// writes 0. A compressed Kafka batch becomes a compressed canonical batch
// holding the producer's compressed bytes as sent (decision 67): only its
// header is rewritten, both ways; its records are checked on append
// (batch.CheckCompressed), not here.
//
// Layout of a v2 batch, big-endian (byte offsets):
//
//	 0 baseOffset int64        21 attributes int16      51 producerEpoch int16
//	 8 batchLength int32       23 lastOffsetDelta int32 53 baseSequence int32
//	12 partitionLeaderEpoch    27 baseTimestamp int64   57 recordCount int32
//	16 magic int8 (2)          35 maxTimestamp int64    61 records
//	17 crc uint32              43 producerId int64
//
// batchLength counts the bytes after itself; the CRC-32C (Castagnoli)
// covers attributes through the end. A record is a varint length, then
// attributes int8, timestampDelta varlong, offsetDelta varint, key and
// value (varint length, -1 for null, then the bytes), a varint header
// count and per header a key (varint length, never null) and a value
// (varint length, -1 for null). Varints are zigzag-encoded, as protobuf's
// sint32 and sint64.
package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"
	"iter"

	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// Sizes and offsets of a v2 batch.
const (
	// HeaderSize is the size of a v2 batch header, records excluded.
	HeaderSize = 61
	// LogOverhead is the size of baseOffset and batchLength, which
	// batchLength does not count.
	LogOverhead = 12
	// Magic is the magic byte of a v2 batch.
	Magic = 2

	offBatchLength   = 8
	offLeaderEpoch   = 12
	offMagic         = 16
	offCRC           = 17
	offAttributes    = 21
	offLastDelta     = 23
	offBaseTS        = 27
	offMaxTS         = 35
	offProducerID    = 43
	offProducerEpoch = 51
	offBaseSequence  = 53
	offRecordCount   = 57

	// minLegacySize is Kafka's smallest batchLength of any magic (a v0
	// message's overhead): Batches refuses less, as Kafka does.
	minLegacySize = 14
	// minRecordSize is the smallest v2 record: length, attributes,
	// timestampDelta, offsetDelta, key and value lengths, header count.
	minRecordSize = 7
)

// Attribute bits of a Kafka batch (the low 16 bits of a canonical batch's
// attributes are the same bits).
const (
	AttrCompressionMask int16 = 0x7
	AttrLogAppendTime   int16 = 1 << 3
	AttrTransactional   int16 = 1 << 4
	AttrControl         int16 = 1 << 5
	// AttrDeleteHorizon marks a batch whose baseTimestamp is the delete
	// horizon set by Kafka's log cleaner (KIP-534). Produced batches
	// may not carry it; AppendKafka passes it through.
	AttrDeleteHorizon int16 = 1 << 6
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Codec is a Kafka compression codec, attribute bits 0-2
// (kafkarecords.Codec).
type Codec = kafkarecords.Codec

// Kafka's codecs.
const (
	None   = kafkarecords.None
	Gzip   = kafkarecords.Gzip
	Snappy = kafkarecords.Snappy
	LZ4    = kafkarecords.LZ4
	Zstd   = kafkarecords.Zstd
)

// Header is the header of a Kafka v2 batch, as its bytes say.
type Header struct {
	BaseOffset           int64
	BatchLength          int32
	PartitionLeaderEpoch int32
	Magic                int8
	CRC                  uint32
	Attributes           int16
	LastOffsetDelta      int32
	BaseTimestamp        int64
	MaxTimestamp         int64
	ProducerID           int64
	ProducerEpoch        int16
	BaseSequence         int32
	RecordCount          int32
}

// Codec is the compression codec of the batch's records.
func (h Header) Codec() Codec { return Codec(h.Attributes & AttrCompressionMask) }

// ParseHeader reads the header of the Kafka batch at the start of b. It
// checks the magic (ErrLegacyMagic for 0 and 1, ErrMagic for another),
// that the header is whole (ErrTruncated) and that batchLength covers it
// (ErrBatchLength); not the CRC, nor that b holds the whole batch. A
// caller that must refuse zstd before produce v7, as Kafka does, reads
// the codec here before anything is decompressed.
func ParseHeader(b []byte) (Header, error) {
	if len(b) <= offMagic {
		return Header{}, corrupt(ErrTruncated, "%d bytes end before the batch's magic byte", len(b))
	}
	switch m := int8(b[offMagic]); m {
	case Magic:
	case 0, 1:
		return Header{}, invalid(ErrLegacyMagic, "record batches must be magic version 2, this one is magic %d", m)
	default:
		return Header{}, corrupt(ErrMagic, "invalid magic %d", m)
	}
	if len(b) < HeaderSize {
		return Header{}, corrupt(ErrTruncated, "%d bytes end inside the %d-byte batch header", len(b), HeaderSize)
	}
	h := Header{
		BaseOffset:           int64(binary.BigEndian.Uint64(b)),
		BatchLength:          int32(binary.BigEndian.Uint32(b[offBatchLength:])),
		PartitionLeaderEpoch: int32(binary.BigEndian.Uint32(b[offLeaderEpoch:])),
		Magic:                Magic,
		CRC:                  binary.BigEndian.Uint32(b[offCRC:]),
		Attributes:           int16(binary.BigEndian.Uint16(b[offAttributes:])),
		LastOffsetDelta:      int32(binary.BigEndian.Uint32(b[offLastDelta:])),
		BaseTimestamp:        int64(binary.BigEndian.Uint64(b[offBaseTS:])),
		MaxTimestamp:         int64(binary.BigEndian.Uint64(b[offMaxTS:])),
		ProducerID:           int64(binary.BigEndian.Uint64(b[offProducerID:])),
		ProducerEpoch:        int16(binary.BigEndian.Uint16(b[offProducerEpoch:])),
		BaseSequence:         int32(binary.BigEndian.Uint32(b[offBaseSequence:])),
		RecordCount:          int32(binary.BigEndian.Uint32(b[offRecordCount:])),
	}
	if h.BatchLength < HeaderSize-LogOverhead {
		return h, corrupt(ErrBatchLength, "batchLength %d is less than a v2 header's %d", h.BatchLength, HeaderSize-LogOverhead)
	}
	return h, nil
}

// Batches yields the batches of a records field that holds several (a
// fetch answer, a log segment of Kafka's), each aliasing records, framed
// by baseOffset and batchLength whatever their magic. A batchLength below
// Kafka's minimum (14) yields ErrBatchLength, bytes that end inside a
// batch ErrTruncated (a fetch answer may end in a partial batch, which a
// consumer ignores: check errors.Is(err, ErrTruncated)); either ends the
// sequence. Batches does not check the batches themselves: FromKafka
// does. A Produce request holds exactly one batch per partition (Kafka
// answers INVALID_RECORD otherwise); FromKafka refuses bytes after it.
func Batches(records []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for b := records; len(b) > 0; {
			if len(b) < LogOverhead {
				yield(nil, corrupt(ErrTruncated, "%d bytes end inside a batch's length", len(b)))
				return
			}
			l := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
			if l < minLegacySize {
				yield(nil, corrupt(ErrBatchLength, "batchLength %d is less than the minimum %d", l, minLegacySize))
				return
			}
			if int64(l) > int64(len(b)-LogOverhead) {
				yield(nil, corrupt(ErrTruncated, "a batch of %d bytes, only %d left", int64(l)+LogOverhead, len(b)))
				return
			}
			n := LogOverhead + int(l)
			if !yield(b[:n:n], nil) {
				return
			}
			b = b[n:]
		}
	}
}

// Limits bound what FromKafka accepts.
type Limits struct {
	// MaxBytes is the largest canonical batch FromKafka returns (the
	// topic's max.message.bytes); larger is MESSAGE_TOO_LARGE
	// (ErrTooLarge), refused before the batch is allocated. For a
	// compressed batch it is the compressed size, as Kafka's. 0 or
	// less: no bound.
	MaxBytes int
}
