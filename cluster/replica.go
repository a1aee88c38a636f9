package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/proto/topic"
	"github.com/sluice-io/sluice/storage"
)

// TopicPartition names one partition: topic.Partition, the name every layer shares.
type TopicPartition = topic.Partition

// Replica is this node's replica of one partition: its log, and its
// role (leader or follower) as the metadata image says. Safe for
// concurrent use. Its log is reached through the ReplicaManager's read
// and append paths and the accessors below, never directly.
type Replica struct {
	TopicPartition
	TopicID string
	// log is the partition's log; safe for concurrent use (storage.Log).
	log *storage.Log
	// events is the manager's leadership-event queue (listener.go).
	events *leadershipEvents

	// leadership packs leader id (high 32 bits) and leader epoch (low).
	leadership atomic.Uint64
	config     atomic.Pointer[TopicConfig]

	// roleMu guards the replication role below (leadership.go, isr.go).
	// Lock order: roleMu before the log's locks (docs/locks.md).
	roleMu sync.Mutex
	// tracker is the ISR/HW state while this broker leads; nil otherwise.
	tracker *replication.Tracker
	// hwCh is closed (and replaced) when the HW moves or leadership ends
	// (WaitCommitted waits on it).
	hwCh chan struct{}
	// commitWaits are the acks=all waits of AwaitCommit, in offset order
	// (commitwait.go); empty while this broker does not lead. waitTimer
	// ends those whose deadline passed; waitTimerAt is when it fires
	// (zero: not armed).
	commitWaits []*commitWait
	waitTimer   *time.Timer
	waitTimerAt time.Time
	// following and followEpoch name the leader being fetched from
	// (controller.NoLeader when not a follower).
	following   int32
	followEpoch int32
	// expand queues followers that qualify for the ISR (and isrQueue,
	// the manager's, the replica); altering is set while an
	// AlterPartition is in flight.
	expand   []int32
	isrQueue *isrQueue
	altering bool

	// watchMu guards watchers, the fetch sessions' entries for p
	// (fetchsession.go); taken under the log's lock by its change hook.
	watchMu  sync.Mutex
	watchers []*sessionPart
}

// Leadership returns the partition's leader and leader epoch as this
// broker last applied them.
func (p *Replica) Leadership() (leader, epoch int32) {
	v := p.leadership.Load()
	return int32(v >> 32), int32(uint32(v))
}

// LeaderEpoch is the current leader epoch.
func (p *Replica) LeaderEpoch() int32 {
	_, e := p.Leadership()
	return e
}

func (p *Replica) setLeadership(leader, epoch int32) {
	p.leadership.Store(uint64(uint32(leader))<<32 | uint64(uint32(epoch)))
}

// Config is the topic's effective configuration.
func (p *Replica) Config() TopicConfig { return *p.config.Load() }

// IsLeader reports whether this broker leads p at leaderEpoch (any epoch
// when leaderEpoch < 0).
func (p *Replica) IsLeader(leaderEpoch int32) bool {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	return p.tracker != nil && (leaderEpoch < 0 || p.tracker.LeaderEpoch() == leaderEpoch)
}

// HighWatermark is the partition's high watermark on this replica: on the
// leader the offset below which records are committed; on a follower the
// leader's as last fetched (bounded by its own log end).
func (p *Replica) HighWatermark() int64 { return p.log.HighWatermark() }

// LogStartOffset is the first offset still in the log.
func (p *Replica) LogStartOffset() int64 { return p.log.StartOffset() }

// LogEndOffset is the offset the next record appended here will get.
func (p *Replica) LogEndOffset() int64 { return p.log.EndOffset() }

// LastStableOffset is the offset below which read_committed consumers
// read (DESIGN §10): min(first offset of the oldest open transaction,
// high watermark); the high watermark while no transaction is open.
func (p *Replica) LastStableOffset() int64 { return p.lastStableOffset() }

// Size is the bytes of the log's segments.
func (p *Replica) Size() int64 { return p.log.Size() }

// ProducerCount is the number of producer ids whose idempotence state
// this replica keeps.
func (p *Replica) ProducerCount() int { return p.log.ProducerCount() }

// OpenTransactions is the number of transactions open in the replica's
// producer state (storage.Log.OpenTransactions).
func (p *Replica) OpenTransactions() int { return p.log.OpenTransactions() }

// MaxTimestampOffset is the offset and timestamp of the record with the
// largest timestamp (ListOffsets MAX_TIMESTAMP); -1, -1 for an empty log.
func (p *Replica) MaxTimestampOffset() (offset, timestamp int64) { return p.log.MaxTimestampOffset() }

// OffsetForTimestamp is the first offset whose timestamp is >= ts, and
// that timestamp (ListOffsets TIMESTAMP); found is false when there is
// none.
func (p *Replica) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	return p.log.OffsetForTimestamp(ts)
}

// Changed returns a channel closed at the log's next change (append,
// truncation, retention, high-watermark move, close); fetch it again after
// it fires.
func (p *Replica) Changed() <-chan struct{} { return p.log.Changed() }

// EpochEntries is the replica's leader-epoch cache, oldest first (a copy).
func (p *Replica) EpochEntries() []replication.EpochEntry { return p.log.EpochEntries() }

// ReadResult is a raw read of a replica's log (Replica.Read).
type ReadResult struct {
	// Batches are whole canonical batches in offset order; the first may
	// start before the offset read. The caller must not modify them.
	Batches [][]byte
	// NextOffset is the offset after the last batch, or the offset read
	// when there is none.
	NextOffset int64
}

// Read returns whole batches from offset below maxOffset, about maxBytes
// of them (at least one batch when there is one). It applies no leader or
// isolation rule: it is for tools and tests; clients and followers read
// through ReplicaManager.Fetch.
func (p *Replica) Read(offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	res, err := p.log.Read(offset, maxBytes, maxOffset)
	return ReadResult{Batches: res.Batches, NextOffset: res.NextOffset}, err
}
