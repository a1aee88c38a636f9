package codec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The in-place decoders (ProduceRequest, ReplicaFetchResponse) share one
// field walker: each message's decoder only says what a field means.

var errMalformed = errors.New("codec: malformed message")

func malformed(what string, n int) error {
	return fmt.Errorf("%w: %s: %v", errMalformed, what, protowire.ParseError(n))
}

// field is one varint or length-delimited field of a message. bytes
// aliases the message's buffer, capped so that an append to it can never
// write into the bytes that follow.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	bytes  []byte
	varint uint64
}

// is reports whether f is field num with wire type typ. A known number
// with an unexpected wire type is skipped like an unknown field, as
// proto.Unmarshal would not take it either.
func (f field) is(num protowire.Number, typ protowire.Type) bool {
	return f.num == num && f.typ == typ
}

// utf8 returns a string field's value, refusing invalid UTF-8 as
// proto.Unmarshal does; what names the field in the error.
func (f field) utf8(what string) (string, error) {
	if !utf8.Valid(f.bytes) {
		return "", fmt.Errorf("%w: %s is not valid UTF-8", errMalformed, what)
	}
	return string(f.bytes), nil
}

// walk calls fn for every varint and length-delimited field of message b
// in order, skipping fields of other wire types; a truncated or malformed
// encoding is an error naming msg, and so is any error fn returns.
func walk(b []byte, msg string, fn func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed(msg+" tag", n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
			f.bytes = f.bytes[:len(f.bytes):len(f.bytes)]
		case protowire.VarintType:
			f.varint, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return malformed(fmt.Sprintf("%s field %d", msg, num), n)
		}
		b = b[n:]
		if typ != protowire.BytesType && typ != protowire.VarintType {
			continue
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}
