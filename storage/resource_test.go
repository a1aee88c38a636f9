package storage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// checkResourceErr asserts err is the resource error of resource.go: a
// retriable KAFKA_STORAGE_ERROR wrapping the OS error, not the offline
// error, and that the log stayed online.
func checkResourceErr(t *testing.T, l *Log, err error, cause error) {
	t.Helper()
	if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !errs.Retriable(errs.Code(err)) {
		t.Fatalf("error %v (code %v), want a retriable KAFKA_STORAGE_ERROR", err, errs.Code(err))
	}
	if !IsResourceError(err) || !errors.Is(err, cause) {
		t.Fatalf("error %v: IsResourceError %v, wraps %v: %v", err, IsResourceError(err), cause, errors.Is(err, cause))
	}
	if f := l.Failure(); f != nil {
		t.Fatalf("the log went offline after a resource error: %v", f)
	}
}

// Issue 29: EMFILE and ENFILE are resource errors, not disk failures. A
// write, roll, read or high-watermark checkpoint that hits one fails with
// a retriable error, changes nothing, leaves the log online (OnFailure
// never called, OnResourceError told), and the same operation succeeds
// once descriptors are available again. An fsync is never a resource
// error: it still takes the log offline.
func TestFileDescriptorExhaustionKeepsLogOnline(t *testing.T) {
	cases := []struct {
		name    string
		op      Op
		err     error
		trigger func(t *testing.T, l *Log) error
	}{
		{"append EMFILE", OpWrite, syscall.EMFILE, func(t *testing.T, l *Log) error {
			_, err := l.Append(makeBatch(2, 100, "x"), fillEpoch, t0)
			return err
		}},
		{"follower append ENFILE", OpWrite, syscall.ENFILE, func(t *testing.T, l *Log) error {
			_, err := l.AppendVerbatim(verbatimNext(t, l), t0)
			return err
		}},
		{"read EMFILE", OpRead, syscall.EMFILE, func(t *testing.T, l *Log) error {
			_, err := l.Read(0, 1<<20, 1<<62)
			return err
		}},
		{"high-watermark checkpoint EMFILE", OpWrite, syscall.EMFILE, func(t *testing.T, l *Log) error {
			return l.CheckpointHighWatermark()
		}},
		{"roll EMFILE", OpRoll, syscall.EMFILE, func(t *testing.T, l *Log) error {
			// Fill the 4 KiB active segment until it must roll.
			for i := 0; i < 200; i++ {
				if _, err := l.Append(makeBatch(5, 200+int64(i), "roll"), fillEpoch, t0); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var faults FaultSet
			var offline, resource failures
			l, err := OpenWith(dir, testConfig(), t0, Options{Faults: &faults, OnFailure: offline.record, OnResourceError: resource.record})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			fill(t, l, 3, 3, 10)
			l.SetHighWatermark(l.EndOffset())
			end, segs := l.EndOffset(), len(l.segments)

			faults.Fail(dir, tc.err, tc.op)
			err = tc.trigger(t, l)
			checkResourceErr(t, l, err, tc.err)
			if got := offline.all(); len(got) != 0 {
				t.Fatalf("OnFailure heard %v", got)
			}
			if got := resource.all(); len(got) == 0 || got[0].Op != tc.op || !errors.Is(got[0], tc.err) {
				t.Fatalf("OnResourceError heard %v, want a %s failure with %v", got, tc.op, tc.err)
			}
			if tc.op == OpRoll {
				// The batch that needed the roll was not written, and no
				// file of the segment that could not be opened is left.
				if len(l.segments) != segs || l.EndOffset() < end {
					t.Fatalf("after the failed roll: %d segments (was %d), end %d", len(l.segments), segs, l.EndOffset())
				}
				if _, err := os.Stat(segmentName(dir, l.EndOffset(), ".log")); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a file of the failed segment is left (stat: %v)", err)
				}
			} else if l.EndOffset() != end {
				t.Fatalf("log end %d after a failed operation, want %d", l.EndOffset(), end)
			}

			// Descriptors free again: the same operation succeeds, and so
			// does everything else, with no reopen.
			faults.Clear()
			if err := tc.trigger(t, l); err != nil {
				t.Fatalf("%s once descriptors are free: %v", tc.name, err)
			}
			if _, err := l.Append(makeBatch(1, 900, "after"), fillEpoch, t0); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := l.CheckpointHighWatermark(); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, l); len(got) == 0 {
				t.Fatal("nothing readable")
			}
			if err := l.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, cleanShutdownFile)); err != nil {
				t.Fatalf("no clean-shutdown marker after a resource error: %v", err)
			}
		})
	}

	// An fsync never runs out of descriptors; one that says it did is a
	// disk failure like any other (dirty pages may be lost).
	t.Run("fsync EMFILE stays a disk failure", func(t *testing.T) {
		dir := t.TempDir()
		var faults FaultSet
		l, err := OpenWith(dir, testConfig(), t0, Options{Faults: &faults})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fill(t, l, 2, 2, 10)
		faults.Fail(dir, syscall.EMFILE, OpSync)
		checkOffline(t, l.Flush(), dir, syscall.EMFILE)
	})
}

