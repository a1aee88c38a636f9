package controller

import (
	"context"
	"fmt"
	"slices"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Adding partitions to a topic (Kafka's CreatePartitions, KIP-195). The
// count only grows: a record appends partitions after the last one, so a
// key's partition changes for producers that hash over the count (as in
// Kafka: the operator's choice), but no record moves. The brokers named
// by the new partitions create their replicas when they apply the record,
// as for a new topic.

// CreatePartitions appends partitions to a topic: partition
// len(topic's partitions)+i is Partitions[i]. The FSM refuses it for a
// topic that does not exist or has another id (re-created since the
// proposer read it: UNKNOWN_TOPIC_OR_PARTITION), for no partition or a
// total above MaxPartitions (INVALID_PARTITIONS), and for replica lists
// that are not lists of distinct registered brokers, all of one length
// (INVALID_REPLICA_ASSIGNMENT). Each new partition's ISR and leader are
// set as CreateTopic sets them. (Added to version 1 as a new type: a
// voter or broker that does not know it must not apply a log that holds
// it.)
type CreatePartitions struct {
	Topic      string                `json:"topic"`
	TopicID    string                `json:"topic_id"`
	Partitions []PartitionAssignment `json:"partitions"`
}

// Type implements Record.
func (CreatePartitions) Type() RecordType { return TypeCreatePartitions }

// ReplicationFactor is t's replication factor: the fewest target
// replicas (PartitionState.TargetReplicas) of any partition, so that a
// running reassignment's extra replicas do not count. 0 for a topic
// without partitions.
func (t *Topic) ReplicationFactor() int32 {
	rf := -1
	for _, p := range t.Partitions {
		if n := len(p.TargetReplicas()); rf < 0 || n < rf {
			rf = n
		}
	}
	return int32(max(rf, 0))
}

// newPartition is a new partition on replicas: its ISR is the unfenced
// replicas and its leader the first of them; with none unfenced, leader
// NoLeader and the whole assignment in the ISR, so a clean election can
// happen once any replica returns.
func newPartition(im *Image, replicas []int32) *PartitionState {
	p := &PartitionState{Replicas: slices.Clone(replicas), Leader: NoLeader}
	for _, id := range replicas {
		if !im.Brokers[id].Fenced {
			p.ISR = append(p.ISR, id)
		}
	}
	if len(p.ISR) == 0 {
		p.ISR = slices.Clone(replicas)
	} else {
		p.Leader = p.ISR[0]
	}
	return p
}

func applyCreatePartitions(im *Image, r CreatePartitions) error {
	t := im.Topics[r.Topic]
	if t == nil || t.ID != r.TopicID {
		return errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q with id %s does not exist", errs.Echo(r.Topic), r.TopicID)
	}
	total := len(t.Partitions) + len(r.Partitions)
	if len(r.Partitions) == 0 || total > MaxPartitions {
		return errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "topic %q: %d partitions to add to %d, want 1 or more and %d in all at most",
			r.Topic, len(r.Partitions), len(t.Partitions), MaxPartitions)
	}
	rf := len(r.Partitions[0].Replicas)
	for i, pa := range r.Partitions {
		index := len(t.Partitions) + i
		if err := checkReplicas(im, pa.Replicas); err != nil {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT, "topic %q partition %d: %s", r.Topic, index, errs.Message(err))
		}
		if len(pa.Replicas) != rf {
			return errs.New(sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT,
				"topic %q partition %d has %d replicas, partition %d has %d", r.Topic, index, len(pa.Replicas), len(t.Partitions), rf)
		}
	}
	// A new slice: the old one may be shared with an image this edit
	// started from (ImageEditor copies the topic, not beyond its length).
	parts := make([]*PartitionState, 0, total)
	parts = append(parts, t.Partitions...)
	for _, pa := range r.Partitions {
		parts = append(parts, newPartition(im, pa.Replicas))
	}
	t.Partitions = parts
	return nil
}

// PartitionsToCreate is one topic of Controller.CreatePartitions: the
// number of partitions it should have.
type PartitionsToCreate struct {
	Topic string
	Count int32
}

