package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Offsets committed inside a transaction (KIP-447): the group coordinator
// writes them to its __consumer_offsets partition as a transactional batch
// of the producer (AppendCoordinatorTxn), and learns the transaction's
// outcome from the marker its coordinator later writes there
// (TxnMarkerListener). cluster owns both hooks; it never imports the
// coordinator.

// TxnMarkerListener is told of every transaction marker this node, as the
// partition's leader, has committed to a partition of the topic it was
// registered for (SetTxnMarkerListener): the group coordinator applies or
// drops the offsets a transaction left pending in that partition.
//
// Contract: TxnMarkerCommitted is called on the goroutine that wrote the
// marker (a WriteTxnMarkers handler, the hanging-transaction abort), after
// the marker is committed, with no replica manager lock held; it must not
// block. Calls for different markers may run concurrently and arrive out
// of offset order; a listener orders them by markerOffset. A marker
// appended but not known to be committed (the wait ended) is not reported:
// the coordinator's next load reads it from the log.
type TxnMarkerListener interface {
	TxnMarkerCommitted(tp TopicPartition, producerID int64, commit bool, markerOffset int64)
}

// txnMarkerListeners maps a topic to its listener.
type txnMarkerListeners struct {
	mu sync.RWMutex // guards m
	m  map[string]TxnMarkerListener
}

// SetTxnMarkerListener sets the listener of topic's markers (nil removes
// it). Safe at any time; a marker committed meanwhile may be reported to
// the old listener.
func (m *ReplicaManager) SetTxnMarkerListener(topic string, l TxnMarkerListener) {
	m.markerListeners.mu.Lock()
	defer m.markerListeners.mu.Unlock()
	if m.markerListeners.m == nil {
		m.markerListeners.m = map[string]TxnMarkerListener{}
	}
	if l == nil {
		delete(m.markerListeners.m, topic)
		return
	}
	m.markerListeners.m[topic] = l
}

// markerCommitted reports a committed marker to its topic's listener.
func (m *ReplicaManager) markerCommitted(tp TopicPartition, producerID int64, commit bool, offset int64) {
	m.markerListeners.mu.RLock()
	l := m.markerListeners.m[tp.Topic]
	m.markerListeners.mu.RUnlock()
	if l != nil {
		l.TxnMarkerCommitted(tp, producerID, commit, offset)
	}
}

// AppendCoordinatorTxn appends a transactional batch that a coordinator
// writes on a producer's behalf — the group coordinator's offsets of
// TxnOffsetCommit — to tp as its leader at leaderEpoch, and waits until it
// is committed. tp is first added to the producer's transaction at its
// coordinator exactly as for the producer's own batches (AppendTxnTo's
// verification guard, TV2), so the transaction's markers reach tp — or,
// with verifyOnly (a TV1 producer, which added tp itself with
// AddOffsetsToTxn), only verified to be in it (INVALID_TXN_STATE if not).
//
// build returns the batch for a base sequence: the producer's next
// sequence on tp at producerEpoch (0 when tp has nothing of that epoch);
// it must return a transactional batch of (producerID, producerEpoch)
// starting at that sequence. Calls for one producer and partition must
// not run concurrently (the caller serializes them), or both may pick the
// same sequence and one is refused (OUT_OF_ORDER_SEQUENCE_NUMBER).
//
// Outcomes are AppendTxnTo's before the append (nothing stored:
// NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, INVALID_PRODUCER_EPOCH,
// INVALID_TXN_STATE, the coordinator's codes, NOT_ENOUGH_REPLICAS, ...)
// and AppendCommitted's after it (nil; an error wrapping ErrCommitUnknown;
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, committed).
func (m *ReplicaManager) AppendCoordinatorTxn(ctx context.Context, tp TopicPartition, leaderEpoch int32, transactionalID string,
	producerID int64, producerEpoch int16, verifyOnly bool, build func(baseSequence int32) []byte, now time.Time) (AppendResult, error) {
	p, err := m.Replica(tp.Topic, tp.Partition)
	if err != nil {
		return AppendResult{}, err
	}
	if !p.IsLeader(leaderEpoch) {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d does not lead %s at leader epoch %d", m.cfg.NodeID, tp, leaderEpoch)
	}
	seq := int32(0)
	if e, ok := p.log.Producer(producerID); ok && e.Epoch == producerEpoch && len(e.Batches) > 0 {
		seq = e.Batches[len(e.Batches)-1].LastSeq + 1
		if seq < 0 { // wraps after MaxInt32, as batch.Header.LastSequence
			seq = 0
		}
	}
	res, err := m.appendTxnTo(ctx, p, transactionalID, build(seq), now, true, verifyOnly)
	if err != nil {
		return res, err
	}
	return res, p.WaitCommitted(ctx, res.LastOffset, res.LeaderEpoch)
}
