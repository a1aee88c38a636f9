package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// defaultBatchRPCTimeout bounds a coalesced RPC whose callers set no
// deadline.
const defaultBatchRPCTimeout = 30 * time.Second

// brokerBatcher coalesces calls of one RPC to the same broker (Kafka's
// per-broker request queues of the marker channel manager and the
// AddPartitionsToTxn manager): at most one request per broker address is
// in flight; calls arriving meanwhile queue, and the next request carries
// everything queued. A sender goroutine per busy broker sends and hands
// each call its own answer; it ends when its queue is empty.
//
// The RPC's deadline is the latest deadline of the calls it carries
// (defaultBatchRPCTimeout for a call without one), and it ends at Close.
// A caller whose ctx ends stops waiting (REQUEST_TIMED_OUT); its part of
// the request may still be sent and acted on.
type brokerBatcher[Req, Resp any] struct {
	// send sends reqs to the broker at addr in one RPC and returns one
	// answer per request, in order, or an error for them all.
	send func(ctx context.Context, addr string, reqs []Req) ([]Resp, error)

	ctx        context.Context // ends at close
	cancel     context.CancelFunc
	goroutines goroutine.Group

	mu     sync.Mutex // guards the following (a leaf: never held while sending)
	queues map[string]*brokerQueue[Req, Resp]
	closed bool
}

// brokerQueue is one broker's queue; it exists while a sender runs.
type brokerQueue[Req, Resp any] struct {
	calls []*brokerCall[Req, Resp]
}

// brokerCall is one caller's request and, once done is closed, its
// answer.
type brokerCall[Req, Resp any] struct {
	req      Req
	deadline time.Time
	done     chan struct{}
	resp     Resp
	err      error
}

func newBrokerBatcher[Req, Resp any](send func(ctx context.Context, addr string, reqs []Req) ([]Resp, error)) *brokerBatcher[Req, Resp] {
	ctx, cancel := context.WithCancel(context.Background())
	return &brokerBatcher[Req, Resp]{send: send, ctx: ctx, cancel: cancel, queues: map[string]*brokerQueue[Req, Resp]{}}
}

// do queues req for the broker at addr and waits for its answer or ctx.
func (b *brokerBatcher[Req, Resp]) do(ctx context.Context, addr string, req Req) (Resp, error) {
	var zero Resp
	c := &brokerCall[Req, Resp]{req: req, done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		c.deadline = dl
	} else {
		c.deadline = time.Now().Add(defaultBatchRPCTimeout)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return zero, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "this broker is shutting down")
	}
	q := b.queues[addr]
	if q == nil {
		// No sender for addr: start one. Started under mu after the
		// closed check, so close's Wait never races a new goroutine.
		q = &brokerQueue[Req, Resp]{}
		b.queues[addr] = q
		b.goroutines.Go(func() { b.run(addr, q) })
	}
	q.calls = append(q.calls, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.resp, c.err
	case <-ctx.Done():
		return zero, errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "no answer from %s in time: %v", addr, ctx.Err())
	}
}

// run is the sender of addr's queue q: it sends everything queued in one
// request, answers those calls, and goes on until the queue is empty.
func (b *brokerBatcher[Req, Resp]) run(addr string, q *brokerQueue[Req, Resp]) {
	for {
		b.mu.Lock()
		calls := q.calls
		q.calls = nil
		if len(calls) == 0 {
			delete(b.queues, addr)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		reqs := make([]Req, len(calls))
		deadline := calls[0].deadline
		for i, c := range calls {
			reqs[i] = c.req
			if c.deadline.After(deadline) {
				deadline = c.deadline
			}
		}
		ctx, cancel := context.WithDeadline(b.ctx, deadline)
		resps, err := b.send(ctx, addr, reqs)
		cancel()
		if err == nil && len(resps) != len(reqs) {
			err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "%s answered %d results for %d requests", addr, len(resps), len(reqs))
		}
		for i, c := range calls {
			if err != nil {
				c.err = err
			} else {
				c.resp = resps[i]
			}
			close(c.done)
		}
	}
}

// close ends the RPCs in flight, refuses new calls and waits for the
// senders.
func (b *brokerBatcher[Req, Resp]) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.goroutines.Wait()
}

// rpcError maps a failed RPC (no answer at all) to a retriable
// *errs.Error: the peer's code when it answered a retriable Sluice error,
// else REQUEST_TIMED_OUT. A whole request's failure never carries a
// per-partition verdict such as UNKNOWN_TOPIC_OR_PARTITION.
func rpcError(addr string, err error) error {
	if e, _ := errs.FromStatus(err); errs.Retriable(errs.Code(e)) {
		return e
	}
	return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%s", fmt.Sprintf("request to %s failed: %v", addr, err))
}
