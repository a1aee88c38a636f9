package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
)

// initTransactional answers an InitProducerId with a transactional id:
// WRITE on the id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing asked
// of the coordinator, so a refused caller can neither fence the owner
// nor abort its transaction), then the coordinator's answer (KIP-360:
// the producer id and epoch given ask for a bump of that epoch) after
// making sure __transaction_state exists. A timeout of 0 is Kafka's
// default, 60 s.
func (c *conn) initTransactional(req *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) func() kmsg.Response {
	id := *req.TransactionalID
	res := auth.TransactionalID(id)
	if !c.allowed(c.ctx, auth.OpWrite, res) {
		resp.ErrorCode, _ = c.denied(auth.OpWrite, res)
		return answered(resp)
	}
	timeout := req.TransactionTimeoutMillis
	if timeout == 0 {
		timeout = int32(txn.DefaultTimeout / time.Millisecond)
	}
	pid, epoch := txn.NoProducerID, txn.NoProducerEpoch
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 {
		pid, epoch = req.ProducerID, req.ProducerEpoch
	}
	return func() kmsg.Response {
		s := c.s
		resp.ErrorCode = errCode(s.askTxn(c.ctx, func(ctx context.Context) error {
			if _, err := s.cfg.Coordinators.TxnLocator.Locate(ctx, id); err != nil {
				return err
			}
			r, err := s.cfg.Coordinators.Txn.InitProducerID(ctx, txn.InitProducerIDRequest{
				TransactionalID: id, TimeoutMs: timeout, ProducerID: pid, ProducerEpoch: epoch})
			if err == nil {
				resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch
			}
			return err
		}))
		return resp
	}
}

// endTxn serves EndTxn: commit or abort the producer's transaction,
// answered once PrepareCommit or PrepareAbort is durable. v5+ is KIP-890's
// transaction version 2: the coordinator bumps the epoch and the answer
// carries the producer id and epoch of the next transaction; before, the
// client's version 1: the markers are written at the producer's epoch,
// which it keeps (decision 69). WRITE on the
// transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing
// committed or aborted).
func endTxn(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.EndTxnRequest)
	resp := req.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	res := auth.TransactionalID(req.TransactionalID)
	if !c.allowed(c.ctx, auth.OpWrite, res) {
		resp.ErrorCode, _ = c.denied(auth.OpWrite, res)
		return answered(resp)
	}
	return func() kmsg.Response {
		resp.ErrorCode = errCode(c.s.askTxn(c.ctx, func(ctx context.Context) error {
			pe, err := c.s.cfg.Coordinators.Txn.EndTxn(ctx, txn.EndTxnRequest{TransactionalID: req.TransactionalID,
				ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch, Commit: req.Commit, ClientVersion: clientVersion(r.version, 5)})
			if err == nil {
				resp.ProducerID, resp.ProducerEpoch = pe.ProducerID, pe.ProducerEpoch
			}
			return err
		}))
		return resp
	}
}

