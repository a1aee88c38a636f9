package kafka

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// DefaultProduceTimeout is the acks=all wait when a request gives none.
const DefaultProduceTimeout = 30 * time.Second

// produce serves Produce (v3+: record batches of magic 2). Its work —
// authorization, converting each partition's Kafka batch to Sluice's
// canonical batch (proto/kafkabatch), appending — is done in the
// connection's request order, so an idempotent producer's pipelined
// requests append in the order sent; the acks=all wait for the in-sync
// replicas overlaps with the next requests. acks=0 is not answered.
// Errors are per partition, with Kafka's codes; nothing is stored for a
// refused partition.
func produce(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	s := c.s
	start := time.Now()
	now := s.cfg.Now()
	acksAll := req.Acks == -1
	timeout := DefaultProduceTimeout
	if req.TimeoutMillis > 0 {
		timeout = time.Duration(req.TimeoutMillis) * time.Millisecond
	}
	var txnID string
	if req.TransactionID != nil {
		txnID = *req.TransactionID
	}
	// Kafka refuses a transactional request whose id the caller may not
	// write as a whole, before looking at a topic.
	var requestErr int16
	if txnID != "" && !c.allowed(c.ctx, auth.OpWrite, auth.TransactionalID(txnID)) {
		requestErr, _ = c.denied(auth.OpWrite, auth.TransactionalID(txnID))
	}
	if req.Acks != -1 && req.Acks != 0 && req.Acks != 1 {
		requestErr = kafkaCode(sluicev1.ErrorCode_INVALID_REQUIRED_ACKS)
	}
	var txnParts []txnPart // a transaction's partitions, appended below
	w := &acksWait{done: make(chan struct{})}
	w.pending.Store(1) // this function's own hold, released below
	resp.Topics = make([]kmsg.ProduceResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		tr := &resp.Topics[i]
		tr.Topic, tr.TopicID = rt.Topic, rt.TopicID
		tr.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		code := requestErr
		var msg *string
		if code == 0 && !c.allowed(c.ctx, auth.OpWrite, auth.Topic(rt.Topic)) {
			code, msg = c.denied(auth.OpWrite, auth.Topic(rt.Topic))
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			pr := &tr.Partitions[j]
			*pr = kmsg.NewProduceResponseTopicPartition()
			pr.Partition, pr.BaseOffset, pr.LogAppendTime, pr.LogStartOffset = rp.Partition, -1, -1, -1
			if code != 0 {
				pr.ErrorCode, pr.ErrorMessage = code, msg
				continue
			}
			if txnID != "" {
				txnParts = append(txnParts, txnPart{rt.Topic, rp, pr})
				continue
			}
			err := c.appendPartition(rt.Topic, rp, pr, r.version, txnID, now, acksAll, timeout, w)
			if err != nil {
				c.answerError(resp, rt.Topic, pr, err)
			}
		}
	}
	// A transaction's partitions are appended side by side: the first
	// batch of a transaction in each waits for its partition to be added
	// at the coordinator, which writes the adds that come together as one
	// record (txn.Coordinator.AddPartitions); one after the other, each
	// would wait for the one before. Partitions are independent logs, and
	// the next request starts only once all are done, so each
	// partition's batches still append in request order.
	txnErrs := make([]error, len(txnParts))
	if len(txnParts) == 1 {
		p := txnParts[0]
		txnErrs[0] = c.appendPartition(p.topic, p.rp, p.pr, r.version, txnID, now, acksAll, timeout, w)
	} else if len(txnParts) > 1 {
		// At most txnAppendWorkers at a time: a request may name
		// thousands of partitions.
		var wg sync.WaitGroup
		var next atomic.Int64
		for range min(len(txnParts), txnAppendWorkers) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < len(txnParts); i = int(next.Add(1) - 1) {
					p := txnParts[i]
					txnErrs[i] = c.appendPartition(p.topic, p.rp, p.pr, r.version, txnID, now, acksAll, timeout, w)
				}
			}()
		}
		wg.Wait()
	}
	for i, p := range txnParts {
		if txnErrs[i] != nil {
			c.answerError(resp, p.topic, p.pr, txnErrs[i])
		}
	}
	handling := time.Since(start) // the work; the acks=all wait is not
	w.release()
	if req.Acks == 0 {
		c.throttle(r, auth.QuotaProduce, produceBytes(req), handling)
		return func() kmsg.Response { return nil }
	}
	return func() kmsg.Response {
		<-w.done
		for _, f := range w.failed() {
			c.answerError(resp, f.topic, f.pr, f.err)
		}
		resp.ThrottleMillis = c.throttle(r, auth.QuotaProduce, produceBytes(req), handling)
		return resp
	}
}

