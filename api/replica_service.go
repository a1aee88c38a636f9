package api

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ReplicaService serves sluice.internal.v1.Replica: followers fetching from
// this broker's leader partitions. The rules (broker-epoch and
// leader-epoch fencing, follower accounting, long poll) are
// cluster.ReplicaManager's; this translates.
type ReplicaService struct {
	internalv1.UnimplementedReplicaServer

	replicas *cluster.ReplicaManager
	draining <-chan struct{}
}

// NewReplicaService returns the service. Closing draining (nil: never)
// ends the open ReplicaFetchStreams with UNAVAILABLE: the node is stopping.
// cache is not used: followers' broker epochs are checked by the replica
// manager against its ReplicationConfig.Metadata (the same cache in a
// node); the parameter goes when the node's wiring drops it.
func NewReplicaService(replicas *cluster.ReplicaManager, cache *cluster.MetadataCache, draining <-chan struct{}) *ReplicaService {
	_ = cache
	return &ReplicaService{replicas: replicas, draining: draining}
}

// ReplicaFetch implements the Replica service. Each partition's fetch
// offset is the follower's log end offset: it is recorded first (moving
// the high watermark and perhaps the ISR), then the leader's batches from
// there up to its log end are returned. With nothing to return it waits up
// to max_wait_ms for an append or a high-watermark move.
func (s *ReplicaService) ReplicaFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest) (*internalv1.ReplicaFetchResponse, error) {
	return s.replicaFetch(ctx, req, nil)
}

// ReplicaFetchStream implements the Replica service: ReplicaFetch's rules
// for each request on the stream, answered in order. An error that would
// fail a ReplicaFetch call (a stale broker epoch) ends the stream with
// that status; the follower opens a new one. When the node starts
// shutting down the stream ends with UNAVAILABLE: a follower keeps its
// stream open, and grpc's graceful stop would wait for it (serveStream).
func (s *ReplicaService) ReplicaFetchStream(stream grpc.BidiStreamingServer[internalv1.ReplicaFetchRequest, internalv1.ReplicaFetchResponse]) error {
	return serveStream(stream, s.draining, func(ctx context.Context, out *streamSender) error {
		for {
			req, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			// The batches are read into pooled buffers, referenced (not
			// copied) by the encoded answer and given back once gRPC
			// has written it.
			bufs := &codec.BatchBuffers{}
			resp, err := s.replicaFetch(ctx, req, bufs.Alloc)
			if err != nil {
				bufs.Free()
				return err
			}
			err = out.send(&codec.OutgoingReplicaFetchResponse{ReplicaFetchResponse: resp, Buffers: bufs})
			bufs.Free()
			if err != nil {
				return err
			}
		}
	})
}

// alloc (nil: none) supplies the buffers the batches are read into
// (cluster.FetchParams.Alloc).
func (s *ReplicaService) replicaFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest, alloc func(int) []byte) (*internalv1.ReplicaFetchResponse, error) {
	// The answer must fit in what gRPC sends: its partition entries
	// (each naming its topic) first, the batches in what is left.
	overhead := 0
	for _, fp := range req.Partitions {
		overhead += len(fp.Topic) + answerPartitionOverhead
	}
	maxBytes := batchBudget(overhead)
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, int(req.MaxBytes))
	}
	params := cluster.FetchParams{ReplicaID: req.ReplicaId, BrokerEpoch: req.BrokerEpoch, Isolation: cluster.FetchLogEnd,
		MaxWait: min(time.Duration(req.MaxWaitMs)*time.Millisecond, MaxFetchWait), MinBytes: int(req.MinBytes), MaxBytes: maxBytes,
		Partitions: make([]cluster.FetchPartition, len(req.Partitions)), Alloc: alloc}
	for i, fp := range req.Partitions {
		limit := int(fp.PartitionMaxBytes)
		if limit <= 0 {
			limit = DefaultPartitionMaxBytes
		}
		params.Partitions[i] = cluster.FetchPartition{TopicPartition: cluster.TopicPartition{Topic: fp.Topic, Partition: fp.Partition},
			FetchOffset: fp.FetchOffset, CurrentLeaderEpoch: fp.CurrentLeaderEpoch, PartitionMaxBytes: limit}
	}
	if req.SessionEpoch != cluster.FetchSessionNone {
		return s.sessionFetch(ctx, req, params)
	}
	res, err := s.replicas.Fetch(ctx, params)
	if errs.Code(err) == sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		return nil, errs.Status(err, nil)
	}
	if err != nil {
		return nil, err
	}
	resp := &internalv1.ReplicaFetchResponse{Partitions: make([]*internalv1.ReplicaFetchPartitionData, len(req.Partitions))}
	for i, fp := range req.Partitions {
		resp.Partitions[i] = partitionData(fp.Topic, fp.Partition, res.Partitions[i])
	}
	return resp, nil
}

