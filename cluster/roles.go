package cluster

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// DefaultReplicaLagTimeMax is replica.lag.time.max.ms: a follower that has
// not caught up with the leader for this long leaves the ISR.
const DefaultReplicaLagTimeMax = 30 * time.Second

// isrCheckInterval is how often leaders look for ISR changes and
// checkpoint high watermarks.
const (
	isrCheckInterval  = 250 * time.Millisecond
	hwCheckpointEvery = 5 * time.Second
)

// ReplicationConfig connects a ReplicaManager to the cluster: where
// leaders are (the metadata cache), how to reach other brokers, the
// controller (AlterPartition) and this broker's epoch.
type ReplicationConfig struct {
	Metadata    *MetadataCache
	Pool        *ConnPool
	Controllers *ControllerClient
	BrokerEpoch func() int64
	// LagTimeMax is replica.lag.time.max.ms; 0 means the default.
	LagTimeMax time.Duration
}

// StartReplication starts follower fetchers and the leaders' ISR upkeep.
// Call it once, before the first Apply that should replicate; without it
// the manager hosts leaders only (tests of a single node).
func (m *ReplicaManager) StartReplication(rc ReplicationConfig) {
	if rc.LagTimeMax <= 0 {
		rc.LagTimeMax = DefaultReplicaLagTimeMax
	}
	m.applyMu.Lock()
	m.repl = &rc
	m.fetchers = newFetcherManager(m, rc.Pool, m.log)
	m.applyMu.Unlock()
	m.wg.Add(1)
	go m.isrLoop()
}

func (m *ReplicaManager) metadata() *MetadataCache { return m.repl.Metadata }

// SetFetchPaused stops (or resumes) every follower fetch of this broker, as
// if its fetchers hung: fault injection for tests. Heartbeats continue.
func (m *ReplicaManager) SetFetchPaused(paused bool) { m.fetchPaused.Store(paused) }

func (m *ReplicaManager) brokerEpoch() int64 {
	if m.repl == nil || m.repl.BrokerEpoch == nil {
		return 0
	}
	return m.repl.BrokerEpoch()
}

func (m *ReplicaManager) lagTimeMax() time.Duration {
	if m.repl == nil {
		return DefaultReplicaLagTimeMax
	}
	return m.repl.LagTimeMax
}

// updateRole makes p leader or follower as the image's partition state ps
// says. Caller holds applyMu.
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
			leo := p.Log.EndOffset()
			t, err := replication.NewTracker(replication.TrackerConfig{
				LeaderID: self, LeaderEpoch: ps.LeaderEpoch, PartitionEpoch: ps.PartitionEpoch,
				Replicas: ps.Replicas, ISR: ps.ISR, LeaderLEO: leo, HW: p.Log.HighWatermark(),
				LeaderEpochStartOffset: leo, LagTimeMax: m.lagTimeMax(), MinInsyncReplicas: tc.MinInsyncReplicas, Now: now,
			})
			if err != nil {
				m.log.Error("cannot lead partition", "partition", p.String(), "err", err)
				p.dropTrackerLocked()
				return
			}
			p.dropTrackerLocked()
			p.tracker = t
			// A leader whose ISR is only itself commits its whole log at
			// once (Kafka makeLeader → maybeIncrementLeaderHW).
			t.LeaderAppended(leo, now)
			p.publishHWLocked()
			m.log.Info("became leader", "partition", p.String(), "leader_epoch", ps.LeaderEpoch, "isr", ps.ISR, "log_end_offset", leo, "high_watermark", p.Log.HighWatermark())
		} else if ps.PartitionEpoch != p.tracker.PartitionEpoch() {
			if changed, err := p.tracker.ApplyMetadata(ps.LeaderEpoch, ps.PartitionEpoch, ps.Replicas, ps.ISR, now); err != nil {
				m.log.Error("partition metadata not applied", "partition", p.String(), "err", err)
			} else if changed {
				p.publishHWLocked()
			}
		}
		for _, r := range ps.Replicas {
			if r != self {
				b := im.Brokers[r]
				_ = p.tracker.SetISREligible(r, b != nil && !b.Fenced)
			}
		}
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
			m.log.Info("became follower", "partition", p.String(), "leader", ps.Leader, "leader_epoch", ps.LeaderEpoch, "log_end_offset", p.Log.EndOffset())
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

