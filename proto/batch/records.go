package batch

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// RecordHeader is an application header of a record.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is a decoded record. Key, Value and header values alias the
// batch bytes they were decoded from.
type Record struct {
	Offset    int64
	Timestamp int64
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
}

// Builder assembles a canonical batch record by record. The zero value is
// ready after Reset. A Builder is not safe for concurrent use.
type Builder struct {
	buf    []byte
	n      int32
	baseTS int64
	maxTS  int64
}

// Reset starts a new batch whose base timestamp is baseTimestamp (ms). It
// keeps the buffer unless Finish handed it out.
func (b *Builder) Reset(baseTimestamp int64) {
	if cap(b.buf) < HeaderSize {
		b.buf = make([]byte, HeaderSize, 16<<10)
	}
	b.buf = b.buf[:HeaderSize]
	b.n = 0
	b.baseTS, b.maxTS = baseTimestamp, baseTimestamp
}

// ResetBuffer is Reset building into buf's storage (its contents are
// discarded), for callers that recycle batch buffers once a batch has been
// acknowledged.
func (b *Builder) ResetBuffer(buf []byte, baseTimestamp int64) {
	if cap(buf) < HeaderSize {
		buf = make([]byte, HeaderSize, 16<<10)
	}
	b.buf = buf[:HeaderSize]
	b.n = 0
	b.baseTS, b.maxTS = baseTimestamp, baseTimestamp
}

// Count is the number of records added since Reset.
func (b *Builder) Count() int { return int(b.n) }

// Size is the encoded size of the batch so far.
func (b *Builder) Size() int { return len(b.buf) }

