package client

import (
	"fmt"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// RecordTooLargeError is a record that Send refused before sending it,
// because no request could carry it: as a batch of its own it is larger
// than its topic's max.message.bytes (the broker's limit, read from the
// topic's metadata) or than the producer's max request bytes
// (WithMaxRequestBytes). errs.Code reports MESSAGE_TOO_LARGE for it, as
// for the broker's own refusal.
type RecordTooLargeError struct {
	Topic string
	// Size is the record's bytes as a batch of its own: what both limits
	// are compared with.
	Size int
	// MaxMessageBytes is the topic's max.message.bytes, 0 when its
	// metadata did not say; MaxRequestBytes the producer's limit.
	MaxMessageBytes int
	MaxRequestBytes int
}

// OverTopicLimit reports whether the record exceeds its topic's
// max.message.bytes: raising max request bytes alone cannot send it.
func (e *RecordTooLargeError) OverTopicLimit() bool {
	return e.MaxMessageBytes > 0 && e.Size > e.MaxMessageBytes
}

// OverRequestLimit reports whether the record exceeds the producer's max
// request bytes.
func (e *RecordTooLargeError) OverRequestLimit() bool { return e.Size > e.MaxRequestBytes }

func (e *RecordTooLargeError) Error() string { return e.Unwrap().Error() }

// Unwrap returns the error as a MESSAGE_TOO_LARGE *errs.Error.
func (e *RecordTooLargeError) Unwrap() error {
	var msg string
	switch {
	case e.OverTopicLimit() && e.OverRequestLimit():
		msg = fmt.Sprintf("record of %d bytes exceeds the max.message.bytes %d of topic %q and max request bytes %d", e.Size, e.MaxMessageBytes, e.Topic, e.MaxRequestBytes)
	case e.OverTopicLimit():
		msg = fmt.Sprintf("record of %d bytes exceeds the max.message.bytes %d of topic %q", e.Size, e.MaxMessageBytes, e.Topic)
	default:
		msg = fmt.Sprintf("record of %d bytes exceeds max request bytes %d", e.Size, e.MaxRequestBytes)
	}
	return &errs.Error{Code: sluicev1.ErrorCode_MESSAGE_TOO_LARGE, Message: msg}
}

// singleBatchSize returns the bytes of a batch holding r alone: its
// header and the record with zero deltas (a batch's first record). The
// broker compares this with max.message.bytes.
func singleBatchSize(r Record) int {
	return batch.HeaderSize + batch.RecordSize(0, 0, r.Key, r.Value, r.Headers)
}

// checkRecordSize returns a *RecordTooLargeError when r cannot be sent
// under the producer's max request bytes or, when tm says it, its topic's
// max.message.bytes; nil otherwise.
func checkRecordSize(r Record, tm *topicMeta, maxRequestBytes int) error {
	size := singleBatchSize(r)
	if size <= maxRequestBytes && (tm.maxMessageBytes <= 0 || size <= tm.maxMessageBytes) {
		return nil // the common case, without allocating
	}
	return &RecordTooLargeError{Topic: r.Topic, Size: size, MaxMessageBytes: tm.maxMessageBytes, MaxRequestBytes: maxRequestBytes}
}
