package kafkabatch

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
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
// timestamp type, transactional, control and delete-horizon bits, with
// codec in bits 0-2. Records carry their offset and timestamp deltas,
// key, value and headers: an absent canonical key, value or header value
// is Kafka's null (length -1), a present empty one is empty (length 0);
// an absent header key is the empty string. Record attributes are 0.
// Fields a canonical record does not define are skipped, as protobuf
// readers do, and of a repeated field the last one counts.
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
	if bh.Attributes&^uint32(uint16(convertedAttrs)) != 0 {
		return dst, canonicalErr("attributes 0x%x have bits Kafka's batch cannot carry, or a compression bit (stored batches are uncompressed)", bh.Attributes)
	}
	if bh.ProducerEpoch < math.MinInt16 || bh.ProducerEpoch > math.MaxInt16 {
		return dst, canonicalErr("producer epoch %d is outside Kafka's int16", bh.ProducerEpoch)
	}
	if codec < None || codec > Zstd {
		return dst, fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's (0-4)", codec)
	}
	records := canonical[batch.HeaderSize:]
	size, n, err := sizeRecords(records, bh.LastOffsetDelta)
	if err != nil {
		return dst, err
	}
	if n != int(bh.RecordCount) {
		return dst, canonicalErr("record_count %d but the batch holds %d records", bh.RecordCount, n)
	}
	start := len(dst)
	if codec == None {
		if HeaderSize+size-LogOverhead > math.MaxInt32 {
			return dst, canonicalErr("batch of %d records' bytes is too large for Kafka's batchLength", size)
		}
		dst = slices.Grow(dst, HeaderSize+size)
		dst = appendHeader(dst, &bh, 0, n)
		dst = appendRecords(dst, records)
		return finishKafka(dst, start), nil
	}
	buf := recordBuffers.Get().(*[]byte)
	rec := appendRecords(slices.Grow((*buf)[:0], size), records)
	if cap(rec) <= maxPooledRecords {
		*buf = rec[:0]
		defer recordBuffers.Put(buf)
	}
	dst = appendHeader(dst, &bh, int16(codec), n)
	if dst, err = compress(dst, rec, codec); err != nil {
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

// appendHeader appends a Kafka batch header for bh with codec's bits and
// n records; batchLength and CRC are left 0 for finishKafka.
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

// sizeRecords checks the canonical record entries b of a batch whose
// last offset delta is last, and returns the size of their Kafka
// records and their number. Offset deltas must increase and stay within
// [0, last], as batch.ForEachRecord requires.
func sizeRecords(b []byte, last int32) (size, n int, err error) {
	prev := int64(-1)
	for len(b) > 0 {
		body, k, err := nextEntry(b, n)
		if err != nil {
			return 0, 0, err
		}
		r, err := parseCanonical(body, n)
		if err != nil {
			return 0, 0, err
		}
		if int64(r.offsetDelta) <= prev || r.offsetDelta > last {
			return 0, 0, canonicalErr("record %d has offset_delta %d after %d (last offset delta %d)", n, r.offsetDelta, prev, last)
		}
		prev = int64(r.offsetDelta)
		size += varintSize(int64(r.kafkaSize)) + r.kafkaSize
		n++
		b = b[k:]
	}
	return size, n, nil
}

// nextEntry returns the Record of the canonical record entry (tag 0x62,
// length) at the start of b, the n-th of its batch, and the entry's size.
func nextEntry(b []byte, n int) ([]byte, int, error) {
	if b[0] != tagRecordEntry {
		return nil, 0, canonicalErr("unexpected field tag 0x%02x among records", b[0])
	}
	if len(b) > 1 && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		end := 2 + int(b[1])
		return b[2:end:end], end, nil
	}
	body, k := consumeBytes(b, 1)
	if k < 0 {
		return nil, 0, canonicalErr("record entry %d overruns the batch", n)
	}
	return body, k, nil
}

// uvarint reads the protobuf varint at b[p:], its one-byte form inline;
// a negative length means malformed (protowire's convention).
func uvarint(b []byte, p int) (uint64, int) {
	if p < len(b) && b[p] < 0x80 {
		return uint64(b[p]), 1
	}
	return protowire.ConsumeVarint(b[p:])
}

// consumeBytes reads the length-delimited value at b[p:] and returns it
// and the offset just after it (negative if malformed).
func consumeBytes(b []byte, p int) ([]byte, int) {
	l, k := uvarint(b, p)
	if k < 0 || l > uint64(len(b)-p-k) {
		return nil, -1
	}
	p += k
	return b[p : p+int(l) : p+int(l)], p + int(l)
}

// tag reads the field tag at b[p:], its one-byte form inline, and
// returns the field, its wire type and the offset after it (negative if
// malformed).
func tag(b []byte, p int) (protowire.Number, protowire.Type, int) {
	if b[p] < 0x80 {
		return protowire.Number(b[p] >> 3), protowire.Type(b[p] & 7), p + 1
	}
	num, typ, m := protowire.ConsumeTag(b[p:])
	if m < 0 {
		return 0, 0, -1
	}
	return num, typ, p + m
}

// canonicalRecord is a parsed canonical Record; its slices alias the
// batch. A nil key, value or header value was absent.
type canonicalRecord struct {
	timestampDelta int64
	offsetDelta    int32
	key, value     []byte
	headerCount    int
	kafkaSize      int // size of the Kafka record after its length
	body           []byte
}

