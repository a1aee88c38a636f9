package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A CreatePartitions record appends partitions to the topic it names, by
// id, each started as CreateTopic starts one (ISR = the unfenced
// replicas, the first of them leading); anything else leaves the image
// as it was.
func TestApplyCreatePartitionsRules(t *testing.T) {
	add := func(replicas ...[]int32) CreatePartitions {
		r := CreatePartitions{Topic: "t", TopicID: "id-t"}
		for _, rs := range replicas {
			r.Partitions = append(r.Partitions, PartitionAssignment{Replicas: rs})
		}
		return r
	}
	cases := []struct {
		name  string
		setup []Record
		rec   CreatePartitions
		code  sluicev1.ErrorCode
	}{
		{name: "two partitions appended", rec: add([]int32{2, 3, 1}, []int32{3, 1, 2})},
		{name: "a fenced replica is left out of the ISR", setup: []Record{FenceBroker{BrokerID: 2, BrokerEpoch: 2}}, rec: add([]int32{2, 3, 1})},
		{name: "unknown topic", rec: CreatePartitions{Topic: "nope", TopicID: "id-t", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "the topic was re-created since", rec: CreatePartitions{Topic: "t", TopicID: "id-old", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "no partition", rec: add(), code: sluicev1.ErrorCode_INVALID_PARTITIONS},
		{name: "beyond MaxPartitions", rec: add(slices.Repeat([][]int32{{1, 2, 3}}, MaxPartitions)...), code: sluicev1.ErrorCode_INVALID_PARTITIONS},
		{name: "an unregistered replica", rec: add([]int32{1, 2, 9}), code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "a replica twice", rec: add([]int32{1, 1, 2}), code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "replica lists of two lengths", rec: add([]int32{1, 2, 3}, []int32{1, 2}), code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			im := build(t, append(withTopic(), c.setup...)...)
			before := im.Clone()
			_, err := Apply(im, c.rec, im.Offset+1)
			if errs.Code(err) != c.code {
				t.Fatalf("err = %v, want %v", err, c.code)
			}
			if c.code != sluicev1.ErrorCode_NONE {
				before.Offset = im.Offset
				if !reflect.DeepEqual(im, before) {
					t.Error("a refused record changed the image")
				}
				return
			}
			parts := im.Topics["t"].Partitions
			if len(parts) != 1+len(c.rec.Partitions) || !reflect.DeepEqual(parts[0], before.Topics["t"].Partitions[0]) {
				t.Fatalf("partitions %+v", parts)
			}
			for i, pa := range c.rec.Partitions {
				p := parts[1+i]
				var isr []int32
				for _, id := range pa.Replicas {
					if !im.Brokers[id].Fenced {
						isr = append(isr, id)
					}
				}
				if !slices.Equal(p.Replicas, pa.Replicas) || !slices.Equal(p.ISR, isr) || p.Leader != isr[0] || p.LeaderEpoch != 0 || p.PartitionEpoch != 0 {
					t.Errorf("partition %d: %+v, want replicas %v, ISR %v led by %d", 1+i, p, pa.Replicas, isr, isr[0])
				}
			}
		})
	}
}

// PlanPartitions continues the topic's placement: the partitions added
// are those Place gives the grown topic past the current count, with the
// topic's replication factor; the count only grows, within MaxPartitions,
// the live brokers and their replica limits.
func TestPlanPartitions(t *testing.T) {
	im := build(t, append(threeBrokers(), CreateTopic{Name: "t", TopicID: "id-t", Partitions: mustPlace(t, 3, "t", 2, 2)})...)
	r, err := PlanPartitions(im, ReplicaCounts(im), "t", 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustPlace(t, 3, "t", 5, 2)[2:]; r.Topic != "t" || r.TopicID != "id-t" || !reflect.DeepEqual(r.Partitions, want) {
		t.Errorf("plan %+v, want partitions %v", r, want)
	}
	for _, c := range []struct {
		name  string
		topic string
		count int32
		code  sluicev1.ErrorCode
		msg   string
	}{
		{"the same count", "t", 2, sluicev1.ErrorCode_INVALID_PARTITIONS, "already has 2 partitions"},
		{"fewer", "t", 1, sluicev1.ErrorCode_INVALID_PARTITIONS, "partitions can be added, not removed"},
		{"beyond MaxPartitions", "t", MaxPartitions + 1, sluicev1.ErrorCode_INVALID_PARTITIONS, "at most"},
		{"unknown topic", "nope", 3, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "does not exist"},
	} {
		if _, err := PlanPartitions(im, ReplicaCounts(im), c.topic, c.count); errs.Code(err) != c.code || !strings.Contains(errs.Message(err), c.msg) {
			t.Errorf("%s: %v, want %v saying %q", c.name, err, c.code, c.msg)
		}
	}
	// Fewer live brokers than the replication factor.
	fenced := build(t, append(withTopic(), FenceBroker{BrokerID: 3, BrokerEpoch: 3})...)
	if _, err := PlanPartitions(fenced, ReplicaCounts(fenced), "t", 2); errs.Code(err) != sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
		t.Errorf("replication factor 3 over 2 live brokers: %v", err)
	}
	// Replica limits (issue 29): 3 brokers accepting 2 replicas each hold
	// the topic's 3 replicas and 3 more, not 6 more.
	limited := limitImage(t, 2, 4, CreateTopic{Name: "t", TopicID: "id-t", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2, 3}}}})
	if _, err := PlanPartitions(limited, ReplicaCounts(limited), "t", 2); err != nil {
		t.Errorf("within the limits: %v", err)
	}
	if _, err := PlanPartitions(limited, ReplicaCounts(limited), "t", 3); errs.Code(err) != sluicev1.ErrorCode_INVALID_PARTITIONS ||
		!strings.Contains(errs.Message(err), `adding 2 partitions to topic "t"`) {
		t.Errorf("past the limits: %v", err)
	}
}

