package cluster

import (
	"context"
	"slices"
	"sync"
	"time"

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

// publishHWLocked copies the tracker's HW to the log (waking consumers),
// completes the acks=all waits it decides (AwaitCommit) and wakes
// WaitCommitted's waiters. Every move of the HW, and every end of
// leadership, comes through here.
func (p *Replica) publishHWLocked() {
	if p.tracker != nil {
		p.log.SetHighWatermark(p.tracker.HW())
	}
	p.completeWaitsLocked()
	close(p.hwCh)
	p.hwCh = make(chan struct{})
}

// recordFollowerFetch records that replica fetched p at offset (its log end
// offset) in leaderEpoch, advancing the HW and queueing an ISR expansion
// when it qualifies. Errors: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH
// (the follower's epoch is older), UNKNOWN_LEADER_EPOCH (newer), and the
// tracker's.
func (p *Replica) recordFollowerFetch(replica, leaderEpoch int32, offset int64, now time.Time) (int64, error) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	t := p.tracker
	if t == nil {
		return 0, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", p)
	}
	if err := checkLeaderEpoch(p.TopicPartition, leaderEpoch, t.LeaderEpoch(), true); err != nil {
		return 0, err
	}
	// An append wakes followers before its writer records the new log end
	// in the tracker: catch the tracker up first.
	if leo := p.log.EndOffset(); leo > t.LeaderLEO() && t.LeaderAppended(leo, now) {
		p.publishHWLocked()
	}
	upd, err := t.FollowerFetched(replica, offset, now)
	if err != nil {
		return 0, err
	}
	if upd.HWChanged {
		p.publishHWLocked()
	}
	if upd.ExpandISR {
		p.queueExpansionLocked(replica)
	}
	return upd.HW, nil
}

// queueExpansionLocked queues replica's addition to the ISR for the ISR
// loop's next tick. The caller holds roleMu.
func (p *Replica) queueExpansionLocked(replica int32) {
	if slices.Contains(p.expand, replica) {
		return
	}
	p.expand = append(p.expand, replica)
	if p.isrQueue != nil {
		p.isrQueue.add(p)
	}
}

// isrQueue is the replicas with ISR expansions queued: the ISR loop
// looks at them at every tick, and at every leader only every
// shrinkScanEvery (a shrink waits for LagTimeMax anyway).
type isrQueue struct {
	mu      sync.Mutex
	pending map[*Replica]struct{}
}

func (q *isrQueue) add(p *Replica) {
	q.mu.Lock()
	if q.pending == nil {
		q.pending = map[*Replica]struct{}{}
	}
	q.pending[p] = struct{}{}
	q.mu.Unlock()
}

func (q *isrQueue) take() []*Replica {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pending) == 0 {
		return nil
	}
	out := make([]*Replica, 0, len(q.pending))
	for p := range q.pending {
		out = append(out, p)
	}
	clear(q.pending)
	return out
}

// shrinkScanEvery is how often the ISR loop looks at every partition this
// broker leads for followers out of sync: an eighth of LagTimeMax, within
// [isrCheckInterval, 5s] (Kafka checks every LagTimeMax/2).
func shrinkScanEvery(lagTimeMax time.Duration) time.Duration {
	return min(max(lagTimeMax/8, isrCheckInterval), 5*time.Second)
}

// queueExpansionsLocked queues the followers that may join the ISR now
// without a fetch of their own (Tracker.ExpandCandidates): after a change
// of eligibility or the end of an ISR change. The caller holds roleMu.
func (p *Replica) queueExpansionsLocked() {
	if p.tracker == nil {
		return
	}
	for _, id := range p.tracker.ExpandCandidates() {
		p.queueExpansionLocked(id)
	}
}

