package api

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/auth"
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
//
// A request with transactional_id is a transactional producer's (DESIGN
// §10, decision 33): each partition's batch goes through
// cluster.ReplicaManager.AppendTxnTo, which first adds the partition to
// the transaction at its coordinator; the partitions of one request are
// verified concurrently, all within the request's timeout. Its batches
// must all be transactional (else INVALID_RECORD for that partition); a
// transactional batch in a request without transactional_id is
// INVALID_TXN_STATE. Either way nothing of that partition is stored.
//
// Authorization (auth.Operations, as Kafka's Produce): WRITE on each
// topic, checked once per topic of the request, never per record — a
// topic refused answers TOPIC_AUTHORIZATION_FAILED in each of its
// partitions and nothing of it is appended, the other topics are served;
// with a transactional_id, WRITE on it, else the whole request is refused
// (PERMISSION_DENIED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED). No
// permission lets a client write an internal topic (INVALID_TOPIC_EXCEPTION:
// cluster.ReplicaManager.AppendTo refuses it, issue 29).
func (s *Server) Produce(ctx context.Context, req *internalv1.ProduceRequestView) (*sluicev1.ProduceResponse, error) {
	return s.produce(ctx, req, nil)
}

// produceAliased is Produce for a request whose batches alias the received
// gRPC buffer (codec.ProduceRequest): the buffer is released as soon as
// every batch has been appended (copied into its log) or refused — after
// the verifications of a transactional request, before the acks=all wait.
func (s *Server) produceAliased(ctx context.Context, req *codec.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	defer req.Release() // on every path; a second Release is a no-op
	return s.produce(ctx, &req.ProduceRequestView, req.Release)
}

// produce is Produce; appended (if not nil) is called once the request's
// batches are no longer used.
//
// Over a producer_byte_rate or request_percentage quota, the answer is
// held for the throttle time once it is ready (throttle.go). The request
// time counted is the handler's but the acks=all wait and the
// transaction coordinator's verifications.
func (s *Server) produce(ctx context.Context, req *internalv1.ProduceRequestView, appended func()) (*sluicev1.ProduceResponse, error) {
	rt := s.quotas.startRequest()
	size := s.quotas.produceBytes(req) // before appended releases the batches
	pp, err := s.appendProduce(ctx, req, &rt)
	if appended != nil {
		appended()
	}
	if err != nil {
		return nil, err
	}
	pp.await(ctx, &rt)
	throttle := s.quotas.charge(ctx, auth.QuotaProduce, size, &rt)
	pp.resp.ThrottleTimeMs = throttleMs(throttle)
	s.hold(ctx, throttle)
	return pp.resp, nil
}

// pendingProduce is a produce request whose batches are appended: its
// answer, and what acks=all still waits for.
type pendingProduce struct {
	resp    *sluicev1.ProduceResponse
	waits   []pendingAck
	timeout time.Duration

	// id is the request's correlation id on a ProduceStream.
	id int64
	// remaining counts the waits not ended yet (startWaits); the one that
	// brings it to zero sends pp to committed.
	remaining atomic.Int32
	committed chan<- *pendingProduce
}

// await waits until every batch acks=all waits for is committed, or the
// request's timeout passes (those batches then answer REQUEST_TIMED_OUT),
// or ctx ends (the same). The wait is taken out of rt's handling time.
func (pp *pendingProduce) await(ctx context.Context, rt *requestTimer) {
	if len(pp.waits) == 0 {
		return
	}
	committed := make(chan *pendingProduce, 1)
	pp.startWaits(ctx, committed)
	w := rt.waitStart()
	<-committed // the waits end at the timeout at the latest
	rt.waited(w)
	pp.answerWaits()
}

