package api

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ReplicaService serves sluice.internal.v1.Replica: followers fetching from
// this broker's leader partitions. The replication rules are in
// cluster/replication; this translates and long-polls.
type ReplicaService struct {
	internalv1.UnimplementedReplicaServer

	replicas *cluster.ReplicaManager
	cache    *cluster.MetadataCache
	draining <-chan struct{}
}

// NewReplicaService returns the service. Closing draining (nil: never)
// ends the open ReplicaFetchStreams with UNAVAILABLE: the node is stopping.
func NewReplicaService(replicas *cluster.ReplicaManager, cache *cluster.MetadataCache, draining <-chan struct{}) *ReplicaService {
	return &ReplicaService{replicas: replicas, cache: cache, draining: draining}
}

// ReplicaFetch implements the Replica service. Each partition's fetch
// offset is the follower's log end offset: it is recorded first (moving
// the high watermark and perhaps the ISR), then the leader's batches from
// there up to its log end are returned. With nothing to return it waits up
// to max_wait_ms for an append or a high-watermark move.
func (s *ReplicaService) ReplicaFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest) (*internalv1.ReplicaFetchResponse, error) {
	return s.replicaFetch(ctx, req)
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
			resp, err := s.replicaFetch(ctx, req)
			if err != nil {
				return err
			}
			if err := out.send(resp); err != nil {
				return err
			}
		}
	})
}

func (s *ReplicaService) replicaFetch(ctx context.Context, req *internalv1.ReplicaFetchRequest) (*internalv1.ReplicaFetchResponse, error) {
	if b := s.cache.Image().Brokers[req.ReplicaId]; b == nil || b.Epoch != req.BrokerEpoch {
		return nil, errs.Status(errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "replica %d broker epoch %d is not current", req.ReplicaId, req.BrokerEpoch), nil)
	}
	wait := min(time.Duration(req.MaxWaitMs)*time.Millisecond, MaxFetchWait)
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 || maxBytes > MaxMessageSize-(1<<20) {
		maxBytes = MaxMessageSize - (1 << 20)
	}
	now := time.Now()
	resp := &internalv1.ReplicaFetchResponse{Partitions: make([]*internalv1.ReplicaFetchPartitionData, len(req.Partitions))}
	parts := make([]*cluster.Replica, len(req.Partitions))
	for i, fp := range req.Partitions {
		out := &internalv1.ReplicaFetchPartitionData{Topic: fp.Topic, Partition: fp.Partition, HighWatermark: -1, LogStartOffset: -1, LogEndOffset: -1}
		resp.Partitions[i] = out
		p, err := s.replicas.Replica(fp.Topic, fp.Partition)
		if err == nil {
			var hw int64
			hw, err = p.FollowerFetched(req.ReplicaId, fp.CurrentLeaderEpoch, fp.FetchOffset, now)
			out.HighWatermark = hw
		}
		if err != nil {
			out.ErrorCode, out.ErrorMessage = partitionError(err)
			if errs.Code(err) == sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE {
				out.LogStartOffset, out.LogEndOffset = p.Log.StartOffset(), p.Log.EndOffset()
			}
			continue
		}
		parts[i] = p
	}
	deadline := now.Add(wait)
	for {
		total := 0
		var changed []<-chan struct{}
		for i, p := range parts {
			if p == nil {
				continue
			}
			out, fp := resp.Partitions[i], req.Partitions[i]
			changed = append(changed, p.Log.Changed())
			out.LogStartOffset, out.LogEndOffset = p.Log.StartOffset(), p.Log.EndOffset()
			if !p.IsLeader(fp.CurrentLeaderEpoch) {
				out.ErrorCode, out.ErrorMessage = sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership moved while the fetch waited"
				parts[i] = nil
				continue
			}
			out.HighWatermark = p.Log.HighWatermark()
			limit := int(fp.PartitionMaxBytes)
			if limit <= 0 {
				limit = DefaultPartitionMaxBytes
			}
			limit = min(limit, maxBytes-total)
			if limit <= 0 {
				continue
			}
			res, err := p.Log.Read(fp.FetchOffset, limit, p.Log.EndOffset())
			if err != nil {
				out.ErrorCode, out.ErrorMessage = partitionError(err)
				parts[i] = nil
				continue
			}
			out.Batches = res.Batches
			total += batchBytes(res)
		}
		left := time.Until(deadline)
		if total >= max(1, int(req.MinBytes)) || left <= 0 || len(changed) == 0 {
			return resp, nil
		}
		if !waitAny(ctx, changed, left) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
}

// OffsetForLeaderEpoch implements the Replica service.
func (s *ReplicaService) OffsetForLeaderEpoch(ctx context.Context, req *internalv1.OffsetForLeaderEpochRequest) (*internalv1.OffsetForLeaderEpochResponse, error) {
	resp := &internalv1.OffsetForLeaderEpochResponse{}
	for _, q := range req.Partitions {
		out := &internalv1.EpochResult{Topic: q.Topic, Partition: q.Partition, LeaderEpoch: -1, EndOffset: -1, LogStartOffset: -1}
		resp.Partitions = append(resp.Partitions, out)
		p, err := s.replicas.Replica(q.Topic, q.Partition)
		if err == nil {
			out.LeaderEpoch, out.EndOffset, err = p.EndOffsetForEpoch(q.CurrentLeaderEpoch, q.LeaderEpoch)
			out.LogStartOffset = p.Log.StartOffset()
		}
		if err != nil {
			out.ErrorCode, out.ErrorMessage = partitionError(err)
		}
	}
	return resp, nil
}
