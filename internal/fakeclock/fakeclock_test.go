package fakeclock

import (
	"testing"
	"time"
)

func TestAdvance(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := New(t0)
	c.Advance(time.Minute)
	if got := c.Now(); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Now %v, want %v", got, t0.Add(time.Minute))
	}
}
