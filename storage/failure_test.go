package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// failures records what OnFailure heard.
type failures struct {
	mu   sync.Mutex
	seen []*Failure
}

func (f *failures) record(x *Failure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, x)
}

func (f *failures) all() []*Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Failure(nil), f.seen...)
}

// verbatimNext is a follower's copy of a batch at l's log end.
func verbatimNext(t *testing.T, l *Log) []byte {
	t.Helper()
	src := openLog(t, t.TempDir(), testConfig())
	defer src.Close()
	if err := src.TruncateFullyAndStartAt(l.EndOffset()); err != nil {
		t.Fatal(err)
	}
	b := makeBatch(1, 300, "copy")
	if _, err := src.Append(b, fillEpoch, t0); err != nil {
		t.Fatal(err)
	}
	return b
}

// checkOffline asserts err is the offline error: KAFKA_STORAGE_ERROR whose
// message names the log directory and the OS error.
func checkOffline(t *testing.T, err error, dir string, cause error) {
	t.Helper()
	if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR {
		t.Fatalf("error %v (code %v), want KAFKA_STORAGE_ERROR", err, errs.Code(err))
	}
	var f *Failure
	if !errors.As(err, &f) || !errors.Is(err, cause) {
		t.Fatalf("error %v does not wrap the *Failure with %v", err, cause)
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, cause.Error()) {
		t.Fatalf("error %q does not name the path %s and the OS error %q", msg, dir, cause)
	}
}

// A read that races with retention sees a file this process closed: that
// is not a disk failure.
func TestClosedFileIsNotADiskFailure(t *testing.T) {
	for _, err := range []error{os.ErrClosed, &os.PathError{Op: "read", Path: "x", Err: os.ErrClosed}, errors.New("bad frame")} {
		if isFileError(err) {
			t.Errorf("isFileError(%v) = true", err)
		}
	}
	for _, err := range []error{syscall.EIO, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}} {
		if !isFileError(err) {
			t.Errorf("isFileError(%v) = false", err)
		}
	}
}

// A checkpoint that cannot be written takes the log offline too (often
// the first sign of a full disk). A directory in the way of the
// checkpoint's temporary file fails the write even as root.
func TestCheckpointFailureTakesLogOffline(t *testing.T) {
	dir := t.TempDir()
	var heard failures
	l, err := OpenWith(dir, testConfig(), t0, Options{OnFailure: heard.record})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fill(t, l, 2, 2, 10)
	l.SetHighWatermark(l.EndOffset())
	if err := os.Mkdir(filepath.Join(dir, highWatermarkFile+".tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	checkOffline(t, l.CheckpointHighWatermark(), dir, syscall.EISDIR)
	if got := heard.all(); len(got) != 1 || got[0].Op != OpWrite || !strings.Contains(got[0].Path, highWatermarkFile) {
		t.Fatalf("OnFailure heard %v", got)
	}
	_, err = l.Append(makeBatch(1, 100, "x"), fillEpoch, t0)
	checkOffline(t, err, dir, syscall.EISDIR)
}

// A truncation whose file work fails (here the checkpoint of the lowered
// high watermark) takes the log offline as well, and leaves the batches
// where they were.
func TestTruncationFailureTakesLogOffline(t *testing.T) {
	dir := t.TempDir()
	var heard failures
	l, err := OpenWith(dir, testConfig(), t0, Options{OnFailure: heard.record})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	written := fill(t, l, 3, 2, 10)
	end := l.EndOffset()
	l.SetHighWatermark(end)
	if err := os.Mkdir(filepath.Join(dir, highWatermarkFile+".tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	checkOffline(t, l.TruncateTo(written[1].base), dir, syscall.EISDIR)
	if got := heard.all(); len(got) != 1 || got[0].Op != OpWrite {
		t.Fatalf("OnFailure heard %v", got)
	}
	if l.EndOffset() != end {
		t.Fatalf("log end %d after a failed truncation, want %d", l.EndOffset(), end)
	}
	checkOffline(t, l.TruncateFullyAndStartAt(100), dir, syscall.EISDIR)
}
