package txn

import (
	"context"
)

// The coordinator's dependencies (STYLE §3) besides its runtime.Log: small
// interfaces owned here, so its tests use fakes and the node wires the
// real ones (coordinator.ProducerIDManager, coordinator.BrokerMarkerWriter).

// ProducerIDSource hands out producer ids: ProducerIDManager.Next's
// contract (an id never returned before; COORDINATOR_LOAD_IN_PROGRESS
// when none is at hand before ctx ends; COORDINATOR_NOT_AVAILABLE after
// Close). Safe for concurrent use.
type ProducerIDSource interface {
	Next(ctx context.Context) (int64, error)
}

// Markers is one round of transaction markers for one transaction:
// a COMMIT (Commit) or ABORT marker written for ProducerID at
// ProducerEpoch with CoordinatorEpoch (the __transaction_state leader
// epoch of the coordinator sending it) to each of Partitions.
type Markers struct {
	TransactionalID  string
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Commit           bool
	Partitions       []TopicPartition
	// ClientVersion is the ending transaction's (Metadata.ClientVersion):
	// the partition checks the marker's epoch by its rule — TV2: above
	// the producer's epoch there; TV1 (and 0): at least it, equal
	// allowed (Kafka's WriteTxnMarkers TransactionVersion).
	ClientVersion ClientVersion
}

// MarkerWriter writes transaction markers to the leaders of their
// partitions (the internal WriteTxnMarkers RPC, batched per broker, each
// leader appending batch.MarkerBatch with AppendCommitted:
// coordinator.BrokerMarkerWriter).
//
// WriteMarkers returns one outcome per partition of m.Partitions (a map
// keyed by partition; a partition missing from it counts as retriable).
// A nil error means the marker is committed in that partition. Errors
// are *errs.Error; the coordinator reads their codes as follows:
//   - UNKNOWN_TOPIC_OR_PARTITION: the partition no longer exists (its
//     topic was deleted) — the writer must answer it only then, never for
//     "leader unknown"; the partition is dropped from the round, as Kafka
//     drops markers of deleted topics;
//   - TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH: a newer
//     coordinator or producer epoch wrote there; this coordinator's view
//     is stale and it stops the round without completing (the
//     partition's next leader resends);
//   - anything else (NOT_LEADER_OR_FOLLOWER, timeouts, an unreachable
//     broker, ...): retried after a backoff.
//
// It must honour ctx, may be called concurrently for different
// transactions, and must not modify m.
type MarkerWriter interface {
	WriteMarkers(ctx context.Context, m Markers) map[TopicPartition]error
}
