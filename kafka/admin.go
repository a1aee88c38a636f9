package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// adminTimeout is a request's timeout_ms, or 30 s when it gives none.
func adminTimeout(ms int32) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 30 * time.Second
}

// createTopics serves CreateTopics: authorized as Kafka's (CREATE on
// the cluster, else on each topic), internal names refused, the rest
// forwarded to the controller quorum as the gRPC door does; the answer
// comes once this broker's metadata shows the topics, so a Metadata sent
// here next finds them. -1 partitions or replication factor take the
// cluster's defaults; a manual replica assignment is refused.
func createTopics(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.CreateTopicsRequest)
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	anyTopic := c.allowedQuiet(c.ctx, auth.OpCreate, auth.Cluster)
	resp.Topics = make([]kmsg.CreateTopicsResponseTopic, len(req.Topics))
	fwd := &sluicev1.CreateTopicsRequest{TimeoutMs: req.TimeoutMillis, ValidateOnly: req.ValidateOnly}
	var fwdAt []int
	for i, t := range req.Topics {
		tr := &resp.Topics[i]
		*tr = kmsg.NewCreateTopicsResponseTopic()
		tr.Topic, tr.NumPartitions, tr.ReplicationFactor = t.Topic, -1, -1
		switch {
		case !anyTopic && !c.allowed(c.ctx, auth.OpCreate, auth.Topic(t.Topic)):
			tr.ErrorCode, tr.ErrorMessage = c.denied(auth.OpCreate, auth.Topic(t.Topic))
			continue
		case cluster.IsInternalTopic(t.Topic):
			err := cluster.ValidateTopicName(t.Topic)
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		case len(t.ReplicaAssignment) > 0:
			err := errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "manual replica assignment is not supported: give the number of partitions and the replication factor")
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		ct := &sluicev1.CreatableTopic{Name: t.Topic, NumPartitions: max(t.NumPartitions, 0), ReplicationFactor: int32(max(t.ReplicationFactor, 0))}
		for _, cfg := range t.Configs {
			if cfg.Value == nil {
				continue
			}
			if ct.Configs == nil {
				ct.Configs = make(map[string]string)
			}
			ct.Configs[cfg.Name] = *cfg.Value
		}
		fwd.Topics = append(fwd.Topics, ct)
		fwdAt = append(fwdAt, i)
	}
	if len(fwd.Topics) == 0 {
		return resp
	}
	ctx, cancel := context.WithTimeout(c.ctx, adminTimeout(req.TimeoutMillis))
	defer cancel()
	var out *internalv1.ControllerCreateTopicsResponse
	err := c.s.cfg.Controllers.Call(ctx, adminTimeout(req.TimeoutMillis), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.CreateTopics(ctx, fwd)
		return err
	})
	if err == nil && len(out.Response.Topics) != len(fwd.Topics) {
		err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Response.Topics), len(fwd.Topics))
	}
	if err == nil {
		if werr := c.s.cfg.Metadata.WaitForOffset(ctx, out.MetadataOffset); werr != nil {
			err = errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "topics were created but broker %d has not seen them yet: %v", c.s.cfg.NodeID, werr)
		}
	}
	for j, i := range fwdAt {
		tr := &resp.Topics[i]
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		res := out.Response.Topics[j]
		if res.ErrorCode != sluicev1.ErrorCode_NONE {
			tr.ErrorCode, tr.ErrorMessage = kafkaCode(res.ErrorCode), kmsg.StringPtr(res.ErrorMessage)
			continue
		}
		tr.NumPartitions, tr.ReplicationFactor = res.NumPartitions, int16(res.ReplicationFactor)
		if t := c.s.cfg.Metadata.Image().Topics[res.Name]; t != nil {
			tr.TopicID = topicID(t)
		}
		for k, v := range res.Configs {
			rc := kmsg.NewCreateTopicsResponseTopicConfig()
			rc.Name, rc.Value, rc.Source = k, kmsg.StringPtr(v), 5 // DEFAULT_CONFIG: what the topic has
			tr.Configs = append(tr.Configs, rc)
		}
		if !req.ValidateOnly {
			c.s.log.Info("topic created", "topic", res.Name, "partitions", res.NumPartitions, "replication_factor", res.ReplicationFactor, "by", c.caller.Principal.String())
		}
	}
	return resp
}

