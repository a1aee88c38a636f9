package cluster

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// The operator's side of transactions on a partition (KIP-664, decision 35
// of docs/design.md): what a partition holds for each producer
// (DescribeProducers) and the abort of a hanging transaction
// (AbortTransaction).

// Producers returns the producer state of this replica, by producer id
// (a copy; the caller owns it). Any replica answers; api asks leaders only.
func (p *Replica) Producers() []storage.ProducerEntry { return p.log.Producers() }

// ProducerState is what DescribeProducers answers for one producer of a
// partition (KIP-664), through either door.
type ProducerState struct {
	ProducerID    int64
	ProducerEpoch int16
	// LastSequence is the sequence of the last record remembered; -1 if
	// none (after a marker).
	LastSequence int32
	// LastTimestamp is the max timestamp of the last batch or marker (ms).
	LastTimestamp int64
	// CoordinatorEpoch is the last marker's; -1 if none.
	CoordinatorEpoch int32
	// TxnStartOffset is the first offset of the open transaction; -1 if
	// none is open.
	TxnStartOffset int64
	// TxnStartTime is when the open transaction's first batch was
	// appended here (ms); TxnDuration how long it has been open at the
	// time asked (ms). Both -1 if none is open (or its start is unknown).
	TxnStartTime, TxnDuration int64
	// LastOffset is the last offset of the last batch or marker.
	LastOffset int64
}

// ProducerStates is Producers as DescribeProducers answers them, the
// durations of open transactions measured at now.
func (p *Replica) ProducerStates(now time.Time) []ProducerState {
	nowMs := now.UnixMilli()
	entries := p.Producers()
	out := make([]ProducerState, 0, len(entries))
	for _, e := range entries {
		ps := ProducerState{ProducerID: e.ProducerID, ProducerEpoch: e.Epoch, LastSequence: -1, LastTimestamp: e.LastTimestamp,
			CoordinatorEpoch: e.CoordinatorEpoch, TxnStartOffset: e.TxnFirstOffset, TxnStartTime: -1, TxnDuration: -1, LastOffset: e.LastOffset}
		if n := len(e.Batches); n > 0 {
			ps.LastSequence = e.Batches[n-1].LastSeq
		}
		if e.TxnFirstOffset >= 0 {
			ps.TxnStartTime = e.TxnStartTime
			if e.TxnStartTime >= 0 {
				ps.TxnDuration = max(nowMs-e.TxnStartTime, 0)
			}
		}
		out = append(out, ps)
	}
	return out
}

// HangingAbort names the open transaction an operator aborts on one
// partition.
type HangingAbort struct {
	ProducerID int64
	// ProducerEpoch is the epoch of the open transaction's data (as
	// DescribeProducers shows it); the marker carries ProducerEpoch + 1.
	ProducerEpoch int16
	// CoordinatorEpoch is written in the marker; it must not be below
	// that of the producer's last marker on the partition.
	CoordinatorEpoch int32
}

// AbortTransaction writes an ABORT marker for a's open transaction on tp,
// as tp's leader, and waits until it is committed; it returns the
// marker's offset.
//
// Refused with nothing written:
//   - UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER: tp is not hosted
//     or not led here;
//   - INVALID_TXN_STATE: the producer has no open transaction on tp (an
//     abort must close something: a marker for nothing would only bump
//     the producer's epoch here behind its coordinator's back);
//   - INVALID_PRODUCER_EPOCH: the open transaction is at another epoch
//     (the operator's view is stale), or at the last epoch, which cannot
//     be bumped;
//   - TRANSACTION_COORDINATOR_FENCED: a.CoordinatorEpoch is below that of
//     the producer's last marker (storage's marker rule).
//
// TV2 (DESIGN §10): a marker's epoch is strictly above the data it
// closes, so the marker carries ProducerEpoch + 1 — what the coordinator
// itself would have written for an abort. A producer still writing at
// ProducerEpoch is fenced on this partition afterwards
// (INVALID_PRODUCER_EPOCH), which is the point of the repair. The other
// outcomes are AppendCommitted's (see WriteTxnMarker). The check and the
// append are not atomic: if the transaction's own marker lands in
// between, ours is accepted as its retry (same epoch, nothing open) and
// ends nothing. Safe for concurrent use.
func (m *ReplicaManager) AbortTransaction(ctx context.Context, tp TopicPartition, a HangingAbort) (int64, error) {
	p, err := m.Replica(tp.Topic, tp.Partition)
	if err != nil {
		return -1, err
	}
	if err := m.checkLeader(p); err != nil {
		return -1, err
	}
	e, ok := p.log.Producer(a.ProducerID)
	if !ok || e.TxnFirstOffset < 0 {
		return -1, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "producer %d has no open transaction on %s: nothing to abort", a.ProducerID, tp)
	}
	if e.Epoch != a.ProducerEpoch {
		return -1, errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "the open transaction of producer %d on %s is at epoch %d, not %d", a.ProducerID, tp, e.Epoch, a.ProducerEpoch)
	}
	if a.ProducerEpoch == math.MaxInt16 {
		return -1, errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "producer %d is at the last epoch %d: an abort marker must carry a higher one", a.ProducerID, a.ProducerEpoch)
	}
	now := time.Now()
	raw := batch.MarkerBatch(batch.Producer{ID: a.ProducerID, Epoch: int32(a.ProducerEpoch) + 1}, batch.ControlAbort, a.CoordinatorEpoch, now.UnixMilli())
	res, err := m.AppendCommitted(ctx, tp, raw, NoLeaderEpoch, now)
	if err == nil || errs.Code(err) == sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND {
		m.markerCommitted(tp, a.ProducerID, false, res.BaseOffset)
	}
	if err != nil {
		return -1, err
	}
	return res.BaseOffset, nil
}

