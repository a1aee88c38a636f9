package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// offsetForLeaderEpoch serves OffsetForLeaderEpoch (v2+) for consumers
// detecting truncation (KIP-320): where an epoch ends in the leader's
// log (the log end offset for the current epoch), after fencing its
// current leader epoch, as Kafka answers (UnifiedLog.endOffsetForEpoch).
// Not bounded by this leader's high watermark: a consumer may have read
// up to the previous leader's, which a new leader's high watermark
// reaches only once its followers fetch again; an end offset below the
// consumer's position makes the client report data loss and read again
// what it had read. DESCRIBE on the topic.
// Replicas use the internal listener: a replica id other than -1 (a
// consumer) or -2 (a debugging tool) is refused.
func offsetForLeaderEpoch(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.OffsetForLeaderEpochRequest)
	resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	resp.Topics = make([]kmsg.OffsetForLeaderEpochResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		tr := &resp.Topics[i]
		tr.Topic = rt.Topic
		tr.Partitions = make([]kmsg.OffsetForLeaderEpochResponseTopicPartition, len(rt.Partitions))
		var code int16
		switch {
		case r.version >= 3 && req.ReplicaID >= 0:
			code = kafkaCode(sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED)
		case !c.allowed(c.ctx, auth.OpDescribe, auth.Topic(rt.Topic)):
			code, _ = c.denied(auth.OpDescribe, auth.Topic(rt.Topic))
		}
		for j, p := range rt.Partitions {
			pr := &tr.Partitions[j]
			*pr = kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			pr.Partition, pr.LeaderEpoch, pr.EndOffset = p.Partition, -1, -1
			if code != 0 {
				pr.ErrorCode = code
				continue
			}
			_, err := c.s.leaders.Partition(rt.Topic, p.Partition)
			if err == nil {
				var eo cluster.EpochEndOffset
				eo, err = c.s.cfg.Replicas.OffsetForLeaderEpoch(cluster.TopicPartition{Topic: rt.Topic, Partition: p.Partition}, p.CurrentLeaderEpoch, p.LeaderEpoch)
				if err == nil {
					pr.LeaderEpoch, pr.EndOffset = eo.LeaderEpoch, eo.EndOffset
				}
			}
			if err != nil {
				if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
					c.s.log.Error("offset for leader epoch", "topic", rt.Topic, "partition", p.Partition, "err", err)
				}
				pr.ErrorCode = errCode(err)
			}
		}
	}
	return resp
}
