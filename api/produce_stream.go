package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// MaxProduceStreamInFlight bounds the requests of one ProduceStream that
// wait for their answers; the stream is not read further until one is
// answered (gRPC flow control then holds the client back).
const MaxProduceStreamInFlight = 64

// produceStream serves sluice.v1.Log/ProduceStream: Produce's rules for
// each request (its authorization too, checked per request, so that a
// change of ACLs applies to an open stream's next request; a request
// refused as a whole is answered its code and the stream goes on),
// appended in arrival order (so a client's pipelined batches of one
// partition arrive in sequence), answered as each is done.
// A transactional request's verifications (AppendTxnTo) also run before
// the next request is read, which keeps that order.
// A goroutine reads and appends, and answers what needs no wait; the
// acks=all waits end where the high watermark moves
// (cluster.Replica.AwaitCommit), which hands each request, once all its
// partitions are done, to the stream's one sender goroutine: no goroutine
// per request. The stream ends when the client closes its side and every
// request is answered, or at the first failure to receive or send (the
// requests still waiting are then not answered: the client fails them
// and retries, as after a lost connection), or when the node starts
// shutting down (UNAVAILABLE: grpc's graceful stop would otherwise wait
// for a stream the client keeps open).
func (s *Server) produceStream(ss grpc.ServerStream) error {
	return serveStream(ss, s.draining, func(ctx context.Context, out *streamSender) error {
		return s.produceStreamReceive(ctx, ss, out)
	})
}

// produceStreamReceive reads, appends and dispatches a stream's requests
// until it ends. It returns nil after the client's end of the stream,
// once every request is answered.
func (s *Server) produceStreamReceive(ctx context.Context, ss grpc.ServerStream, out *streamSender) error {
	slots := make(chan struct{}, MaxProduceStreamInFlight)
	var waiting sync.WaitGroup // the acks=all requests not answered yet
	// committed never blocks its writers (AwaitCommit's completions,
	// possibly under a partition's lock): each holds a slot, so at most
	// MaxProduceStreamInFlight requests are ever in it or on their way.
	committed := make(chan *pendingProduce, MaxProduceStreamInFlight)
	stop := make(chan struct{})
	var sender goroutine.Group
	sender.Go(func() {
		for {
			select {
			case pp := <-committed:
				pp.answerWaits()
				_ = out.send(produceStreamAnswer(pp.id, pp, nil))
				<-slots
				waiting.Done()
			case <-stop:
				return
			}
		}
	})
	// After EOF the sender stops once every request has been answered.
	// On the other paths it is told to stop but not waited for: it may be
	// in a send that ends only with the stream, after this handler has
	// returned (the waits still registered end with ctx, into committed,
	// which has room for them).
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
	}()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		req := &codec.ProduceStreamRequest{}
		if err := ss.RecvMsg(req); err != nil {
			req.Release()
			if errors.Is(err, io.EOF) {
				waiting.Wait()
				close(stop)
				stopped = true
				sender.Wait()
				return nil
			}
			if r := (*refusal)(nil); errors.As(err, &r) {
				// Over the request limits (limits.go): refused as a
				// whole, as Produce would, and the stream goes on.
				_ = out.send(produceStreamAnswer(req.CorrelationID, nil, err))
				<-slots
				continue
			}
			return err
		}
		id := req.CorrelationID
		rt := s.quotas.startRequest()
		size := s.quotas.produceBytes(&req.Request)
		pp, err := s.appendProduce(ctx, &req.Request, &rt)
		req.Release()
		var throttle time.Duration
		if err == nil {
			// Over a producer_byte_rate or request_percentage quota:
			// the answer says so, and the stream is not read for the
			// throttle time (Kafka's muted channel; throttle.go). The
			// request's time is counted until its batches are appended.
			throttle = s.quotas.charge(ctx, auth.QuotaProduce, size, &rt)
			pp.resp.ThrottleTimeMs = throttleMs(throttle)
		}
		if err != nil || len(pp.waits) == 0 {
			_ = out.send(produceStreamAnswer(id, pp, err))
			<-slots
		} else {
			waiting.Add(1)
			pp.id = id
			pp.startWaits(ctx, committed)
		}
		s.hold(ctx, throttle)
	}
}

// produceStreamAnswer is the answer to request id: pp's response, or
// err's code when the request was refused as a whole. (A failed send ends
// the stream through serveStream; the receiver need not look.)
func produceStreamAnswer(id int64, pp *pendingProduce, err error) *sluicev1.ProduceStreamResponse {
	m := &sluicev1.ProduceStreamResponse{CorrelationId: id}
	if err != nil {
		e, _ := errs.FromStatus(err)
		m.ErrorCode, m.ErrorMessage = errs.Code(e), errs.Message(e)
	} else {
		m.Response = pp.resp
	}
	return m
}