// txnOffsetCommit serves TxnOffsetCommit: offsets committed as part of
// the producer's transaction, visible to the group when it commits. v5+
// (transaction version 2): the group coordinator adds its
// __consumer_offsets partition to the transaction itself; before, the
// client added it (AddOffsetsToTxn) and the coordinator verifies it is
// there (INVALID_TXN_STATE otherwise, nothing written). The member
// fields (v3+, KIP-447) fence a zombie: a generation or member epoch the
// group has moved past is ILLEGAL_GENERATION / FENCED_MEMBER_EPOCH.
// WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
// and READ on the group (GROUP_AUTHORIZATION_FAILED), for every
// partition, and READ on each topic (TOPIC_AUTHORIZATION_FAILED for its
// partitions, which are left out; the others are committed).
func txnOffsetCommit(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.TxnOffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	commit := commitTopics(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) (string, []group.OffsetCommitEntry) {
		var es []group.OffsetCommitEntry
		for _, p := range t.Partitions {
			es = append(es, entry(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata))
		}
		return t.Topic, es
	})
	var reqErr error
	if res := auth.TransactionalID(req.TransactionalID); !c.allowed(c.ctx, auth.OpWrite, res) {
		reqErr = c.deniedErr(auth.OpWrite, res)
	} else {
		reqErr = c.groupAllowed(auth.OpRead, req.Group)
	}
	denied := c.deniedTopics(auth.OpRead, commit)
	generation := int32(-1)
	var member, instance string
	if r.version >= 3 {
		generation, member, instance = req.Generation, req.MemberID, stringOr(req.InstanceID, "")
	}
	return func() kmsg.Response {
		results, err := c.commitOffsets(commit, denied, reqErr,
			func(ctx context.Context, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error) {
				return c.s.cfg.Coordinators.Group.TxnCommitOffsets(ctx, group.TxnOffsetCommitRequest{
					TransactionalID: req.TransactionalID, Group: req.Group, ProducerID: req.ProducerID, ProducerEpoch: req.ProducerEpoch,
					MemberID: member, MemberEpoch: generation, InstanceID: instance, Entries: entries, VerifyOnly: r.version < 5})
			})
		resp.Topics = answerCommit(commit, denied, err, results,
			func(name string) kmsg.TxnOffsetCommitResponseTopic {
				t := kmsg.NewTxnOffsetCommitResponseTopic()
				t.Topic = name
				return t
			}, func(t *kmsg.TxnOffsetCommitResponseTopic, partition int32, code int16) {
				p := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				t.Partitions = append(t.Partitions, p)
			})
		return resp
	}
}

// clientVersion is the transaction version of a request of version v
// whose first TV2 version is tv2From.
func clientVersion(v, tv2From int16) txn.ClientVersion {
	if v >= tv2From {
		return txn.TV2
	}
	return txn.TV1
}

