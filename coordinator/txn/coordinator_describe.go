package txn

import (
	"slices"
	"strings"
	"time"

	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Description is DescribeTransactions' answer for one id.
type Description struct {
	// Metadata is the id's applied state (a copy).
	Metadata
	// CoordinatorEpoch is the leader epoch of its __transaction_state
	// partition on this node.
	CoordinatorEpoch int32
}

// Describe returns the applied state of transactionalID (what is
// committed in the log; a transition in flight is not shown).
// Errors: INVALID_REQUEST (bad id), NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
// TRANSACTIONAL_ID_NOT_FOUND.
func (c *Coordinator) Describe(transactionalID string) (Description, error) {
	if err := ValidateTransactionalID(transactionalID); err != nil {
		return Description{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, err := c.rt.RouteLocked(transactionalID)
	if err != nil {
		return Description{}, err
	}
	m := ps.txns[transactionalID]
	if m == nil {
		return Description{}, errs.New(sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND,
			"transactional id %q is not known", errs.Echo(transactionalID))
	}
	return Description{Metadata: m.Clone(), CoordinatorEpoch: ps.Epoch}, nil
}

// ListFilter selects the transactions List returns; zero fields select
// everything.
type ListFilter struct {
	// States: only ids in one of these states.
	States []State
	// ProducerIDs: only ids with one of these producer ids.
	ProducerIDs []int64
	// MinDuration (KIP-994): only transactions open (Ongoing, Prepare*)
	// for at least this long; idle ids have no running transaction and
	// are left out when it is set.
	MinDuration time.Duration
}

// Listing is one entry of List.
type Listing struct {
	TransactionalID string
	ProducerID      int64
	State           State
	// StartTimeMs is when the open (or last) transaction started, in Unix
	// milliseconds (NoTimestamp if none has).
	StartTimeMs int64
	// ClientVersion is the transaction version of the open (or last)
	// transaction's client (Metadata.ClientVersion).
	ClientVersion ClientVersion
}

// List returns the ids of every loaded partition matching f, sorted by
// id. While any partition of this node is loading it fails with
// COORDINATOR_LOAD_IN_PROGRESS (as Kafka's ListTransactions), since the
// answer would be incomplete; a partition whose load failed is likewise
// COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) List(f ListFilter) ([]Listing, error) {
	nowMs := c.now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Listing
	for p, ps := range c.rt.PartitionsLocked() {
		if ps.LoadErr() != nil {
			return nil, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s partition %d could not be loaded: %w", StateTopic, p, ps.LoadErr())
		}
		if ps.Loading() {
			return nil, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, "%s partition %d is loading; retry", StateTopic, p)
		}
		for id, m := range ps.txns {
			if len(f.States) > 0 && !slices.Contains(f.States, m.State) {
				continue
			}
			if len(f.ProducerIDs) > 0 && !slices.Contains(f.ProducerIDs, m.ProducerID) {
				continue
			}
			if f.MinDuration > 0 {
				open := m.State == Ongoing || m.State.IsPrepare()
				if !open || nowMs-m.StartTimeMs < f.MinDuration.Milliseconds() {
					continue
				}
			}
			out = append(out, Listing{TransactionalID: id, ProducerID: m.ProducerID, State: m.State, StartTimeMs: m.StartTimeMs, ClientVersion: m.ClientVersion})
		}
	}
	slices.SortFunc(out, func(a, b Listing) int { return strings.Compare(a.TransactionalID, b.TransactionalID) })
	return out, nil
}

// PartitionStats describes one __transaction_state partition this node
// leads, for metrics.
type PartitionStats struct {
	Partition int32
	// CoordinatorEpoch is the partition's leader epoch on this node.
	CoordinatorEpoch int32
	// Loading: the partition is being loaded (its counts are 0 then).
	Loading bool
	// OpenTransactions counts the ids with an open transaction: Ongoing,
	// PrepareCommit or PrepareAbort (applied state).
	OpenTransactions int
	// PendingMarkers counts the ids in PrepareCommit or PrepareAbort: the
	// transactions whose markers are being written.
	PendingMarkers int
	// LoadTime is how long the partition's last load took (0 while it
	// loads), by the coordinator's clock.
	LoadTime time.Duration
	// QueueDepth counts the requests and timers holding or waiting for
	// one of the partition's ids (runtime.Partition.QueueDepth).
	QueueDepth int
}

// Stats returns one PartitionStats per __transaction_state partition this
// node leads, sorted by partition. It reads applied state under the
// coordinator's lock and calls no dependency.
func (c *Coordinator) Stats() []PartitionStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]PartitionStats, 0, len(c.rt.PartitionsLocked()))
	for p, ps := range c.rt.PartitionsLocked() {
		s := PartitionStats{Partition: p, CoordinatorEpoch: ps.Epoch, Loading: ps.Loading(), LoadTime: ps.LoadTime(), QueueDepth: ps.QueueDepth()}
		for _, m := range ps.txns {
			if m.State == Ongoing || m.State.IsPrepare() {
				s.OpenTransactions++
			}
			if m.State.IsPrepare() {
				s.PendingMarkers++
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PartitionStats) int { return int(a.Partition - b.Partition) })
	return out
}

// AppendLatency is the distribution of the coordinator's appends to
// __transaction_state, from the call to the commit or the failure.
func (c *Coordinator) AppendLatency() runtime.HistogramSnapshot {
	return c.rt.AppendLatency()
}