// startWaits registers every acks=all wait of pp with its partition
// (cluster.Replica.AwaitCommit), each ending within pp.timeout or when ctx
// ends, and arranges for pp to be sent to committed once they have all
// ended. The send happens on whichever goroutine ends the last wait,
// possibly under that partition's lock, so committed must have room for
// it (CommitWaiter's contract). The receiver then calls answerWaits.
// pp.waits must not be empty.
func (pp *pendingProduce) startWaits(ctx context.Context, committed chan<- *pendingProduce) {
	pp.committed = committed
	pp.remaining.Store(int32(len(pp.waits)))
	deadline := time.Now().Add(pp.timeout)
	for i := range pp.waits {
		w := &pp.waits[i]
		w.pp = pp
		w.part.AwaitCommit(ctx, w.last, w.epoch, deadline, w)
	}
}

// Committed implements cluster.CommitWaiter: it records the outcome of
// w's wait, and hands pp over once every wait of pp has ended.
func (w *pendingAck) Committed(err error) {
	w.err = err
	// The atomic orders w.err before answerWaits reads it.
	if w.pp.remaining.Add(-1) == 0 {
		w.pp.committed <- w.pp
	}
}

// answerWaits fills the answers of the batches whose wait failed, once
// every wait has ended. It runs on the goroutine that sends the answer,
// not under a partition's lock (leaderHint reads the metadata cache).
func (pp *pendingProduce) answerWaits() {
	for _, w := range pp.waits {
		if w.err != nil {
			w.resp.ErrorCode, w.resp.ErrorMessage = partitionError(w.err)
			w.resp.CurrentLeader = w.hint(w.part.Topic, w.part.Partition, w.resp.ErrorCode)
		}
	}
}

// appendProduce checks req and appends its batches: Produce up to the
// acks=all wait. A request refused as a whole is a status error and
// nothing is appended. The batches are not used once it returns (a
// transactional request's verifications have all ended). ctx bounds the
// verifications of a transactional request, with the request's timeout;
// their waits are taken out of rt's handling time.
func (s *Server) appendProduce(ctx context.Context, req *internalv1.ProduceRequestView, rt *requestTimer) (*pendingProduce, error) {
	switch req.Acks {
	case sluicev1.Acks_ACKS_UNSPECIFIED, sluicev1.Acks_ACKS_ALL, sluicev1.Acks_ACKS_LEADER, sluicev1.Acks_ACKS_NONE:
	default:
		return nil, requestError(invalidArgument, sluicev1.ErrorCode_INVALID_REQUIRED_ACKS, "acks value %d is not one of ACKS_ALL, ACKS_LEADER, ACKS_NONE", req.Acks)
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	if req.TransactionalId != "" {
		// Kafka refuses the whole request, before looking at a topic.
		if err := s.authz.Require(ctx, auth.OpWrite, auth.TransactionalID(req.TransactionalId)); err != nil {
			return nil, err
		}
	}
	// acks=all: every appended batch must reach the high watermark within
	// the request timeout.
	timeout := DefaultProduceTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	now := s.now()
	acksAll := req.Acks == sluicev1.Acks_ACKS_ALL || req.Acks == sluicev1.Acks_ACKS_UNSPECIFIED
	var waits []pendingAck
	var txn []txnAppend // a transactional request's partitions, appended after the loop
	resp := &sluicev1.ProduceResponse{Topics: make([]*sluicev1.TopicProduceResponse, 0, len(req.Topics))}
	for _, t := range req.Topics {
		tr := &sluicev1.TopicProduceResponse{Name: t.Name, Partitions: make([]*sluicev1.PartitionProduceResponse, 0, len(t.Partitions))}
		resp.Topics = append(resp.Topics, tr)
		if !s.authz.Allowed(ctx, auth.OpWrite, auth.Topic(t.Name)) {
			code, msg := ItemError(ctx, auth.OpWrite, auth.Topic(t.Name))
			for _, p := range t.Partitions {
				tr.Partitions = append(tr.Partitions, &sluicev1.PartitionProduceResponse{Partition: p.Partition, BaseOffset: -1, LogAppendTimeMs: -1, LogStartOffset: -1,
					ErrorCode: code, ErrorMessage: msg})
			}
			continue
		}
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
			if req.TransactionalId != "" {
				txn = append(txn, txnAppend{resp: pr, topic: t.Name, part: part, batch: p.Batch})
				continue
			}
			res, err := s.replicas.AppendTo(part, p.Batch, now, acksAll)
			waits = s.answerAppend(pr, t.Name, part, res, err, req.Acks, waits)
		}
	}
	pp := &pendingProduce{resp: resp, timeout: timeout}
	if len(txn) > 0 {
		// The verifications and the acks=all wait share the timeout.
		deadline := time.Now().Add(timeout)
		s.appendTxn(ctx, req.TransactionalId, txn, now, acksAll, deadline, rt)
		for i := range txn {
			a := &txn[i]
			waits = s.answerAppend(a.resp, a.topic, a.part, a.res, a.err, req.Acks, waits)
		}
		pp.timeout = max(time.Until(deadline), 0)
	}
	pp.waits = waits
	return pp, nil
}

