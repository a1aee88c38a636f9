package kafka

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// metadata answers Metadata: the brokers that have a Kafka listener, and
// the topics asked for (all when the list is null) that the caller may
// DESCRIBE — an unauthorized topic named in the request is answered
// TOPIC_AUTHORIZATION_FAILED, one in a listing is left out, so topics the
// caller may not see are not revealed to exist. Topics are not created
// by Metadata (auto-creation is off, as Kafka's default in KRaft
// clusters: allow.auto.create.topics answers UNKNOWN_TOPIC_OR_PARTITION).
func metadata(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)
	s := c.s
	im := s.cfg.Metadata.Image()
	resp.ClusterID = &im.ClusterID
	// Sluice's brokers forward admin requests to the controller quorum
	// themselves: any broker serves as the clients' "controller".
	resp.ControllerID = s.cfg.NodeID
	resp.Brokers = brokers(im)
	loadErr := s.leaders.MetadataLoaded()
	answer := func(t *controller.Topic) kmsg.MetadataResponseTopic {
		return topicMetadata(im, t)
	}
	if req.Topics == nil || (r.version == 0 && len(req.Topics) == 0) {
		if loadErr != nil {
			// An empty image must not be taken for "no topics": no topics
			// listed, and the client asks again.
			return resp
		}
		for _, name := range im.TopicNames() {
			if !c.allowedQuiet(c.ctx, auth.OpDescribe, auth.Topic(name)) {
				continue
			}
			resp.Topics = append(resp.Topics, answer(im.Topics[name]))
		}
		return resp
	}
	var names topicNames
	for _, rt := range req.Topics {
		var name string
		if rt.Topic != nil {
			name = *rt.Topic
		} else {
			name = names.name(im, rt.TopicID)
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.TopicID = kmsg.StringPtr(name), rt.TopicID
		switch {
		case name == "":
			mt.ErrorCode = codeUnknownTopicID
			mt.Topic = nil
		case !c.allowed(c.ctx, auth.OpDescribe, auth.Topic(name)):
			mt.ErrorCode, _ = c.denied(auth.OpDescribe, auth.Topic(name))
		case loadErr != nil:
			mt.ErrorCode = errCode(loadErr)
		case im.Topics[name] == nil:
			mt.ErrorCode = codeUnknownTopicOrPartition
		default:
			mt = answer(im.Topics[name])
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// brokers is Metadata's broker list: the live brokers with a Kafka
// listener.
func brokers(im *controller.Image) []kmsg.MetadataResponseBroker {
	var out []kmsg.MetadataResponseBroker
	for _, id := range im.LiveBrokers() {
		b := im.Brokers[id]
		host, port, ok := splitAddress(brokerAddress(b))
		if !ok {
			continue
		}
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = b.ID, host, port
		if b.Rack != "" {
			mb.Rack = kmsg.StringPtr(b.Rack)
		}
		out = append(out, mb)
	}
	return out
}

// topicMetadata is t's entry in a Metadata answer.
func topicMetadata(im *controller.Image, t *controller.Topic) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	mt.Topic, mt.TopicID, mt.IsInternal = kmsg.StringPtr(t.Name), topicID(t), cluster.IsInternalTopic(t.Name)
	mt.AuthorizedOperations = -2147483648 // not asked for or not computed: Kafka's "omitted"
	mt.Partitions = make([]kmsg.MetadataResponseTopicPartition, 0, len(t.Partitions))
	for i, p := range t.Partitions {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition, mp.Leader, mp.LeaderEpoch = int32(i), p.Leader, p.LeaderEpoch
		mp.Replicas, mp.ISR = slices.Clone(p.Replicas), slices.Clone(p.ISR)
		for _, id := range p.Replicas {
			if !im.ReplicaLive(t.Name, int32(i), id) {
				mp.OfflineReplicas = append(mp.OfflineReplicas, id)
			}
		}
		if p.Leader == controller.NoLeader {
			mp.Leader = -1
			mp.ErrorCode = errCode(cluster.NoLeaderError(im, t.Name, int32(i)))
		} else if b := im.Brokers[p.Leader]; b == nil || brokerAddress(b) == "" {
			// The leader has no Kafka listener: a client could not reach
			// it.
			mp.ErrorCode = kafkaCode(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE)
		}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}

// describeCluster serves DescribeCluster (KIP-700): the cluster id, a
// broker to send admin requests to (any broker forwards them), and the
// brokers with a Kafka listener. Endpoint type 2 (controllers) is
// refused: Sluice's controllers are not reachable over Kafka's protocol.
func describeCluster(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	resp.ClusterAuthorizedOperations = -2147483648
	if r.version >= 1 && req.EndpointType != 1 {
		resp.ErrorCode = codeUnsupportedEndpointType
		resp.ErrorMessage = kmsg.StringPtr("only broker endpoints (type 1) are served")
		return resp
	}
	im := c.s.cfg.Metadata.Image()
	resp.ClusterID, resp.ControllerID, resp.EndpointType = im.ClusterID, c.s.cfg.NodeID, 1
	for _, b := range brokers(im) {
		resp.Brokers = append(resp.Brokers, kmsg.DescribeClusterResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
	}
	return resp
}
