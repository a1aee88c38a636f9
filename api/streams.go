package api

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
)

// errStreamClosed is what streamSender.send returns once the stream is
// done with: a send failed earlier, or the handler has returned.
var errStreamClosed = errors.New("stream closed")

// streamSender sends a long-lived stream's messages, one at a time, from
// any goroutine, and never after the handler has returned.
type streamSender struct {
	ss     grpc.ServerStream
	failed chan error // capacity 1: the first failed send

	mu     sync.Mutex
	closed bool // no more sends: one failed, or the handler is returning
}

// send sends m. The first failure ends the stream with its error.
func (o *streamSender) send(m any) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errStreamClosed
	}
	if err := o.ss.SendMsg(m); err != nil {
		o.closed = true
		o.failed <- err
		return err
	}
	return nil
}

// serveStream runs serve for a long-lived stream on a goroutine of its own
// and returns (ending the stream) when serve returns, when a send fails,
// or when draining closes: then with UNAVAILABLE "node is shutting down",
// whatever serve is blocked on, since grpc's graceful stop waits for every
// open stream and a client keeps these open. serve's context ends when
// the handler returns; nothing is sent after that.
func serveStream(ss grpc.ServerStream, draining <-chan struct{}, serve func(ctx context.Context, out *streamSender) error) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	out := &streamSender{ss: ss, failed: make(chan error, 1)}
	done := make(chan error, 1)
	// Bounded by the stream, so not in a goroutine.Group, and not waited
	// for here: serve may be blocked in a receive that ends only once this
	// handler has returned (gRPC then ends the stream). It ends then, its
	// ctx cancelled and its sends refused (streams_internal_test.go); a
	// call it makes after the node closed the replica manager fails.
	go func() { done <- serve(ctx, out) }()
	var err error
	select {
	case err = <-done:
	case err = <-out.failed:
	case <-draining:
		err = errNodeStopping
	}
	out.mu.Lock()
	out.closed = true
	out.mu.Unlock()
	return err
}
