package kafkarecords

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The errors of this package are *errs.Error values whose Code is the
// per-partition answer (Sluice's ErrorCode, Kafka's name) and whose Cause
// is one of the sentinels below, so that a caller can both answer
// (errs.Code) and branch (errors.Is). The code of each sentinel is fixed
// and written next to it. proto/kafkabatch exports the same values under
// the same names.
var (
	// ErrCodec: compression codec 5, 6 or 7 (none is assigned).
	// UNSUPPORTED_COMPRESSION_TYPE.
	ErrCodec = errors.New("kafkarecords: unknown compression codec")
	// ErrDecompress: the compressed records do not decode.
	// CORRUPT_RECORD.
	ErrDecompress = errors.New("kafkarecords: compressed records do not decode")
	// ErrDecompressedTooLarge: the records decompress to more than the
	// caller's limit; found without holding more than that many bytes of
	// output. MESSAGE_TOO_LARGE (a Java producer splits the batch and
	// retries; CORRUPT_RECORD is retriable and would have every client
	// resend the same bytes until its delivery timeout).
	ErrDecompressedTooLarge = errors.New("kafkarecords: records decompress to more than the limit")
	// ErrRecordCount: the records are not as many as the batch header
	// says, or the header's count is impossible. INVALID_RECORD.
	ErrRecordCount = errors.New("kafkarecords: record count does not match the records")
	// ErrOffsetDelta: record i of a produced batch does not have
	// offsetDelta i. INVALID_RECORD.
	ErrOffsetDelta = errors.New("kafkarecords: record offset delta out of order")
	// ErrVarint: a varint or varlong is cut short, longer than 5 (10)
	// bytes, or out of range. CORRUPT_RECORD.
	ErrVarint = errors.New("kafkarecords: malformed varint")
	// ErrRecordFraming: a record's length, or a key, value or header
	// length, is negative (other than -1 for null where null is allowed)
	// or runs past its record, or a record's fields do not fill exactly
	// the length it declares. CORRUPT_RECORD.
	ErrRecordFraming = errors.New("kafkarecords: malformed record")
	// ErrHeaderKey: a record header key is null (length -1; Kafka's
	// "Invalid negative header key size") or not UTF-8 (the canonical
	// form's header key is a protobuf string). INVALID_RECORD.
	ErrHeaderKey = errors.New("kafkarecords: invalid header key")
	// ErrCanonical: canonical record entries that do not convert to
	// Kafka's records: malformed, or offset deltas out of order.
	// CORRUPT_RECORD.
	ErrCanonical = errors.New("kafkarecords: not convertible canonical records")
)

// Fail returns an *errs.Error with code and message whose Cause is
// sentinel.
func Fail(code sluicev1.ErrorCode, sentinel error, format string, args ...any) error {
	return &errs.Error{Code: code, Message: fmt.Sprintf(format, args...), Cause: sentinel}
}

func corrupt(sentinel error, format string, args ...any) error {
	return Fail(sluicev1.ErrorCode_CORRUPT_RECORD, sentinel, format, args...)
}

func invalid(sentinel error, format string, args ...any) error {
	return Fail(sluicev1.ErrorCode_INVALID_RECORD, sentinel, format, args...)
}

func canonicalErr(format string, args ...any) error {
	return corrupt(ErrCanonical, format, args...)
}