// dropTrackerLocked ends leadership: waiters wake and see it gone.
func (p *Replica) dropTrackerLocked() {
	if p.tracker == nil {
		return
	}
	p.tracker = nil
	p.publishHWLocked()
}

// publishHWLocked copies the tracker's HW to the log (waking consumers)
// and wakes acks=all waiters.
func (p *Replica) publishHWLocked() {
	if p.tracker != nil {
		p.Log.SetHighWatermark(p.tracker.HW())
	}
	close(p.hwCh)
	p.hwCh = make(chan struct{})
}

// leaderAppended records the leader's new log end offset.
func (p *Replica) leaderAppended(leo int64, now time.Time) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker != nil && p.tracker.LeaderAppended(leo, now) {
		p.publishHWLocked()
	}
}

// checkAcksAll refuses an acks=all produce before append when the ISR is
// smaller than min.insync.replicas.
func (p *Replica) checkAcksAll() error {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker == nil {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s has no leader here", p)
	}
	if !p.tracker.EnoughReplicas() {
		return errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, "%s has %d in-sync replicas %v, fewer than min.insync.replicas %d",
			p, p.tracker.InSyncCount(), p.tracker.ISR(), p.Config().MinInsyncReplicas)
	}
	return nil
}

// WaitCommitted blocks until the batch ending at lastOffset is below the
// high watermark (replicated to the ISR), ctx ends (REQUEST_TIMED_OUT:
// the batch is in the leader's log and may or may not become committed),
// or leadership is lost (NOT_LEADER_OR_FOLLOWER, same uncertainty).
func (p *Replica) WaitCommitted(ctx context.Context, lastOffset int64) error {
	for {
		p.roleMu.Lock()
		if p.tracker == nil {
			p.roleMu.Unlock()
			return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership of %s was lost before offset %d was replicated; it may or may not be committed", p, lastOffset)
		}
		done, err := p.tracker.AcksAllResult(lastOffset)
		ch := p.hwCh
		p.roleMu.Unlock()
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "offset %d of %s was appended but not replicated to the in-sync replicas in time; it may or may not be committed", lastOffset, p)
		}
	}
}

// IsLeader reports whether this broker leads p at leaderEpoch (any epoch
// when leaderEpoch < 0).
func (p *Replica) IsLeader(leaderEpoch int32) bool {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	return p.tracker != nil && (leaderEpoch < 0 || p.tracker.LeaderEpoch() == leaderEpoch)
}

// FollowerFetched records that replica fetched p at offset (its log end
// offset) in leaderEpoch, advancing the HW and queueing an ISR expansion
// when it qualifies. Errors: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
// (the follower's epoch is older), UNKNOWN_LEADER_EPOCH (newer), and the
// tracker's.
func (p *Replica) FollowerFetched(replica, leaderEpoch int32, offset int64, now time.Time) (int64, error) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	t := p.tracker
	switch {
	case t == nil:
		return 0, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", p)
	case leaderEpoch < t.LeaderEpoch():
		return 0, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch %d of %s is stale, current is %d", leaderEpoch, p, t.LeaderEpoch())
	case leaderEpoch > t.LeaderEpoch():
		return 0, errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch %d of %s is newer than this leader's %d", leaderEpoch, p, t.LeaderEpoch())
	}
	// An append wakes followers before its writer records the new log end
	// in the tracker: catch the tracker up first.
	if leo := p.Log.EndOffset(); leo > t.LeaderLEO() && t.LeaderAppended(leo, now) {
		p.publishHWLocked()
	}
	upd, err := t.FollowerFetched(replica, offset, now)
	if err != nil {
		return 0, err
	}
	if upd.HWChanged {
		p.publishHWLocked()
	}
	if upd.ExpandISR && !slices.Contains(p.expand, replica) {
		p.expand = append(p.expand, replica)
	}
	return upd.HW, nil
}

