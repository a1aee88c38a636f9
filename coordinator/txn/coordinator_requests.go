package txn

import (
	"context"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The requests a transaction coordinator answers. Each validates its
// input, routes the id to its loaded partition (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS), takes the id's slot (else
// CONCURRENT_TRANSACTIONS), runs the core and, when the core writes,
// answers only once the record is committed and applied. Errors are
// *errs.Error; every one of them but the core's own answers is retriable.

// ProducerIDAndEpoch is a successful answer: the producer id and epoch
// the producer uses next.
type ProducerIDAndEpoch struct {
	ProducerID    int64
	ProducerEpoch int16
}

// InitProducerID answers InitProducerId for a transactional producer (the
// core's InitProducerID): a new or bumped producer id and epoch. An open
// transaction of the id is fenced and aborted first; the answer is then
// CONCURRENT_TRANSACTIONS, and the producer's retry gets its epoch once
// the abort has completed. req.NewProducerID is ignored: the coordinator
// takes one from its ProducerIDSource when the core asks for one.
func (c *Coordinator) InitProducerID(ctx context.Context, req InitProducerIDRequest) (ProducerIDAndEpoch, error) {
	if err := ValidateTransactionalID(req.TransactionalID); err != nil {
		return ProducerIDAndEpoch{}, err
	}
	if err := ValidateTimeout(req.TimeoutMs, c.cfg.MaxTimeout); err != nil {
		return ProducerIDAndEpoch{}, err
	}
	if req.ProducerID > 0 && req.ProducerEpoch < 0 {
		return ProducerIDAndEpoch{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST,
			"producer id %d given without its epoch", req.ProducerID)
	}
	return c.serve(ctx, req.TransactionalID, func(m *Metadata, newPID int64, now time.Time) Result {
		r := req
		r.NewProducerID = newPID
		return InitProducerID(m, r, now)
	})
}

// AddPartitions answers AddPartitionsToTxn (the core's AddPartitions) in
// its three forms, told apart by req.ClientVersion and req.VerifyOnly:
//
//   - TV2 add (ClientVersion TV2): the leader of a partition receiving a
//     TV2 transaction's first batch adds the partition before it appends
//     (coordinator.BrokerTxnVerifier; every request of the gRPC door).
//   - TV1 client add (ClientVersion TV1, VerifyOnly false): a TV1 client's
//     own AddPartitionsToTxn v0–v3, and its AddOffsetsToTxn — the Kafka
//     door passes the group's __consumer_offsets partition
//     (group.PartitionFor), which this package accepts as any partition.
//     The transaction starts (or grows) at the producer's current epoch.
//   - verification (VerifyOnly): a partition leader of a TV1 produce, the
//     group coordinator of a TV1 TxnOffsetCommit, or a Kafka broker's
//     AddPartitionsToTxn v4+ with verifyOnly: nothing is written; nil only
//     if every partition is already in the open transaction at
//     req.ProducerID/ProducerEpoch, else INVALID_TXN_STATE (or the epoch
//     and id codes of the core).
//
// Once an add returns nil the partitions are in the open transaction,
// durably, and its end will write their markers.
//
// While the id is busy — its previous transaction's markers are still
// being written (Prepare*), or another request holds its slot — it waits
// for that to finish (up to MaxConcurrentWait, within ctx) and tries
// again, rather than answering CONCURRENT_TRANSACTIONS at once: the first
// batch of a producer's next transaction arrives right after its commit
// answer, before the markers, and a retry after a backoff would hold it
// back for the whole backoff (Kafka's broker retries every 20 ms).
//
// Concurrent TV2 adds of one transaction are joined and written as one
// record (coordinator_adds.go).
func (c *Coordinator) AddPartitions(ctx context.Context, req AddPartitionsRequest) error {
	if err := ValidateTransactionalID(req.TransactionalID); err != nil {
		return err
	}
	if !joinable(req) {
		return c.addPartitions(ctx, req, nil)
	}
	b, lead := c.adds.join(req)
	if !lead {
		return b.wait(ctx)
	}
	err := c.addPartitions(ctx, req, b)
	c.adds.finish(b, err)
	return err
}

// addPartitions is AddPartitions for req alone (b nil) or for the batch b
// it leads: each attempt takes b's partitions joined so far.
func (c *Coordinator) addPartitions(ctx context.Context, req AddPartitionsRequest, b *addBatch) error {
	deadline := time.Now().Add(c.cfg.MaxConcurrentWait)
	for {
		changed := c.changes(req.TransactionalID)
		_, err := c.serve(ctx, req.TransactionalID, func(m *Metadata, _ int64, now time.Time) Result {
			if b == nil {
				return AddPartitions(m, req, now)
			}
			return c.adds.decide(b, req, func(r AddPartitionsRequest) Result { return AddPartitions(m, r, now) })
		})
		if errs.Code(err) != sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS || changed == nil {
			return err
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return err
		}
		// Woken by the id's next state change; and at most every
		// concurrentRecheck, for a slot freed without a change.
		t := time.NewTimer(min(wait, concurrentRecheck))
		select {
		case <-changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// concurrentRecheck bounds one wait of AddPartitions for a busy id: a
// slot released without a change (another request refused, a marker
// round that found nothing to complete) wakes no one.
const concurrentRecheck = 20 * time.Millisecond

// changes returns the channel closed at the next change of id's
// partition (nil when this node does not hold it loaded).
func (c *Coordinator) changes(id string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, err := c.rt.RouteLocked(id)
	if err != nil {
		return nil
	}
	return ps.changed
}

// EndTxn answers EndTxn (the core's EndTxn). req.ClientVersion is TV2 for
// the gRPC door and a Kafka EndTxn v5+ from a TV2 client, TV1 for EndTxn
// v0–v4. Once PrepareCommit or PrepareAbort is committed it answers the
// producer id and epoch to continue with: TV2 the bumped epoch (or the
// next producer id at epoch 0), TV1 the same epoch; the markers (carrying
// that epoch and the transaction's version) are then written in the
// background and the transaction completes (CompleteCommit/CompleteAbort
// written) when every partition has its marker. Until then the id
// answers CONCURRENT_TRANSACTIONS. req.NewProducerID is ignored, as for
// InitProducerID.
func (c *Coordinator) EndTxn(ctx context.Context, req EndTxnRequest) (ProducerIDAndEpoch, error) {
	if err := ValidateTransactionalID(req.TransactionalID); err != nil {
		return ProducerIDAndEpoch{}, err
	}
	return c.serve(ctx, req.TransactionalID, func(m *Metadata, newPID int64, now time.Time) Result {
		r := req
		r.NewProducerID = newPID
		return EndTxn(m, r, now)
	})
}

// serve runs one request for id on its in-flight slot: core decides
// (called again with a fresh producer id when it asks for one), the
// result is persisted and applied (answer), and the slot is released on
// every path.
func (c *Coordinator) serve(ctx context.Context, id string, core func(m *Metadata, newPID int64, now time.Time) Result) (ProducerIDAndEpoch, error) {
	ps, m, err := c.acquire(id)
	if err != nil {
		return ProducerIDAndEpoch{}, err
	}
	now := c.now()
	r, err := c.decide(ctx, func(newPID int64) Result { return core(m, newPID, now) })
	if err != nil {
		c.release(ps, id)
		return ProducerIDAndEpoch{}, err
	}
	return c.answer(ctx, ps, id, r)
}

// answer persists and applies r (transition) and returns its answer.
func (c *Coordinator) answer(ctx context.Context, ps *statePartition, id string, r Result) (ProducerIDAndEpoch, error) {
	if err := c.transition(ctx, ps, id, r); err != nil {
		return ProducerIDAndEpoch{}, err
	}
	if r.Err != nil {
		return ProducerIDAndEpoch{}, r.Err
	}
	return ProducerIDAndEpoch{ProducerID: r.ProducerID, ProducerEpoch: r.ProducerEpoch}, nil
}
