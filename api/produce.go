package api

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/codec"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Produce appends one batch per partition entry. Each partition succeeds or
// fails on its own; a failed partition stores nothing. ACKS_LEADER answers
// once the leader has appended; ACKS_ALL (the default) first refuses with
// NOT_ENOUGH_REPLICAS when the ISR is smaller than min.insync.replicas,
// then waits until the batch is below the high watermark (replicated to
// every in-sync replica) or the timeout passes (REQUEST_TIMED_OUT: the
// batch is in the leader's log and may still become committed); ACKS_NONE
// answers without offsets.
func (s *Server) Produce(ctx context.Context, req *internalv1.ProduceRequestView) (*sluicev1.ProduceResponse, error) {
	return s.produce(ctx, req, nil)
}

// produceAliased is Produce for a request whose batches alias the received
// gRPC buffer (codec.ProduceRequest): the buffer is released as soon as
// every batch has been appended (copied into its log), not after the
// acks=all wait.
func (s *Server) produceAliased(ctx context.Context, req *codec.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	defer req.Release() // on every path; a second Release is a no-op
	return s.produce(ctx, &req.ProduceRequestView, req.Release)
}

// produce is Produce; appended (if not nil) is called once the request's
// batches are no longer used.
func (s *Server) produce(ctx context.Context, req *internalv1.ProduceRequestView, appended func()) (*sluicev1.ProduceResponse, error) {
	pp, err := s.appendProduce(req)
	if appended != nil {
		appended()
	}
	if err != nil {
		return nil, err
	}
	pp.await(ctx)
	return pp.resp, nil
}

// pendingProduce is a produce request whose batches are appended: its
// answer, and what acks=all still waits for.
type pendingProduce struct {
	resp    *sluicev1.ProduceResponse
	waits   []pendingAck
	timeout time.Duration
}

// await waits until every batch acks=all waits for is committed, or the
// request's timeout passes (those batches then answer REQUEST_TIMED_OUT),
// or ctx ends.
func (pp *pendingProduce) await(ctx context.Context) {
	if len(pp.waits) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, pp.timeout)
	defer cancel()
	for _, w := range pp.waits {
		if err := w.part.WaitCommitted(wctx, w.last); err != nil {
			w.resp.ErrorCode, w.resp.ErrorMessage = partitionError(err)
			w.resp.CurrentLeader = w.hint(w.part.Topic, w.part.Partition, w.resp.ErrorCode)
		}
	}
}

// appendProduce checks req and appends its batches: Produce up to the
// acks=all wait. A request refused as a whole is a status error and
// nothing is appended. The batches are not used once it returns.
func (s *Server) appendProduce(req *internalv1.ProduceRequestView) (*pendingProduce, error) {
	switch req.Acks {
	case sluicev1.Acks_ACKS_UNSPECIFIED, sluicev1.Acks_ACKS_ALL, sluicev1.Acks_ACKS_LEADER, sluicev1.Acks_ACKS_NONE:
	default:
		return nil, requestError(invalidArgument, sluicev1.ErrorCode_INVALID_REQUIRED_ACKS, "acks value %d is not one of ACKS_ALL, ACKS_LEADER, ACKS_NONE", req.Acks)
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if req.TransactionalId != "" {
		return nil, requestError(failedPrecondition, sluicev1.ErrorCode_INVALID_TXN_STATE, "transactional produce is not supported yet")
	}
	now := s.now()
	var waits []pendingAck
	resp := &sluicev1.ProduceResponse{Topics: make([]*sluicev1.TopicProduceResponse, 0, len(req.Topics))}
	for _, t := range req.Topics {
		tr := &sluicev1.TopicProduceResponse{Name: t.Name, Partitions: make([]*sluicev1.PartitionProduceResponse, 0, len(t.Partitions))}
		seen := make(map[int32]bool, len(t.Partitions))
		for _, p := range t.Partitions {
			pr := &sluicev1.PartitionProduceResponse{Partition: p.Partition, BaseOffset: -1, LogAppendTimeMs: -1, LogStartOffset: -1}
			tr.Partitions = append(tr.Partitions, pr)
			if seen[p.Partition] {
				pr.ErrorCode, pr.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "partition listed twice in one request"
				continue
			}
			seen[p.Partition] = true
			part, err := s.leaderPartition(t.Name, p.Partition)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				pr.CurrentLeader = s.leaderHint(t.Name, p.Partition, pr.ErrorCode)
				continue
			}
			acksAll := req.Acks == sluicev1.Acks_ACKS_ALL || req.Acks == sluicev1.Acks_ACKS_UNSPECIFIED
			res, err := s.replicas.AppendTo(part, p.Batch, now, acksAll)
			if err == nil && acksAll {
				waits = append(waits, pendingAck{resp: pr, part: part, last: res.LastOffset, hint: s.leaderHint})
			}
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				pr.CurrentLeader = s.leaderHint(t.Name, p.Partition, pr.ErrorCode)
				if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
					s.log.Error("produce failed", "topic", t.Name, "partition", p.Partition, "err", err)
				}
				continue
			}
			if req.Acks != sluicev1.Acks_ACKS_NONE {
				pr.BaseOffset = res.BaseOffset
			}
			pr.LogStartOffset = part.LogStartOffset()
		}
		resp.Topics = append(resp.Topics, tr)
	}
	// acks=all: every appended batch must reach the high watermark within
	// the request timeout.
	timeout := DefaultProduceTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	return &pendingProduce{resp: resp, waits: waits, timeout: timeout}, nil
}

// pendingAck is an appended batch an acks=all produce waits for.
type pendingAck struct {
	resp *sluicev1.PartitionProduceResponse
	part *cluster.Replica
	last int64
	hint func(topic string, partition int32, code sluicev1.ErrorCode) *sluicev1.LeaderHint
}