// sessionFetch serves a fetch in a fetch session (cluster.FetchInSession):
// a session that is gone or out of step is answered in the response
// (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), not as a
// failed call, so that a stream carries on.
func (s *ReplicaService) sessionFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest, params cluster.FetchParams) (*internalv1.ReplicaFetchResponse, error) {
	// The answer may hold any partition of the session, not only those
	// listed: its budget is the session's (the listed ones' is in params).
	sr := cluster.FetchSessionRequest{ID: req.SessionId, Epoch: req.SessionEpoch, AnswerBudget: func(partitions, nameBytes int) int {
		return batchBudget(nameBytes + partitions*answerPartitionOverhead)
	}}
	for _, f := range req.Forgotten {
		sr.Forgotten = append(sr.Forgotten, cluster.TopicPartition{Topic: f.Topic, Partition: f.Partition})
	}
	res, err := s.replicas.FetchInSession(ctx, params, sr)
	switch code := errs.Code(err); {
	case err == nil:
	case code == sluicev1.ErrorCode_STALE_BROKER_EPOCH:
		return nil, errs.Status(err, nil)
	case code == sluicev1.ErrorCode_FETCH_SESSION_ID_NOT_FOUND || code == sluicev1.ErrorCode_INVALID_FETCH_SESSION_EPOCH:
		return &internalv1.ReplicaFetchResponse{ErrorCode: code, ErrorMessage: cutMessage(err.Error())}, nil
	default:
		return nil, err
	}
	resp := &internalv1.ReplicaFetchResponse{SessionId: res.SessionID, Partitions: make([]*internalv1.ReplicaFetchPartitionData, len(res.Partitions))}
	for i, r := range res.Partitions {
		resp.Partitions[i] = partitionData(r.Topic, r.Partition, r.FetchPartitionResult)
	}
	return resp, nil
}

// partitionData is one partition's answer to a follower.
func partitionData(topic string, partition int32, r cluster.FetchPartitionResult) *internalv1.ReplicaFetchPartitionData {
	out := &internalv1.ReplicaFetchPartitionData{Topic: topic, Partition: partition, HighWatermark: r.HighWatermark,
		LogStartOffset: r.LogStartOffset, LogEndOffset: r.LogEndOffset, Batches: r.Batches}
	if r.Err != nil {
		out.ErrorCode, out.ErrorMessage = partitionError(r.Err)
		out.ErrorMessage = cutMessage(out.ErrorMessage)
	}
	return out
}

// OffsetForLeaderEpoch implements the Replica service.
func (s *ReplicaService) OffsetForLeaderEpoch(ctx context.Context, req *internalv1.OffsetForLeaderEpochRequest) (*internalv1.OffsetForLeaderEpochResponse, error) {
	resp := &internalv1.OffsetForLeaderEpochResponse{}
	for _, q := range req.Partitions {
		r, err := s.replicas.OffsetForLeaderEpoch(cluster.TopicPartition{Topic: q.Topic, Partition: q.Partition}, q.CurrentLeaderEpoch, q.LeaderEpoch)
		out := &internalv1.EpochResult{Topic: q.Topic, Partition: q.Partition, LeaderEpoch: r.LeaderEpoch, EndOffset: r.EndOffset, LogStartOffset: r.LogStartOffset}
		if err != nil {
			out.ErrorCode, out.ErrorMessage = partitionError(err)
		}
		resp.Partitions = append(resp.Partitions, out)
	}
	return resp, nil
}
