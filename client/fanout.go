package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// askEveryBroker sends one request to every broker at once (each bounded
// by the request timeout) and hands each answer to take, one at a time,
// as it arrives; call returns the broker's answer and its ErrorCode and
// message. A broker's failure (transport, request status, error code, or
// take's error) does not stop the others; they are returned together,
// each naming its broker, in a stable order, as one error.
func askEveryBroker[R any](ctx context.Context, c *Client, brokers []*sluicev1.BrokerMetadata,
	call func(ctx context.Context, cc *grpc.ClientConn) (R, sluicev1.ErrorCode, string, error),
	take func(node int32, resp R) error) error {
	type answer struct {
		node int32
		resp R
		err  error
	}
	answers := make(chan answer, len(brokers))
	for _, b := range brokers {
		// Bounded by the call, so not in a goroutine.Group: it ends with
		// its request (rctx), and the loop below takes every answer
		// before askEveryBroker returns.
		go func() {
			cc, err := c.conn(b.Address)
			if err != nil {
				answers <- answer{node: b.NodeId, err: err}
				return
			}
			rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
			defer cancel()
			resp, code, msg, err := call(rctx, cc)
			if err = rpcError(err); err == nil {
				err = codeError(code, msg)
			}
			answers <- answer{node: b.NodeId, resp: resp, err: err}
		}()
	}
	var failures []error
	for range brokers {
		a := <-answers
		if a.err == nil {
			a.err = take(a.node, a.resp)
		}
		if a.err != nil {
			failures = append(failures, fmt.Errorf("broker %d: %w", a.node, a.err))
		}
	}
	slices.SortFunc(failures, func(a, b error) int {
		switch {
		case a.Error() < b.Error():
			return -1
		case a.Error() > b.Error():
			return 1
		}
		return 0
	})
	return errors.Join(failures...)
}
