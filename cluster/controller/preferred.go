package controller

import (
	"context"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Preferred-leader election (Kafka's PREFERRED election and
// auto.leader.rebalance.enable; issue 18, "leadership balance"). A
// partition's preferred leader is its first replica. Leaderships leave it
// when its broker stops or restarts and do not come back by themselves: a
// rolling restart ends with the nodes restarted last leading nothing. The
// active controller moves them back — on demand (ElectPreferredLeaders,
// `sluice cluster elect-leaders`) and, every LeaderRebalanceInterval, for
// each broker whose share of preferred partitions led elsewhere is above
// LeaderImbalanceThreshold.

// Defaults of Config's rebalance fields (Kafka: 300 s, 10 %).
const (
	DefaultLeaderRebalanceInterval  = 300 * time.Second
	DefaultLeaderImbalanceThreshold = 0.10
)

// preferredEligible reports whether p's preferred replica can lead it
// now: it is not the leader, it is in the ISR and live (Image.ReplicaLive:
// its broker unfenced, the replica not reported offline).
func preferredEligible(im *Image, topic string, partition int32, p *PartitionState) (int32, bool) {
	if len(p.Replicas) == 0 {
		return NoLeader, false
	}
	pref := p.Replicas[0]
	if pref == p.Leader {
		return pref, false
	}
	if !im.ReplicaLive(topic, partition, pref) {
		return pref, false
	}
	for _, id := range p.ISR {
		if id == pref {
			return pref, true
		}
	}
	return pref, false
}

// PreferredLeaderChanges returns the changes that make the preferred
// replica the leader of every partition selected by want (nil: all) where
// it can lead now, in topic-name then partition order. Each carries the
// partition's current epochs. Pure.
func PreferredLeaderChanges(im *Image, want func(topic string, partition int32) bool) []PartitionChange {
	var out []PartitionChange
	for _, name := range im.TopicNames() {
		for i, p := range im.Topics[name].Partitions {
			if want != nil && !want(name, int32(i)) {
				continue
			}
			if pref, ok := preferredEligible(im, name, int32(i), p); ok {
				out = append(out, PartitionChange{Topic: name, Partition: int32(i),
					PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch, Leader: pref})
			}
		}
	}
	return out
}

// LeaderImbalance returns, per broker that is the preferred replica of at
// least one partition, the fraction of those partitions it does not lead
// (Kafka's leader imbalance ratio). Pure.
func LeaderImbalance(im *Image) map[int32]float64 {
	preferred, notLeading := map[int32]int{}, map[int32]int{}
	for _, name := range im.TopicNames() {
		for _, p := range im.Topics[name].Partitions {
			if len(p.Replicas) == 0 {
				continue
			}
			pref := p.Replicas[0]
			preferred[pref]++
			if p.Leader != pref {
				notLeading[pref]++
			}
		}
	}
	out := make(map[int32]float64, len(preferred))
	for id, n := range preferred {
		out[id] = float64(notLeading[id]) / float64(n)
	}
	return out
}

// RebalanceChanges returns the preferred-leader changes for the brokers
// whose LeaderImbalance is above threshold (Kafka's
// checkAndTriggerAutoLeaderRebalance). Pure.
func RebalanceChanges(im *Image, threshold float64) []PartitionChange {
	over := map[int32]bool{}
	for id, r := range LeaderImbalance(im) {
		if r > threshold {
			over[id] = true
		}
	}
	if len(over) == 0 {
		return nil
	}
	return PreferredLeaderChanges(im, func(topic string, partition int32) bool {
		p := im.Partition(topic, partition)
		return p != nil && len(p.Replicas) > 0 && over[p.Replicas[0]]
	})
}

// PartitionSelection names partitions by topic for an admin request: a
// topic with no partitions listed stands for all of its partitions; a nil
// (or empty) selection stands for every partition of the cluster.
type PartitionSelection map[string][]int32

// Check reports UNKNOWN_TOPIC_OR_PARTITION, naming the first (in topic
// name order) topic that does not exist in im or partition it does not
// have, so a request about nothing is refused rather than answered "none
// moved" (issue 28). Pure.
func (s PartitionSelection) Check(im *Image) error {
	names := make([]string, 0, len(s))
	for name := range s {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t := im.Topics[name]
		if t == nil {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(name))
		}
		for _, p := range s[name] {
			if p < 0 || int(p) >= len(t.Partitions) {
				return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q has no partition %d (its partitions are 0..%d)",
					name, p, len(t.Partitions)-1)
			}
		}
	}
	return nil
}

// Selects reports whether s selects partition of topic.
func (s PartitionSelection) Selects(topic string, partition int32) bool {
	if len(s) == 0 {
		return true
	}
	parts, ok := s[topic]
	return ok && (len(parts) == 0 || slices.Contains(parts, partition))
}

// ElectPreferredLeaders makes the preferred replica the leader of every
// partition selected by sel where it can lead now, and returns the
// partitions it moved. A selection naming a topic or partition that does
// not exist is refused as a whole (UNKNOWN_TOPIC_OR_PARTITION, nothing
// elected). Partitions that changed meanwhile are skipped (the caller may
// run it again). Other errors: NOT_CONTROLLER and timeouts.
func (c *Controller) ElectPreferredLeaders(ctx context.Context, sel PartitionSelection) ([]PartitionChange, error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var changes []PartitionChange
	var selErr error
	if err := c.readForProposal(ctx, func(im *Image) {
		if selErr = sel.Check(im); selErr == nil {
			changes = PreferredLeaderChanges(im, sel.Selects)
		}
	}); err != nil {
		return nil, err
	}
	if selErr != nil {
		return nil, selErr
	}
	done, err := c.proposeChangesLocked(ctx, changes)
	if err != nil && len(done) > 0 {
		// The caller gets the partitions moved; say why the rest were not.
		c.log.Warn("controller: preferred-leader election stopped part way", "moved", len(done), "planned", len(changes), "err", err)
	}
	return done, err
}

// proposeChangesLocked proposes changes (all at once: proposeAll) and
// returns those applied; a change refused because its partition moved on
// is skipped.
// Caller holds proposeMu.
func (c *Controller) proposeChangesLocked(ctx context.Context, changes []PartitionChange) ([]PartitionChange, error) {
	accepted, _, err := c.proposeAll(ctx, partitionChanges(changes))
	done := make([]PartitionChange, 0, len(accepted))
	for _, r := range accepted {
		done = append(done, r.(PartitionChange))
	}
	return done, err
}

// maybeRebalance runs the automatic rebalance when LeaderRebalanceInterval
// has passed since the last one (sessionLoop calls it on the active
// controller).
func (c *Controller) maybeRebalance(ctx context.Context) {
	if c.cfg.LeaderRebalanceInterval < 0 {
		return
	}
	now := time.Now()
	if now.Sub(c.lastRebalance) < c.cfg.LeaderRebalanceInterval {
		return
	}
	c.lastRebalance = now
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var changes []PartitionChange
	if err := c.readForProposal(ctx, func(im *Image) { changes = RebalanceChanges(im, c.cfg.LeaderImbalanceThreshold) }); err != nil || len(changes) == 0 {
		return
	}
	done, err := c.proposeChangesLocked(ctx, changes)
	if len(done) > 0 {
		c.log.Info("controller: leaderships moved back to preferred replicas", "partitions", len(done))
	}
	if err != nil {
		c.log.Warn("controller: preferred-leader rebalance", "err", err)
	}
}
