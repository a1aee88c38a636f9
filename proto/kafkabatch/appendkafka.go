package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"slices"
	"sync"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// AppendKafka appends canonical, one canonical batch as stored (base
// offset and partition leader epoch patched by the leader; possibly
// compacted: gaps in its offset deltas, even no records), to dst as a
// Kafka v2 batch with its batchLength and CRC-32C, and returns the
// extended slice (dst must not overlap canonical). A Kafka Fetch
// answer's records are such batches one after another. On error dst is
// returned unchanged in length.
//
// Header fields map one to one; the attributes carry the canonical
// timestamp type, transactional, control and delete-horizon bits, and
// the codec in bits 0-2.
//
// A compressed canonical batch (decision 67) is sent as stored: its
// compressed records are copied after a Kafka header carrying its codec,
// and the Kafka CRC computed — nothing is decompressed or recompressed;
// codec is ignored. An uncompressed one is converted record by record
// (kafkarecords.AppendKafka: an absent key, value or header value is
// Kafka's null, a present empty one empty, record attributes 0) and,
// when codec is not None, compressed with it.
//
// The canonical batch's CRC is checked first, so that bytes damaged at
// rest are not sent to a consumer under a fresh Kafka CRC (ErrCanonical,
// as for a malformed batch or one Kafka's format cannot carry). Without
// compression the output's size is computed first and dst grows at most
// once; nothing else is allocated. With a codec the records are built
// in a pooled buffer and compressed into dst.
func AppendKafka(dst, canonical []byte, codec Codec) ([]byte, error) {
	bh, err := batch.ParseHeader(canonical)
	if err != nil {
		return dst, canonicalErr("%s", errs.Message(err))
	}
	if c := batch.ComputeCRC(canonical); c != bh.CRC {
		return dst, canonicalErr("batch CRC %08x does not match computed %08x", bh.CRC, c)
	}
	if bh.Attributes&^uint32(uint16(convertedAttrs|AttrCompressionMask)) != 0 {
		return dst, canonicalErr("attributes 0x%x have bits Kafka's batch cannot carry", bh.Attributes)
	}
	if bh.ProducerEpoch < math.MinInt16 || bh.ProducerEpoch > math.MaxInt16 {
		return dst, canonicalErr("producer epoch %d is outside Kafka's int16", bh.ProducerEpoch)
	}
	start := len(dst)
	if bh.IsCompressed() {
		if !bh.Codec().Known() {
			return dst, canonicalErr("compression codec %d is not one of Kafka's", bh.Codec())
		}
		comp, err := batch.CompressedRecords(canonical)
		if err != nil {
			return dst, canonicalErr("%s", errs.Message(err))
		}
		if HeaderSize+len(comp)-LogOverhead > math.MaxInt32 {
			return dst, canonicalErr("compressed records of %d bytes are too large for Kafka's batchLength", len(comp))
		}
		dst = slices.Grow(dst, HeaderSize+len(comp))
		dst = appendHeader(dst, &bh, 0, int(bh.RecordCount))
		dst = append(dst, comp...)
		return finishKafka(dst, start), nil
	}
	if !codec.Known() {
		return dst, fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's (0-4)", codec)
	}
	records := canonical[batch.HeaderSize:]
	size, n, err := kafkarecords.SizeKafka(records, bh.LastOffsetDelta)
	if err != nil {
		return dst, err
	}
	if n != int(bh.RecordCount) {
		return dst, canonicalErr("record_count %d but the batch holds %d records", bh.RecordCount, n)
	}
	if codec == None {
		if HeaderSize+size-LogOverhead > math.MaxInt32 {
			return dst, canonicalErr("batch of %d records' bytes is too large for Kafka's batchLength", size)
		}
		dst = slices.Grow(dst, HeaderSize+size)
		dst = appendHeader(dst, &bh, 0, n)
		dst = kafkarecords.AppendKafka(dst, records)
		return finishKafka(dst, start), nil
	}
	buf := recordBuffers.Get().(*[]byte)
	rec := kafkarecords.AppendKafka(slices.Grow((*buf)[:0], size), records)
	if cap(rec) <= maxPooledRecords {
		*buf = rec[:0]
		defer recordBuffers.Put(buf)
	}
	dst = appendHeader(dst, &bh, int16(codec), n)
	if dst, err = kafkarecords.Compress(dst, rec, codec); err != nil {
		return dst[:start], err
	}
	if len(dst)-start-LogOverhead > math.MaxInt32 {
		return dst[:start], canonicalErr("compressed batch of %d bytes is too large for Kafka's batchLength", len(dst)-start)
	}
	return finishKafka(dst, start), nil
}

// recordBuffers hold the uncompressed records of a batch AppendKafka
// compresses. Buffers larger than maxPooledRecords are left to the
// collector, so that one large batch does not keep its buffer for good.
var recordBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledRecords = 4 << 20

// appendHeader appends a Kafka batch header for bh, its attributes'
// codec bits ored with codec, and n records; batchLength and CRC are
// left 0 for finishKafka.
func appendHeader(dst []byte, bh *batch.Header, codec int16, n int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(bh.BaseOffset))
	dst = binary.BigEndian.AppendUint32(dst, 0) // batchLength
	dst = binary.BigEndian.AppendUint32(dst, uint32(bh.PartitionLeaderEpoch))
	dst = append(dst, Magic)
	dst = binary.BigEndian.AppendUint32(dst, 0) // crc
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(bh.Attributes)|codec))
	dst = binary.BigEndian.AppendUint32(dst, uint32(bh.LastOffsetDelta))
	dst = binary.BigEndian.AppendUint64(dst, uint64(bh.BaseTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(bh.MaxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(bh.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(bh.ProducerEpoch)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(bh.BaseSequence))
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// finishKafka fills the batchLength and CRC of the batch at dst[start:].
func finishKafka(dst []byte, start int) []byte {
	b := dst[start:]
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-LogOverhead))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return dst
}

func canonicalErr(format string, args ...any) error {
	return corrupt(ErrCanonical, format, args...)
}