// isrLoop is the leaders' upkeep: ISR shrink and expansion through
// AlterPartition, and periodic high-watermark checkpoints.
func (m *ReplicaManager) isrLoop() {
	t := time.NewTicker(isrCheckInterval)
	defer t.Stop()
	lastCkpt, lastScan := time.Now(), time.Now()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C:
			for _, p := range m.isrQueue.take() {
				if !p.Offline() {
					m.maybeAlterISR(p, now, false)
				}
			}
			if now.Sub(lastScan) >= shrinkScanEvery(m.lagTimeMax()) {
				lastScan = now
				self := m.cfg.NodeID
				for _, p := range m.healthyReplicas() {
					// Followers (most replicas) have nothing to check:
					// their leadership is read without the role lock.
					if leader, _ := p.Leadership(); leader == self {
						m.maybeAlterISR(p, now, true)
					}
				}
			}
			if now.Sub(lastCkpt) >= hwCheckpointEvery {
				lastCkpt = now
				// Each log records its value in memory (the shared
				// checkpoint); one write, only if one changed.
				for _, p := range m.healthyReplicas() {
					if err := p.log.CheckpointHighWatermark(); err != nil && err != storage.ErrClosed && !p.Offline() && !storage.IsResourceError(err) {
						m.log.Warn("high watermark checkpoint failed", p.LogAttr(), "err", err)
					}
				}
				_ = m.flushHighWatermarks() // logged
			}
		}
	}
}

// maybeAlterISR proposes one ISR change for p if one is due: removing
// followers out of sync for LagTimeMax, or adding queued caught-up ones.
// The AlterPartition call runs in its own goroutine; one per partition at a
// time.
//
// scan is set by the periodic look at every led partition: it also looks
// for followers that may join without having been queued. With fetch
// sessions a caught-up follower does not fetch an idle partition again,
// so an expansion queued from its fetch and then dropped (an ISR change
// in flight at that tick, a proposal refused because the high watermark
// moved meanwhile) would otherwise wait for its next write; the scan
// (every shrinkScanEvery) bounds that.
func (m *ReplicaManager) maybeAlterISR(p *Replica, now time.Time, scan bool) {
	p.roleMu.Lock()
	t := p.tracker
	if t == nil || p.altering {
		p.expand = nil
		p.roleMu.Unlock()
		return
	}
	if scan && len(p.expand) == 0 {
		p.expand = t.ExpandCandidates()
	}
	var next []int32
	var isr []int32
	if out := t.ShrinkCandidates(now); len(out) > 0 {
		isr = t.ISR()
		for _, id := range isr {
			if !slices.Contains(out, id) {
				next = append(next, id)
			}
		}
	} else if len(p.expand) > 0 {
		isr = t.ISR()
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
		m.log.Debug("ISR change not proposed", p.LogAttr(), "isr", next, "err", err)
		return
	}
	p.altering = true
	p.roleMu.Unlock()
	m.log.Info("proposing ISR change", p.LogAttr(), "from", isr, "to", req.NewISR)
	m.goroutines.Go(func() { m.sendAlterPartition(p, t, req) })
}

func (m *ReplicaManager) sendAlterPartition(p *Replica, t *replication.Tracker, req replication.AlterRequest) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second) // ends at Close too
	defer cancel()
	var resp *internalv1.AlterPartitionResponse
	err := m.repl.Load().Controllers.Call(ctx, 5*time.Second, func(ctx context.Context, cl internalv1.ControllerClient) error {
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
		m.log.Warn("ISR change refused", p.LogAttr(), "to", req.NewISR, "err", err)
		if t.ISRChangeFailed(now) {
			p.publishHWLocked()
		}
		p.queueExpansionsLocked()
		return
	}
	if t.PartitionEpoch() >= resp.PartitionEpoch {
		// The metadata stream delivered the change first (ApplyMetadata).
	} else if changed, err := t.ISRChangeCommitted(resp.Isr, resp.PartitionEpoch, now); err != nil {
		m.log.Warn("ISR change result not applied", p.LogAttr(), "err", err)
	} else if changed {
		p.publishHWLocked()
	}
	p.queueExpansionsLocked()
	m.log.Info("ISR changed", p.LogAttr(), "isr", resp.Isr, "partition_epoch", resp.PartitionEpoch)
}
