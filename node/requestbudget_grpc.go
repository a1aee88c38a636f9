package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/codec"
)

// How a gRPC listener's requests take their bytes from its requestBudget
// (decision 51). grpc-go reads a request message whole (up to the
// server's MaxRecvMsgSize) before any interceptor runs, and learns its
// size only from the message's 5-byte prefix inside that read, where it
// also lets the client send all of it (an HTTP/2 window update). So the
// budget is consulted before gRPC is asked for a message: until then
// flow control keeps all but the stream's window (cluster.StreamWindow)
// in the client and the kernels. Two ways, by when the message comes:
//
//   - A unary call's request, and the one request of a server-streaming
//     call, follow the call's headers at once. The call reserves the
//     largest message the listener accepts (b.reserve) before the read,
//     waiting for it in arrival order, and gives back down to the
//     message's size once gRPC has read it (stats.InPayload). Bytes
//     reserved this way never exceed the budget. A reservation whose
//     message has not arrived within requestReadTimeout (or the call's
//     deadline, if sooner) ends the call (DEADLINE_EXCEEDED), so a client
//     that sends headers and nothing else cannot hold the budget for long.
//   - A client stream's next message may come minutes later (an idle
//     producer's ProduceStream): holding a reservation meanwhile would
//     let a few idle streams stop the listener. So a stream waits, in the
//     same order and holding nothing, until the largest message would fit,
//     then reads, and takes the message's size once read, even beyond
//     the budget: each open client stream can add one message over it.
//
// A unary call holds its message's bytes until its handler returns; a
// stream holds each message's until it asks for the next one, or its
// handler returns.
//
// budgetedServer registers every service so that each method receives
// its requests through rpcBytes (a unary method's decode function, a
// stream's RecvMsg: on the method's own goroutine, before gRPC reads the
// message); budgetStats, the server's stats.Handler, gives each call its
// rpcBytes (TagRPC) and hands it each message's size (InPayload, on the
// receiving goroutine, inside the read).

// requestReadTimeout bounds the time from a reservation to its message
// having been read (a client sends a unary request with its headers; 30 s
// is 2 MB/s for the largest request).
const requestReadTimeout = 30 * time.Second

// rpcBytesKey is the context key of a call's *rpcBytes.
type rpcBytesKey struct{}

// rpcBytes is what one call holds in its listener's budget. One receive
// runs at a time (gRPC's rule for RecvMsg); sized runs inside it, and end
// on the handler's goroutine once the handler returned (a stream's
// receiving goroutine, or a timed-out read, may outlive it).
type rpcBytes struct {
	b *requestBudget

	mu      sync.Mutex // guards the following; taken before b.mu, never after
	held    int64      // bytes taken from b: a reservation while a message is read, then its size
	reading bool       // a reserved read is under way: it, not end, gives its bytes back
	ended   bool       // the handler returned: nothing more is taken
}

// errCallEnded is a receive after the handler returned.
var errCallEnded = status.Error(codes.Canceled, "the call has ended")

// receiveReserved reads the call's request into m with recv (the call's
// decode function or its stream's RecvMsg) once the largest message fits
// in the budget, reserving that much meanwhile, and keeps the message's
// bytes until end. A wait that the call's context or the node's draining
// ends is the call's error: DEADLINE_EXCEEDED or CANCELLED, UNAVAILABLE.
func (r *rpcBytes) receiveReserved(ctx context.Context, m any, recv func(any) error) error {
	if err := r.b.acquire(ctx, r.b.reserve); err != nil {
		return waitError(err)
	}
	r.mu.Lock()
	if r.ended {
		r.mu.Unlock()
		r.b.release(r.b.reserve)
		return errCallEnded
	}
	r.b.release(r.held) // a server-streaming call reads one message; be safe
	r.held, r.reading = r.b.reserve, true
	r.mu.Unlock()
	read := func() error {
		err := recv(m)
		r.mu.Lock()
		r.reading = false
		if err != nil || r.ended {
			r.b.release(r.held) // no message, or no handler to use it
			r.held = 0
		}
		r.mu.Unlock()
		return err
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= r.b.readTimeout {
		// gRPC ends the call, and so the read, at its deadline.
		return read()
	}
	// Else the read runs on a goroutine of its own so that a message that
	// does not come cannot keep the reservation: the call then ends, which
	// ends the read, which gives the bytes back. Bounded by the call, so
	// not in a goroutine.Group: it may outlive the handler only until gRPC
	// ends the call.
	done := make(chan error, 1)
	go func() { done <- read() }()
	timer := time.NewTimer(r.b.readTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the request message did not arrive within %v of the call's admission", r.b.readTimeout)
	}
}

// receiveStreamed reads a client stream's next message into m with recv
// once the largest message would fit in the budget, holding nothing
// meanwhile, and keeps the message's bytes until the next receive or end.
func (r *rpcBytes) receiveStreamed(ctx context.Context, m any, recv func(any) error) error {
	r.drop() // the previous message is done with once the next is asked for
	if err := r.b.await(ctx, r.b.reserve); err != nil {
		return waitError(err)
	}
	err := recv(m)
	if err != nil {
		r.drop() // no message (end of stream, a failed read): nothing to keep
	}
	return err
}

// waitError is the call's error for a wait for the budget that err ended.
func waitError(err error) error {
	if errors.Is(err, errNodeDraining) {
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.FromContextError(err).Err()
}

// sized sets what r holds to n, the size of the message just read: it
// gives back the rest of a reservation, or takes n for a streamed
// message (nothing after end).
func (r *rpcBytes) sized(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case n < r.held:
		r.b.release(r.held - n)
	case n > r.held && !r.ended:
		r.b.take(n - r.held)
	default:
		return
	}
	r.held = n
}

// drop gives back what r holds.
func (r *rpcBytes) drop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.b.release(r.held)
	r.held = 0
}

