package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/wait"
)

// acquireAsync starts b.acquire(ctx, n) and returns where its result
// arrives.
func acquireAsync(b *requestBudget, ctx context.Context, n int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.acquire(ctx, n) }()
	return ch
}

// waitForWaiters waits until b has n waiters.
func waitForWaiters(t *testing.T, b *requestBudget, n int) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("%d waiting", n), func() error {
		if _, w := b.state(); w != n {
			return fmt.Errorf("%d waiting", w)
		}
		return nil
	})
}

// pending reports whether nothing arrived on ch yet.
func pending(ch <-chan error) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// wantUsed fails t unless b holds used bytes with waiting waiters.
func wantUsed(t *testing.T, b *requestBudget, used int64, waiting int) {
	t.Helper()
	if u, w := b.state(); u != used || w != waiting {
		t.Fatalf("budget holds %d with %d waiting, want %d with %d", u, w, used, waiting)
	}
}

// Decision 50: requests are admitted in arrival order, a later small one
// not before an earlier large one, and the bytes held never exceed the
// limit.
func TestRequestBudgetAdmitsInArrivalOrder(t *testing.T) {
	b := newRequestBudget("client", 100, 60, nil)
	ctx := context.Background()
	if err := b.acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	first := acquireAsync(b, ctx, 60)
	waitForWaiters(t, b, 1)
	second := acquireAsync(b, ctx, 10) // fits, but arrived after first
	waitForWaiters(t, b, 2)
	if !pending(second) {
		t.Fatal("a later request was admitted before an earlier one")
	}
	b.release(60)
	for _, ch := range []<-chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	wantUsed(t, b, 70, 0)
	if got := b.waits.Load(); got != 2 {
		t.Errorf("waits = %d, want 2", got)
	}
	// Never more than the limit, even for a request larger than it.
	b.release(70)
	if err := b.acquire(ctx, 500); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, b, 100, 0)
}

// A wait that the request's context or the node's draining ends takes
// nothing, is counted as abandoned, and lets the requests behind it in.
func TestRequestBudgetWaitEndsWithTheRequest(t *testing.T) {
	draining := make(chan struct{})
	b := newRequestBudget("client", 100, 60, draining)
	bg := context.Background()
	if err := b.acquire(bg, 50); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	head := acquireAsync(b, ctx, 60) // does not fit
	waitForWaiters(t, b, 1)
	behind := acquireAsync(b, bg, 40) // fits, but behind head
	waitForWaiters(t, b, 2)
	cancel()
	if err := <-head; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	if err := <-behind; err != nil {
		t.Fatal(err)
	}
	wantUsed(t, b, 90, 0)

	deadline, cancel2 := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel2()
	if err := b.acquire(deadline, 60); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v, want context.DeadlineExceeded", err)
	}
	drained := acquireAsync(b, bg, 60)
	waitForWaiters(t, b, 1)
	close(draining)
	if err := <-drained; !errors.Is(err, errNodeDraining) {
		t.Fatalf("wait while draining: %v, want errNodeDraining", err)
	}
	wantUsed(t, b, 90, 0)
	if got := b.abandoned.Load(); got != 3 {
		t.Errorf("abandoned = %d, want 3", got)
	}
}

// Bytes already read are taken even beyond the limit; later requests then
// wait until the budget is under it again. await waits the same way but
// holds nothing.
func TestRequestBudgetTakeAndAwait(t *testing.T) {
	b := newRequestBudget("client", 100, 60, nil)
	ctx := context.Background()
	b.take(150)
	wantUsed(t, b, 150, 0)
	waited := make(chan error, 1)
	go func() { waited <- b.await(ctx, 60) }()
	waitForWaiters(t, b, 1)
	b.release(100) // 50 held: 60 more do not fit yet
	if !pending(waited) {
		t.Fatal("admitted while the budget had no room")
	}
	b.release(10)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	wantUsed(t, b, 40, 0)
}

// recvSized is a recv function that reads a message of n bytes: as gRPC
// does, it reports the size (stats.InPayload) before returning.
func recvSized(r *rpcBytes, n int64) func(any) error {
	return func(any) error { r.sized(n); return nil }
}

