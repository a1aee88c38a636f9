package kafkarecords

import (
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
)

// Record is a parsed Kafka record; its slices alias the records it was
// parsed from. A nil Key, Value or header value is null; a present one
// is never nil. Record attributes (an int8 Kafka does not use) are not
// kept.
type Record struct {
	TimestampDelta int64
	OffsetDelta    int32
	Key, Value     []byte
	// HeaderCount headers, as Kafka encodes them after the count, in
	// Headers: read them with NextHeader.
	HeaderCount int
	Headers     []byte
	// canonicalSize is the size of the canonical Record message.
	canonicalSize int
}

// NextHeader splits the first header off the headers of a record that
// ParseRecord accepted: its key, its value (nil for null) and the rest.
func NextHeader(h []byte) (key, value, rest []byte) {
	kl, n, _ := readVarint(h)
	key = h[n : n+int(kl) : n+int(kl)]
	h = h[n+int(kl):]
	value, n, _ = readNullable(h, 0, "")
	return key, value, h[n:]
}

// ParseRecord parses and checks the Kafka record at the start of b (the
// i-th of its batch, for messages) into r and returns its size. It checks
// the varints (ErrVarint), the lengths (ErrRecordFraming) and the header
// keys, never null and UTF-8 (ErrHeaderKey); not the offset delta.
func ParseRecord(r *Record, b []byte, i int) (int, error) {
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
	if r.TimestampDelta, k, err = readVarlong(body[p:]); err != nil {
		return 0, recordErr(err, i, "timestampDelta")
	}
	p += k
	if r.OffsetDelta, k, err = readVarint(body[p:]); err != nil {
		return 0, recordErr(err, i, "offsetDelta")
	}
	p += k
	if r.Key, k, err = readNullable(body[p:], i, "key"); err != nil {
		return 0, err
	}
	p += k
	if r.Value, k, err = readNullable(body[p:], i, "value"); err != nil {
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
	r.HeaderCount, r.Headers = int(c), body[p:]
	cs := 0
	if r.TimestampDelta != 0 {
		cs += 1 + varintSize(r.TimestampDelta)
	}
	if r.OffsetDelta != 0 {
		cs += 1 + varintSize(int64(r.OffsetDelta))
	}
	if r.Key != nil {
		cs += 1 + uvarintSize(uint64(len(r.Key))) + len(r.Key)
	}
	if r.Value != nil {
		cs += 1 + uvarintSize(uint64(len(r.Value))) + len(r.Value)
	}
	for j := 0; j < r.HeaderCount; j++ {
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

// Scan is what walking the records of a produced batch learns.
type Scan struct {
	// N is the number of records.
	N int
	// MaxTimestamp is the largest record timestamp, at least the base
	// timestamp.
	MaxTimestamp int64
	// CanonicalSize is the size of the records as canonical record
	// entries (field 12, tag and length included), as AppendCanonical
	// writes them.
	CanonicalSize int
	// FirstKeyless is the offset delta of the first record whose key is
	// null or empty, -1 when every record has one (a compacted topic
	// takes only keyed records).
	FirstKeyless int32
}

// ScanRecords checks every record of b, the uncompressed records of a
// batch a producer sent with base timestamp baseTS: each well formed
// (ParseRecord) and record i with offsetDelta i (ErrOffsetDelta). It
// does not check their number against a header: the caller compares
// Scan.N.
func ScanRecords(b []byte, baseTS int64) (Scan, error) {
	s := Scan{MaxTimestamp: baseTS, FirstKeyless: -1}
	var r Record
	for len(b) > 0 {
		n, err := ParseRecord(&r, b, s.N)
		if err != nil {
			return s, err
		}
		if int64(r.OffsetDelta) != int64(s.N) {
			return s, invalid(ErrOffsetDelta, "record %d has offsetDelta %d", s.N, r.OffsetDelta)
		}
		if len(r.Key) == 0 && s.FirstKeyless < 0 {
			s.FirstKeyless = r.OffsetDelta
		}
		s.MaxTimestamp = max(s.MaxTimestamp, baseTS+r.TimestampDelta)
		s.CanonicalSize += CanonicalEntrySize(&r)
		s.N++
		b = b[n:]
	}
	return s, nil
}

// Canonical record fields (sluice.v1.Record and Header) as tag bytes.
const (
	tagRecordEntry = 12<<3 | 2
	tagTimestamp   = 1<<3 | 0
	tagOffsetDelta = 2<<3 | 0
	tagKey         = 3<<3 | 2
	tagValue       = 4<<3 | 2
	tagHeader      = 5<<3 | 2
	tagHeaderKey   = 1<<3 | 2
	tagHeaderValue = 2<<3 | 2
)

// AppendCanonical appends records b, which ScanRecords accepted, as
// canonical record entries (Scan.CanonicalSize bytes): tag, length, and
// the Record as proto.Marshal writes it, with a present empty key, value
// or header value kept (written with length 0) where a null one is left
// out. Record attributes are dropped.
func AppendCanonical(dst, b []byte) []byte {
	var r Record
	for len(b) > 0 {
		n, _ := ParseRecord(&r, b, 0) // checked by ScanRecords
		dst = appendCanonical(dst, &r)
		b = b[n:]
	}
	return dst
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

// appendCanonical appends r (checked by ParseRecord) as a canonical
// record entry.
func appendCanonical(out []byte, r *Record) []byte {
	out = append(out, tagRecordEntry)
	out = appendUvarint(out, uint64(r.canonicalSize))
	if r.TimestampDelta != 0 {
		out = append(out, tagTimestamp)
		out = appendVarint(out, r.TimestampDelta)
	}
	if r.OffsetDelta != 0 {
		out = append(out, tagOffsetDelta)
		out = appendVarint(out, int64(r.OffsetDelta))
	}
	if r.Key != nil {
		out = append(out, tagKey)
		out = appendUvarint(out, uint64(len(r.Key)))
		out = append(out, r.Key...)
	}
	if r.Value != nil {
		out = append(out, tagValue)
		out = appendUvarint(out, uint64(len(r.Value)))
		out = append(out, r.Value...)
	}
	h := r.Headers
	for range r.HeaderCount {
		var key, v []byte
		key, v, h = NextHeader(h)
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

// CanonicalEntrySize is the size of r's canonical record entry (tag and
// length included), as AppendCanonical writes it.
func CanonicalEntrySize(r *Record) int {
	return 1 + uvarintSize(uint64(r.canonicalSize)) + r.canonicalSize
}
