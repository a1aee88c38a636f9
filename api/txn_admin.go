package api

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// defaultAbortTimeout bounds AbortTransaction when timeout_ms is 0.
const defaultAbortTimeout = 30 * time.Second

// DescribeProducers implements the Admin service (KIP-664): per partition
// this broker leads, its producer state (cluster.Replica.ProducerStates); per
// partition it does not, the leader error (NOT_LEADER_OR_FOLLOWER,
// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE).
//
// Authorization (auth.Operations, as Kafka's DescribeProducers): READ on
// each topic; a topic refused answers TOPIC_AUTHORIZATION_FAILED in each
// of its partitions, whether or not it exists, the others are served.
func (s *Server) DescribeProducers(ctx context.Context, req *sluicev1.DescribeProducersRequest) (*sluicev1.DescribeProducersResponse, error) {
	now := s.now()
	resp := &sluicev1.DescribeProducersResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.DescribeProducersTopicResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		if !s.authz.Allowed(ctx, auth.OpRead, auth.Topic(t.Name)) {
			code, msg := ItemError(ctx, auth.OpRead, auth.Topic(t.Name))
			for _, part := range t.Partitions {
				tr.Partitions = append(tr.Partitions, &sluicev1.DescribeProducersPartition{Partition: part, ErrorCode: code, ErrorMessage: msg})
			}
			continue
		}
		for _, part := range t.Partitions {
			pr := &sluicev1.DescribeProducersPartition{Partition: part}
			tr.Partitions = append(tr.Partitions, pr)
			p, err := s.leaderPartition(t.Name, part)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				continue
			}
			for _, e := range p.ProducerStates(now) {
				pr.ActiveProducers = append(pr.ActiveProducers, &sluicev1.ProducerState{ProducerId: e.ProducerID, ProducerEpoch: int32(e.ProducerEpoch),
					LastSequence: e.LastSequence, LastTimestampMs: e.LastTimestamp, CoordinatorEpoch: e.CoordinatorEpoch,
					CurrentTxnStartOffset: e.TxnStartOffset, CurrentTxnStartTimeMs: e.TxnStartTime, CurrentTxnDurationMs: e.TxnDuration, LastOffset: e.LastOffset})
			}
		}
	}
	return resp, nil
}

// AbortTransaction implements the Admin service: the ABORT marker of a
// hanging transaction, written by this broker as the partition's leader
// (cluster.ReplicaManager.AbortTransaction, which holds the rules).
// Failures are answered in error_code, but for authorization: it needs
// CLUSTER_ACTION on the cluster, as Kafka's WriteTxnMarkers, which its
// abortTransaction sends (else PERMISSION_DENIED, nothing written).
func (s *Server) AbortTransaction(ctx context.Context, req *sluicev1.AbortTransactionRequest) (*sluicev1.AbortTransactionResponse, error) {
	if err := s.authz.Require(ctx, auth.OpClusterAction, auth.Cluster); err != nil {
		return nil, err
	}
	resp := &sluicev1.AbortTransactionResponse{MarkerOffset: -1}
	epoch, err := producerEpoch(req.ProducerEpoch)
	if err == nil && (req.ProducerId <= 0 || epoch < 0) {
		err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "producer id %d and epoch %d must be set", req.ProducerId, req.ProducerEpoch)
	}
	if err == nil && req.TimeoutMs < 0 {
		err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = partitionError(err)
		return resp, nil
	}
	if _, err := s.leaderPartition(req.Topic, req.Partition); err != nil {
		resp.ErrorCode, resp.ErrorMessage = partitionError(err)
		return resp, nil
	}
	timeout := defaultAbortTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	off, err := s.replicas.AbortTransaction(ctx, cluster.TopicPartition{Topic: req.Topic, Partition: req.Partition},
		cluster.HangingAbort{ProducerID: req.ProducerId, ProducerEpoch: epoch, CoordinatorEpoch: req.CoordinatorEpoch})
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = partitionError(err)
		return resp, nil
	}
	s.log.Warn("transaction aborted by an operator", "topic", req.Topic, "partition", req.Partition,
		"producer_id", req.ProducerId, "producer_epoch", req.ProducerEpoch, "coordinator_epoch", req.CoordinatorEpoch, "marker_offset", off)
	resp.MarkerOffset = off
	return resp, nil
}