// end gives back what r holds, for good (a read still under way gives
// its own back when it ends).
func (r *rpcBytes) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	if !r.reading {
		r.b.release(r.held)
		r.held = 0
	}
}

// rpcBytesOf returns ctx's rpcBytes (set by budgetStats.TagRPC), or a
// new one for b: without its stats handler a call still waits for the
// budget, and holds the reserve until its handler returns.
func rpcBytesOf(ctx context.Context, b *requestBudget) *rpcBytes {
	if r, ok := ctx.Value(rpcBytesKey{}).(*rpcBytes); ok && r.b == b {
		return r
	}
	return &rpcBytes{b: b}
}

// budgetStats is the stats.Handler of a budgeted gRPC server
// (grpc.StatsHandler); see the top of this file.
type budgetStats struct{ b *requestBudget }

// TagRPC gives the call its rpcBytes.
func (h budgetStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcBytesKey{}, &rpcBytes{b: h.b})
}

// HandleRPC hands the size of a message received to the call's rpcBytes:
// the larger of its size on the wire and decompressed.
func (h budgetStats) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		if r, ok := ctx.Value(rpcBytesKey{}).(*rpcBytes); ok {
			r.sized(int64(max(p.Length, p.CompressedLength)))
		}
	}
}

// TagConn implements stats.Handler.
func (budgetStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (budgetStats) HandleConn(context.Context, stats.ConnStats) {}

// budgetedServer registers services on a gRPC server built with
// grpc.StatsHandler(budgetStats{b}) so that their methods receive
// requests through b (see the top of this file). Every other method is
// the server's own.
type budgetedServer struct {
	reflection.GRPCServer
	b *requestBudget
}

// RegisterService registers impl under a copy of desc whose handlers
// receive their requests through the budget.
func (s budgetedServer) RegisterService(desc *grpc.ServiceDesc, impl any) {
	codec.RegisterHooked(s.GRPCServer, desc, impl, codec.ReceiveHook{
		Unary: func(ctx context.Context, dec func(any) error) (func(any) error, func()) {
			r := rpcBytesOf(ctx, s.b)
			return func(v any) error { return r.receiveReserved(ctx, v, dec) }, r.end
		},
		Stream: func(ss grpc.ServerStream, clientStreams bool) (grpc.ServerStream, func()) {
			r := rpcBytesOf(ss.Context(), s.b)
			return budgetedStream{ServerStream: ss, r: r, streamed: clientStreams}, r.end
		},
	})
}

// budgetedStream is a server stream whose RecvMsg goes through the
// budget: reserved for a server-streaming call's one request, streamed
// for a client stream's.
type budgetedStream struct {
	grpc.ServerStream
	r        *rpcBytes
	streamed bool
}

func (s budgetedStream) RecvMsg(m any) error {
	if s.streamed {
		return s.r.receiveStreamed(s.Context(), m, s.ServerStream.RecvMsg)
	}
	return s.r.receiveReserved(s.Context(), m, s.ServerStream.RecvMsg)
}
