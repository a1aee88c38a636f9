package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A log whose files fail (decision 42; Kafka's offline log directory).
//
// The first I/O error a log hits on a write, fsync, read or roll, or in a
// truncation, retention, checkpoint or cleaning pass (EIO, ENOSPC, EROFS,
// EACCES, a directory gone, ...; not EMFILE or ENFILE, see resource.go)
// takes the log offline for good: the error is recorded as its Failure,
// Options.OnFailure is told once, and from then on every operation that
// would touch the files answers KAFKA_STORAGE_ERROR naming the path and
// the OS error, without touching them. Nothing that was written before is undone, and Close
// writes no clean-shutdown marker: the next Open of the directory (after
// the disk is replaced or repaired, with a new process) recovers the log
// as after a crash. A failed log never comes back in the same process:
// Kafka's rule too, since the OS may have dropped dirty pages that the log
// believes are written.

// Op names a file operation of a log, in failures and for fault
// injection.
type Op string

// The operations a Failure or a FaultInjector names.
const (
	// OpWrite is a write of a batch, an index entry or a checkpoint.
	OpWrite Op = "write"
	// OpSync is an fsync (a flush, or the seal of a segment at a roll).
	OpSync Op = "fsync"
	// OpRead is a read of a segment's batches.
	OpRead Op = "read"
	// OpRoll is the creation of a new segment's files.
	OpRoll Op = "roll"
	// OpTruncate is a truncation's cut or removal of segment files.
	OpTruncate Op = "truncate"
	// OpOpen is opening (and recovering) a log; OpenWith asks the
	// FaultInjector about it with the log's directory, and its callers
	// name failures to create or open a log with it.
	OpOpen Op = "open"
)

// Failure is why a log went offline: the first I/O error it hit.
type Failure struct {
	Op Op
	// Path is the file (or directory) the operation was on.
	Path string
	// Err is the OS error without the path (syscall.EIO, ...), or the
	// error as it came when it carried none.
	Err error
}

// Error is "<op> <path>: <os error>", e.g. "write
// /data/logs/t-0/00000000000000000000.log: input/output error".
func (f *Failure) Error() string { return fmt.Sprintf("%s %s: %v", f.Op, f.Path, f.Err) }

// Unwrap returns the OS error.
func (f *Failure) Unwrap() error { return f.Err }

// FaultInjector makes chosen file operations of a log fail as if the disk
// did (tests and fault drills; nil in production). The log asks it before
// each write of a batch or of the high-watermark checkpoint (OpWrite),
// fsync, read of a segment and creation of a segment, and OpenWith before
// opening the log (OpOpen, with the directory as the path).
//
// Contract: Fault returns the error the operation op on path must fail
// with (an OS-like error, e.g. syscall.EIO; the operation is then not
// done), or nil to let it run. It is called from any goroutine, possibly
// with the log's locks held: it must be safe for concurrent use, must not
// block and must not call the log.
type FaultInjector interface {
	Fault(op Op, path string) error
}

// Options are Open's optional hooks.
type Options struct {
	// Faults, when set, injects file errors (FaultInjector).
	Faults FaultInjector
	// OnFailure, when set, is called once when the log goes offline, with
	// its Failure. It is called from the goroutine that hit the error,
	// possibly with the log's locks held: it must not block and must not
	// call the log (hand the news to another goroutine).
	OnFailure func(*Failure)
	// OnResourceError, when set, is called each time an operation fails
	// because the process or the system is out of file descriptors
	// (IsResourceError; the log stays online, resource.go), with the
	// operation, file and OS error. Same contract as OnFailure: any
	// goroutine, possibly under the log's locks; it must not block and
	// must not call the log.
	OnResourceError func(*Failure)
	// PageCacheWindow, when > 0, is how many of each segment's newest
	// bytes are left to the OS page cache: once the writeback of older
	// bytes has been started (writebackChunk), the log asks the kernel to
	// drop their pages (posix_fadvise DONTNEED; Linux only, advisory —
	// pages still dirty stay). 0 leaves the page cache to the kernel.
	// See decision 44.
	PageCacheWindow int64
	// Files is the cache of open segment files this log shares with the
	// process's other logs (filecache.go); nil: DefaultFileCache().
	Files *FileCache
	// HighWatermarks, when set, is the high-watermark checkpoint of the
	// log's parent directory, shared with the other logs there
	// (hwcheckpoint.go): the log records its high watermark in it rather
	// than in a file of its own, and whoever owns it Flushes it (on an
	// interval, and after closing the logs). The log's directory must be
	// named "topic-partition"; any other name keeps a file of its own.
	HighWatermarks *OffsetCheckpoint
	// RecoveryPoints, when set, is the recovery-point checkpoint of the
	// log's parent directory, shared the same way (recoverypoint.go): the
	// log records its recovery point there in memory, and whoever owns
	// it Flushes it on an interval and after closing the logs. Same
	// naming rule as HighWatermarks.
	RecoveryPoints *OffsetCheckpoint
	// Created says that the caller has just created the log's directory,
	// empty: there is nothing to recover or load, and OpenWith starts an
	// empty log at offset 0 with two file-system calls instead of a
	// dozen (issue 31: a topic creation opens thousands of logs). The
	// shared checkpoints' entries under its name (left by a deleted log of
	// the same name, if a crash came before their next write) are reset.
	Created bool
}

// Failure returns why the log went offline, or nil while it is healthy.
func (l *Log) Failure() *Failure { return l.failure.Load() }

// inject asks the fault injector about op on path.
func (l *Log) inject(op Op, path string) error {
	if l.opts.Faults == nil {
		return nil
	}
	return l.opts.Faults.Fault(op, path)
}

// fail takes the log offline with err (an error of op on path; the path
// the OS error names, when it names one, wins) unless it already is, tells
// OnFailure the first time, and returns the offline error (offlineErr).
// A resource error (EMFILE, ENFILE) of an operation other than an fsync
// does not: it returns resourceErr and the log stays online (resource.go).
// It takes no lock of the log: callers may hold any.
func (l *Log) fail(op Op, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		path = pe.Path
	}
	if op != OpSync && IsResourceError(err) {
		return l.resourceErr(op, path, err) // not a disk failure (resource.go)
	}
	f := &Failure{Op: op, Path: path, Err: osCause(err)}
	if l.failure.CompareAndSwap(nil, f) && l.opts.OnFailure != nil {
		l.opts.OnFailure(f)
	}
	return l.offlineErr()
}

