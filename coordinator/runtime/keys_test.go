package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// leadOne makes r lead partition 0 at epoch 1 and returns its loaded shard.
func leadOne(t *testing.T, r *Runtime[*shard], mu *sync.Mutex) *shard {
	t.Helper()
	r.BecameLeader(cluster.TopicPartition{Topic: "__t", Partition: 0}, 1)
	var s *shard
	wait.For(t, 5*time.Second, "the partition loaded", func() error {
		var err error
		s, err = route(r, mu, "k")
		return err
	})
	return s
}

// A key has one holder; waiters get it in arrival order; other keys never
// wait; a waiter whose ctx ends or whose partition is resigned gives up
// without holding the key, and a key handed to a waiter that just gave up
// passes on.
func TestKeysSerializeOneKeyOnly(t *testing.T) {
	r, mu := newTestRuntime(t, &fakeLog{})
	s := leadOne(t, r, mu)
	ctx := context.Background()
	if !s.TryAcquire("a") || s.TryAcquire("a") || !s.Busy("a") {
		t.Fatal("TryAcquire: want the first to take a and the second refused")
	}
	if !s.TryAcquire("b") {
		t.Fatal("b waits for a")
	}
	s.Release("b")

	// Three waiters for a, in order.
	order := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Acquire(ctx, "a"); err != nil {
				t.Error(err)
				return
			}
			order <- i
			s.Release("a")
		}()
		wait.For(t, 5*time.Second, "the waiter queued", func() error {
			if d := s.QueueDepth(); d != i+2 {
				return errs.New(sluicev1.ErrorCode_NONE, "depth %d", d)
			}
			return nil
		})
	}
	// A waiter that gives up leaves the queue.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	err := s.Acquire(cctx, "a")
	cancel()
	if errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
		t.Fatalf("acquire with an ended ctx: %v", err)
	}
	if d := s.QueueDepth(); d != 4 {
		t.Fatalf("depth %d after a waiter gave up, want 4 (holder and three waiters)", d)
	}
	s.Release("a")
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d got the key as number %d", got, want)
		}
		want++
	}
	if s.Busy("a") || s.QueueDepth() != 0 {
		t.Fatalf("a still held (depth %d)", s.QueueDepth())
	}

	// Resigned while waiting: NOT_COORDINATOR, and the key is not held.
	if !s.TryAcquire("c") {
		t.Fatal("c")
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Acquire(ctx, "c") }()
	wait.For(t, 5*time.Second, "the waiter queued", func() error {
		if s.QueueDepth() != 2 {
			return errs.New(sluicev1.ErrorCode_NONE, "depth %d", s.QueueDepth())
		}
		return nil
	})
	r.Resigned(s.TP, s.Epoch)
	if err := <-errc; errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("acquire on a resigned partition: %v", err)
	}
}

// Hand-over racing a give-up: the key passes to the next waiter, never
// lost and never held twice.
func TestKeysHandOverWhileGivingUp(t *testing.T) {
	r, mu := newTestRuntime(t, &fakeLog{})
	s := leadOne(t, r, mu)
	for range 200 {
		if !s.TryAcquire("k") {
			t.Fatal("k held")
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- s.Acquire(ctx, "k") }()
		wait.For(t, 5*time.Second, "queued", func() error {
			if s.QueueDepth() != 2 {
				return errs.New(sluicev1.ErrorCode_NONE, "depth %d", s.QueueDepth())
			}
			return nil
		})
		go cancel()
		s.Release("k")
		if err := <-errc; err == nil {
			s.Release("k")
		}
		if s.Busy("k") {
			t.Fatal("k still held after both let go")
		}
		cancel()
	}
}

// Timers fire once at their time, a later Schedule of the same name
// replaces the earlier, CancelTimer drops it, and resigning stops them all.
func TestTimers(t *testing.T) {
	r, mu := newTestRuntime(t, &fakeLog{})
	s := leadOne(t, r, mu)
	fired := make(chan string, 10)
	now := time.Now()
	r.Schedule(s, "x", now.Add(time.Hour), func() { fired <- "x-late" })
	r.Schedule(s, "x", now, func() { fired <- "x" }) // replaces
	r.Schedule(s, "y", now.Add(time.Hour), func() { fired <- "y" })
	r.Schedule(s, "z", now.Add(time.Hour), func() { fired <- "z" })
	r.CancelTimer(s, "y")
	select {
	case got := <-fired:
		if got != "x" {
			t.Fatalf("fired %s, want x", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("x never fired")
	}
	if n := r.Timers(s); n != 1 {
		t.Fatalf("%d timers left, want z's", n)
	}
	r.Resigned(s.TP, s.Epoch)
	if n := r.Timers(s); n != 0 {
		t.Fatalf("%d timers after resigning", n)
	}
	r.Schedule(s, "w", now, func() { fired <- "w" }) // resigned: ignored
	if n := r.Timers(s); n != 0 {
		t.Fatalf("a resigned partition scheduled a timer")
	}
	select {
	case got := <-fired:
		t.Fatalf("%s fired after resigning or being replaced", got)
	case <-time.After(50 * time.Millisecond):
	}
}

// The append histogram counts each append in its bucket, cumulatively.
func TestAppendLatency(t *testing.T) {
	var h Histogram
	h.Observe(300 * time.Microsecond)
	h.Observe(3 * time.Millisecond)
	h.Observe(time.Minute)
	s := h.Snapshot()
	if s.Count != 3 || s.Buckets[0.0005] != 1 || s.Buckets[0.005] != 2 || s.Buckets[10] != 2 {
		t.Fatalf("snapshot %+v", s)
	}
	if s.Sum != time.Minute+3*time.Millisecond+300*time.Microsecond {
		t.Fatalf("sum %v", s.Sum)
	}
}
