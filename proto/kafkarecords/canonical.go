package kafkarecords

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The conversion of canonical record entries (sluice.v1.Record, field 12
// of a canonical batch) to Kafka's records: what the Kafka door's fetch
// sends for an uncompressed stored batch, and what a compressed canonical
// batch carries (compressed) when the broker or the Go client compresses
// one.

// SizeKafka checks the canonical record entries b (field 12 entries, as
// a stored batch holds them) of a batch whose last offset delta is last,
// and returns the size of their Kafka records and their number. Offset
// deltas must increase and stay within [0, last], as batch.ForEachRecord
// requires (a compacted batch has gaps). Fields a canonical record does
// not define are skipped, as protobuf readers do, and of a repeated field
// the last one counts. Errors are ErrCanonical.
func SizeKafka(b []byte, last int32) (size, n int, err error) {
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

// AppendKafka appends the canonical record entries b, which SizeKafka
// accepted, as Kafka records (record attributes 0; an absent key, value
// or header value is null, a present empty one empty; an absent header
// key is the empty string).
func AppendKafka(dst, b []byte) []byte {
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
