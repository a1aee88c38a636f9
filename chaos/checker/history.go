// Package checker judges a chaos run's history: what producers were told,
// what consumers read, and what the replicas hold once the cluster is
// healed. It is pure: a History in, a Report out, no clock and no network.
//
// Values are unique across the whole run (the workload makes them so), which
// is what lets a value identify one write wherever it is read.
package checker

import "time"

// Outcome is what a producer learned about one write.
type Outcome int

const (
	// OK: acknowledged (acks=all) at Write.Offset.
	OK Outcome = iota
	// Failed: definitely not written (refused before append, e.g. a
	// validation error). Reading the value later is an anomaly.
	Failed
	// Unknown: timed out, connection lost, or retries ran out; the value
	// may or may not be in the log.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	}
	return "outcome?"
}

// Write is one produce of one record, from invocation to completion.
type Write struct {
	// Producer names the producer instance (one idempotent producer id).
	// A restarted producer is a new name.
	Producer  string
	Partition int32
	// Seq is the order in which Producer sent its writes (0, 1, 2, ...):
	// an idempotent producer must keep that order within a partition.
	Seq   int64
	Key   string
	Value string // unique across the run
	// Invoke and Complete bracket the call. Complete is zero for a write
	// still in flight when the run ended (treated as Unknown).
	Invoke   time.Time
	Complete time.Time
	Outcome  Outcome
	Offset   int64 // valid only when Outcome == OK
	Err      string
	// Txn is the ID of the transaction the write belongs to (History.Txns);
	// empty for a write outside any transaction. A transactional write is
	// judged by its transaction's outcome (see Check), not by lost-write and
	// unseen-ack: an acknowledged record of an aborted transaction is
	// rightly never read by read_committed readers.
	Txn string
	// CopyOf is, for a copier's output write, the input value it copies
	// (see Copier); empty otherwise.
	CopyOf string
}

// Read is one record returned to a consumer.
type Read struct {
	// Consumer names the consumer session: within one session offsets of a
	// partition must strictly increase. A consumer that seeks back or
	// restarts starts a new session name.
	Consumer  string
	Partition int32
	Offset    int64
	Key       string
	Value     string
	Time      time.Time
	// Committed says the session reads with read_committed (it must see
	// only committed transactions, and all of each); false for
	// read_uncommitted.
	Committed bool
}

// ReplicaRecord is one record of one replica's log.
type ReplicaRecord struct {
	Offset int64
	Value  string
}

// ReplicaLog is what one replica of one partition holds, read from its
// files once the cluster is healed and stopped.
type ReplicaLog struct {
	Partition int32
	Node      int32
	// HighWatermark is this replica's checkpointed high watermark.
	HighWatermark int64
	Records       []ReplicaRecord
}

// History is everything a run recorded.
type History struct {
	Writes []Write
	Reads  []Read
	// Replicas: every replica of every partition, after healing. May be
	// empty (the replica check is then skipped and says so).
	Replicas []ReplicaLog
	// Txns are the transactions the writes' Txn fields refer to.
	Txns []Txn
	// Watermarks are samples of partitions' high watermark and last
	// stable offset, in time order per partition, for the stuck-LSO check
	// (skipped when empty).
	Watermarks []Watermark
	// HealedAt is when the last fault was healed; LSOBound is how long
	// after max(HealedAt, a sample's time) the LSO must have passed that
	// sample's high watermark: the transaction timeout plus a margin.
	HealedAt time.Time
	LSOBound time.Duration
	// Copier, when set, is a transactional copier's input partitions and
	// the positions it committed by the end (see CopierEnds).
	Copier *Copier
}

// Copier describes a transactional copier: it reads its input
// partitions with read_committed and writes each record to an output
// topic (writes with CopyOf set) in transactions that also carry its
// position in each input partition.
type Copier struct {
	// Ends maps each input partition to the position the copier had
	// committed at the end (read back from its positions with
	// read_committed): every input record below it must be visible in the
	// output exactly once, none at or above it.
	Ends map[int32]int64
}
