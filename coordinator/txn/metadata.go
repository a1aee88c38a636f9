package txn

import (
	"cmp"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/proto/topic"
)

// NoProducerID and NoProducerEpoch mean "none" in Metadata and requests,
// as Kafka's RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH. (Allocated
// producer ids start at 1000 and are never ≤ 0: decision 4.)
const (
	NoProducerID    int64 = -1
	NoProducerEpoch int16 = -1
)

// NoTimestamp is StartTimeMs when no transaction has started.
const NoTimestamp int64 = -1

// Defaults and limits of the transaction configuration (Kafka's names).
const (
	// DefaultMaxTimeout is transaction.max.timeout.ms: the largest
	// transaction timeout a producer may ask for.
	DefaultMaxTimeout = 15 * time.Minute
	// DefaultTimeout is the producer's transaction.timeout.ms default.
	DefaultTimeout = time.Minute
	// DefaultIDExpiration is transactional.id.expiration.ms: an id idle
	// (no open transaction, no update) this long is removed.
	DefaultIDExpiration = 7 * 24 * time.Hour
	// MaxTransactionalIDBytes is the longest transactional id, in UTF-8
	// bytes: Kafka's protocol strings carry an int16 length, so no Kafka
	// client can send a longer one, and a record key stays small.
	MaxTransactionalIDBytes = math.MaxInt16
	// maxEpoch is the largest producer epoch (an int16 on the wire).
	maxEpoch = math.MaxInt16
)

// TopicPartition names one partition in a transaction: topic.Partition, the name every layer shares.
type TopicPartition = topic.Partition

// Metadata is what the coordinator knows about one transactional id, and
// what one __transaction_state record holds (Kafka's TransactionMetadata).
// Values are immutable by convention: transitions return new ones and
// never share Partitions with their input.
type Metadata struct {
	// TransactionalID is the record's key. Valid per ValidateTransactionalID.
	TransactionalID string
	// ProducerID is the producer id the id's producer uses now.
	ProducerID int64
	// PrevProducerID is the producer id held before the transition that
	// wrote this record: ProducerID, except right after a move to a new
	// producer id on epoch exhaustion. A retried request with the old id
	// is recognised by it (KIP-360, TV2 overflow retries).
	PrevProducerID int64
	// NextProducerID is set only in a Prepare* state whose epoch bump
	// reached the last epoch: the transaction still ends with ProducerID
	// at ProducerEpoch (the markers' epoch), and Complete moves the id to
	// NextProducerID at epoch 0. NoProducerID otherwise.
	NextProducerID int64
	// ProducerEpoch is the current epoch of ProducerID.
	ProducerEpoch int16
	// LastProducerEpoch is the epoch before the last bump made by a
	// commit, an abort or a KIP-360 InitProducerId (NoProducerEpoch after
	// a plain InitProducerId): a request carrying it is a retry of the
	// call that bumped.
	LastProducerEpoch int16
	// TimeoutMs is the transaction timeout the producer asked for at
	// InitProducerId.
	TimeoutMs int32
	// State is the transaction's state.
	State State
	// Partitions are the partitions in the open (or ending) transaction,
	// sorted by topic then partition, no duplicates; empty in Empty and
	// Complete*.
	Partitions []TopicPartition
	// StartTimeMs is when the current (or last) transaction started, in
	// Unix milliseconds; NoTimestamp in Empty.
	StartTimeMs int64
	// UpdateTimeMs is when this record was prepared, in Unix milliseconds.
	UpdateTimeMs int64
	// ClientVersion is the transaction version of the client of the open,
	// ending or last transaction (Kafka's clientTransactionVersion): set
	// by AddPartitions and EndTxn from their request, kept by the other
	// transitions, so a coordinator-side abort (InitProducerId fencing, a
	// timeout) and a retried EndTxn follow the aborted or ended
	// transaction's rules. A new id starts at 0 (TV1 rules, as Kafka's
	// TV_0) until its first transaction says otherwise.
	ClientVersion ClientVersion
}

// Clone returns a copy of m that shares nothing with it.
func (m Metadata) Clone() Metadata {
	m.Partitions = slices.Clone(m.Partitions)
	return m
}

// PendingMarkers reports whether markers are owed for m: it is in
// PrepareCommit or PrepareAbort. A coordinator loading a partition sends
// them for every such id and then calls Complete.
func (m Metadata) PendingMarkers() bool { return m.State.IsPrepare() }

// Commit reports, for a Prepare* or Complete* state, whether the
// transaction commits (true) or aborts.
func (m Metadata) Commit() bool { return m.State == PrepareCommit || m.State == CompleteCommit }

// epochExhausted is Kafka's isEpochExhausted: a bump from this epoch would
// leave no room for the next one, so the id moves to a new producer id.
func epochExhausted(e int16) bool { return e >= maxEpoch-1 }

// ValidateTransactionalID checks a transactional id from a request: not
// empty (Kafka answers an empty one INVALID_REQUEST), at most
// MaxTransactionalIDBytes bytes, and valid UTF-8 (the id is hashed and
// stored as UTF-8; other bytes could not round-trip through other
// languages' strings). Failures are INVALID_REQUEST *errs.Error.
func ValidateTransactionalID(id string) error {
	switch {
	case id == "":
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "transactional id is empty")
	case len(id) > MaxTransactionalIDBytes:
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "transactional id is %d bytes, more than %d", len(id), MaxTransactionalIDBytes)
	case !utf8.ValidString(id):
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "transactional id is not valid UTF-8")
	}
	return nil
}

// ValidateTimeout checks a requested transaction timeout against
// transaction.max.timeout.ms (max; zero means DefaultMaxTimeout): it must
// be above zero and at most max, as Kafka's validateTransactionTimeoutMs.
// Failures are INVALID_TRANSACTION_TIMEOUT *errs.Error.
func ValidateTimeout(timeoutMs int32, max time.Duration) error {
	if max <= 0 {
		max = DefaultMaxTimeout
	}
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > max {
		return errs.New(sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT,
			"transaction timeout %d ms is not in (0, %d] ms (transaction.max.timeout.ms)", timeoutMs, max.Milliseconds())
	}
	return nil
}

// comparePartitions orders partitions by topic, then partition.
func comparePartitions(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// unionPartitions returns the sorted, duplicate-free union of a and b in a
// new slice.
func unionPartitions(a, b []TopicPartition) []TopicPartition {
	out := make([]TopicPartition, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	slices.SortFunc(out, comparePartitions)
	return slices.Compact(out)
}

// containsAll reports whether every partition of sub is in set (sorted).
func containsAll(set, sub []TopicPartition) bool {
	for _, p := range sub {
		if _, ok := slices.BinarySearchFunc(set, p, comparePartitions); !ok {
			return false
		}
	}
	return true
}