// emfileChild is set in the subprocess of TestRealFileDescriptorExhaustion.
const emfileChild = "SLUICE_STORAGE_TEST_EMFILE_CHILD"

// Issue 29, with the real limit: in a subprocess (the limit and the
// hoarded descriptors must not disturb other tests), descriptors are taken
// until open(2) fails with EMFILE. The high-watermark checkpoint and a
// roll then fail with a resource error and the log stays online; once the
// descriptors are closed both succeed and the log reopens with everything
// written.
func TestRealFileDescriptorExhaustion(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("RLIMIT_NOFILE is a Unix limit")
	}
	if os.Getenv(emfileChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRealFileDescriptorExhaustion$", "-test.v")
		cmd.Env = append(os.Environ(), emfileChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("subprocess: %v\n%s", err, out)
		}
		t.Logf("subprocess:\n%s", out)
		return
	}

	dir := t.TempDir()
	var offline, resource failures
	l, err := OpenWith(dir, testConfig(), t0, Options{OnFailure: offline.record, OnResourceError: resource.record})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, l, 3, 3, 10)
	l.SetHighWatermark(l.EndOffset())

	// A low soft limit makes exhausting it quick.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = min(lim.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var hoard []*os.File
	release := func() {
		for _, f := range hoard {
			f.Close()
		}
		hoard = nil
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("hoarding descriptors: %v", err)
			}
			break
		}
		hoard = append(hoard, f)
	}
	t.Logf("hoarded %d descriptors up to the soft limit %d", len(hoard), low.Cur)

	checkResourceErr(t, l, l.CheckpointHighWatermark(), syscall.EMFILE)
	var rollErr error
	for i := 0; i < 200 && rollErr == nil; i++ {
		_, rollErr = l.Append(makeBatch(5, 200+int64(i), "roll"), fillEpoch, t0)
	}
	checkResourceErr(t, l, rollErr, syscall.EMFILE)
	if got := offline.all(); len(got) != 0 {
		t.Fatalf("OnFailure heard %v", got)
	}
	if len(resource.all()) < 2 {
		t.Fatalf("OnResourceError heard %v, want the checkpoint and the roll", resource.all())
	}

	release()
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatalf("checkpoint with descriptors free: %v", err)
	}
	if _, err := l.Append(makeBatch(5, 900, "rolled"), fillEpoch, t0); err != nil {
		t.Fatalf("append (roll) with descriptors free: %v", err)
	}
	end := l.EndOffset()
	want := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, testConfig())
	defer r.Close()
	if r.EndOffset() != end || len(readAll(t, r)) != len(want) {
		t.Fatalf("reopened: end %d, %d batches; want %d, %d", r.EndOffset(), len(readAll(t, r)), end, len(want))
	}
}
