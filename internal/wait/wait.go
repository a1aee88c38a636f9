// Package wait is the project's one polling helper for tests: wait for a
// condition with a deadline instead of sleeping (STYLE §15). Every package's
// tests use it; it imports nothing of Sluice's, so any package may.
package wait

import (
	"fmt"
	"time"
)

// TB is the part of testing.TB that For needs (a *testing.T, *testing.B or
// a fake in the helper's own tests).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Interval is the pause between two checks of a condition.
const Interval = 10 * time.Millisecond

// For calls cond until it returns nil, and fails tb (Fatalf, naming what
// and cond's last error) if it has not within timeout. It returns the time
// at which cond first held. cond runs on the caller's goroutine, at least
// once, and never after For returns.
func For(tb TB, timeout time.Duration, what string, cond func() error) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v: %v", what, timeout, err)
			return time.Time{}
		}
		time.Sleep(Interval)
	}
}

// Until is For with a boolean condition.
func Until(tb TB, timeout time.Duration, what string, cond func() bool) time.Time {
	tb.Helper()
	return For(tb, timeout, what, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("condition false")
	})
}