// txnAppendWorkers bounds the partitions of one transactional produce
// request appended at once.
const txnAppendWorkers = 16

// txnPart is one partition of a transactional produce request.
type txnPart struct {
	topic string
	rp    *kmsg.ProduceRequestTopicPartition
	pr    *kmsg.ProduceResponseTopicPartition
}

// appendPartition converts and appends one partition's batch; when
// acks=all it registers the wait with w. The answer's offsets are set in
// pr; an error is the partition's refusal.
func (c *conn) appendPartition(topic string, rp *kmsg.ProduceRequestTopicPartition, pr *kmsg.ProduceResponseTopicPartition,
	version int16, txnID string, now time.Time, acksAll bool, timeout time.Duration, w *acksWait) error {
	s := c.s
	if err := cluster.CheckProducerTopic(topic); err != nil {
		return err
	}
	part, err := s.leaders.Partition(topic, rp.Partition)
	if err != nil {
		return err
	}
	in, err := oneBatch(rp.Records, version)
	if err != nil {
		return err
	}
	limits := kafkabatch.Limits{MaxBytes: int(part.Config().Storage.MaxMessageBytes)}
	raw, _, err := kafkabatch.FromKafka(nil, in, limits)
	if err != nil {
		return errs.New(errs.Code(err), "%s-%d: %s", topic, rp.Partition, errs.Message(err))
	}
	var res cluster.AppendResult
	if txnID != "" {
		ctx, cancel := context.WithTimeout(c.ctx, timeout)
		// Produce v12+ is a TV2 producer's (KIP-890): the leader adds the
		// partition to the transaction; before, the producer added it
		// itself (AddPartitionsToTxn) and the leader only verifies.
		res, err = s.cfg.Replicas.AppendTxn(ctx, part, cluster.TxnProduce{TransactionalID: txnID, Batch: raw, Now: now,
			AcksAll: acksAll, VerifyOnly: version < 12})
		cancel()
	} else {
		res, err = s.cfg.Replicas.AppendTo(part, raw, now, acksAll)
	}
	if err != nil {
		return err
	}
	pr.BaseOffset, pr.LogAppendTime = res.BaseOffset, res.LogAppendTime
	pr.LogStartOffset = part.LogStartOffset()
	if acksAll {
		pw := &partitionWait{w: w, topic: topic, pr: pr}
		w.pending.Add(1)
		part.AwaitCommit(c.ctx, res.LastOffset, res.LeaderEpoch, time.Now().Add(timeout), pw)
	}
	return nil
}