// EndOffsetForEpoch answers OffsetForLeaderEpoch on the leader.
func (p *Replica) EndOffsetForEpoch(currentEpoch, epoch int32) (int32, int64, error) {
	p.roleMu.Lock()
	t := p.tracker
	var cur int32
	if t != nil {
		cur = t.LeaderEpoch()
	}
	p.roleMu.Unlock()
	switch {
	case t == nil:
		return 0, 0, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", p)
	case currentEpoch >= 0 && currentEpoch < cur:
		return 0, 0, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch %d of %s is stale, current is %d", currentEpoch, p, cur)
	case currentEpoch > cur:
		return 0, 0, errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch %d of %s is newer than this leader's %d", currentEpoch, p, cur)
	}
	// The leader's current epoch counts as starting at its log end even
	// before its first append under it (Kafka assigns it at election).
	e, off := replication.LeaderEndOffsetForEpoch(epochEntries(p.Log), p.Log.EndOffset(), cur, epoch)
	return e, off, nil
}

// epochEntries is l's leader-epoch cache in the replication package's
// terms.
func epochEntries(l *storage.Log) []replication.EpochEntry {
	entries := l.EpochEntries()
	out := make([]replication.EpochEntry, len(entries))
	for i, e := range entries {
		out[i] = replication.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return out
}

// truncateFollower truncates a follower's log where it diverges from the
// leader's answer (KIP-101/279). again reports that another
// OffsetForLeaderEpoch round is needed.
func (m *ReplicaManager) truncateFollower(p *Replica, leaderEpoch int32, endOffset, leaderStart int64) (again bool, err error) {
	d := replication.TruncationOffset(replication.TruncationInput{
		LogStartOffset: p.Log.StartOffset(), LogEndOffset: p.Log.EndOffset(), HighWatermark: p.Log.HighWatermark(),
		Epochs: epochEntries(p.Log), Leader: replication.EpochEndOffset{LeaderEpoch: leaderEpoch, EndOffset: endOffset},
		LeaderLogStartOffset: leaderStart,
	})
	if d.BelowHW {
		m.log.Error("truncating below the high watermark: committed data is lost (unclean leader election?)",
			"partition", p.String(), "truncate_to", d.TruncateTo, "high_watermark", p.Log.HighWatermark(), "rule", d.Rule.String())
	}
	switch {
	case d.Fully:
		m.log.Warn("follower log restarts empty", "partition", p.String(), "at", d.FetchFrom, "rule", d.Rule.String())
		err = p.Log.TruncateFullyAndStartAt(d.FetchFrom)
	case d.Truncate:
		m.log.Info("follower truncating to the divergence point", "partition", p.String(), "from", p.Log.EndOffset(), "to", d.TruncateTo, "rule", d.Rule.String())
		err = p.Log.TruncateTo(d.TruncateTo)
	case p.Log.LatestEpoch() > leaderEpoch && leaderEpoch >= 0 && d.TruncateTo == p.Log.EndOffset():
		// Nothing to cut, but an epoch entry with no records sits at the
		// log end (a leader that crashed before its first batch reached
		// the log): drop it, or the leader's lower-epoch batches would be
		// refused.
		err = p.Log.TruncateTo(d.TruncateTo)
	}
	return d.NeedAnotherRound, err
}

// restartFollowerAt empties a follower whose log ends below the leader's
// log start offset.
func (m *ReplicaManager) restartFollowerAt(p *Replica, offset int64) error {
	m.log.Warn("follower is behind the leader's log start; restarting its log", "partition", p.String(), "at", offset)
	return p.Log.TruncateFullyAndStartAt(offset)
}

// isrLoop is the leaders' upkeep: ISR shrink and expansion through
// AlterPartition, and periodic high-watermark checkpoints.
func (m *ReplicaManager) isrLoop() {
	defer m.wg.Done()
	t := time.NewTicker(isrCheckInterval)
	defer t.Stop()
	lastCkpt := time.Now()
	for {
		select {
		case <-m.stop:
			return
		case now := <-t.C:
			for _, p := range m.allReplicas() {
				m.maybeAlterISR(p, now)
			}
			if now.Sub(lastCkpt) >= hwCheckpointEvery {
				lastCkpt = now
				for _, p := range m.allReplicas() {
					if err := p.Log.CheckpointHighWatermark(); err != nil && err != storage.ErrClosed {
						m.log.Warn("high watermark checkpoint failed", "partition", p.String(), "err", err)
					}
				}
			}
		}
	}
}

// maybeAlterISR proposes one ISR change for p if one is due: removing
// followers out of sync for LagTimeMax, or adding queued caught-up ones.
// The AlterPartition call runs in its own goroutine; one per partition at a
// time.
func (m *ReplicaManager) maybeAlterISR(p *Replica, now time.Time) {
	p.roleMu.Lock()
	t := p.tracker
	if t == nil || p.altering {
		p.expand = nil
		p.roleMu.Unlock()
		return
	}
	isr := t.ISR()
	var next []int32
	if out := t.ShrinkCandidates(now); len(out) > 0 {
		for _, id := range isr {
			if !slices.Contains(out, id) {
				next = append(next, id)
			}
		}
	} else if len(p.expand) > 0 {
		next = slices.Clone(isr)
		for _, id := range p.expand {
			if !slices.Contains(next, id) {
				next = append(next, id)
			}
		}
		p.expand = nil
	}
	if next == nil {
		p.roleMu.Unlock()
		return
	}
	req, err := t.BeginISRChange(next)
	if err != nil {
		p.roleMu.Unlock()
		m.log.Debug("ISR change not proposed", "partition", p.String(), "isr", next, "err", err)
		return
	}
	p.altering = true
	p.roleMu.Unlock()
	m.log.Info("proposing ISR change", "partition", p.String(), "from", isr, "to", req.NewISR)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.sendAlterPartition(p, t, req)
	}()
}

