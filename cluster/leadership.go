package cluster

import (
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/replication"
)

// updateRole makes p leader or follower as the image's partition state ps
// says, and queues the leadership events (listener.go). Caller holds
// applyMu.
func (m *ReplicaManager) updateRole(p *Replica, ps *controller.PartitionState, im *controller.Image, tc TopicConfig, now time.Time) {
	self := m.cfg.NodeID
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if ps.Leader == self {
		if p.tracker == nil || p.tracker.LeaderEpoch() != ps.LeaderEpoch {
			if m.fetchers != nil {
				m.fetchers.unfollow(p.TopicPartition)
			}
			p.following = controller.NoLeader
			leo := p.log.EndOffset()
			t, err := replication.NewTracker(replication.TrackerConfig{
				LeaderID: self, LeaderEpoch: ps.LeaderEpoch, PartitionEpoch: ps.PartitionEpoch,
				Replicas: ps.Replicas, ISR: ps.ISR, LeaderLEO: leo, HW: p.log.HighWatermark(),
				LeaderEpochStartOffset: leo, LagTimeMax: m.lagTimeMax(), MinInsyncReplicas: tc.MinInsyncReplicas, Now: now,
			})
			if err != nil {
				m.log.Error("cannot lead partition", p.LogAttr(), "err", err)
				p.dropTrackerLocked()
				return
			}
			p.dropTrackerLocked()
			p.tracker = t
			// Fetch sessions holding the old epoch answer its fencing.
			p.signalWatchers(true)
			// A leader whose ISR is only itself commits its whole log at
			// once (Kafka makeLeader → maybeIncrementLeaderHW).
			t.LeaderAppended(leo, now)
			p.publishHWLocked()
			p.events.changed(p.TopicPartition, ps.LeaderEpoch, true)
			m.log.Info("became leader", p.LogAttr(), "leader_epoch", ps.LeaderEpoch, "isr", ps.ISR, "log_end_offset", leo, "high_watermark", p.log.HighWatermark())
		} else if ps.PartitionEpoch != p.tracker.PartitionEpoch() {
			if changed, err := p.tracker.ApplyMetadata(ps.LeaderEpoch, ps.PartitionEpoch, ps.Replicas, ps.ISR, now); err != nil {
				m.log.Error("partition metadata not applied", p.LogAttr(), "err", err)
			} else if changed {
				p.publishHWLocked()
			}
		}
		for _, r := range ps.Replicas {
			if r != self {
				// Fenced brokers and replicas offline after a disk error
				// (decision 42) may not join the ISR.
				_ = p.tracker.SetISREligible(r, im.ReplicaLive(p.Topic, p.Partition, r))
			}
		}
		p.queueExpansionsLocked()
		return
	}
	p.dropTrackerLocked()
	if ps.Leader == controller.NoLeader {
		if m.fetchers != nil {
			m.fetchers.unfollow(p.TopicPartition)
		}
		p.following, p.followEpoch = controller.NoLeader, -1
		return
	}
	if p.following != ps.Leader || p.followEpoch != ps.LeaderEpoch {
		p.following, p.followEpoch = ps.Leader, ps.LeaderEpoch
		if m.fetchers != nil {
			m.fetchers.follow(p, ps.Leader, ps.LeaderEpoch)
			m.log.Info("became follower", p.LogAttr(), "leader", ps.Leader, "leader_epoch", ps.LeaderEpoch, "log_end_offset", p.log.EndOffset())
		}
	}
}

// lockAsFollower takes roleMu if p still follows leader at leaderEpoch and
// reports whether it did; the caller unlocks.
func (p *Replica) lockAsFollower(leader, leaderEpoch int32) bool {
	p.roleMu.Lock()
	if p.tracker == nil && p.following == leader && p.followEpoch == leaderEpoch {
		return true
	}
	p.roleMu.Unlock()
	return false
}

// dropTrackerLocked ends leadership: waiters wake and see it gone, and
// listeners hear Resigned. The caller holds roleMu (and applyMu: every
// leadership change happens under it).
func (p *Replica) dropTrackerLocked() {
	if p.tracker == nil {
		return
	}
	epoch := p.tracker.LeaderEpoch()
	p.tracker = nil
	p.expand = nil
	p.publishHWLocked()
	// Fetch sessions holding p answer NOT_LEADER_OR_FOLLOWER at once.
	p.signalWatchers(true)
	p.events.changed(p.TopicPartition, epoch, false)
}
