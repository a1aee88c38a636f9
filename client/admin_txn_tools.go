package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The hanging-transaction tools of KIP-664 (decision 35 of
// docs/design.md): what partitions hold (DescribeProducers), which open
// transactions no coordinator owns (FindHangingTransactions) and their
// repair (AbortTransaction).

// DefaultMaxTransactionTimeout is the brokers' default
// transaction.max.timeout.ms (15 min): no transaction may stay open longer
// without its coordinator aborting it.
const DefaultMaxTransactionTimeout = 15 * time.Minute

// DescribeProducers returns the producer state the leader of
// topic/partition holds, by producer id. Retriable failures (a leader
// moving) are retried a few times with fresh metadata; a partition error
// comes back as an *errs.Error.
func (c *Client) DescribeProducers(ctx context.Context, topic string, partition int32) ([]*sluicev1.ProducerState, error) {
	for attempt := 0; ; attempt++ {
		ps, err := c.describeProducersOnce(ctx, topic, partition)
		if err == nil || attempt >= 3 || !isRetriable(err) {
			if err != nil {
				return nil, fmt.Errorf("describe producers of %s/%d: %w", topic, partition, err)
			}
			return ps, nil
		}
		if needsMetadata(errs.Code(err)) || isTransportError(err) {
			c.forget(topic)
		}
		if werr := sleepCtx(ctx, backoffFor(attempt)); werr != nil {
			return nil, fmt.Errorf("describe producers of %s/%d: %w", topic, partition, err)
		}
	}
}

func (c *Client) describeProducersOnce(ctx context.Context, topic string, partition int32) ([]*sluicev1.ProducerState, error) {
	addr, _, err := c.leader(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	res, err := c.describeProducersAt(ctx, addr, map[string][]int32{topic: {partition}})
	if err != nil {
		return nil, err
	}
	for _, p := range res {
		if p.topic == topic && p.partition.Partition == partition {
			if err := codeError(p.partition.ErrorCode, p.partition.ErrorMessage); err != nil {
				return nil, err
			}
			return p.partition.ActiveProducers, nil
		}
	}
	return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no answer for the partition")
}

type producersOf struct {
	topic     string
	partition *sluicev1.DescribeProducersPartition
}

// describeProducersAt sends one DescribeProducers to the broker at addr.
func (c *Client) describeProducersAt(ctx context.Context, addr string, parts map[string][]int32) ([]producersOf, error) {
	cc, err := c.conn(addr)
	if err != nil {
		return nil, err
	}
	req := &sluicev1.DescribeProducersRequest{}
	for t, ps := range parts {
		req.Topics = append(req.Topics, &sluicev1.DescribeProducersTopic{Name: t, Partitions: ps})
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(cc).DescribeProducers(rctx, req)
	if err != nil {
		return nil, rpcError(err)
	}
	var out []producersOf
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out = append(out, producersOf{topic: t.Name, partition: p})
		}
	}
	return out, nil
}

// OpenTransaction is a transaction a partition holds open: data of
// (ProducerID, ProducerEpoch) from StartOffset on, and no marker yet.
type OpenTransaction struct {
	Topic            string
	Partition        int32
	Leader           int32
	ProducerID       int64
	ProducerEpoch    int32
	CoordinatorEpoch int32
	StartOffset      int64
	// StartTimeMs is when its first batch was appended (leader's clock);
	// Duration is how long it has been open by the leader's clock.
	StartTimeMs int64
	Duration    time.Duration
}

// HangingTransaction is an open transaction FindHangingTransactions
// reports, with why.
type HangingTransaction struct {
	OpenTransaction
	// TransactionalID is the id whose coordinator knows the producer id,
	// "" when none does.
	TransactionalID string
	// Reason says why it is hanging, for people.
	Reason string
}

// HangingFilter selects the partitions FindHangingTransactions looks at.
type HangingFilter struct {
	// Broker, when >= 0, keeps only partitions this broker leads.
	Broker int32
	// MinDuration keeps only transactions open at least this long.
	MinDuration time.Duration
	// MaxTimeout is transaction.max.timeout.ms: a transaction open longer
	// is hanging whatever its coordinator says; 0:
	// DefaultMaxTransactionTimeout.
	MaxTimeout time.Duration
}

// FindHangingTransactions lists the open transactions that partitions
// hold (DescribeProducers of every partition, or of those filter.Broker
// leads) and that their coordinator does not own: no transactional id has
// the producer id, or the id has it in another state, at another epoch,
// or without that partition; and every open transaction older than
// filter.MaxTimeout. Candidates are checked again with a second
// DescribeProducers, so a transaction that ended while the coordinators
// were asked is not reported. Sorted by topic, partition, producer id.
// Every leader and coordinator must answer: a partial answer would look
// complete, so any failure fails the call.
func (c *Client) FindHangingTransactions(ctx context.Context, filter HangingFilter) ([]HangingTransaction, error) {
	if filter.MaxTimeout <= 0 {
		filter.MaxTimeout = DefaultMaxTransactionTimeout
	}
	open, err := c.openTransactions(ctx, filter.Broker)
	if err != nil {
		return nil, fmt.Errorf("find hanging transactions: %w", err)
	}
	var candidates []OpenTransaction
	for _, o := range open {
		if o.Duration >= filter.MinDuration {
			candidates = append(candidates, o)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	owners, err := c.ownersOf(ctx, candidates)
	if err != nil {
		return nil, fmt.Errorf("find hanging transactions: %w", err)
	}
	var hanging []HangingTransaction
	for _, o := range candidates {
		if h, ok := judgeOpen(o, owners[o.ProducerID], filter.MaxTimeout); ok {
			hanging = append(hanging, h)
		}
	}
	if len(hanging) == 0 {
		return nil, nil
	}
	// A transaction that ended between the two looks is not hanging.
	again, err := c.openTransactions(ctx, filter.Broker)
	if err != nil {
		return nil, fmt.Errorf("find hanging transactions: %w", err)
	}
	still := map[OpenTransaction]bool{}
	for _, o := range again {
		o.Duration, o.Leader = 0, 0
		still[o] = true
	}
	out := hanging[:0]
	for _, h := range hanging {
		k := h.OpenTransaction
		k.Duration, k.Leader = 0, 0
		if still[k] {
			out = append(out, h)
		}
	}
	return out, nil
}

// openTransactions asks every partition leader (or broker's, when broker
// >= 0) for its producer state and returns the open transactions, sorted
// by topic, partition, producer id.
func (c *Client) openTransactions(ctx context.Context, broker int32) ([]OpenTransaction, error) {
	md, err := c.Metadata(ctx)
	if err != nil {
		return nil, err
	}
	addrs := map[int32]string{}
	for _, b := range md.Brokers {
		addrs[b.NodeId] = b.Address
	}
	byLeader := map[int32]map[string][]int32{}
	for _, t := range md.Topics {
		for _, p := range t.Partitions {
			if broker >= 0 && p.LeaderId != broker {
				continue
			}
			if p.LeaderId < 0 {
				return nil, fmt.Errorf("%s/%d: %w", t.Name, p.Partition, errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "the partition has no leader"))
			}
			if byLeader[p.LeaderId] == nil {
				byLeader[p.LeaderId] = map[string][]int32{}
			}
			byLeader[p.LeaderId][t.Name] = append(byLeader[p.LeaderId][t.Name], p.Partition)
		}
	}
	var out []OpenTransaction
	for leader, parts := range byLeader {
		addr, ok := addrs[leader]
		if !ok {
			return nil, errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "leader %d has no address in the metadata", leader)
		}
		res, err := c.describeProducersAt(ctx, addr, parts)
		if err != nil {
			return nil, fmt.Errorf("broker %d: %w", leader, err)
		}
		for _, r := range res {
			if err := codeError(r.partition.ErrorCode, r.partition.ErrorMessage); err != nil {
				return nil, fmt.Errorf("%s/%d: %w", r.topic, r.partition.Partition, err)
			}
			for _, ps := range r.partition.ActiveProducers {
				if ps.CurrentTxnStartOffset < 0 {
					continue
				}
				out = append(out, OpenTransaction{Topic: r.topic, Partition: r.partition.Partition, Leader: leader,
					ProducerID: ps.ProducerId, ProducerEpoch: ps.ProducerEpoch, CoordinatorEpoch: ps.CoordinatorEpoch,
					StartOffset: ps.CurrentTxnStartOffset, StartTimeMs: ps.CurrentTxnStartTimeMs,
					Duration: time.Duration(max(ps.CurrentTxnDurationMs, 0)) * time.Millisecond})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.ProducerID < b.ProducerID
	})
	return out, nil
}

// ownersOf returns, per producer id of txns, the coordinators' state of
// every transactional id that has it (ListTransactions filtered by
// producer id on every broker, then DescribeTransactions). An id that
// vanished between the two (TRANSACTIONAL_ID_NOT_FOUND) is left out.
func (c *Client) ownersOf(ctx context.Context, txns []OpenTransaction) (map[int64][]*sluicev1.TransactionState, error) {
	var pids []int64
	for _, o := range txns {
		if !slices.Contains(pids, o.ProducerID) {
			pids = append(pids, o.ProducerID)
		}
	}
	ls, err := c.ListTransactions(ctx, ListTransactionsFilter{ProducerIDs: pids})
	if err != nil {
		return nil, err
	}
	owners := map[int64][]*sluicev1.TransactionState{}
	for _, l := range ls {
		sts, err := c.DescribeTransactions(ctx, l.TransactionalId)
		if err != nil {
			return nil, err
		}
		st := sts[0]
		switch st.ErrorCode {
		case sluicev1.ErrorCode_NONE:
		case sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND:
			continue
		default:
			return nil, fmt.Errorf("describe %q: %w", l.TransactionalId, codeError(st.ErrorCode, st.ErrorMessage))
		}
		owners[l.ProducerId] = append(owners[l.ProducerId], st)
		if st.ProducerId != l.ProducerId {
			owners[st.ProducerId] = append(owners[st.ProducerId], st)
		}
	}
	return owners, nil
}

// ownsOpen reports whether coordinator state st owns o: the id's open
// transaction is o's producer at o's epoch and includes o's partition.
// TV2: Prepare* (and PrepareEpochFence) already carry the bumped epoch,
// the data's epoch + 1, while the markers are written.
func ownsOpen(st *sluicev1.TransactionState, o OpenTransaction) bool {
	if st.ProducerId != o.ProducerID {
		return false
	}
	switch st.State {
	case "Ongoing":
		if st.ProducerEpoch != o.ProducerEpoch {
			return false
		}
	case "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
		if st.ProducerEpoch != o.ProducerEpoch && st.ProducerEpoch != o.ProducerEpoch+1 && st.LastProducerEpoch != o.ProducerEpoch {
			return false
		}
	default:
		return false
	}
	for _, t := range st.Topics {
		if t.Name == o.Topic && slices.Contains(t.Partitions, o.Partition) {
			return true
		}
	}
	return false
}

// judgeOpen decides whether the open transaction o is hanging, given the
// coordinator states of the ids that have its producer id: true with the
// reason when none owns it, or when it is older than maxTimeout.
func judgeOpen(o OpenTransaction, states []*sluicev1.TransactionState, maxTimeout time.Duration) (HangingTransaction, bool) {
	h := HangingTransaction{OpenTransaction: o}
	if len(states) == 0 {
		h.Reason = fmt.Sprintf("no coordinator knows producer id %d", o.ProducerID)
		return h, true
	}
	for _, st := range states {
		if ownsOpen(st, o) {
			h.TransactionalID = st.TransactionalId
			if o.Duration > maxTimeout {
				h.Reason = fmt.Sprintf("open for %v, longer than the maximum transaction timeout %v, though %q still owns it (%s)", o.Duration.Round(time.Second), maxTimeout, st.TransactionalId, st.State)
				return h, true
			}
			return h, false
		}
	}
	st := states[0]
	h.TransactionalID = st.TransactionalId
	h.Reason = fmt.Sprintf("transactional id %q is %s at producer %d epoch %d, not open at epoch %d on this partition", st.TransactionalId, st.State, st.ProducerId, st.ProducerEpoch, o.ProducerEpoch)
	return h, true
}

// AbortSpec names the open transaction AbortTransaction aborts.
type AbortSpec struct {
	Topic            string
	Partition        int32
	ProducerID       int64
	ProducerEpoch    int32
	CoordinatorEpoch int32
	// Force skips the check that no coordinator owns the transaction.
	Force bool
}

// ErrTransactionOwned is wrapped by AbortTransaction's refusal of a
// transaction its coordinator still owns.
var ErrTransactionOwned = errors.New("the coordinator still owns the transaction")

// AbortTransaction writes an ABORT marker for spec's open transaction
// (Admin.AbortTransaction at the partition's leader) and returns the
// marker's offset. Unless spec.Force, it first checks that the partition
// holds that transaction open (INVALID_TXN_STATE if not) and that no
// coordinator owns it (an error wrapping ErrTransactionOwned, naming the
// transactional id and its state): the coordinator ends its own
// transactions, and a marker behind its back fences its producer. One
// attempt: a marker whose answer was lost may have been written, and a
// retry would be refused as "nothing open".
func (c *Client) AbortTransaction(ctx context.Context, spec AbortSpec) (int64, error) {
	wrap := func(err error) error {
		return fmt.Errorf("abort transaction of producer %d on %s/%d: %w", spec.ProducerID, spec.Topic, spec.Partition, err)
	}
	if !spec.Force {
		ps, err := c.DescribeProducers(ctx, spec.Topic, spec.Partition)
		if err != nil {
			return -1, wrap(err)
		}
		var o *OpenTransaction
		for _, p := range ps {
			if p.ProducerId == spec.ProducerID && p.CurrentTxnStartOffset >= 0 {
				o = &OpenTransaction{Topic: spec.Topic, Partition: spec.Partition, ProducerID: p.ProducerId, ProducerEpoch: p.ProducerEpoch,
					CoordinatorEpoch: p.CoordinatorEpoch, StartOffset: p.CurrentTxnStartOffset, StartTimeMs: p.CurrentTxnStartTimeMs}
			}
		}
		if o == nil {
			return -1, wrap(errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "the partition holds no open transaction of producer %d", spec.ProducerID))
		}
		owners, err := c.ownersOf(ctx, []OpenTransaction{*o})
		if err != nil {
			return -1, wrap(err)
		}
		for _, st := range owners[o.ProducerID] {
			if ownsOpen(st, *o) {
				return -1, wrap(fmt.Errorf("%w: transactional id %q is %s at producer %d epoch %d with this partition, and its coordinator will end it (timeout %v); --force aborts it anyway",
					ErrTransactionOwned, st.TransactionalId, st.State, st.ProducerId, st.ProducerEpoch, time.Duration(st.TransactionTimeoutMs)*time.Millisecond))
			}
		}
	}
	addr, _, err := c.leader(ctx, spec.Topic, spec.Partition)
	if err != nil {
		return -1, wrap(err)
	}
	cc, err := c.conn(addr)
	if err != nil {
		return -1, wrap(err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
	defer cancel()
	resp, err := sluicev1.NewAdminClient(cc).AbortTransaction(rctx, &sluicev1.AbortTransactionRequest{Topic: spec.Topic, Partition: spec.Partition,
		ProducerId: spec.ProducerID, ProducerEpoch: spec.ProducerEpoch, CoordinatorEpoch: spec.CoordinatorEpoch,
		TimeoutMs: int32(c.cfg.requestTimeout / time.Millisecond)})
	if err != nil {
		return -1, wrap(rpcError(err))
	}
	if err := codeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return -1, wrap(err)
	}
	return resp.MarkerOffset, nil
}
