package cluster

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/storage"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (tp TopicPartition) String() string { return tp.Topic + "-" + strconv.Itoa(int(tp.Partition)) }

// Replica is this node's replica of one partition. Its Log is safe for
// concurrent use; leadership and config follow the metadata image.
type Replica struct {
	TopicPartition
	TopicID string
	Log     *storage.Log

	// leadership packs leader id (high 32 bits) and leader epoch (low).
	leadership atomic.Uint64
	config     atomic.Pointer[TopicConfig]

	// roleMu guards the replication role below (see roles.go).
	roleMu sync.Mutex
	// tracker is the ISR/HW state while this broker leads; nil otherwise.
	tracker *replication.Tracker
	// hwCh is closed (and replaced) when the HW moves or leadership ends.
	hwCh chan struct{}
	// following and followEpoch name the leader being fetched from
	// (controller.NoLeader when not a follower).
	following   int32
	followEpoch int32
	// expand queues followers that qualify for the ISR; altering is set
	// while an AlterPartition is in flight.
	expand   []int32
	altering bool
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
