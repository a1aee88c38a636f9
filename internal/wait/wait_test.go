package wait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	f := &fakeTB{}
	For(f, time.Second, "third call", func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if f.failed != "" || calls != 3 {
		t.Fatalf("failed=%q calls=%d, want no failure after 3 calls", f.failed, calls)
	}
}

func TestForFailsAtTheDeadlineWithTheLastError(t *testing.T) {
	f := &fakeTB{}
	start := time.Now()
	For(f, 50*time.Millisecond, "never", func() error { return errors.New("still broken") })
	if !strings.Contains(f.failed, "never") || !strings.Contains(f.failed, "still broken") {
		t.Fatalf("failure %q should name what and the last error", f.failed)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("gave up before the deadline")
	}
}

func TestUntilFailsOnFalse(t *testing.T) {
	f := &fakeTB{}
	Until(f, 20*time.Millisecond, "false", func() bool { return false })
	if f.failed == "" {
		t.Fatal("want a failure")
	}
}