// addPartitionsToTxn serves AddPartitionsToTxn. v0-3 are a transaction
// version 1 client's own: its partitions are added to its transaction at
// its epoch before it produces to them. WRITE on the transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on each
// topic: a refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED,
// an unknown one's UNKNOWN_TOPIC_OR_PARTITION, and then every other
// partition OPERATION_NOT_ATTEMPTED — nothing is added (Kafka's rule).
// v4+ is the brokers' form (several transactions; KIP-890's verification
// with verify_only): it needs CLUSTER_ACTION on the cluster
// (CLUSTER_AUTHORIZATION_FAILED).
func addPartitionsToTxn(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.AddPartitionsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.version >= 4 {
		if !c.allowed(c.ctx, auth.OpClusterAction, auth.Cluster) {
			resp.ErrorCode, _ = c.denied(auth.OpClusterAction, auth.Cluster)
			return answered(resp)
		}
		return func() kmsg.Response {
			for _, t := range req.Transactions {
				rt := kmsg.NewAddPartitionsToTxnResponseTransaction()
				rt.TransactionalID = t.TransactionalID
				var tps []txn.TopicPartition
				for _, tt := range t.Topics {
					for _, p := range tt.Partitions {
						tps = append(tps, txn.TopicPartition{Topic: tt.Topic, Partition: p})
					}
				}
				err := c.s.addPartitions(c.ctx, txn.AddPartitionsRequest{TransactionalID: t.TransactionalID, ProducerID: t.ProducerID,
					ProducerEpoch: t.ProducerEpoch, Partitions: tps, ClientVersion: txn.TV2, VerifyOnly: t.VerifyOnly})
				for _, tt := range t.Topics {
					rtt := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
					rtt.Topic = tt.Topic
					for _, p := range tt.Partitions {
						rp := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
						rp.Partition, rp.ErrorCode = p, errCode(err)
						rtt.Partitions = append(rtt.Partitions, rp)
					}
					rt.Topics = append(rt.Topics, rtt)
				}
				resp.Transactions = append(resp.Transactions, rt)
			}
			return resp
		}
	}
	// The client's form: every partition answered by the same rule.
	answer := func(code func(topic string) int16) kmsg.Response {
		for _, t := range req.Topics {
			rt := kmsg.NewAddPartitionsToTxnResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p, code(t.Topic)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	if res := auth.TransactionalID(req.TransactionalID); !c.allowed(c.ctx, auth.OpWrite, res) {
		code, _ := c.denied(auth.OpWrite, res)
		return answered(answer(func(string) int16 { return code }))
	}
	im := c.s.cfg.Metadata.Image()
	refused := map[string]int16{}
	for _, t := range req.Topics {
		if _, seen := refused[t.Topic]; seen {
			continue
		}
		refused[t.Topic] = 0
		if res := auth.Topic(t.Topic); !c.allowed(c.ctx, auth.OpWrite, res) {
			refused[t.Topic], _ = c.denied(auth.OpWrite, res)
		} else if tt := im.Topics[t.Topic]; tt == nil {
			refused[t.Topic] = codeUnknownTopicOrPartition
		} else {
			for _, p := range t.Partitions {
				if p < 0 || int(p) >= len(tt.Partitions) {
					refused[t.Topic] = codeUnknownTopicOrPartition
				}
			}
		}
	}
	for _, code := range refused {
		if code != 0 {
			return answered(answer(func(topic string) int16 {
				if refused[topic] != 0 {
					return refused[topic]
				}
				return codeOperationNotAttempted
			}))
		}
	}
	var tps []txn.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, txn.TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	return func() kmsg.Response {
		err := c.s.addPartitions(c.ctx, txn.AddPartitionsRequest{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
			ProducerEpoch: req.ProducerEpoch, Partitions: tps, ClientVersion: txn.TV1})
		code := errCode(err)
		return answer(func(string) int16 { return code })
	}
}

// addPartitions asks the transaction coordinator.
func (s *Server) addPartitions(ctx context.Context, req txn.AddPartitionsRequest) error {
	return s.askTxn(ctx, func(ctx context.Context) error { return s.cfg.Coordinators.Txn.AddPartitions(ctx, req) })
}

// askTxn runs call, a request to the transaction coordinator, with ctx
// bounded by coordinatorWait; it returns call's error, or at once
// servesTransactions' when this broker serves no transactions.
func (s *Server) askTxn(ctx context.Context, call func(ctx context.Context) error) error {
	if err := s.servesTransactions(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	return call(ctx)
}

// addOffsetsToTxn serves AddOffsetsToTxn (transaction version 1): the
// group's __consumer_offsets partition joins the producer's transaction,
// so that the offsets its TxnOffsetCommit writes there commit or abort
// with it. WRITE on the transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the group
// (GROUP_AUTHORIZATION_FAILED): refused, nothing is added.
func addOffsetsToTxn(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.AddOffsetsToTxnRequest)
	resp := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	if res := auth.TransactionalID(req.TransactionalID); !c.allowed(c.ctx, auth.OpWrite, res) {
		resp.ErrorCode, _ = c.denied(auth.OpWrite, res)
		return answered(resp)
	}
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		resp.ErrorCode = errCode(err)
		return answered(resp)
	}
	return func() kmsg.Response {
		err := c.s.servesGroups()
		if err == nil {
			err = c.s.addOffsets(c.ctx, req)
		}
		resp.ErrorCode = errCode(err)
		return resp
	}
}

// addOffsets adds req's group's __consumer_offsets partition (found by
// the group locator, which creates the topic on first need) to the
// transaction.
func (s *Server) addOffsets(ctx context.Context, req *kmsg.AddOffsetsToTxnRequest) error {
	ctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	n, err := s.cfg.Coordinators.GroupLocator.Locate(ctx, req.Group)
	if err != nil {
		return err
	}
	return s.addPartitions(ctx, txn.AddPartitionsRequest{TransactionalID: req.TransactionalID, ProducerID: req.ProducerID,
		ProducerEpoch: req.ProducerEpoch, Partitions: []txn.TopicPartition{{Topic: group.OffsetsTopic, Partition: n.Partition}},
		ClientVersion: txn.TV1})
}

// describeTransactions serves DescribeTransactions (KIP-664): the
// applied state of each id this broker coordinates (per id
// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
// TRANSACTIONAL_ID_NOT_FOUND, ...). An id needs DESCRIBE
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that id); a transaction's
// partitions are listed only for the topics the caller may DESCRIBE.
func describeTransactions(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DescribeTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	described := map[string]bool{}
	for _, id := range req.TransactionalIDs {
		ts := kmsg.NewDescribeTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.ProducerEpoch, ts.StartTimestamp = id, -1, -1, -1
		var err error
		if res := auth.TransactionalID(id); !c.allowed(c.ctx, auth.OpDescribe, res) {
			err = c.deniedErr(auth.OpDescribe, res)
		}
		if err == nil {
			err = c.s.servesTransactions()
		}
		var d txn.Description
		if err == nil {
			d, err = c.s.cfg.Coordinators.Txn.Describe(id)
		}
		if err != nil {
			ts.ErrorCode = errCode(err)
			resp.TransactionStates = append(resp.TransactionStates, ts)
			continue
		}
		ts.State, ts.TimeoutMillis = d.State.String(), d.TimeoutMs
		ts.StartTimestamp, ts.ProducerID, ts.ProducerEpoch = d.StartTimeMs, d.ProducerID, d.ProducerEpoch
		for _, tp := range d.Partitions { // sorted by topic, then partition
			ok, asked := described[tp.Topic]
			if !asked {
				ok = c.allowedQuiet(c.ctx, auth.OpDescribe, auth.Topic(tp.Topic))
				described[tp.Topic] = ok
			}
			if !ok {
				continue
			}
			if n := len(ts.Topics); n == 0 || ts.Topics[n-1].Topic != tp.Topic {
				t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
				t.Topic = tp.Topic
				ts.Topics = append(ts.Topics, t)
			}
			last := &ts.Topics[len(ts.Topics)-1]
			last.Partitions = append(last.Partitions, tp.Partition)
		}
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp
}

// listTransactions serves ListTransactions (KIP-664; an admin asks every
// broker): the ids this broker coordinates that the caller may DESCRIBE,
// filtered by state (Kafka's names; unknown ones are answered in
// UnknownStateFilters, and when every state filter is unknown nothing is
// listed), producer id and (v1+) minimum duration.
func listTransactions(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.ListTransactionsRequest)
	resp := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	if err := c.s.servesTransactions(); err != nil {
		resp.ErrorCode = errCode(err)
		return resp
	}
	var f txn.ListFilter
	for _, name := range req.StateFilters {
		if st, ok := txn.ParseState(name); ok {
			f.States = append(f.States, st)
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
	}
	if len(req.StateFilters) > 0 && len(f.States) == 0 {
		return resp
	}
	f.ProducerIDs = req.ProducerIDFilters
	if req.DurationFilterMillis > 0 {
		f.MinDuration = time.Duration(req.DurationFilterMillis) * time.Millisecond
	}
	list, err := c.s.cfg.Coordinators.Txn.List(f)
	if err != nil {
		resp.ErrorCode = errCode(err)
		return resp
	}
	for _, l := range list {
		if !c.allowedQuiet(c.ctx, auth.OpDescribe, auth.TransactionalID(l.TransactionalID)) {
			continue
		}
		ts := kmsg.NewListTransactionsResponseTransactionState()
		ts.TransactionalID, ts.ProducerID, ts.TransactionState = l.TransactionalID, l.ProducerID, l.State.String()
		resp.TransactionStates = append(resp.TransactionStates, ts)
	}
	return resp
}

// offsetCommitTopic is one topic of an offset commit: its entries in the
// request's order.
type offsetCommitTopic struct {
	topic string
	parts []group.OffsetCommitEntry
}

// commitTopics is the topics of a commit request, each made by of.
func commitTopics[T any](topics []T, of func(T) (string, []group.OffsetCommitEntry)) []offsetCommitTopic {
	out := make([]offsetCommitTopic, len(topics))
	for i, t := range topics {
		out[i].topic, out[i].parts = of(t)
	}
	return out
}

// entry is one partition's offset to commit.
func entry(topic string, partition int32, offset int64, leaderEpoch int32, metadata *string) group.OffsetCommitEntry {
	return group.OffsetCommitEntry{TP: group.TopicPartition{Topic: topic, Partition: partition},
		Offset: group.Offset{Offset: offset, LeaderEpoch: leaderEpoch, Metadata: stringOr(metadata, "")}}
}

// deniedTopics asks op on each topic once: the refusals by topic (nil if
// none), the answers of their partitions (Kafka's filterByAuthorized).
func (c *conn) deniedTopics(op auth.Operation, topics []offsetCommitTopic) map[string]error {
	var denied map[string]error
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t.topic] {
			continue
		}
		seen[t.topic] = true
		if res := auth.Topic(t.topic); !c.allowed(c.ctx, op, res) {
			if denied == nil {
				denied = map[string]error{}
			}
			denied[t.topic] = c.deniedErr(op, res)
		}
	}
	return denied
}

