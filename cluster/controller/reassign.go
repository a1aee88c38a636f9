package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Partition reassignment, Kafka KIP-455 style. A reassignment moves a
// partition from its current replicas to a target set in three steps, each
// an ordinary PartitionChange, so a controller failover at any point
// leaves a state the next controller can finish from:
//
//  1. start (PlanReassignment): Replicas = target followed by the replicas
//     being removed, AddingReplicas = target − current, RemovingReplicas =
//     current − target. Brokers named by the new Replicas create the log
//     and fetch from the leader; nobody is dropped yet.
//  2. catch up: the leader adds each new replica to the ISR through
//     AlterPartition once it has caught up (DESIGN §8), as for any
//     follower.
//  3. complete (ReassignmentCompletions): once every adding replica is in
//     the ISR, Replicas = target, the ISR loses the removed replicas, a
//     leader outside the target hands over to a target replica, and the
//     reassignment is cleared. The removed brokers then delete the log.

// ConfigMinInsyncReplicas is the topic config that sets the smallest ISR
// an acks=all produce accepts.
const ConfigMinInsyncReplicas = "min.insync.replicas"

// PlanReassignment checks a request to reassign topic/partition to target
// against im and returns the PartitionChange that starts it. It is pure.
// ok is false when nothing needs to change (target is the current
// assignment, or the reassignment to exactly target is already running:
// a retry of an ambiguous request). The rules, in order:
//
//   - the partition exists (UNKNOWN_TOPIC_OR_PARTITION);
//   - target is a non-empty list of distinct registered brokers
//     (INVALID_REPLICA_ASSIGNMENT); fenced brokers are allowed, the
//     reassignment then waits until they return and catch up;
//   - target is not smaller than the topic's min.insync.replicas
//     (INVALID_REPLICA_ASSIGNMENT): such a partition could never accept
//     an acks=all produce, and brokers would refuse the topic config;
//   - no reassignment to another target is running
//     (REASSIGNMENT_IN_PROGRESS). Kafka replaces a running one; Sluice
//     refuses, so a partition is never in two moves at once and an
//     operator sees the conflict.
//
// The same replicas in another order only change the preference order
// (no replica moves, no reassignment is recorded).
func PlanReassignment(im *Image, topic string, partition int32, target []int32) (pc PartitionChange, ok bool, err error) {
	p := im.Partition(topic, partition)
	if p == nil {
		return PartitionChange{}, false, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d does not exist", errs.Echo(topic), partition)
	}
	if err := checkReplicas(im, target); err != nil {
		return PartitionChange{}, false, errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "reassignment of %s-%d: %s", topic, partition, errs.Message(err))
	}
	if v, found := im.Topics[topic].Configs[ConfigMinInsyncReplicas]; found {
		if n, perr := strconv.Atoi(v); perr == nil && len(target) < n {
			return PartitionChange{}, false, errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT,
				"reassignment of %s-%d: %d target replicas are fewer than the topic's min.insync.replicas %d", topic, partition, len(target), n)
		}
	}
	if p.Reassigning() {
		if cur := p.TargetReplicas(); slices.Equal(cur, target) {
			return PartitionChange{}, false, nil
		}
		return PartitionChange{}, false, errs.New(sluicev1.ErrorCode_REASSIGNMENT_IN_PROGRESS,
			"%s-%d is already being reassigned to %v (adding %v, removing %v)", topic, partition, p.TargetReplicas(), p.AddingReplicas, p.RemovingReplicas)
	}
	if slices.Equal(p.Replicas, target) {
		return PartitionChange{}, false, nil
	}
	pc = PartitionChange{Topic: topic, Partition: partition, PartitionEpoch: p.PartitionEpoch,
		LeaderEpoch: p.LeaderEpoch, Leader: NoChange}
	var adding, removing []int32
	for _, id := range target {
		if !slices.Contains(p.Replicas, id) {
			adding = append(adding, id)
		}
	}
	for _, id := range p.Replicas {
		if !slices.Contains(target, id) {
			removing = append(removing, id)
		}
	}
	pc.Replicas = append(slices.Clone(target), removing...)
	pc.AddingReplicas, pc.RemovingReplicas = adding, removing
	return pc, true, nil
}