// PlanPartitions returns the record that takes topic to count partitions
// (pure). The new partitions are placed over the live brokers as the
// topic's first partitions were (Place with the topic's seed: partition
// p's preferred leader continues the round robin), with the topic's
// replication factor (Topic.ReplicationFactor). counts are the replicas
// per broker already placed (ReplicaCounts, plus what the request placed
// before); the new ones are checked against the brokers' limits.
// Errors: UNKNOWN_TOPIC_OR_PARTITION; INVALID_PARTITIONS when count is
// not above the current count, above MaxPartitions, or past a broker's
// replica limit; INVALID_REPLICATION_FACTOR when fewer brokers are live
// than the replication factor.
func PlanPartitions(im *Image, counts map[int32]int, topic string, count int32) (CreatePartitions, error) {
	t := im.Topics[topic]
	if t == nil {
		return CreatePartitions{}, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", errs.Echo(topic))
	}
	have := int32(len(t.Partitions))
	switch {
	case count == have:
		return CreatePartitions{}, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "topic %q already has %d partitions", topic, have)
	case count < have:
		return CreatePartitions{}, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS,
			"topic %q has %d partitions, more than the %d asked for: partitions can be added, not removed", topic, have, count)
	case count > MaxPartitions:
		return CreatePartitions{}, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "topic %q: %d partitions, want at most %d", topic, count, MaxPartitions)
	}
	rf := t.ReplicationFactor()
	assign, err := Place(LivePlacementBrokers(im), PlacementSeed(topic), count, rf)
	if err != nil {
		return CreatePartitions{}, err
	}
	assign = assign[have:]
	if err := checkReplicaLimits(im, counts, fmt.Sprintf("adding %s partitions to topic %q (replication factor %d)",
		thousands(int64(count-have)), topic, rf), addedReplicas(assign)); err != nil {
		return CreatePartitions{}, err
	}
	return CreatePartitions{Topic: topic, TopicID: t.ID, Partitions: assign}, nil
}

// planPartitionCreations decides what CreatePartitions proposes (pure):
// perTopic[i] is why topics[i] is refused, recordOf[i] the index of its
// record or -1. The replica limits count the partitions placed for the
// topics before each one. A topic named twice is refused the second time.
func planPartitionCreations(im *Image, topics []PartitionsToCreate) (perTopic []error, records []Record, recordOf []int) {
	perTopic = make([]error, len(topics))
	recordOf = make([]int, len(topics))
	counts := ReplicaCounts(im)
	seen := map[string]bool{}
	for i, pt := range topics {
		recordOf[i] = -1
		if seen[pt.Topic] {
			perTopic[i] = invalid("topic %q is named twice", errs.Echo(pt.Topic))
			continue
		}
		seen[pt.Topic] = true
		r, err := PlanPartitions(im, counts, pt.Topic, pt.Count)
		if err != nil {
			perTopic[i] = err
			continue
		}
		for id, k := range addedReplicas(r.Partitions) {
			counts[id] += k
		}
		recordOf[i] = len(records)
		records = append(records, r)
	}
	return perTopic, records, recordOf
}

// CreatePartitions grows each topic to its count of partitions
// (PlanPartitions on the leader's image after a barrier; the FSM checks
// each record again). perTopic[i] is topics[i]'s outcome: nil when its
// partitions were added (with validateOnly: when they would be, and
// nothing is proposed), else the *errs.Error of PlanPartitions or the
// FSM. offset is the metadata offset that holds every change made. err is
// set when the call failed as a whole (NOT_CONTROLLER, ctx): then a topic
// may or may not have grown, as with Propose.
func (c *Controller) CreatePartitions(ctx context.Context, topics []PartitionsToCreate, validateOnly bool) (perTopic []error, offset uint64, err error) {
	return c.proposePlanned(ctx, func(im *Image) ([]error, []Record, []int) {
		perTopic, recs, recordOf := planPartitionCreations(im, topics)
		if validateOnly {
			recs = nil
		}
		return perTopic, recs, recordOf
	}, func(r Record) {
		cp := r.(CreatePartitions)
		c.log.Info("controller: partitions added", "topic", cp.Topic, "added", len(cp.Partitions))
	})
}
