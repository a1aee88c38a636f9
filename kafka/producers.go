package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// describeProducers serves DescribeProducers (KIP-664): per partition
// this broker leads, the producer state it holds
// (cluster.Replica.ProducerStates, as the gRPC door answers it); per
// partition it does not, why (NOT_LEADER_OR_FOLLOWER,
// UNKNOWN_TOPIC_OR_PARTITION, ...: clients send each partition to its
// leader). READ on the topic, as Kafka's; a topic refused answers
// TOPIC_AUTHORIZATION_FAILED in each of its partitions.
func describeProducers(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	now := c.s.cfg.Now()
	resp.Topics = make([]kmsg.DescribeProducersResponseTopic, len(req.Topics))
	for i, rt := range req.Topics {
		tr := &resp.Topics[i]
		*tr = kmsg.NewDescribeProducersResponseTopic()
		tr.Topic = rt.Topic
		tr.Partitions = make([]kmsg.DescribeProducersResponseTopicPartition, len(rt.Partitions))
		var deniedCode int16
		var deniedMsg *string
		if !c.allowed(c.ctx, auth.OpRead, auth.Topic(rt.Topic)) {
			deniedCode, deniedMsg = c.denied(auth.OpRead, auth.Topic(rt.Topic))
		}
		for j, part := range rt.Partitions {
			pr := &tr.Partitions[j]
			*pr = kmsg.NewDescribeProducersResponseTopicPartition()
			pr.Partition = part
			if deniedCode != 0 {
				pr.ErrorCode, pr.ErrorMessage = deniedCode, deniedMsg
				continue
			}
			p, err := c.s.leaders.Partition(rt.Topic, part)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = errCode(err), errMessage(err)
				continue
			}
			for _, e := range p.ProducerStates(now) {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence, ap.LastTimestamp = e.ProducerID, int32(e.ProducerEpoch), e.LastSequence, e.LastTimestamp
				ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = e.CoordinatorEpoch, e.TxnStartOffset
				pr.ActiveProducers = append(pr.ActiveProducers, ap)
			}
		}
	}
	return resp
}
