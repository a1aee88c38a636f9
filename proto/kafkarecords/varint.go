package kafkarecords

import "math"

// Kafka's varints are zigzag-encoded LEB128, as protobuf's sint32 and
// sint64: a varint (int32) takes at most 5 bytes, a varlong (int64) at
// most 10. Java reads the same, but lets a 5th byte's high bits overflow
// silently; these readers refuse a value out of range (ErrVarint).
// Non-minimal encodings (0x80 0x00 for 0) are accepted, as Java does.

// readVarint reads a zigzag varint (int32) from the start of b and
// returns it and its length.
func readVarint(b []byte) (int32, int, error) {
	if len(b) > 0 && b[0] < 0x80 {
		return int32(b[0]>>1) ^ -int32(b[0]&1), 1, nil
	}
	return readVarintSlow(b)
}

func readVarintSlow(b []byte) (int32, int, error) {
	var u uint64
	for i := 0; i < 5; i++ {
		if i >= len(b) {
			return 0, 0, corrupt(ErrVarint, "varint cut short")
		}
		c := b[i]
		u |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if u > math.MaxUint32 {
				return 0, 0, corrupt(ErrVarint, "varint out of the int32 range")
			}
			v := uint32(u)
			return int32(v>>1) ^ -int32(v&1), i + 1, nil
		}
	}
	return 0, 0, corrupt(ErrVarint, "varint longer than 5 bytes")
}

// readVarlong reads a zigzag varlong (int64) from the start of b and
// returns it and its length.
func readVarlong(b []byte) (int64, int, error) {
	if len(b) > 0 && b[0] < 0x80 {
		return int64(b[0]>>1) ^ -int64(b[0]&1), 1, nil
	}
	return readVarlongSlow(b)
}

func readVarlongSlow(b []byte) (int64, int, error) {
	var u uint64
	for i := 0; i < 10; i++ {
		if i >= len(b) {
			return 0, 0, corrupt(ErrVarint, "varlong cut short")
		}
		c := b[i]
		if i == 9 && c > 1 {
			return 0, 0, corrupt(ErrVarint, "varlong out of the int64 range")
		}
		u |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i + 1, nil
		}
	}
	return 0, 0, corrupt(ErrVarint, "varlong longer than 10 bytes")
}

// zigzag is the zigzag encoding of v, as Kafka's varint and varlong and
// protobuf's sint32 and sint64 write it.
func zigzag(v int64) uint64 { return uint64(v<<1) ^ uint64(v>>63) }

// varintSize is the size of the zigzag varint of v.
func varintSize(v int64) int { return uvarintSize(zigzag(v)) }

// uvarintSize is the size of the LEB128 encoding of u.
func uvarintSize(u uint64) int {
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// appendUvarint appends the LEB128 encoding of u.
func appendUvarint(b []byte, u uint64) []byte {
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

// appendVarint appends the zigzag varint of v.
func appendVarint(b []byte, v int64) []byte { return appendUvarint(b, zigzag(v)) }