// answerError sets pr's error from err, naming the current leader
// (KIP-951) when the error is NOT_LEADER_OR_FOLLOWER and the metadata
// knows it.
func (c *conn) answerError(resp *kmsg.ProduceResponse, topic string, pr *kmsg.ProduceResponseTopicPartition, err error) {
	pr.ErrorCode, pr.ErrorMessage = errCode(err), errMessage(err)
	pr.BaseOffset, pr.LogStartOffset = -1, -1
	if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
		c.s.log.Error("produce failed", "topic", topic, "partition", pr.Partition, "err", err)
	}
	h, ok := c.s.leaders.Hint(topic, pr.Partition, errs.Code(err))
	if !ok {
		return
	}
	pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = h.LeaderID, h.LeaderEpoch
	im := c.s.cfg.Metadata.Image()
	for _, b := range resp.Brokers {
		if b.NodeID == h.LeaderID {
			return
		}
	}
	if b := im.Brokers[h.LeaderID]; b != nil {
		if host, port, ok := splitAddress(brokerAddress(b)); ok {
			rb := kmsg.NewProduceResponseBroker()
			rb.NodeID, rb.Host, rb.Port = b.ID, host, port
			if b.Rack != "" {
				rb.Rack = kmsg.StringPtr(b.Rack)
			}
			resp.Brokers = append(resp.Brokers, rb)
		}
	}
}

// acksWait is a produce request's acks=all waits: done closes when the
// last one ends.
type acksWait struct {
	pending atomic.Int32
	done    chan struct{}
	head    atomic.Pointer[partitionWait] // the failed waits, a stack
}

func (w *acksWait) release() {
	if w.pending.Add(-1) == 0 {
		close(w.done)
	}
}

// failed is the waits that ended with an error (read after done).
func (w *acksWait) failed() []*partitionWait {
	var out []*partitionWait
	for p := w.head.Load(); p != nil; p = p.next {
		out = append(out, p)
	}
	return out
}

// partitionWait is one partition's acks=all wait (cluster.CommitWaiter).
type partitionWait struct {
	w     *acksWait
	topic string
	pr    *kmsg.ProduceResponseTopicPartition
	err   error
	next  *partitionWait
}

// Committed records the outcome; it must not block (CommitWaiter).
func (p *partitionWait) Committed(err error) {
	if err != nil {
		p.err = err
		for {
			head := p.w.head.Load()
			p.next = head
			if p.w.head.CompareAndSwap(head, p) {
				break
			}
		}
	}
	p.w.release()
}

// oneBatch is the one record batch of a produce request's partition:
// Kafka takes exactly one from v3 on (INVALID_RECORD otherwise), and
// zstd only from v7 (UNSUPPORTED_COMPRESSION_TYPE before: the client
// did not say it knows the codec).
func oneBatch(records []byte, version int16) ([]byte, error) {
	var first []byte
	for b, err := range kafkabatch.Batches(records) {
		if err != nil {
			return nil, err
		}
		if first != nil {
			return nil, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "a produce request (v3 and later) carries exactly one record batch per partition")
		}
		first = b
	}
	if first == nil {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "no record batch")
	}
	if version < 7 {
		if h, err := kafkabatch.ParseHeader(first); err == nil && h.Codec() == kafkabatch.Zstd {
			return nil, errs.New(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, "zstd needs produce version 7 or later (this request is version %d)", version)
		}
	}
	return first, nil
}

// refuseOldProduce answers Produce v0-2 (message sets of magic 0 and 1),
// listed in ApiVersions for librdkafka's sake (handler.listedFrom) but not
// served: every partition UNSUPPORTED_VERSION, as Kafka 4 answers them,
// nothing stored. acks=0 is not answered.
func refuseOldProduce(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.ProduceRequest)
	if req.Acks == 0 {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		tr := kmsg.NewProduceResponseTopic()
		tr.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition, pr.ErrorCode, pr.BaseOffset = rp.Partition, codeUnsupportedVersion, -1
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp
}

// produceBytes is what a produce request is charged against its
// principal's producer_byte_rate: its record batches' bytes, as Kafka
// counts them (and the gRPC door: the batches as sent).
func produceBytes(req *kmsg.ProduceRequest) int {
	n := 0
	for i := range req.Topics {
		for j := range req.Topics[i].Partitions {
			n += len(req.Topics[i].Partitions[j].Records)
		}
	}
	return n
}
