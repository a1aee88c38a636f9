package kafkabatch

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The errors FromKafka, AppendKafka, ParseHeader and Batches return are
// *errs.Error values whose Code is the per-partition answer (Sluice's
// ErrorCode, Kafka's name) and whose Cause is one of the sentinels below,
// so that a caller can both answer (errs.Code) and branch (errors.Is).
// The code of each sentinel is fixed and written next to it.
var (
	// ErrTruncated: the bytes end before the batch does (shorter than
	// its header or than its batchLength says). CORRUPT_RECORD.
	ErrTruncated = errors.New("kafkabatch: truncated batch")
	// ErrBatchLength: batchLength is below the size of a v2 header, or
	// the bytes go on after the batch it frames. CORRUPT_RECORD.
	ErrBatchLength = errors.New("kafkabatch: batchLength does not frame the bytes")
	// ErrLegacyMagic: a magic 0 or 1 message set. Kafka answers a
	// produce (v3 and later) holding one INVALID_RECORD ("only allowed to
	// contain record batches with magic version 2"). INVALID_RECORD.
	ErrLegacyMagic = errors.New("kafkabatch: message format v0/v1 (magic 0 or 1)")
	// ErrMagic: a magic other than 0, 1 or 2 (Kafka: "Invalid magic
	// found in record", a CorruptRecordException). CORRUPT_RECORD.
	ErrMagic = errors.New("kafkabatch: unknown magic")
	// ErrCRC: the CRC-32C over attributes..end does not match.
	// CORRUPT_RECORD.
	ErrCRC = errors.New("kafkabatch: CRC mismatch")
	// ErrAttributes: an attribute bit a produced batch may not carry
	// (bits 6-15: the delete-horizon flag is the log cleaner's, the rest
	// are unassigned). INVALID_RECORD.
	ErrAttributes = errors.New("kafkabatch: unsupported attribute bits")
	// ErrCodec: compression codec 5, 6 or 7 (none is assigned).
	// UNSUPPORTED_COMPRESSION_TYPE.
	ErrCodec = errors.New("kafkabatch: unknown compression codec")
	// ErrDecompress: the compressed records do not decode.
	// CORRUPT_RECORD.
	ErrDecompress = errors.New("kafkabatch: compressed records do not decode")
	// ErrDecompressedTooLarge: the records decompress to more than
	// Limits.MaxUncompressedBytes; found without holding more than that
	// many bytes of output. MESSAGE_TOO_LARGE (a Java producer splits
	// the batch and retries; CORRUPT_RECORD is retriable and would have
	// every client resend the same bytes until its delivery timeout).
	ErrDecompressedTooLarge = errors.New("kafkabatch: records decompress to more than the limit")
	// ErrTooLarge: the canonical batch would be larger than
	// Limits.MaxBytes (max.message.bytes); nothing was allocated for it.
	// MESSAGE_TOO_LARGE.
	ErrTooLarge = errors.New("kafkabatch: batch larger than the limit")
	// ErrRecordCount: recordCount is not positive, does not match the
	// records, or lastOffsetDelta is not recordCount - 1. INVALID_RECORD.
	ErrRecordCount = errors.New("kafkabatch: record count does not match the records")
	// ErrOffsetDelta: record i does not have offsetDelta i.
	// INVALID_RECORD.
	ErrOffsetDelta = errors.New("kafkabatch: record offset delta out of order")
	// ErrVarint: a varint or varlong is cut short, longer than 5 (10)
	// bytes, or out of range. CORRUPT_RECORD.
	ErrVarint = errors.New("kafkabatch: malformed varint")
	// ErrRecordFraming: a record's length, or a key, value or header
	// length, is negative (other than -1 for null where null is allowed)
	// or runs past its record, or a record's fields do not fill exactly
	// the length it declares. CORRUPT_RECORD.
	ErrRecordFraming = errors.New("kafkabatch: malformed record")
	// ErrHeaderKey: a record header key is null (length -1; Kafka's
	// "Invalid negative header key size") or not UTF-8 (the canonical
	// form's header key is a protobuf string). INVALID_RECORD.
	ErrHeaderKey = errors.New("kafkabatch: invalid header key")
	// ErrCanonical: AppendKafka's input is not a canonical batch it can
	// convert: malformed, its CRC does not match, or it holds what
	// Kafka's format cannot carry (attribute bits beyond 16, a
	// compression bit in a stored batch, a producer epoch outside int16).
	// CORRUPT_RECORD.
	ErrCanonical = errors.New("kafkabatch: not a convertible canonical batch")
)

// fail returns an *errs.Error with code and message whose Cause is
// sentinel.
func fail(code sluicev1.ErrorCode, sentinel error, format string, args ...any) error {
	return &errs.Error{Code: code, Message: fmt.Sprintf(format, args...), Cause: sentinel}
}

func corrupt(sentinel error, format string, args ...any) error {
	return fail(sluicev1.ErrorCode_CORRUPT_RECORD, sentinel, format, args...)
}

func invalid(sentinel error, format string, args ...any) error {
	return fail(sluicev1.ErrorCode_INVALID_RECORD, sentinel, format, args...)
}
