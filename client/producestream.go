package client

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/codec"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// produceStreamRetryAfter is how long a producer whose broker does not
// serve ProduceStream (an older version) uses unary Produce calls before
// it tries the stream again.
const produceStreamRetryAfter = time.Minute

var produceStreamDesc = &grpc.StreamDesc{StreamName: "ProduceStream", ServerStreams: true, ClientStreams: true}

// errProduceStreamUnsupported answers the requests sent on a stream the
// broker does not serve: nothing was applied, send them again as unary
// calls.
var errProduceStreamUnsupported = status.Error(codes.Unimplemented, "broker does not serve ProduceStream")

// produceAnswer is what a request sent on a ProduceStream gets.
type produceAnswer struct {
	resp *sluicev1.ProduceStreamResponse
	err  error
}

// produceConn is a producer's ProduceStream to one broker. The broker's
// workers send on it one at a time (under their queue's sendMu); a reader
// goroutine hands each answer to its request by correlation id. When the
// stream fails, every request waiting on it gets the failure (and is
// retried like after a lost connection); the next send opens a new one.
type produceConn struct {
	p    *Producer
	addr string

	mu      sync.Mutex // guards the following
	st      grpc.ClientStream
	cancel  context.CancelFunc
	pending map[int64]chan produceAnswer
	nextID  int64
	// unaryUntil: the broker did not serve the stream; use Produce until
	// then.
	unaryUntil time.Time
}

func newProduceConn(p *Producer, addr string) *produceConn {
	return &produceConn{p: p, addr: addr, pending: map[int64]chan produceAnswer{}}
}

// useStream reports whether requests should go on the stream.
func (c *produceConn) useStream() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().After(c.unaryUntil)
}

// send puts req on the stream, opening it if needed, and returns the
// stream and the channel its answer (or the stream's failure) arrives on.
// Callers serialise send.
func (c *produceConn) send(req *internalv1.ProduceRequestView, bufs *codec.BatchBuffers) (grpc.ClientStream, <-chan produceAnswer, error) {
	cc, err := c.p.c.conn(c.addr)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	if c.st == nil {
		ctx, cancel := context.WithCancel(c.p.ctx)
		st, err := cc.NewStream(ctx, produceStreamDesc, "/sluice.v1.Log/ProduceStream")
		if err != nil {
			c.mu.Unlock()
			cancel()
			return nil, nil, err
		}
		c.st, c.cancel = st, cancel
		c.p.goTracked(func() { c.read(st) })
	}
	st := c.st
	c.nextID++
	id := c.nextID
	ch := make(chan produceAnswer, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	// Not under mu: SendMsg may wait for flow control, which needs the
	// reader to take answers.
	msg := &codec.OutgoingProduceStreamRequest{ProduceStreamRequestView: &internalv1.ProduceStreamRequestView{CorrelationId: id, Request: req}, Buffers: bufs}
	if err := st.SendMsg(msg); err != nil {
		// The stream is broken: the reader gets its status and fails
		// every request on it, this one included. Make sure it wakes.
		c.mu.Lock()
		if c.st == st {
			c.cancel()
		}
		c.mu.Unlock()
	}
	return st, ch, nil
}

// read hands the stream's answers to their requests until it fails.
func (c *produceConn) read(st grpc.ClientStream) {
	for {
		resp := &sluicev1.ProduceStreamResponse{}
		if err := st.RecvMsg(resp); err != nil {
			c.fail(st, c.streamError(err))
			return
		}
		c.mu.Lock()
		ch := c.pending[resp.CorrelationId]
		delete(c.pending, resp.CorrelationId)
		c.mu.Unlock()
		if ch != nil { // nil: its request timed out and was failed
			ch <- produceAnswer{resp: resp}
		}
	}
}

// streamError is the error a stream's failure gives its pending requests.
// A stream this producer cancelled itself while it runs (send cancels the
// stream whose SendMsg failed, so that the reader wakes) ends with
// Canceled, which would read as final; it means the connection broke
// under the requests, so they get UNAVAILABLE and are retried like after
// a lost connection. Found by an end-to-end test: a record failed with
// "context canceled" when its leader was SIGKILLed.
func (c *produceConn) streamError(err error) error {
	if status.Code(err) == codes.Canceled && c.p.ctx.Err() == nil {
		return status.Errorf(codes.Unavailable, "produce stream to %s broke: %v", c.addr, err)
	}
	return err
}

// fail ends st, if it is still the current stream, and fails every
// request waiting on it with err.
func (c *produceConn) fail(st grpc.ClientStream, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != st {
		return // already failed
	}
	c.cancel()
	c.st, c.cancel = nil, nil
	if status.Code(err) == codes.Unimplemented {
		c.unaryUntil = time.Now().Add(produceStreamRetryAfter)
		err = errProduceStreamUnsupported
	}
	for id, ch := range c.pending {
		ch <- produceAnswer{err: err}
		delete(c.pending, id)
	}
}

// wait returns the answer that arrives on ch, or fails st (and with it
// every request on it, as a Kafka client closes the connection of a
// request that timed out) when none arrives within timeout.
func (c *produceConn) wait(st grpc.ClientStream, ch <-chan produceAnswer, timeout time.Duration) produceAnswer {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-ch:
		return a
	case <-t.C:
		c.fail(st, status.Errorf(codes.DeadlineExceeded, "no produce answer from %s within %v", c.addr, timeout))
		return <-ch // fail answered it, or its answer had just arrived
	}
}