// A unary call reserves the largest message before its read, holds its
// message's size after it, and nothing once its handler returned.
func TestReservedReceiveHoldsTheMessageUntilTheEnd(t *testing.T) {
	b := newRequestBudget("client", 100, 60, nil)
	r := &rpcBytes{b: b}
	var during int64
	recv := func(m any) error {
		during, _ = b.state()
		return recvSized(r, 7)(m)
	}
	if err := r.receiveReserved(context.Background(), nil, recv); err != nil {
		t.Fatal(err)
	}
	if during != 60 {
		t.Errorf("held %d during the read, want the reserve, 60", during)
	}
	wantUsed(t, b, 7, 0)
	r.end()
	wantUsed(t, b, 0, 0)

	// A failed read keeps nothing.
	r = &rpcBytes{b: b}
	if err := r.receiveReserved(context.Background(), nil, func(any) error { return errors.New("reset") }); err == nil {
		t.Fatal("the read's error was lost")
	}
	wantUsed(t, b, 0, 0)
	r.end()
	wantUsed(t, b, 0, 0)
}

// A reserved read whose message does not come ends the call
// (DEADLINE_EXCEEDED) after the read timeout; the reservation is given
// back when the read itself ends (as gRPC ends it once the call has).
func TestReservedReceiveTimesOut(t *testing.T) {
	b := newRequestBudget("client", 100, 60, nil)
	b.readTimeout = 10 * time.Millisecond
	r := &rpcBytes{b: b}
	unblock := make(chan struct{})
	err := r.receiveReserved(context.Background(), nil, func(any) error {
		<-unblock
		return errors.New("stream closed")
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("message never sent: %v, want DeadlineExceeded", err)
	}
	r.end()
	wantUsed(t, b, 60, 0) // the read is still under way
	close(unblock)
	wait.For(t, 5*time.Second, "the reservation given back", func() error {
		if u, _ := b.state(); u != 0 {
			return fmt.Errorf("%d held", u)
		}
		return nil
	})

	// A call with a deadline sooner than that ends with it (gRPC ends
	// the read there).
	b.readTimeout = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	r = &rpcBytes{b: b}
	err = r.receiveReserved(ctx, nil, func(any) error {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("message never sent before the deadline: %v, want DeadlineExceeded", err)
	}
	r.end()
	wantUsed(t, b, 0, 0)
}

// A client stream holds nothing while it waits for its next message,
// takes each message's size once read, even beyond the limit (two idle
// streams passed the wait before either message came), and gives it
// back when it asks for the next one. It reads only while the largest
// message would fit.
func TestStreamedReceiveHoldsNothingWhileIdle(t *testing.T) {
	b := newRequestBudget("client", 100, 60, nil)
	ctx := context.Background()
	streams := []*rpcBytes{{b: b}, {b: b}}
	reading, arrive := make(chan struct{}), make(chan struct{})
	done := make(chan error, 2)
	for i, r := range streams {
		go func() {
			done <- r.receiveStreamed(ctx, nil, func(any) error {
				reading <- struct{}{}
				<-arrive
				r.sized(int64(80 - 10*i))
				return nil
			})
		}()
	}
	<-reading
	<-reading
	wantUsed(t, b, 0, 0) // both idle, waiting for their messages
	close(arrive)
	for range streams {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	wantUsed(t, b, 150, 0) // over the limit: a message per stream at most

	// The next read waits until the largest message fits again.
	next := make(chan error, 1)
	go func() { next <- streams[1].receiveStreamed(ctx, nil, func(any) error { return nil }) }()
	waitForWaiters(t, b, 1) // 80 still held after giving back the 70
	if err := streams[0].receiveStreamed(ctx, nil, func(any) error { return errors.New("EOF") }); err == nil {
		t.Fatal("the read's error was lost")
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	wantUsed(t, b, 0, 0)
	streams[1].end()
	// A message read after the handler returned is not taken.
	streams[1].sized(30)
	wantUsed(t, b, 0, 0)
}