// RecordSize returns how many bytes Add would add for such a record.
func RecordSize(tsDelta int64, offDelta int32, key, value []byte, headers []RecordHeader) int {
	n := recordBodySize(tsDelta, offDelta, key, value, headers)
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

func recordBodySize(tsDelta int64, offDelta int32, key, value []byte, headers []RecordHeader) int {
	n := 0
	if tsDelta != 0 {
		n += 1 + protowire.SizeVarint(protowire.EncodeZigZag(tsDelta))
	}
	if offDelta != 0 {
		n += 1 + protowire.SizeVarint(protowire.EncodeZigZag(int64(offDelta)))
	}
	if len(key) > 0 {
		n += 1 + protowire.SizeBytes(len(key))
	}
	if len(value) > 0 {
		n += 1 + protowire.SizeBytes(len(value))
	}
	for _, h := range headers {
		n += 1 + protowire.SizeBytes(headerSize(h))
	}
	return n
}

func headerSize(h RecordHeader) int {
	n := 0
	if len(h.Key) > 0 {
		n += 1 + protowire.SizeBytes(len(h.Key))
	}
	if len(h.Value) > 0 {
		n += 1 + protowire.SizeBytes(len(h.Value))
	}
	return n
}

// Add appends a record with timestamp ts (ms). The encoding is what
// proto.Marshal of sluice.v1.Record would produce.
func (b *Builder) Add(ts int64, key, value []byte, headers []RecordHeader) {
	d := ts - b.baseTS
	body := recordBodySize(d, b.n, key, value, headers)
	buf := append(b.buf, recordTag)
	buf = protowire.AppendVarint(buf, uint64(body))
	if d != 0 {
		buf = append(buf, 1<<3|0)
		buf = protowire.AppendVarint(buf, protowire.EncodeZigZag(d))
	}
	if b.n != 0 {
		buf = append(buf, 2<<3|0)
		buf = protowire.AppendVarint(buf, protowire.EncodeZigZag(int64(b.n)))
	}
	if len(key) > 0 {
		buf = append(buf, 3<<3|2)
		buf = protowire.AppendBytes(buf, key)
	}
	if len(value) > 0 {
		buf = append(buf, 4<<3|2)
		buf = protowire.AppendBytes(buf, value)
	}
	for _, h := range headers {
		buf = append(buf, 5<<3|2)
		buf = protowire.AppendVarint(buf, uint64(headerSize(h)))
		if len(h.Key) > 0 {
			buf = append(buf, 1<<3|2)
			buf = protowire.AppendString(buf, h.Key)
		}
		if len(h.Value) > 0 {
			buf = append(buf, 2<<3|2)
			buf = protowire.AppendBytes(buf, h.Value)
		}
	}
	b.buf = buf
	b.n++
	if ts > b.maxTS {
		b.maxTS = ts
	}
}

// Producer identifies the producer of a batch: ID -1 for a plain producer.
type Producer struct {
	ID           int64
	Epoch        int32
	BaseSequence int32
}

// PlainProducer is the identity of a non-idempotent producer.
var PlainProducer = Producer{ID: NoProducerID, Epoch: -1, BaseSequence: -1}

// Finish writes the header and CRC and returns the canonical batch. The
// returned slice is handed over to the caller: the Builder starts a new
// buffer on its next Reset. Finish on an empty builder returns nil.
func (b *Builder) Finish(p Producer, attributes uint32) []byte {
	if b.n == 0 {
		return nil
	}
	h := Header{
		BaseOffset:      0,
		Attributes:      attributes,
		LastOffsetDelta: b.n - 1,
		BaseTimestamp:   b.baseTS,
		MaxTimestamp:    b.maxTS,
		ProducerID:      p.ID,
		ProducerEpoch:   p.Epoch,
		BaseSequence:    p.BaseSequence,
		RecordCount:     b.n,
	}
	out := b.buf
	PutHeader(out, h)
	h.CRC = ComputeCRC(out)
	PutHeader(out, h)
	b.buf = nil
	return out
}

// ForEachRecord decodes the records of a canonical batch in order and
// calls fn for each; it stops at fn's first error and returns it. Offsets
// and timestamps are absolute. Offset deltas must increase strictly and
// stay within the last offset delta (CORRUPT_RECORD otherwise): a
// producer's batch numbers its records 0, 1, 2, ..., a batch compacted by
// the log cleaner keeps the surviving records' deltas, with gaps.
//
// A compressed batch is decompressed (at most
// kafkarecords.MaxUncompressedBytes) after its CRC has been checked, and
// its Kafka records decoded: null and empty keep their difference as in
// field-12 records, and the records must be as many as record_count.
// Its records' slices alias the decompressed buffer, not b.
func ForEachRecord(b []byte, fn func(Record) error) error {
	h, err := ParseHeader(b)
	if err != nil {
		return err
	}
	if h.IsCompressed() {
		return forEachCompressed(b, h, func(r Record, _ []byte) error { return fn(r) })
	}
	prev := int64(-1)
	rest := b[HeaderSize:]
	for len(rest) > 0 {
		num, typ, m := protowire.ConsumeTag(rest)
		if m < 0 || num != fieldRecords || typ != protowire.BytesType {
			return corrupt("unexpected field among records")
		}
		body, k := protowire.ConsumeBytes(rest[m:])
		if k < 0 {
			return corrupt("record entry overruns the batch")
		}
		rest = rest[m+k:]
		r, err := decodeRecord(body)
		if err != nil {
			return err
		}
		if r.Offset <= prev || r.Offset > int64(h.LastOffsetDelta) {
			return corrupt("record offset_delta %d after %d (last offset delta %d)", r.Offset, prev, h.LastOffsetDelta)
		}
		prev = r.Offset
		r.Offset += h.BaseOffset
		r.Timestamp += h.BaseTimestamp
		if h.Attributes&AttrLogAppendTime != 0 {
			r.Timestamp = h.MaxTimestamp // the broker's append time, every record's (Kafka's rule)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// decodeRecord decodes one Record with Offset and Timestamp as deltas.
func decodeRecord(b []byte) (Record, error) {
	var r Record
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 {
			return r, corrupt("malformed record field tag")
		}
		b = b[m:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return r, corrupt("malformed timestamp_delta")
			}
			r.Timestamp = protowire.DecodeZigZag(v)
			b = b[k:]
		case num == 2 && typ == protowire.VarintType:
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return r, corrupt("malformed offset_delta")
			}
			r.Offset = int64(int32(protowire.DecodeZigZag(v & 0xffffffff)))
			b = b[k:]
		case num == 3 && typ == protowire.BytesType:
			v, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return r, corrupt("key overruns the record")
			}
			r.Key, b = v, b[k:]
		case num == 4 && typ == protowire.BytesType:
			v, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return r, corrupt("value overruns the record")
			}
			r.Value, b = v, b[k:]
		case num == 5 && typ == protowire.BytesType:
			v, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return r, corrupt("header overruns the record")
			}
			h, err := decodeHeader(v)
			if err != nil {
				return r, err
			}
			r.Headers = append(r.Headers, h)
			b = b[k:]
		default:
			k := protowire.ConsumeFieldValue(num, typ, b)
			if k < 0 {
				return r, corrupt("malformed record field %d", num)
			}
			b = b[k:]
		}
	}
	return r, nil
}

func decodeHeader(b []byte) (RecordHeader, error) {
	var h RecordHeader
	for len(b) > 0 {
		num, typ, m := protowire.ConsumeTag(b)
		if m < 0 || typ != protowire.BytesType {
			return h, corrupt("malformed record header")
		}
		v, k := protowire.ConsumeBytes(b[m:])
		if k < 0 {
			return h, corrupt("record header overruns the record")
		}
		switch num {
		case 1:
			h.Key = string(v)
		case 2:
			h.Value = v
		}
		b = b[m+k:]
	}
	return h, nil
}