// deleteTopics serves DeleteTopics (by name; v6's topic ids resolved
// from the metadata): DELETE on each topic, internal topics refused,
// the rest forwarded to the controller quorum.
func deleteTopics(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	names := req.TopicNames
	if r.version >= 6 {
		names = names[:0:0]
		var ids topicNames
		im := c.s.cfg.Metadata.Image()
		for _, t := range req.Topics {
			switch {
			case t.Topic != nil:
				names = append(names, *t.Topic)
			default:
				names = append(names, ids.name(im, t.TopicID))
			}
		}
	}
	resp.Topics = make([]kmsg.DeleteTopicsResponseTopic, len(names))
	fwd := &sluicev1.DeleteTopicsRequest{TimeoutMs: req.TimeoutMillis}
	var fwdAt []int
	for i, name := range names {
		tr := &resp.Topics[i]
		*tr = kmsg.NewDeleteTopicsResponseTopic()
		tr.Topic = kmsg.StringPtr(name)
		switch {
		case name == "":
			tr.Topic, tr.ErrorCode = nil, codeUnknownTopicID
			if r.version >= 6 {
				tr.TopicID = req.Topics[i].TopicID
			}
			continue
		case !c.allowed(c.ctx, auth.OpDelete, auth.Topic(name)):
			tr.ErrorCode, tr.ErrorMessage = c.denied(auth.OpDelete, auth.Topic(name))
			continue
		case cluster.IsInternalTopic(name):
			err := errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic %q is internal and cannot be deleted", name)
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		if t := c.s.cfg.Metadata.Image().Topics[name]; t != nil {
			tr.TopicID = topicID(t)
		}
		fwd.Names = append(fwd.Names, name)
		fwdAt = append(fwdAt, i)
	}
	if len(fwd.Names) == 0 {
		return resp
	}
	ctx, cancel := context.WithTimeout(c.ctx, adminTimeout(req.TimeoutMillis))
	defer cancel()
	var out *internalv1.ControllerDeleteTopicsResponse
	err := c.s.cfg.Controllers.Call(ctx, adminTimeout(req.TimeoutMillis), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.DeleteTopics(ctx, fwd)
		return err
	})
	if err == nil && len(out.Response.Topics) != len(fwd.Names) {
		err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Response.Topics), len(fwd.Names))
	}
	if err == nil {
		if werr := c.s.cfg.Metadata.WaitForOffset(ctx, out.MetadataOffset); werr != nil {
			err = errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "topics were deleted but broker %d has not seen it yet: %v", c.s.cfg.NodeID, werr)
		}
	}
	for j, i := range fwdAt {
		tr := &resp.Topics[i]
		if err != nil {
			tr.ErrorCode, tr.ErrorMessage = errCode(err), errMessage(err)
			continue
		}
		if res := out.Response.Topics[j]; res.ErrorCode != sluicev1.ErrorCode_NONE {
			tr.ErrorCode, tr.ErrorMessage = kafkaCode(res.ErrorCode), kmsg.StringPtr(res.ErrorMessage)
		}
	}
	return resp
}

// initProducerIDWait bounds how long InitProducerId waits for a block of
// producer ids.
const initProducerIDWait = 10 * time.Second

// initProducerID serves InitProducerId for idempotent producers: a new
// producer id at epoch 0 from this broker's block (an epoch bump request,
// KIP-360, of an idempotent producer gets a new id, as Kafka's broker
// answers it). Authorization: IDEMPOTENT_WRITE on the cluster, or WRITE
// on any topic (Kafka 3+). With a transactional id, the transaction
// coordinator's answer (initTransactional).
func initProducerID(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.InitProducerIDRequest)
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		return c.initTransactional(req, resp)
	}
	if !c.s.cfg.Gate.AllowedAny(c.ctx, c.caller.Principal, c.host, auth.OpWrite, auth.ResourceTopic) &&
		!c.allowed(c.ctx, auth.OpIdempotentWrite, auth.Cluster) {
		resp.ErrorCode, _ = c.denied(auth.OpIdempotentWrite, auth.Cluster)
		return answered(resp)
	}
	return func() kmsg.Response {
		ctx, cancel := context.WithTimeout(c.ctx, initProducerIDWait)
		defer cancel()
		id, err := c.s.cfg.ProducerIDs.Next(ctx)
		if err != nil {
			code := errs.Code(err)
			if code == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
				code = sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS
			}
			resp.ErrorCode = kafkaCode(code)
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch = id, 0
		return resp
	}
}
