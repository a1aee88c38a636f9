//go:build sluicetest

package storage

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

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
