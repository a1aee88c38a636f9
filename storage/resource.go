package storage

import (
	"errors"
	"syscall"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Running out of file descriptors is not a disk failure (issue 29).
//
// EMFILE (the process reached its RLIMIT_NOFILE) and ENFILE (the system's
// file table is full) come from open(2): no byte was written, the disk is
// fine, and the same open succeeds once descriptors are free again.
// Taking the log offline for them (failure.go) turned a burst of
// connections, or one topic with many partitions, into every partition of
// the node offline until a restart. So a log that hits one stays online:
//
//   - the operation fails with a retriable KAFKA_STORAGE_ERROR that says
//     the process is out of file descriptors, having changed nothing that
//     a retry does not redo: a checkpoint is left as it was (the old file
//     stays whole: the temporary file is what failed to open), a roll
//     leaves the active segment active (the batch that wanted it is not
//     written), an append is not written, a truncation stops between two
//     of its crash-safe steps;
//   - Options.OnResourceError is told (the broker counts it in a metric
//     and logs, rate-limited, the limit);
//   - the caller retries as for any retriable error: a producer's next
//     attempt, the next checkpoint tick, a follower's next fetch after its
//     backoff, the broker's next attempt to open the log.
//
// An fsync never fails with these errors; if one ever did, it stays a
// disk failure (dirty pages may be gone): only operations that open files
// are resource errors. Kafka does take the log directory offline for any
// IOException, "Too many open files" included; Sluice departs from it
// here on purpose.

// IsResourceError reports whether err (anywhere in its chain) is the
// process or the system running out of file descriptors: EMFILE or
// ENFILE. Such an error is transient; the log stays online.
func IsResourceError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// resourceErr is the error of op on path failing with err, a resource
// error (IsResourceError): it tells OnResourceError and returns a
// retriable KAFKA_STORAGE_ERROR wrapping err. The log stays online. It
// takes no lock of the log: callers may hold any.
func (l *Log) resourceErr(op Op, path string, err error) error {
	f := &Failure{Op: op, Path: path, Err: osCause(err)}
	if l.opts.OnResourceError != nil {
		l.opts.OnResourceError(f)
	}
	return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR,
		"%w (the process is out of file descriptors: a temporary error, log %s stays online; retry)", f, l.dir)
}
