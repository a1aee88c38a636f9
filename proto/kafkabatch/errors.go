package kafkabatch

import (
	"errors"

	"github.com/sluice-io/sluice/proto/kafkarecords"
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
	// ErrTooLarge: the canonical batch would be larger than
	// Limits.MaxBytes (max.message.bytes); nothing was allocated for it.
	// MESSAGE_TOO_LARGE.
	ErrTooLarge = errors.New("kafkabatch: batch larger than the limit")
)

// The record-level sentinels are proto/kafkarecords', shared with
// proto/batch (a compressed batch's records are checked there on
// append); they are the same values here.
var (
	// ErrCodec: compression codec 5, 6 or 7. UNSUPPORTED_COMPRESSION_TYPE.
	ErrCodec = kafkarecords.ErrCodec
	// ErrDecompress: compressed records that do not decode. CORRUPT_RECORD.
	ErrDecompress = kafkarecords.ErrDecompress
	// ErrDecompressedTooLarge: records that decompress to more than
	// kafkarecords.MaxUncompressedBytes. MESSAGE_TOO_LARGE.
	ErrDecompressedTooLarge = kafkarecords.ErrDecompressedTooLarge
	// ErrRecordCount: recordCount is not positive, does not match the
	// records, or lastOffsetDelta is not recordCount - 1. INVALID_RECORD.
	ErrRecordCount = kafkarecords.ErrRecordCount
	// ErrOffsetDelta: record i does not have offsetDelta i.
	// INVALID_RECORD.
	ErrOffsetDelta = kafkarecords.ErrOffsetDelta
	// ErrVarint: a malformed varint or varlong. CORRUPT_RECORD.
	ErrVarint = kafkarecords.ErrVarint
	// ErrRecordFraming: a record or field length out of bounds.
	// CORRUPT_RECORD.
	ErrRecordFraming = kafkarecords.ErrRecordFraming
	// ErrHeaderKey: a null or non-UTF-8 header key. INVALID_RECORD.
	ErrHeaderKey = kafkarecords.ErrHeaderKey
	// ErrCanonical: AppendKafka's input is not a canonical batch it can
	// convert: malformed, its CRC does not match, or it holds what
	// Kafka's format cannot carry (attribute bits beyond 16, an unknown
	// codec, a producer epoch outside int16). CORRUPT_RECORD.
	ErrCanonical = kafkarecords.ErrCanonical
)

// fail returns an *errs.Error with code and message whose Cause is
// sentinel.
func fail(code sluicev1.ErrorCode, sentinel error, format string, args ...any) error {
	return kafkarecords.Fail(code, sentinel, format, args...)
}

func corrupt(sentinel error, format string, args ...any) error {
	return fail(sluicev1.ErrorCode_CORRUPT_RECORD, sentinel, format, args...)
}

func invalid(sentinel error, format string, args ...any) error {
	return fail(sluicev1.ErrorCode_INVALID_RECORD, sentinel, format, args...)
}