// parseCanonical parses a canonical Record, the n-th of its batch. The
// tags and lengths the Builder and FromKafka write (one byte each, for
// values under 128 bytes) are read inline: this runs twice per record on
// the fetch path.
func parseCanonical(b []byte, n int) (r canonicalRecord, err error) {
	r.body = b
	headers := 0 // Kafka size of the headers
	for p := 0; p < len(b); {
		t := b[p]
		var num protowire.Number
		var typ protowire.Type
		if t < 0x80 {
			num, typ = protowire.Number(t>>3), protowire.Type(t&7)
			p++
		} else if num, typ, p = tag(b, p); p < 0 {
			return r, canonicalErr("record %d: malformed field tag", n)
		}
		switch {
		case (num == 1 || num == 2) && typ == protowire.VarintType:
			var v uint64
			if p < len(b) && b[p] < 0x80 {
				v = uint64(b[p])
				p++
			} else {
				var k int
				if v, k = protowire.ConsumeVarint(b[p:]); k < 0 {
					return r, canonicalErr("record %d: malformed field %d", n, num)
				}
				p += k
			}
			if num == 1 {
				r.timestampDelta = protowire.DecodeZigZag(v)
			} else {
				// sint32: the low 32 bits, as batch.ForEachRecord reads it.
				r.offsetDelta = int32(protowire.DecodeZigZag(v & math.MaxUint32))
			}
		case num >= 3 && num <= 5 && typ == protowire.BytesType:
			var l uint64
			if p < len(b) && b[p] < 0x80 {
				l = uint64(b[p])
				p++
			} else {
				var k int
				if l, k = protowire.ConsumeVarint(b[p:]); k < 0 {
					return r, canonicalErr("record %d: malformed field %d", n, num)
				}
				p += k
			}
			if l > uint64(len(b)-p) {
				return r, canonicalErr("record %d: field %d overruns the record", n, num)
			}
			v := b[p : p+int(l) : p+int(l)]
			p += int(l)
			switch num {
			case 3:
				r.key = v
			case 4:
				r.value = v
			case 5:
				key, value, err := parseCanonicalHeader(v, n)
				if err != nil {
					return r, err
				}
				headers += kafkaBytesSize(key) + kafkaNullableSize(value)
				r.headerCount++
			}
		default:
			k := protowire.ConsumeFieldValue(num, typ, b[p:])
			if k < 0 {
				return r, canonicalErr("record %d: malformed field %d", n, num)
			}
			p += k
		}
	}
	if int64(len(b)) > math.MaxInt32 {
		return r, canonicalErr("record %d of %d bytes is too large for Kafka", n, len(b))
	}
	r.kafkaSize = 1 + varintSize(r.timestampDelta) + varintSize(int64(r.offsetDelta)) +
		kafkaNullableSize(r.key) + kafkaNullableSize(r.value) + varintSize(int64(r.headerCount)) + headers
	return r, nil
}

// parseCanonicalHeader parses a canonical Header message: its key (nil
// when absent) and value (nil when absent). Unknown fields are skipped.
func parseCanonicalHeader(b []byte, n int) (key, value []byte, err error) {
	for p := 0; p < len(b); {
		num, typ, q := tag(b, p)
		if q < 0 {
			return nil, nil, canonicalErr("record %d: malformed header", n)
		}
		p = q
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, q := consumeBytes(b, p)
			if q < 0 {
				return nil, nil, canonicalErr("record %d: header overruns the record", n)
			}
			if num == 1 {
				key = v
			} else {
				value = v
			}
			p = q
			continue
		}
		k := protowire.ConsumeFieldValue(num, typ, b[p:])
		if k < 0 {
			return nil, nil, canonicalErr("record %d: malformed header field %d", n, num)
		}
		p += k
	}
	return key, value, nil
}

// kafkaBytesSize is the size of b as Kafka writes a length-prefixed
// field; kafkaNullableSize the same with nil written as null (-1).
func kafkaBytesSize(b []byte) int { return varintSize(int64(len(b))) + len(b) }

func kafkaNullableSize(b []byte) int {
	if b == nil {
		return 1
	}
	return kafkaBytesSize(b)
}

// appendRecords appends the canonical record entries b (checked by
// sizeRecords) as Kafka records.
func appendRecords(dst, b []byte) []byte {
	for n := 0; len(b) > 0; n++ {
		body, k, _ := nextEntry(b, n)
		r, _ := parseCanonical(body, n)
		dst = appendKafkaRecord(dst, &r)
		b = b[k:]
	}
	return dst
}

// appendKafkaRecord appends r as a Kafka record.
func appendKafkaRecord(dst []byte, r *canonicalRecord) []byte {
	dst = appendVarint(dst, int64(r.kafkaSize))
	dst = append(dst, 0) // record attributes
	dst = appendVarint(dst, r.timestampDelta)
	dst = appendVarint(dst, int64(r.offsetDelta))
	dst = appendNullable(dst, r.key)
	dst = appendNullable(dst, r.value)
	dst = appendVarint(dst, int64(r.headerCount))
	if r.headerCount == 0 {
		return dst
	}
	b := r.body
	for p := 0; p < len(b); {
		num, typ, q := tag(b, p)
		p = q
		if num == 5 && typ == protowire.BytesType {
			v, q := consumeBytes(b, p)
			key, value, _ := parseCanonicalHeader(v, 0)
			dst = appendVarint(dst, int64(len(key)))
			dst = append(dst, key...)
			dst = appendNullable(dst, value)
			p = q
			continue
		}
		p += protowire.ConsumeFieldValue(num, typ, b[p:])
	}
	return dst
}

// appendNullable appends b as Kafka's length-prefixed bytes, nil as null.
func appendNullable(dst, b []byte) []byte {
	if b == nil {
		return append(dst, 1) // zigzag(-1)
	}
	dst = appendVarint(dst, int64(len(b)))
	return append(dst, b...)
}
