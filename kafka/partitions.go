package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// createPartitions serves CreatePartitions: each topic grown to its
// count through the controller (controller.CreatePartitions: the new
// partitions placed as the topic's first ones; a count not above the
// current one is INVALID_PARTITIONS), answered once this broker's
// metadata shows them. ALTER on the topic, as Kafka's; a manual
// assignment is refused (INVALID_REQUEST), as CreateTopics refuses one;
// a topic named twice is refused (INVALID_REQUEST), as Kafka refuses it;
// internal topics are refused by the controller (INVALID_REQUEST).
func createPartitions(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.CreatePartitionsRequest)
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	resp.Topics = make([]kmsg.CreatePartitionsResponseTopic, len(req.Topics))
	named := map[string]int{}
	for _, t := range req.Topics {
		named[t.Topic]++
	}
	fwd := &internalv1.ControllerCreatePartitionsRequest{ValidateOnly: req.ValidateOnly}
	var fwdAt []int
	for i, t := range req.Topics {
		tr := &resp.Topics[i]
		*tr = kmsg.NewCreatePartitionsResponseTopic()
		tr.Topic = t.Topic
		var err error
		switch {
		case named[t.Topic] > 1:
			err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "topic %q is named more than once", errs.Echo(t.Topic))
		case !c.allowed(c.ctx, auth.OpAlter, auth.Topic(t.Topic)):
			tr.ErrorCode, tr.ErrorMessage = c.denied(auth.OpAlter, auth.Topic(t.Topic))
			continue
		case len(t.Assignment) > 0:
			err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "manual replica assignment is not supported: give the number of partitions only")
		}
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		fwd.Topics = append(fwd.Topics, &internalv1.PartitionCount{Topic: t.Topic, Count: t.Count})
		fwdAt = append(fwdAt, i)
	}
	if len(fwd.Topics) == 0 {
		return resp
	}
	var out *internalv1.ControllerCreatePartitionsResponse
	err := c.forward(adminTimeout(req.TimeoutMillis), "the partitions were added", func(ctx context.Context, cl internalv1.ControllerClient) (uint64, error) {
		var err error
		out, err = cl.CreatePartitions(ctx, fwd)
		if err == nil && len(out.Topics) != len(fwd.Topics) {
			err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Topics), len(fwd.Topics))
		}
		if err != nil {
			return 0, err
		}
		return out.MetadataOffset, nil
	})
	for j, i := range fwdAt {
		tr := &resp.Topics[i]
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		tr.ErrorCode, tr.ErrorMessage = outcome(out.Topics[j])
		if tr.ErrorCode == 0 && !req.ValidateOnly {
			c.s.log.Info("partitions added", "topic", tr.Topic, "partitions", req.Topics[i].Count, "by", c.caller.Principal.String())
		}
	}
	return resp
}
