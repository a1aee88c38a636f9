package client

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/wait"
)

// The producer sends every request to a broker on one ProduceStream,
// pipelined, with exactly-once, in-order results.
func TestProducerSendsOnOneProduceStream(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0, 1}, nil)
	for _, part := range []int32{0, 1} {
		checkExactlyOnceInOrder(t, f, &a, part, sent[part])
	}
	if s, u := locked(f, func() int { return f.streams }), locked(f, func() int { return f.unaryCalls }); s != 1 || u != 0 {
		t.Errorf("streams opened %d, unary calls %d; want 1 and 0", s, u)
	}
}

// A broker that does not serve ProduceStream (an older version) gets unary
// Produce calls, with the same guarantees; lost answers are retried and
// deduplicated on that path too.
func TestProducerFallsBackToUnaryProduce(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	f.unaryOnly = true
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0, 1}, func() { f.dropRequests = 2 })
	for _, part := range []int32{0, 1} {
		checkExactlyOnceInOrder(t, f, &a, part, sent[part])
		checkSequences(t, f.headers("t", part))
	}
	if s, u := locked(f, func() int { return f.streams }), locked(f, func() int { return f.unaryCalls }); s != 0 || u < 10 {
		t.Errorf("streams opened %d, unary calls %d; want 0 and many", s, u)
	}
	if n := locked(f, func() int { return f.dropRequests }); n != 0 {
		t.Errorf("%d injected lost answers not consumed", n)
	}
}

// A request with no answer within the request timeout fails its stream
// (as a Kafka client closes the connection): every request on it is
// retried on a new stream, and each record is still stored once.
func TestProduceStreamTimeoutOpensANewStream(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	c, err := New([]string{f.addr}, WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := c.NewProducer(WithBatchBytes(1024), WithLinger(time.Millisecond), WithDeliveryTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var a acks
	warm := send(p, &a, "w", []int32{0}, 1)
	flush(t, p)
	f.mu.Lock()
	f.hold = make(chan struct{})
	f.mu.Unlock()
	sent := send(p, &a, "v", []int32{0}, 100)
	wait.Until(t, 10*time.Second, "a second stream after the timeout", func() bool {
		return locked(f, func() int { return f.streams }) >= 2
	})
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	flush(t, p)
	checkExactlyOnceInOrder(t, f, &a, 0, append(warm[0], sent[0]...))
	if n := locked(f, func() int { return f.duplicates }); n < 1 {
		t.Errorf("%d duplicates: the requests of the timed-out stream were not retried", n)
	}
}

// canceledStream is a ProduceStream whose receive ends as a stream the
// producer cancelled itself ends.
type canceledStream struct{ grpc.ClientStream }

func (canceledStream) RecvMsg(any) error { return status.Error(codes.Canceled, "context canceled") }

// A stream the producer cancelled itself (its SendMsg failed: the
// connection broke) fails its pending requests with a retriable error,
// not a final "canceled"; once the producer is closing, canceled stands.
func TestProduceStreamBrokenUnderRequestsIsRetriable(t *testing.T) {
	for _, closing := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		c := newProduceConn(&Producer{ctx: ctx}, "127.0.0.1:1")
		st := canceledStream{}
		ch := make(chan produceAnswer, 1)
		c.st, c.cancel, c.pending[1] = st, func() {}, ch
		if closing {
			cancel()
		}
		c.read(st)
		a := <-ch
		if got := isRetriable(a.err); got == closing {
			t.Errorf("closing=%v: answer %v retriable=%v", closing, a.err, got)
		}
		cancel()
	}
}
