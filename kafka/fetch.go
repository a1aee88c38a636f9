package kafka

import (
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Fetch bounds.
const (
	// MaxFetchWait bounds a fetch's long poll, whatever it asks.
	MaxFetchWait = 30 * time.Second
	// MaxFetchBytes is the broker's fetch.max.bytes (Kafka's default,
	// 55 MiB): a fetch answers at most this many batch bytes (or one
	// batch larger than it).
	MaxFetchBytes = 55 << 20
)

// Fetch session errors (KIP-227).
const (
	codeFetchSessionIDNotFound   int16 = 70
	codeInvalidFetchSessionEpoch int16 = 71
)

// fetch serves Fetch for consumers (v4 to v12: topics by name). Fetch
// sessions (KIP-227) are declined the way Kafka declines them when its
// session cache is full: every answer carries session id 0, so the
// client keeps sending full fetches; a request naming a session gets
// FETCH_SESSION_ID_NOT_FOUND. Batches are served unfiltered up to the
// high watermark (read_uncommitted) or the last stable offset
// (read_committed) with the aborted transactions of the range, as
// Kafka's brokers do: Kafka clients skip markers and aborted batches
// themselves and move on by the batches' offsets. The read and its long
// poll run when the answer is due, after the requests before it.
func fetch(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.FetchRequest)
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	switch {
	case req.SessionID != 0:
		resp.ErrorCode = codeFetchSessionIDNotFound
		return func() kmsg.Response { return resp }
	case req.SessionEpoch > 0:
		resp.ErrorCode = codeInvalidFetchSessionEpoch
		return func() kmsg.Response { return resp }
	}
	isolation := cluster.FetchHighWatermark
	if req.IsolationLevel == 1 {
		isolation = cluster.FetchTxnCommitted
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 || maxBytes > MaxFetchBytes {
		maxBytes = MaxFetchBytes
	}
	params := cluster.FetchParams{ReplicaID: cluster.NoReplica, Isolation: isolation, Unfiltered: true,
		MaxWait: min(time.Duration(max(req.MaxWaitMillis, 0))*time.Millisecond, MaxFetchWait), MinBytes: max(int(req.MinBytes), 1), MaxBytes: maxBytes}
	follower := req.ReplicaID >= 0 || req.ReplicaState.ID >= 0
	resp.Topics = make([]kmsg.FetchResponseTopic, len(req.Topics))
	// denied[i] is the error of topic i answered without reading it.
	denied := make([]error, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		resp.Topics[i].Topic = rt.Topic
		switch {
		case follower:
			denied[i] = errs.New(sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED, "replicas fetch over the internal listener, not the Kafka listener")
		case !c.allowed(c.ctx, auth.OpRead, auth.Topic(rt.Topic)):
			denied[i] = c.s.cfg.Gate.Check(c.ctx, c.caller.Principal, c.host, auth.OpRead, auth.Topic(rt.Topic))
			if denied[i] == nil { // the ACLs changed between the checks
				denied[i] = errs.New(auth.DeniedCode(auth.ResourceTopic), "%s", auth.DeniedMessage(c.caller.Principal, auth.OpRead, auth.Topic(rt.Topic)))
			}
		}
		if denied[i] != nil {
			continue
		}
		for _, fp := range rt.Partitions {
			limit := int(fp.PartitionMaxBytes)
			if limit <= 0 {
				limit = 1 << 20
			}
			epoch := fp.CurrentLeaderEpoch
			if r.version < 9 {
				epoch = cluster.NoLeaderEpoch
			}
			params.Partitions = append(params.Partitions, cluster.FetchPartition{TopicPartition: cluster.TopicPartition{Topic: rt.Topic, Partition: fp.Partition},
				FetchOffset: fp.FetchOffset, CurrentLeaderEpoch: epoch, PartitionMaxBytes: limit})
		}
	}
	return func() kmsg.Response {
		start := time.Now()
		var res cluster.FetchResult
		if len(params.Partitions) > 0 {
			var err error
			res, err = c.s.cfg.Replicas.Fetch(c.ctx, params)
			if err != nil {
				return nil // the connection is closing
			}
		}
		sp := &spliced{Response: resp}
		k := 0
		for i := range req.Topics {
			rt := &req.Topics[i]
			tr := &resp.Topics[i]
			tr.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
			for j, fp := range rt.Partitions {
				pr := &tr.Partitions[j]
				*pr = kmsg.NewFetchResponseTopicPartition()
				pr.Partition, pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset, pr.PreferredReadReplica = fp.Partition, -1, -1, -1, -1
				// An empty record set, never null: Kafka sends length 0,
				// and librdkafka refuses the whole answer over a -1.
				pr.RecordBatches = []byte{}
				if denied[i] != nil {
					pr.ErrorCode = errCode(denied[i])
					continue
				}
				c.answerFetchPartition(resp, rt.Topic, pr, &res.Partitions[k])
				if len(pr.RecordBatches) > 0 {
					pr.RecordBatches = sp.add(pr.RecordBatches)
				}
				k++
			}
		}
		bytes := 0
		for _, p := range sp.payloads {
			bytes += len(p)
		}
		// The work: the read and the answer, not the long poll.
		resp.ThrottleMillis = c.throttle(r, auth.QuotaFetch, bytes, time.Since(start)-res.Waited)
		if len(sp.payloads) == 0 {
			return resp
		}
		return sp
	}
}

// answerFetchPartition fills pr from one partition's read: its batches
// converted to Kafka's v2 batches, the aborted transactions, or its
// error with the current leader (KIP-951).
func (c *conn) answerFetchPartition(resp *kmsg.FetchResponse, topic string, pr *kmsg.FetchResponseTopicPartition, r *cluster.FetchPartitionResult) {
	pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = r.HighWatermark, r.LastStableOffset, r.LogStartOffset
	if err := r.Err; err != nil {
		if errors.Is(err, cluster.ErrNotLeader) {
			err = c.s.leaders.NotLeaderError(topic, pr.Partition)
		}
		pr.ErrorCode = errCode(err)
		if h, ok := c.s.leaders.Hint(topic, pr.Partition, errs.Code(err)); ok {
			pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = h.LeaderID, h.LeaderEpoch
			c.addFetchBroker(resp, h.LeaderID)
		}
		return
	}
	for _, a := range r.AbortedTransactions {
		pr.AbortedTransactions = append(pr.AbortedTransactions, kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	if len(r.Batches) == 0 {
		return
	}
	n := 0
	for _, b := range r.Batches {
		n += len(b) + 16
	}
	out := make([]byte, 0, n)
	for _, b := range r.Batches {
		var err error
		if out, err = kafkabatch.AppendKafka(out, b, kafkabatch.None); err != nil {
			// The log holds canonical batches: this is a broker bug.
			c.s.log.Error("fetch: a stored batch does not convert", "topic", topic, "partition", pr.Partition, "err", err)
			pr.ErrorCode = kafkaCode(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR)
			return
		}
	}
	pr.RecordBatches = out
}

// addFetchBroker adds broker id to a fetch answer's brokers (KIP-951's
// node endpoints), once.
func (c *conn) addFetchBroker(resp *kmsg.FetchResponse, id int32) {
	for _, b := range resp.Brokers {
		if b.NodeID == id {
			return
		}
	}
	b := c.s.cfg.Metadata.Image().Brokers[id]
	if b == nil {
		return
	}
	host, port, ok := splitAddress(brokerAddress(b))
	if !ok {
		return
	}
	fb := kmsg.NewFetchResponseBroker()
	fb.NodeID, fb.Host, fb.Port = id, host, port
	if b.Rack != "" {
		fb.Rack = kmsg.StringPtr(b.Rack)
	}
	resp.Brokers = append(resp.Brokers, fb)
}
