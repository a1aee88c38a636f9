package api

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/codec"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Fetch returns whole batches from each requested partition, bounded by
// partition_max_bytes and max_bytes (cut so that the answer fits in
// MaxMessageSize: batchBudget), below the high watermark. When fewer
// than min_bytes are available it waits up to max_wait_ms for appends.
// The batches are read from the segments into pooled buffers and the
// answer references them without decoding or copying; gRPC gives the
// buffers back once it has written the answer (codec.OutgoingFetchResponse).
// The rules are cluster.ReplicaManager.Fetch's; this validates and
// translates.
//
// Authorization (auth.Operations, as Kafka's Fetch): READ on each topic,
// once per topic. A topic refused answers TOPIC_AUTHORIZATION_FAILED in
// each of its partitions, with no data and whether or not it exists; it
// is not read, and does not count towards min_bytes or the wait.
func (s *Server) Fetch(ctx context.Context, req *sluicev1.FetchRequest) (any, error) {
	rt := s.quotas.startRequest()
	bufs := &codec.BatchBuffers{}
	resp, err := s.fetch(ctx, req, bufs.Alloc, &rt)
	if err != nil {
		bufs.Free()
		return nil, err
	}
	// Over a consumer_byte_rate or request_percentage quota, the data is
	// answered all the same, held for the throttle time (throttle.go).
	// The request time counted is the handler's but the long poll.
	throttle := s.quotas.charge(ctx, auth.QuotaFetch, s.quotas.fetchBytes(resp), &rt)
	resp.ThrottleTimeMs = throttleMs(throttle)
	s.hold(ctx, throttle)
	return &codec.OutgoingFetchResponse{FetchResponseView: resp, Buffers: bufs}, nil
}

// fetch is Fetch with the read buffers from alloc; the long poll is taken
// out of rt's handling time.
func (s *Server) fetch(ctx context.Context, req *sluicev1.FetchRequest, alloc func(int) []byte, rt *requestTimer) (*internalv1.FetchResponseView, error) {
	if req.MaxWaitMs < 0 || req.MinBytes < 0 || req.MaxBytes < 0 {
		return nil, invalidRequest("max_wait_ms, min_bytes and max_bytes must be >= 0 (got %d, %d, %d)", req.MaxWaitMs, req.MinBytes, req.MaxBytes)
	}
	isolation := cluster.FetchTxnCommitted
	switch req.IsolationLevel {
	case sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
	case sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED:
		isolation = cluster.FetchHighWatermark
	default:
		return nil, invalidRequest("unknown isolation_level %d", req.IsolationLevel)
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes == 0 {
		maxBytes = DefaultFetchMaxBytes
	}
	// The answer must fit in what gRPC sends: its partition entries
	// first, the batches in what is left (limits.go).
	overhead := 0
	for _, t := range req.Topics {
		overhead += 16 + len(t.Name) + len(t.Partitions)*answerPartitionOverhead
	}
	maxBytes = min(maxBytes, batchBudget(overhead))
	params := cluster.FetchParams{ReplicaID: cluster.NoReplica, Isolation: isolation,
		MaxWait: min(time.Duration(req.MaxWaitMs)*time.Millisecond, MaxFetchWait), MinBytes: int(req.MinBytes), MaxBytes: maxBytes, Alloc: alloc}
	// denied[j] is set when req.Topics[j] may not be read (nil when
	// every topic may: no allocation then).
	var denied []bool
	for j, t := range req.Topics {
		if !s.authz.Allowed(ctx, auth.OpRead, auth.Topic(t.Name)) {
			if denied == nil {
				denied = make([]bool, len(req.Topics))
			}
			denied[j] = true
			continue
		}
		for _, fp := range t.Partitions {
			limit := int(fp.PartitionMaxBytes)
			if limit == 0 {
				limit = DefaultPartitionMaxBytes
			}
			params.Partitions = append(params.Partitions, cluster.FetchPartition{TopicPartition: cluster.TopicPartition{Topic: t.Name, Partition: fp.Partition},
				FetchOffset: fp.FetchOffset, CurrentLeaderEpoch: fp.CurrentLeaderEpoch, PartitionMaxBytes: limit})
		}
	}
	res, err := s.replicas.Fetch(ctx, params)
	if err != nil {
		return nil, err
	}
	rt.exclude(res.Waited)
	resp := &internalv1.FetchResponseView{Topics: make([]*internalv1.FetchableTopicResponseView, 0, len(req.Topics))}
	i := 0
	for j, t := range req.Topics {
		tr := &internalv1.FetchableTopicResponseView{Name: t.Name, Partitions: make([]*internalv1.PartitionDataView, 0, len(t.Partitions))}
		resp.Topics = append(resp.Topics, tr)
		if denied != nil && denied[j] {
			code, msg := ItemError(ctx, auth.OpRead, auth.Topic(t.Name))
			for _, fp := range t.Partitions {
				tr.Partitions = append(tr.Partitions, &internalv1.PartitionDataView{Partition: fp.Partition, HighWatermark: -1, LastStableOffset: -1,
					LogStartOffset: -1, NextFetchOffset: fp.FetchOffset, ErrorCode: code, ErrorMessage: msg})
			}
			continue
		}
		for _, fp := range t.Partitions {
			r := res.Partitions[i]
			i++
			pd := &internalv1.PartitionDataView{Partition: fp.Partition, HighWatermark: r.HighWatermark, LastStableOffset: r.LastStableOffset,
				LogStartOffset: r.LogStartOffset, NextFetchOffset: r.NextFetchOffset, Batches: r.Batches}
			if err := r.Err; err != nil {
				if errors.Is(err, cluster.ErrNotLeader) {
					err = s.notLeaderError(t.Name, fp.Partition)
				}
				pd.ErrorCode, pd.ErrorMessage = partitionError(err)
				pd.ErrorMessage = cutMessage(pd.ErrorMessage)
				pd.CurrentLeader = s.leaderHint(t.Name, fp.Partition, pd.ErrorCode)
			}
			tr.Partitions = append(tr.Partitions, pd)
		}
	}
	return resp, nil
}