// allowedEntries are the entries of the topics not in denied.
func allowedEntries(topics []offsetCommitTopic, denied map[string]error) []group.OffsetCommitEntry {
	var out []group.OffsetCommitEntry
	for _, t := range topics {
		if denied[t.topic] == nil {
			out = append(out, t.parts...)
		}
	}
	return out
}

// commitOffsets runs the coordinator's part of an OffsetCommit or a
// TxnOffsetCommit whose topics are commit: unless the request is refused
// as a whole (reqErr) or this broker serves no groups, call commits the
// entries of the topics not denied, if there are any, within
// coordinatorWait. It returns the results by partition and the request's
// error, for answerCommit.
func (c *conn) commitOffsets(commit []offsetCommitTopic, denied map[string]error, reqErr error,
	call func(ctx context.Context, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error)) (map[group.TopicPartition]error, error) {
	if reqErr == nil {
		reqErr = c.s.servesGroups()
	}
	entries := allowedEntries(commit, denied)
	if reqErr != nil || len(entries) == 0 {
		return nil, reqErr
	}
	ctx, cancel := context.WithTimeout(c.ctx, coordinatorWait)
	defer cancel()
	return call(ctx, entries)
}

// answerCommit makes the answers of a commit request's topics: topic(name)
// for each topic of commit, and part for each of its partitions with its
// code (commitResult).
func answerCommit[T any](commit []offsetCommitTopic, denied map[string]error, reqErr error, results map[group.TopicPartition]error,
	topic func(name string) T, part func(t *T, partition int32, code int16)) []T {
	out := make([]T, 0, len(commit))
	for _, ct := range commit {
		t := topic(ct.topic)
		for _, en := range ct.parts {
			part(&t, en.TP.Partition, errCode(commitResult(ct.topic, en.TP, denied, reqErr, results)))
		}
		out = append(out, t)
	}
	return out
}

// commitResult is one partition's answer: its topic's refusal, else the
// request's error, else the coordinator's result for it.
func commitResult(topic string, tp group.TopicPartition, denied map[string]error, reqErr error, results map[group.TopicPartition]error) error {
	if err := denied[topic]; err != nil {
		return err
	}
	if reqErr != nil {
		return reqErr
	}
	return results[tp]
}

// stringOr is *p, or def when p is nil.
func stringOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}