// ReassignmentCompletions returns the PartitionChanges that complete every
// running reassignment that can complete now, in topic-name then
// partition order (deterministic). It is pure. A reassignment completes
// (Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment) when
//
//   - every adding replica is in the ISR, and
//   - the ISR without the removing replicas is not empty, and
//   - if the leader is being removed, a live target replica in that ISR
//     can take over (ElectLeader over the target); otherwise the removing
//     leader keeps leading until one can, rather than the partition going
//     offline.
//
// The change sets Replicas = target, ISR = ISR ∩ target, a new leader
// when the old one is removed (which bumps the leader epoch), and clears
// the reassignment. A pure shrink (nothing to add) completes at once.
// Target replicas that were replicas before and are out of sync do not
// hold a reassignment back: they were not in sync before it either.
// Each change carries the partition's current epochs, so it is rejected if
// the partition changed in between.
func ReassignmentCompletions(im *Image) []PartitionChange {
	var out []PartitionChange
	for _, name := range im.TopicNames() {
		for i, p := range im.Topics[name].Partitions {
			if !p.Reassigning() {
				continue
			}
			live := func(id int32) bool { return im.ReplicaLive(name, int32(i), id) }
			caughtUp := true
			for _, id := range p.AddingReplicas {
				if !slices.Contains(p.ISR, id) {
					caughtUp = false
				}
			}
			if !caughtUp {
				continue
			}
			target := p.TargetReplicas()
			var isr []int32
			for _, id := range target {
				if slices.Contains(p.ISR, id) {
					isr = append(isr, id)
				}
			}
			if len(isr) == 0 {
				continue
			}
			leader := NoChange
			if p.Leader == NoLeader || !slices.Contains(target, p.Leader) {
				elected, _ := ElectLeader(&PartitionState{Replicas: target, ISR: isr}, live, false)
				if elected == NoLeader && p.Leader != NoLeader {
					continue // keep the removing leader until a target replica can lead
				}
				if elected != p.Leader {
					leader = elected
				}
			}
			out = append(out, PartitionChange{
				Topic: name, Partition: int32(i),
				PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch,
				Leader: leader, ISR: isr, Replicas: target, ClearReassignment: true,
			})
		}
	}
	return out
}

// ReassignPartition starts reassigning topic/partition to target (see
// PlanReassignment for the checks and errors, plus NOT_CONTROLLER) and
// returns the partition after the request: with a reassignment running,
// or already completed when nothing had to be added (a pure shrink). A
// target equal to the current assignment changes nothing. The caller
// follows the reassignment in the metadata; it completes on its own.
func (c *Controller) ReassignPartition(ctx context.Context, topic string, partition int32, target []int32) (*PartitionState, error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var pc PartitionChange
	var change bool
	var planErr error
	if err := c.readForProposal(ctx, func(im *Image) {
		pc, change, planErr = PlanReassignment(im, topic, partition, target)
		if planErr == nil && change {
			// Issue 29: no broker above the replicas it accepts.
			added := make(map[int32]int, len(pc.AddingReplicas))
			for _, id := range pc.AddingReplicas {
				added[id]++
			}
			planErr = CheckReplicaLimits(im, fmt.Sprintf("reassigning partition %s-%d to %v", topic, partition, target), added)
		}
	}); err != nil {
		return nil, err
	}
	if planErr != nil {
		return nil, planErr
	}
	if change {
		if _, err := c.Propose(ctx, pc); err != nil {
			return nil, err
		}
		c.log.Info("controller: partition reassignment started", "topic", topic, "partition", partition,
			"replicas", pc.Replicas, "adding", pc.AddingReplicas, "removing", pc.RemovingReplicas)
		if err := c.completeReassignmentsLocked(ctx); err != nil {
			// Recorded; the session loop (or the next controller) completes it.
			c.log.Warn("controller: completing reassignments", "err", err)
		}
	}
	var out *PartitionState
	c.fsm.view(func(im *Image) {
		if p := im.Partition(topic, partition); p != nil {
			out = p.Clone()
		}
	})
	if out == nil {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "partition %s-%d was deleted meanwhile", topic, partition)
	}
	return out, nil
}

// completeReassignmentsLocked proposes ReassignmentCompletions until none
// are left (bounded, like reelectLocked). Caller holds proposeMu.
func (c *Controller) completeReassignmentsLocked(ctx context.Context) error {
	for range 3 {
		var changes []PartitionChange
		if err := c.readForProposal(ctx, func(im *Image) { changes = ReassignmentCompletions(im) }); err != nil {
			return err
		}
		if len(changes) == 0 {
			return nil
		}
		// Rejections mean the partition changed meanwhile; the next round
		// recomputes from the new image.
		accepted, _, err := c.proposeAll(ctx, partitionChanges(changes))
		for _, r := range accepted {
			pc := r.(PartitionChange)
			attrs := []any{"topic", pc.Topic, "partition", pc.Partition, "replicas", pc.Replicas, "isr", pc.ISR}
			if pc.Leader != NoChange {
				attrs = append(attrs, "new_leader", pc.Leader)
			}
			c.log.Info("controller: partition reassignment completed", attrs...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// maybeCompleteReassignments runs completeReassignmentsLocked if this
// node's image (read without a barrier, so cheaply) shows a reassignment
// that can complete. It is the session loop's safety net: a completion
// that failed after an AlterPartition, or one left by a controller that
// lost leadership, is retried within a session check interval.
func (c *Controller) maybeCompleteReassignments(ctx context.Context) {
	due := func(im *Image) bool { return len(ReassignmentCompletions(im)) > 0 }
	if _, err := c.runIfDue(ctx, &c.reassignCheckedAt, due, c.completeReassignmentsLocked); err != nil {
		c.log.Warn("controller: completing reassignments", "err", err)
	}
}