func (m *ReplicaManager) sendAlterPartition(p *Replica, t *replication.Tracker, req replication.AlterRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var resp *internalv1.AlterPartitionResponse
	err := m.repl.Controllers.Call(ctx, 5*time.Second, func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		resp, err = cl.AlterPartition(ctx, &internalv1.AlterPartitionRequest{
			BrokerId: m.cfg.NodeID, BrokerEpoch: m.brokerEpoch(), Topic: p.Topic, Partition: p.Partition,
			LeaderEpoch: req.LeaderEpoch, PartitionEpoch: req.PartitionEpoch, NewIsr: req.NewISR,
		})
		return err
	})
	now := time.Now()
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	p.altering = false
	if p.tracker != t {
		return // leadership changed meanwhile; the new tracker has the truth
	}
	if err != nil {
		m.log.Warn("ISR change refused", "partition", p.String(), "to", req.NewISR, "err", err)
		if t.ISRChangeFailed(now) {
			p.publishHWLocked()
		}
		return
	}
	if t.PartitionEpoch() >= resp.PartitionEpoch {
		// The metadata stream delivered the change first (ApplyMetadata).
	} else if changed, err := t.ISRChangeCommitted(resp.Isr, resp.PartitionEpoch, now); err != nil {
		m.log.Warn("ISR change result not applied", "partition", p.String(), "err", err)
	} else if changed {
		p.publishHWLocked()
	}
	m.log.Info("ISR changed", "partition", p.String(), "isr", resp.Isr, "partition_epoch", resp.PartitionEpoch)
}
