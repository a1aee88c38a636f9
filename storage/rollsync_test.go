package storage

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stuckSync holds the fsync of one file (target) until the test sends its
// outcome on release. It blocks, which FaultInjector's contract forbids,
// but only the background fsync of a rolled segment reaches it, and that
// holds no lock of the log.
type stuckSync struct {
	mu      sync.Mutex
	target  string
	entered chan struct{} // closed when the target's fsync is held
	release chan error
	open    bool // unstuck: nothing is held any more
}

// unstick lets a held fsync (and every later one) through: a failing
// test's cleanup, so that closing the log does not wait forever.
func (s *stuckSync) unstick(t *testing.T) {
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.open = true
		if s.release != nil {
			select {
			case s.release <- nil:
			default:
			}
		}
	})
}

func (s *stuckSync) hold(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.target, s.entered, s.release = path, make(chan struct{}), make(chan error, 1)
}

func (s *stuckSync) Fault(op Op, path string) error {
	s.mu.Lock()
	if s.open || op != OpSync || path != s.target {
		s.mu.Unlock()
		return nil
	}
	s.target = ""
	entered, release := s.entered, s.release
	s.mu.Unlock()
	close(entered)
	return <-release
}

// within fails t unless f returns within d (it keeps running if not).
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// stillWaiting fails t if what (running on a goroutine, its outcome to
// come on done) returns within 50 ms: it must wait for the held fsync.
func stillWaiting(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while a rolled segment's fsync was held", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

// Rule: a roll does not wait for the rolled segment's fsync, which runs
// in the background (Kafka's scheduled flush): appends to the new segment
// go on while it is held. Flush and Close wait for it (the recovery point
// and the clean-shutdown marker claim it); its failure takes the log
// offline like a foreground fsync's, naming the rolled segment.
func TestRollSyncsTheSealedSegmentInTheBackground(t *testing.T) {
	dir := t.TempDir()
	stuck := &stuckSync{}
	var heard failures
	l, err := OpenWith(dir, testConfig(), t0, Options{Faults: stuck, OnFailure: heard.record})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	stuck.unstick(t)
	appendUntilRoll := func() {
		t.Helper()
		n := len(l.Segments())
		for i := 0; len(l.Segments()) == n; i++ {
			if i > 1000 {
				t.Fatal("no roll")
			}
			if err := within(t, 10*time.Second, "an append (a roll may be one)", func() error {
				_, err := l.Append(makeBatch(3, 100+int64(i), "r"), fillEpoch, t0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	heldAppends := func() {
		t.Helper()
		for i := 0; i < 5; i++ {
			if err := within(t, 10*time.Second, "an append while the sealed segment's fsync is held", func() error {
				_, err := l.Append(makeBatch(1, 500, "held"), fillEpoch, t0)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// 1: the fsync succeeds once released; Flush waited for it.
	stuck.hold(segmentName(dir, 0, ".log"))
	appendUntilRoll()
	entered, release := stuck.entered, stuck.release
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the rolled segment was not synced")
	}
	heldAppends()
	flushed := make(chan error, 1)
	go func() { flushed <- l.Flush() }()
	stillWaiting(t, flushed, "Flush")
	release <- nil
	if err := within(t, 10*time.Second, "Flush", func() error { return <-flushed }); err != nil {
		t.Fatal(err)
	}

	// 2: the fsync fails: the log goes offline, naming the segment.
	sealed := l.Segments()[len(l.Segments())-1].BaseOffset
	stuck.hold(segmentName(dir, sealed, ".log"))
	appendUntilRoll()
	<-stuck.entered
	heldAppends()
	stuck.release <- syscall.EIO
	err = within(t, 10*time.Second, "Flush", l.Flush)
	checkOffline(t, err, dir, syscall.EIO)
	if got := heard.all(); len(got) != 1 || got[0].Op != OpSync || got[0].Path != segmentName(dir, sealed, ".log") {
		t.Fatalf("OnFailure heard %v, want one fsync failure of %s", got, segmentName(dir, sealed, ".log"))
	}
	_, err = l.Append(makeBatch(1, 900, "after"), fillEpoch, t0)
	checkOffline(t, err, dir, syscall.EIO)
	checkOffline(t, l.Close(), dir, syscall.EIO)
	if _, err := os.Stat(filepath.Join(dir, cleanShutdownFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an offline log wrote the clean-shutdown marker (stat: %v)", err)
	}
}

// Rule: Close waits for a rolled segment's fsync before it writes the
// clean-shutdown marker.
func TestCloseWaitsForTheSealedSegmentsSync(t *testing.T) {
	dir := t.TempDir()
	stuck := &stuckSync{}
	l, err := OpenWith(dir, testConfig(), t0, Options{Faults: stuck})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	stuck.unstick(t)
	stuck.hold(segmentName(dir, 0, ".log"))
	for len(l.Segments()) == 1 {
		if _, err := l.Append(makeBatch(3, 100, "r"), fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
	}
	<-stuck.entered
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	stillWaiting(t, closed, "Close")
	if _, err := os.Stat(filepath.Join(dir, cleanShutdownFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("clean-shutdown marker written before the rolled segment was synced (stat: %v)", err)
	}
	stuck.release <- nil
	if err := within(t, 10*time.Second, "Close", func() error { return <-closed }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, cleanShutdownFile)); err != nil {
		t.Fatalf("no clean-shutdown marker after Close: %v", err)
	}
}
