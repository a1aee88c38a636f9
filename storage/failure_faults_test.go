//go:build sluicetest

package storage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Decision 42: the first file error of a write, fsync, read or roll takes
// the log offline for good: that operation and every later one answer
// KAFKA_STORAGE_ERROR naming the path and the OS error, OnFailure hears it
// once, nothing stored before is lost, and a reopen in a new process
// (the disk repaired) recovers the log as after a crash.
func TestFileErrorTakesLogOffline(t *testing.T) {
	cases := []struct {
		name string
		op   Op
		err  error
		// trigger runs the operation that hits the fault.
		trigger func(l *Log) error
		// path is the file the failure must name, by suffix.
		path string
	}{
		{"write EIO", OpWrite, syscall.EIO, func(l *Log) error {
			_, err := l.Append(makeBatch(2, 100, "x"), fillEpoch, t0)
			return err
		}, ".log"},
		{"write ENOSPC", OpWrite, syscall.ENOSPC, func(l *Log) error {
			_, err := l.AppendVerbatim(verbatimNext(t, l), t0)
			return err
		}, ".log"},
		{"fsync EIO", OpSync, syscall.EIO, func(l *Log) error { return l.Flush() }, ".log"},
		{"read EIO", OpRead, syscall.EIO, func(l *Log) error {
			_, err := l.Read(0, 1<<20, 1<<62)
			return err
		}, ".log"},
		{"read through ReadConsumer", OpRead, syscall.EACCES, func(l *Log) error {
			_, err := l.ReadConsumer(0, 1<<20, ReadUncommitted)
			return err
		}, ".log"},
		{"roll EROFS", OpRoll, syscall.EROFS, func(l *Log) error {
			// Fill the 4 KiB active segment until it rolls.
			for i := 0; i < 200; i++ {
				if _, err := l.Append(makeBatch(5, 200+int64(i), "roll"), fillEpoch, t0); err != nil {
					return err
				}
			}
			return nil
		}, ".log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var faults FaultSet
			var heard failures
			l, err := OpenWith(dir, testConfig(), t0, Options{Faults: &faults, OnFailure: heard.record})
			if err != nil {
				t.Fatal(err)
			}
			before := fill(t, l, 3, 3, 10)
			l.SetHighWatermark(l.EndOffset())
			end := l.EndOffset()

			faults.Fail(dir, tc.err, tc.op)
			err = tc.trigger(l)
			checkOffline(t, err, dir, tc.err)
			if got := heard.all(); len(got) != 1 || got[0].Op != tc.op || !errors.Is(got[0], tc.err) || !strings.HasSuffix(got[0].Path, tc.path) {
				t.Fatalf("OnFailure heard %v, want one %s failure with %v on a %s file", got, tc.op, tc.err, tc.path)
			}
			if f := l.Failure(); f == nil || f.Op != tc.op || !strings.HasPrefix(f.Path, dir) {
				t.Fatalf("Failure() = %v", f)
			}

			// Sticky: with the disk healthy again, every operation still
			// answers the failure and touches no file; OnFailure is not
			// called again.
			faults.Clear()
			_, err = l.Append(makeBatch(1, 500, "after"), fillEpoch, t0)
			checkOffline(t, err, dir, tc.err)
			_, err = l.Read(0, 1<<20, 1<<62)
			checkOffline(t, err, dir, tc.err)
			checkOffline(t, l.Flush(), dir, tc.err)
			checkOffline(t, l.TruncateTo(0), dir, tc.err)
			_, err = l.EnforceRetention(t0)
			checkOffline(t, err, dir, tc.err)
			checkOffline(t, l.CheckpointHighWatermark(), dir, tc.err)
			if n := len(heard.all()); n != 1 {
				t.Fatalf("OnFailure called %d times, want once", n)
			}
			// Close writes no clean-shutdown marker.
			checkOffline(t, l.Close(), dir, tc.err)
			if _, err := os.Stat(filepath.Join(dir, cleanShutdownFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("an offline log wrote the clean-shutdown marker (stat: %v)", err)
			}

			// A new process with a healthy disk recovers everything
			// written before the failure.
			r := openLog(t, dir, testConfig())
			defer r.Close()
			if r.Failure() != nil {
				t.Fatalf("reopened log is offline: %v", r.Failure())
			}
			if r.EndOffset() < end {
				t.Fatalf("reopened log ends at %d, below %d written before the failure", r.EndOffset(), end)
			}
			got := readAll(t, r)
			for i, s := range before {
				if string(got[i]) != string(s.bytes) {
					t.Fatalf("batch %d differs after recovery", i)
				}
			}
			if _, err := r.Append(makeBatch(1, 900, "again"), fillEpoch, t0); err != nil {
				t.Fatalf("append after recovery: %v", err)
			}
		})
	}
}

// OpenWith asks the injector about opening the log (OpOpen, the
// directory), so a test can restart on a disk that still fails.
func TestOpenFaultInjected(t *testing.T) {
	dir := t.TempDir()
	var faults FaultSet
	faults.Fail(dir, syscall.EIO, OpOpen)
	if _, err := OpenWith(dir, testConfig(), t0, Options{Faults: &faults}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("OpenWith with an open fault: %v, want EIO", err)
	}
	faults.Clear()
	l, err := OpenWith(dir, testConfig(), t0, Options{Faults: &faults})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
