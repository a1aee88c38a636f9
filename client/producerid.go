package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// initProducerID asks any broker for a new idempotent producer id (the
// epoch is 0). It makes one attempt: COORDINATOR_LOAD_IN_PROGRESS (the
// broker has no block of ids yet) and transport failures come back as
// retriable errors (isRetriable).
func (c *Client) initProducerID(ctx context.Context) (id int64, epoch int16, err error) {
	var resp *sluicev1.InitProducerIdResponse
	err = c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewTransactionsClient(cc).InitProducerId(ctx, &sluicev1.InitProducerIdRequest{})
		resp = r
		return err
	})
	if status.Code(unwrapStatus(err)) == codes.Unimplemented {
		return -1, -1, fmt.Errorf("init producer id: the broker does not support idempotent producers (use WithIdempotence(false)): %w", err)
	}
	if err != nil {
		return -1, -1, fmt.Errorf("init producer id: %w", err)
	}
	if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return -1, -1, fmt.Errorf("init producer id: %w", err)
	}
	if resp.ProducerId < 0 || resp.ProducerEpoch < 0 || resp.ProducerEpoch > math.MaxInt16 {
		return -1, -1, fmt.Errorf("init producer id: %w", errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "broker answered producer id %d epoch %d", resp.ProducerId, resp.ProducerEpoch))
	}
	return resp.ProducerId, int16(resp.ProducerEpoch), nil
}

// initProducerIDLoop is the goroutine that gets the producer its identity: the
// sender loop starts it when the producer has records but no producer id
// (at first, or when the epoch ran out). It retries retriable errors with
// backoff for as long as records are waiting; records that wait past
// their delivery timeout fail (accumulator.expire), so the wait is
// bounded by the delivery timeout. A non-retriable error is fatal: every
// waiting and later record fails with it (Kafka treats InitProducerId
// failures other than retriable ones as fatal for the producer).
func (p *Producer) initProducerIDLoop() {
	defer func() {
		p.mu.Lock()
		p.initRunning = false
		p.mu.Unlock()
		p.signal()
	}()
	for attempt := 0; ; attempt++ {
		id, epoch, err := p.c.initProducerID(p.ctx)
		p.mu.Lock()
		switch {
		case err == nil:
			p.acc.setIdentity(id, epoch)
			p.acc.waitErr = nil
		case p.stopping():
		case !isRetriable(err):
			p.fatal = fmt.Errorf("sluice: idempotent producer cannot start: %w", err)
		default:
			p.acc.waitErr = err
		}
		over := err == nil || p.fatal != nil || p.acc.empty() || p.stopping()
		p.mu.Unlock()
		if over {
			return
		}
		p.signal() // let the sender loop expire records
		if sleepCtx(p.ctx, initBackoff(attempt)) != nil {
			return
		}
	}
}

// initBackoff is the wait after a failed InitProducerId attempt: 100ms
// doubling to at most 1s (the broker itself waits up to 1s for a block of
// ids before it answers COORDINATOR_LOAD_IN_PROGRESS).
func initBackoff(attempt int) time.Duration {
	return min(100*time.Millisecond<<min(attempt, 4), time.Second)
}