// Filter appends to dst a copy of canonical batch b holding only the
// records keep accepts (in order, their entries copied byte for byte, so
// each keeps its offset delta and timestamp delta), and returns it with
// the number kept. The header is b's (base offset, leader epoch,
// attributes, producer id, epoch and base sequence, base and max
// timestamp, last offset delta) with record_count set to the number kept
// and the CRC recomputed: the batch still covers the same offsets, so the
// offset after it and the producer's last sequence are unchanged. It is
// the log cleaner's rewrite (Kafka's MemoryRecords.filterTo); Verify
// accepts its output, Canonicalize does not (a producer never sends gaps).
// Records passed to keep alias b.
//
// A compressed batch (its CRC checked first) keeps its codec: the
// records kept are copied byte for byte in Kafka's encoding and
// compressed again, as Kafka's cleaner does. If every record is kept the
// batch is copied unchanged; if none is, the batch written is
// uncompressed (no records, codec bits cleared, as Kafka writes an empty
// batch).
func Filter(dst, b []byte, keep func(Record) bool) ([]byte, int, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return dst, 0, err
	}
	if h.IsCompressed() {
		return filterCompressed(dst, b, h, keep)
	}
	start := len(dst)
	dst = append(dst, b[:HeaderSize]...)
	kept := 0
	rest := b[HeaderSize:]
	prev := int64(-1)
	for len(rest) > 0 {
		num, typ, m := protowire.ConsumeTag(rest)
		if m < 0 || num != fieldRecords || typ != protowire.BytesType {
			return dst[:start], 0, corrupt("unexpected field among records")
		}
		body, k := protowire.ConsumeBytes(rest[m:])
		if k < 0 {
			return dst[:start], 0, corrupt("record entry overruns the batch")
		}
		entry := rest[:m+k]
		rest = rest[m+k:]
		r, err := decodeRecord(body)
		if err != nil {
			return dst[:start], 0, err
		}
		if r.Offset <= prev || r.Offset > int64(h.LastOffsetDelta) {
			return dst[:start], 0, corrupt("record offset_delta %d after %d (last offset delta %d)", r.Offset, prev, h.LastOffsetDelta)
		}
		prev = r.Offset
		r.Offset += h.BaseOffset
		r.Timestamp += h.BaseTimestamp
		if h.Attributes&AttrLogAppendTime != 0 {
			r.Timestamp = h.MaxTimestamp
		}
		if keep(r) {
			dst = append(dst, entry...)
			kept++
		}
	}
	out := dst[start:]
	h.RecordCount = int32(kept)
	PutHeader(out, h)
	h.CRC = ComputeCRC(out)
	PutHeader(out, h)
	return dst, kept, nil
}

// forEachCompressed decodes the records of compressed batch b (header
// h) and calls fn with each and its Kafka encoding (length included).
func forEachCompressed(b []byte, h Header, fn func(r Record, raw []byte) error) error {
	records, err := decompressStored(b, h)
	if err != nil {
		return err
	}
	prev := int64(-1)
	n := 0
	var kr kafkarecords.Record
	for rest := records; len(rest) > 0; n++ {
		k, err := kafkarecords.ParseRecord(&kr, rest, n)
		if err != nil {
			return err
		}
		raw := rest[:k]
		rest = rest[k:]
		if int64(kr.OffsetDelta) <= prev || kr.OffsetDelta > h.LastOffsetDelta {
			return corrupt("record offset_delta %d after %d (last offset delta %d)", kr.OffsetDelta, prev, h.LastOffsetDelta)
		}
		prev = int64(kr.OffsetDelta)
		r := Record{Offset: h.BaseOffset + int64(kr.OffsetDelta), Timestamp: h.BaseTimestamp + kr.TimestampDelta, Key: kr.Key, Value: kr.Value}
		if h.Attributes&AttrLogAppendTime != 0 {
			r.Timestamp = h.MaxTimestamp
		}
		if kr.HeaderCount > 0 {
			r.Headers = make([]RecordHeader, 0, kr.HeaderCount)
			hs := kr.Headers
			for range kr.HeaderCount {
				var key, value []byte
				key, value, hs = kafkarecords.NextHeader(hs)
				r.Headers = append(r.Headers, RecordHeader{Key: string(key), Value: value})
			}
		}
		if err := fn(r, raw); err != nil {
			return err
		}
	}
	if n != int(h.RecordCount) {
		return corrupt("batch says %d records but its compressed records hold %d", h.RecordCount, n)
	}
	return nil
}

// filterCompressed is Filter for compressed batch b (header h).
func filterCompressed(dst, b []byte, h Header, keep func(Record) bool) ([]byte, int, error) {
	buf := kafkaBuffers.Get().(*[]byte)
	defer putKafkaBuffer(buf)
	kept := (*buf)[:0]
	n := 0
	err := forEachCompressed(b, h, func(r Record, raw []byte) error {
		if keep(r) {
			kept = append(kept, raw...)
			n++
		}
		return nil
	})
	*buf = kept
	if err != nil {
		return dst, 0, err
	}
	switch n {
	case int(h.RecordCount):
		return append(dst, b...), n, nil
	case 0:
		start := len(dst)
		dst = append(dst, b[:HeaderSize]...)
		h.RecordCount = 0
		finishCodec(dst[start:], h, kafkarecords.None)
		return dst, 0, nil
	}
	h.RecordCount = int32(n)
	start := len(dst)
	out, err := compressInto(dst, h, kept, h.Codec())
	if err != nil {
		return dst[:start], 0, err
	}
	return out, n, nil
}