// answerAppend fills pr with the outcome of appending to part of topic
// and returns waits with the batch added when acks=all waits for it.
func (s *Server) answerAppend(pr *sluicev1.PartitionProduceResponse, topic string, part *cluster.Replica, res cluster.AppendResult, err error, acks sluicev1.Acks, waits []pendingAck) []pendingAck {
	if err != nil {
		pr.ErrorCode, pr.ErrorMessage = partitionError(err)
		pr.CurrentLeader = s.leaderHint(topic, pr.Partition, pr.ErrorCode)
		if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
			s.log.Error("produce failed", "topic", topic, "partition", pr.Partition, "err", err)
		}
		return waits
	}
	if acks == sluicev1.Acks_ACKS_ALL || acks == sluicev1.Acks_ACKS_UNSPECIFIED {
		waits = append(waits, pendingAck{resp: pr, part: part, last: res.LastOffset, epoch: res.LeaderEpoch, hint: s.leaderHint})
	}
	if acks != sluicev1.Acks_ACKS_NONE {
		pr.BaseOffset, pr.LogAppendTimeMs = res.BaseOffset, res.LogAppendTime
	}
	pr.LogStartOffset = part.LogStartOffset()
	return waits
}

// txnAppend is one partition of a transactional produce request: its
// batch, and the outcome of AppendTxnTo.
type txnAppend struct {
	resp  *sluicev1.PartitionProduceResponse
	topic string
	part  *cluster.Replica
	batch []byte
	res   cluster.AppendResult
	err   error
}

// appendTxn appends each of a transactional request's batches with
// AppendTxnTo, the partitions concurrently (each may wait for its
// coordinator's AddPartitionsToTxn; at most maxRequestConcurrency at
// once), until deadline; it returns when every
// append has ended, so the batches are no longer used. rt counts the
// appends' work — each partition's time but its verification, summed —
// in place of the time they took together.
func (s *Server) appendTxn(ctx context.Context, transactionalID string, txn []txnAppend, now time.Time, acksAll bool, deadline time.Time, rt *requestTimer) {
	vctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	all := rt.waitStart()
	var work atomic.Int64 // nanoseconds
	forEachConcurrently(len(txn), func(i int) {
		a := &txn[i]
		start := rt.waitStart()
		a.res, a.err = s.replicas.AppendTxnTo(vctx, a.part, transactionalID, a.batch, now, acksAll)
		if !start.IsZero() {
			work.Add(int64(time.Since(start) - a.res.Verifying))
		}
	})
	rt.waited(all)
	rt.exclude(-time.Duration(work.Load()))
}

// pendingAck is an appended batch an acks=all produce waits for, and
// the outcome of its wait.
type pendingAck struct {
	resp  *sluicev1.PartitionProduceResponse
	part  *cluster.Replica
	last  int64
	epoch int32 // the leader epoch it was appended in
	hint  func(topic string, partition int32, code sluicev1.ErrorCode) *sluicev1.LeaderHint
	pp    *pendingProduce // the request, set by startWaits
	err   error           // the outcome of the wait (Committed)
}
