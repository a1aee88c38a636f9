package client

import (
	"errors"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ErrPartitionOffline is matched (errors.Is) by the error of a partition
// that no broker can serve: the cluster's metadata gives it no leader and
// answers KAFKA_STORAGE_ERROR for it, because the log of every in-sync
// replica failed on its broker's disk (ENOSPC, EIO, ...). It stays so until
// an operator fixes the disk and restarts that broker, so retrying longer
// does not help: producers fail such a partition's records after
// OfflineRetry instead of retrying until their delivery timeout, and
// consumers report it from Poll once OfflineRetry has passed (then keep
// retrying in the background). The error also wraps the *errs.Error
// (code KAFKA_STORAGE_ERROR) whose message names the broker, its log
// directory and the OS error.
//
// A KAFKA_STORAGE_ERROR answered by the one broker whose replica failed,
// while the metadata still names it the leader, is not this error: the
// controller is about to move the leadership, and clients retry as for any
// retriable error.
var ErrPartitionOffline = errors.New("sluice: partition offline after a disk failure")

// OfflineRetry is how long a producer retries, and a consumer waits before
// reporting, a partition the metadata reports offline after a disk
// failure (ErrPartitionOffline). It is short: nothing changes until an
// operator acts; it covers only a metadata answer that lags a broker's
// restart with a healthy disk.
const OfflineRetry = 3 * time.Second

// offlineError is a partition's KAFKA_STORAGE_ERROR from the metadata
// (ErrPartitionOffline).
type offlineError struct{ err *errs.Error }

func (e offlineError) Error() string { return e.err.Error() }

// Unwrap returns the *errs.Error, so that errs.Code and errors.As see the
// code and message.
func (e offlineError) Unwrap() error { return e.err }

// Is matches ErrPartitionOffline.
func (e offlineError) Is(target error) bool { return target == ErrPartitionOffline }

// partitionMetadataError is the error of a partition that the metadata
// reports with no leader: its code and message, an offlineError for
// KAFKA_STORAGE_ERROR; nil when the metadata reports no error.
func partitionMetadataError(code sluicev1.ErrorCode, msg string) error {
	switch code {
	case sluicev1.ErrorCode_NONE:
		return nil
	case sluicev1.ErrorCode_KAFKA_STORAGE_ERROR:
		return offlineError{&errs.Error{Code: code, Message: msg}}
	}
	return &errs.Error{Code: code, Message: msg}
}

// offlineFor tracks how long one piece of work (a batch, an assigned
// partition) has seen its partition offline (ErrPartitionOffline) without
// a break. The zero value has seen nothing.
type offlineFor struct {
	since time.Time
	// reported: the consumer has reported this stretch (Poll, once).
	reported bool
}

// observe records the outcome err of an attempt at now and reports
// whether the partition has been offline for OfflineRetry or more: then
// the caller gives up (producer) or reports err (consumer). Any other
// outcome, success included, restarts the count.
func (o *offlineFor) observe(err error, now time.Time) (expired bool) {
	if !errors.Is(err, ErrPartitionOffline) {
		*o = offlineFor{}
		return false
	}
	if o.since.IsZero() {
		o.since = now
	}
	return now.Sub(o.since) >= OfflineRetry
}
