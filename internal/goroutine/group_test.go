package goroutine

import (
	"testing"
	"time"
)

func TestWaitWaitsForEveryGoroutine(t *testing.T) {
	var g Group
	release := make(chan struct{})
	done := make(chan int, 3)
	for i := range 3 {
		g.Go(func() {
			<-release
			done <- i
		})
	}
	if n := g.Running(); n != 3 {
		t.Fatalf("Running = %d, want 3", n)
	}
	waited := make(chan struct{})
	go func() { g.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while goroutines were blocked")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the goroutines ended")
	}
	if len(done) != 3 || g.Running() != 0 {
		t.Fatalf("done %d, running %d; want 3 and 0", len(done), g.Running())
	}
}

func TestGoFromATrackedGoroutine(t *testing.T) {
	var g Group
	inner := make(chan struct{})
	g.Go(func() { g.Go(func() { close(inner) }) })
	g.Wait()
	select {
	case <-inner:
	default:
		t.Fatal("the goroutine started from a tracked one had not run when Wait returned")
	}
}
