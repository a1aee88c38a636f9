package api

import (
	"context"
	"strconv"

	"github.com/sluice-io/sluice/cluster"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Metadata describes the brokers and the requested topics (all when none
// are named). Unknown topics answer UNKNOWN_TOPIC_OR_PARTITION; topics are
// never created by Metadata.
func (s *Server) Metadata(ctx context.Context, req *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	cat := s.replicas.Catalog()
	resp := &sluicev1.MetadataResponse{
		ClusterId:    cat.ClusterID(),
		ControllerId: s.self.NodeID,
		Brokers:      []*sluicev1.BrokerMetadata{{NodeId: s.self.NodeID, Address: s.self.Address, Rack: s.self.Rack}},
	}
	var topics []cluster.Topic
	if len(req.Topics) == 0 {
		topics = cat.Topics()
	} else {
		for _, name := range req.Topics {
			t, ok := cat.Topic(name)
			if !ok {
				resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: name, ErrorCode: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, ErrorMessage: "topic " + strconv.Quote(name) + " does not exist"})
				continue
			}
			topics = append(topics, t)
		}
	}
	for _, t := range topics {
		resp.Topics = append(resp.Topics, s.topicMetadata(t))
	}
	return resp, nil
}

func (s *Server) topicMetadata(t cluster.Topic) *sluicev1.TopicMetadata {
	tm := &sluicev1.TopicMetadata{Name: t.Name}
	if tc, err := cluster.ParseTopicConfig(t.Configs, t.ReplicationFactor); err == nil {
		tm.Configs = tc.Map()
	}
	for p := int32(0); p < t.Partitions; p++ {
		pm := &sluicev1.PartitionMetadata{Partition: p, LeaderId: s.self.NodeID, Replicas: []int32{s.self.NodeID}, Isr: []int32{s.self.NodeID}}
		if part, err := s.replicas.Partition(t.Name, p); err == nil {
			pm.LeaderEpoch = part.LeaderEpoch
		} else {
			pm.ErrorCode, pm.LeaderId, pm.Isr, pm.OfflineReplicas = sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, -1, nil, []int32{s.self.NodeID}
		}
		tm.Partitions = append(tm.Partitions, pm)
	}
	return tm
}

// CreateTopics creates each topic independently; each gets its own result.
func (s *Server) CreateTopics(ctx context.Context, req *sluicev1.CreateTopicsRequest) (*sluicev1.CreateTopicsResponse, error) {
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	resp := &sluicev1.CreateTopicsResponse{}
	seen := map[string]int{}
	for _, ct := range req.Topics {
		seen[ct.Name]++
	}
	for _, ct := range req.Topics {
		r := &sluicev1.CreatableTopicResult{Name: ct.Name}
		resp.Topics = append(resp.Topics, r)
		if seen[ct.Name] > 1 {
			r.ErrorCode, r.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "topic listed more than once in the request"
			continue
		}
		t, tc, err := s.replicas.CreateTopic(ct.Name, ct.NumPartitions, ct.ReplicationFactor, ct.Configs, req.ValidateOnly, s.now())
		if err != nil {
			r.ErrorCode, r.ErrorMessage = partitionError(err)
			continue
		}
		r.NumPartitions, r.ReplicationFactor, r.Configs = t.Partitions, t.ReplicationFactor, tc.Map()
		if !req.ValidateOnly {
			s.log.Info("topic created", "topic", t.Name, "partitions", t.Partitions, "replication_factor", t.ReplicationFactor)
		}
	}
	return resp, nil
}

// DeleteTopics deletes each named topic and its data.
func (s *Server) DeleteTopics(ctx context.Context, req *sluicev1.DeleteTopicsRequest) (*sluicev1.DeleteTopicsResponse, error) {
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	resp := &sluicev1.DeleteTopicsResponse{}
	for _, name := range req.Names {
		r := &sluicev1.DeletableTopicResult{Name: name}
		resp.Topics = append(resp.Topics, r)
		if err := s.replicas.DeleteTopic(name); err != nil {
			r.ErrorCode, r.ErrorMessage = partitionError(err)
			continue
		}
		s.log.Info("topic deleted", "topic", name)
	}
	return resp, nil
}

// ListOffsets resolves an offset spec per partition.
func (s *Server) ListOffsets(ctx context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	resp := &sluicev1.ListOffsetsResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.ListOffsetsTopicResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		for _, lp := range t.Partitions {
			pr := &sluicev1.ListOffsetsPartitionResponse{Partition: lp.Partition, Offset: -1, Timestamp: -1}
			tr.Partitions = append(tr.Partitions, pr)
			part, err := s.replicas.Partition(t.Name, lp.Partition)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				continue
			}
			pr.LeaderEpoch = part.LeaderEpoch
			switch lp.Spec {
			case sluicev1.OffsetSpec_OFFSET_SPEC_LATEST:
				pr.Offset = part.Log.EndOffset()
			case sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
				pr.Offset = part.Log.StartOffset()
			case sluicev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP:
				pr.Offset, pr.Timestamp = part.Log.MaxTimestampOffset()
			case sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
				if lp.Timestamp < 0 {
					pr.ErrorCode, pr.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "timestamp must be >= 0"
					continue
				}
				off, ts, found, err := part.Log.OffsetForTimestamp(lp.Timestamp)
				if err != nil {
					pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				} else if found {
					pr.Offset, pr.Timestamp = off, ts
				}
			default:
				pr.ErrorCode, pr.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "spec must be LATEST, EARLIEST, TIMESTAMP or MAX_TIMESTAMP"
			}
		}
	}
	return resp, nil
}
