package ratelog

import (
	"testing"
	"time"
)

func TestLimiterAllowsOnePerKeyPerInterval(t *testing.T) {
	l := Limiter{Every: time.Hour}
	if !l.Allow("a") || l.Allow("a") {
		t.Fatal("key a: want the first line only")
	}
	if !l.Allow("b") {
		t.Fatal("key b is limited by key a")
	}
	// The interval since the last line has passed.
	l.last["a"] = time.Now().Add(-2 * time.Hour)
	if !l.Allow("a") {
		t.Fatal("a line after the interval was refused")
	}
}
