package kafka

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// forward runs call against the active controller (retried on
// NOT_CONTROLLER and transport failures, within timeout), then waits
// until this broker's metadata holds the offset call returns, so that a
// request sent here next sees the change. what names the change for the
// timeout's message ("configs altered"). The error is the call's, or
// REQUEST_TIMED_OUT.
func (c *conn) forward(timeout time.Duration, what string, call func(ctx context.Context, cl internalv1.ControllerClient) (uint64, error)) error {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	var offset uint64
	err := c.s.cfg.Controllers.Call(ctx, timeout, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		offset, err = call(ctx, cl)
		return err
	})
	if err != nil {
		return err
	}
	if err := c.s.cfg.Metadata.WaitForOffset(ctx, offset); err != nil {
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%s, but broker %d has not seen it yet: %v", what, c.s.cfg.NodeID, err)
	}
	return nil
}

// outcome is the Kafka code and message of a controller's outcome for
// one topic.
func outcome(o *internalv1.TopicOutcome) (int16, *string) {
	if o.ErrorCode == sluicev1.ErrorCode_NONE {
		return 0, nil
	}
	return kafkaCode(o.ErrorCode), &o.ErrorMessage
}