// A running reassignment's extra replicas do not count in the
// replication factor new partitions get.
func TestTopicReplicationFactorIsTheTargets(t *testing.T) {
	im := build(t, withTopic()...)
	p := im.Topics["t"].Partitions[0]
	if got := im.Topics["t"].ReplicationFactor(); got != 3 {
		t.Fatalf("replication factor %d, want 3", got)
	}
	pc, ok, err := PlanReassignment(im, "t", 0, []int32{1, 2})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, err := Apply(im, pc, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if got := im.Topics["t"].ReplicationFactor(); got != 2 || len(p.Replicas) != 3 {
		t.Errorf("replication factor %d while shrinking to 2 replicas", got)
	}
}

// planPartitionCreations counts the replicas each topic adds before
// placing the next, and refuses a topic named twice.
func TestPlanPartitionCreations(t *testing.T) {
	im := limitImage(t, 3, 6, CreateTopic{Name: "a", TopicID: "id-a", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2, 3}}}},
		CreateTopic{Name: "b", TopicID: "id-b", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2, 3}}}})
	per, recs, recordOf := planPartitionCreations(im, []PartitionsToCreate{{"a", 2}, {"a", 3}, {"b", 2}})
	if per[0] != nil || errs.Code(per[1]) != sluicev1.ErrorCode_INVALID_REQUEST || errs.Code(per[2]) != sluicev1.ErrorCode_INVALID_PARTITIONS {
		t.Errorf("outcomes %v: want a grown, a again refused, b past the limits after a's", per)
	}
	if len(recs) != 1 || !reflect.DeepEqual(recordOf, []int{0, -1, -1}) {
		t.Errorf("records %v, recordOf %v", recs, recordOf)
	}
}

// Through a running single-voter controller: validate-only changes
// nothing; then the topic grows and the offset answered holds it.
func TestControllerCreatePartitions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads, cluster bootstrapped", func() error {
		if im := c.Image(); !c.IsLeader() || im.ClusterID == "" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	for id := int32(1); id <= 2; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), IncarnationID: "i"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateTopic(ctx, "t", 1, 2, nil); err != nil {
		t.Fatal(err)
	}
	per, _, err := c.CreatePartitions(ctx, []PartitionsToCreate{{"t", 3}, {"nope", 2}}, true)
	if err != nil || per[0] != nil || errs.Code(per[1]) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION || len(c.Image().Topics["t"].Partitions) != 1 {
		t.Fatalf("validate only: %v %v, %d partitions", per, err, len(c.Image().Topics["t"].Partitions))
	}
	per, offset, err := c.CreatePartitions(ctx, []PartitionsToCreate{{"t", 3}}, false)
	if err != nil || per[0] != nil {
		t.Fatalf("create: %v %v", per, err)
	}
	im := c.Image()
	if offset == 0 || offset > im.Offset || len(im.Topics["t"].Partitions) != 3 {
		t.Fatalf("offset %d (image at %d), %d partitions", offset, im.Offset, len(im.Topics["t"].Partitions))
	}
	for i, p := range im.Topics["t"].Partitions {
		if len(p.Replicas) != 2 || p.Leader == NoLeader {
			t.Errorf("partition %d: %+v", i, p)
		}
	}
}

// mustPlace is Place over brokers 1..n, no racks, with topic's seed.
func mustPlace(t *testing.T, n int32, topic string, partitions, rf int32) []PartitionAssignment {
	t.Helper()
	var bs []PlacementBroker
	for id := int32(1); id <= n; id++ {
		bs = append(bs, PlacementBroker{ID: id})
	}
	a, err := Place(bs, PlacementSeed(topic), partitions, rf)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
