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
	short := Limiter{Every: time.Nanosecond}
	short.Allow("a")
	time.Sleep(time.Millisecond)
	if !short.Allow("a") {
		t.Fatal("a line after the interval was refused")
	}
}