// DefaultTransactionMaxTimeout is transaction.max.timeout.ms's default
// (15 min; txn.DefaultMaxTimeout, which cluster does not import).
const DefaultTransactionMaxTimeout = 15 * time.Minute

// LateTransaction is a transaction open on a hosted partition for longer
// than the maximum transaction timeout: its coordinator should have
// aborted it by then, so it is likely hanging (KIP-664; Kafka's
// PartitionsWithLateTransactionsCount counts the partitions holding one).
type LateTransaction struct {
	TopicPartition
	// Leader: this node leads the partition.
	Leader        bool
	ProducerID    int64
	ProducerEpoch int16
	StartOffset   int64
	OpenFor       time.Duration
}

// LateTransactions returns the transactions open on any hosted replica
// (leader or follower) for longer than the configured maximum
// transaction timeout at now, by partition then producer id. A
// transaction's age runs from the append of its first batch on this
// replica (storage.ProducerEntry.TxnStartTime). Safe for concurrent use.
func (m *ReplicaManager) LateTransactions(now time.Time) []LateTransaction {
	var out []LateTransaction
	nowMs := now.UnixMilli()
	for _, p := range m.allReplicas() {
		start, ok := p.log.OldestOpenTransactionStart()
		if !ok || now.Sub(start) <= m.cfg.TransactionMaxTimeout {
			continue // cheap: most partitions hold no late transaction
		}
		leader, _ := p.Leadership()
		for _, e := range p.log.Producers() {
			if e.TxnFirstOffset < 0 || e.TxnStartTime < 0 {
				continue
			}
			if age := time.Duration(nowMs-e.TxnStartTime) * time.Millisecond; age > m.cfg.TransactionMaxTimeout {
				out = append(out, LateTransaction{TopicPartition: p.TopicPartition, Leader: leader == m.cfg.NodeID,
					ProducerID: e.ProducerID, ProducerEpoch: e.Epoch, StartOffset: e.TxnFirstOffset, OpenFor: age})
			}
		}
	}
	slices.SortFunc(out, func(a, b LateTransaction) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.ProducerID, b.ProducerID))
	})
	return out
}

// LogLateTransactions logs (warn) each late transaction of a partition
// this node leads, naming it and the repair tools, and returns them. The
// leader alone logs, so one late transaction is one line per check.
func (m *ReplicaManager) LogLateTransactions(now time.Time) []LateTransaction {
	var led []LateTransaction
	for _, lt := range m.LateTransactions(now) {
		if !lt.Leader {
			continue
		}
		led = append(led, lt)
		m.log.Warn("transaction open longer than the maximum transaction timeout: likely hanging (sluice txn find-hanging, sluice txn abort)",
			lt.TopicPartition.LogAttr(), "producer_id", lt.ProducerID, "producer_epoch", lt.ProducerEpoch,
			"start_offset", lt.StartOffset, "open_for", lt.OpenFor.Round(time.Second), "max_timeout", m.cfg.TransactionMaxTimeout)
	}
	return led
}