// fileErr is the error of op on path failing with err: the log goes
// offline when err came from the file system (isFileError), else err is
// a KAFKA_STORAGE_ERROR of its own. what names the step for the latter.
func (l *Log) fileErr(what string, op Op, path string, err error) error {
	if isFileError(err) {
		return l.fail(op, path, err)
	}
	return storageErr("%s: %v", what, err)
}

// offlineErr is the KAFKA_STORAGE_ERROR every operation of an offline log
// answers, wrapping its *Failure; nil while the log is healthy.
func (l *Log) offlineErr() error {
	f := l.failure.Load()
	if f == nil {
		return nil
	}
	return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "log %s is offline after a disk error: %w", l.dir, f)
}

// osCause strips the operation and path off an OS error, which the
// Failure names itself.
func osCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// opOf is the operation an OS error names (read, write, fsync), else def.
func opOf(err error, def Op) Op {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		switch {
		case strings.Contains(pe.Op, "read"):
			return OpRead
		case strings.Contains(pe.Op, "write"):
			return OpWrite
		case strings.Contains(pe.Op, "sync"):
			return OpSync
		}
	}
	return def
}

// isFileError reports whether err came from the file system (rather than
// from the log's own checks, or from a file this process closed, which a
// read racing with retention or a truncation sees).
func isFileError(err error) bool {
	if err == nil || errors.Is(err, os.ErrClosed) {
		return false
	}
	var pe *fs.PathError
	var se *os.SyscallError
	var le *os.LinkError
	var no syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &se) || errors.As(err, &le) || errors.As(err, &no)
}
