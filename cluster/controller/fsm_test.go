package controller

import (
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// build applies recs to a fresh image at offsets 1, 2, ... and fails the
// test on any rejection.
func build(t *testing.T, recs ...Record) *Image {
	t.Helper()
	im := NewImage()
	for i, r := range recs {
		if _, err := Apply(im, r, uint64(i+1)); err != nil {
			t.Fatalf("setup record %d (%T): %v", i, r, err)
		}
	}
	return im
}

func reg(id int32, rack string) RegisterBroker {
	return RegisterBroker{BrokerID: id, Address: "b" + string(rune('0'+id)) + ":9400", Rack: rack, IncarnationID: "inc-" + string(rune('0'+id))}
}

// threeBrokers registers brokers 1..3 (epochs 1..3) and unfences them.
func threeBrokers() []Record {
	return []Record{
		reg(1, ""), reg(2, ""), reg(3, ""),
		UnfenceBroker{BrokerID: 1, BrokerEpoch: 1},
		UnfenceBroker{BrokerID: 2, BrokerEpoch: 2},
		UnfenceBroker{BrokerID: 3, BrokerEpoch: 3},
	}
}

// withTopic adds topic "t" with one partition on replicas 1,2,3 (leader 1).
func withTopic() []Record {
	return append(threeBrokers(), CreateTopic{Name: "t", TopicID: "id-t",
		Partitions: []PartitionAssignment{{Replicas: []int32{1, 2, 3}}}})
}

func TestApplyRules(t *testing.T) {
	type check func(t *testing.T, im *Image, res Result)
	cases := []struct {
		name  string
		setup []Record
		rec   Record
		code  sluicev1.ErrorCode // NONE = accepted
		check check
	}{
		// BootstrapCluster: once, non-empty.
		{name: "bootstrap sets the cluster id", rec: BootstrapCluster{ClusterID: "c1"},
			check: func(t *testing.T, im *Image, res Result) {
				if im.ClusterID != "c1" {
					t.Errorf("cluster id = %q", im.ClusterID)
				}
			}},
		{name: "bootstrap twice rejected", setup: []Record{BootstrapCluster{ClusterID: "c1"}},
			rec: BootstrapCluster{ClusterID: "c2"}, code: sluicev1.ErrorCode_INVALID_REQUEST,
			check: func(t *testing.T, im *Image, res Result) {
				if im.ClusterID != "c1" {
					t.Errorf("cluster id changed to %q", im.ClusterID)
				}
			}},
		{name: "bootstrap with empty id rejected", rec: BootstrapCluster{}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		// RegisterBroker: epoch = Raft index of the record; starts fenced.
		{name: "register assigns epoch = offset, fenced", setup: nil, rec: reg(1, "r1"),
			check: func(t *testing.T, im *Image, res Result) {
				b := im.Brokers[1]
				if res.BrokerEpoch != 1 || b.Epoch != 1 || !b.Fenced || b.Rack != "r1" {
					t.Errorf("broker = %+v, result epoch %d", b, res.BrokerEpoch)
				}
			}},
		{name: "re-register with new incarnation gets a new epoch and is fenced", setup: threeBrokers(),
			rec: RegisterBroker{BrokerID: 2, Address: "x:1", IncarnationID: "new"},
			check: func(t *testing.T, im *Image, res Result) {
				if b := im.Brokers[2]; b.Epoch != 7 || !b.Fenced || b.Address != "x:1" {
					t.Errorf("broker = %+v", b)
				}
			}},
		{name: "re-register with same incarnation is idempotent", setup: threeBrokers(), rec: reg(2, "r9"),
			check: func(t *testing.T, im *Image, res Result) {
				if b := im.Brokers[2]; b.Epoch != 2 || b.Fenced || b.Rack != "r9" || res.BrokerEpoch != 2 {
					t.Errorf("broker = %+v", b)
				}
			}},
		{name: "register without address", rec: RegisterBroker{BrokerID: 1, IncarnationID: "x"},
			code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "register without incarnation", rec: RegisterBroker{BrokerID: 1, Address: "a:1"},
			code: sluicev1.ErrorCode_INVALID_REQUEST},

		// Fence / Unfence: the broker epoch must be current.
		{name: "unfence at current epoch", setup: []Record{reg(1, "")}, rec: UnfenceBroker{BrokerID: 1, BrokerEpoch: 1},
			check: func(t *testing.T, im *Image, res Result) {
				if im.Brokers[1].Fenced {
					t.Error("still fenced")
				}
			}},
		{name: "unfence with stale epoch", setup: []Record{reg(1, ""), RegisterBroker{BrokerID: 1, Address: "a:1", IncarnationID: "2nd"}},
			rec: UnfenceBroker{BrokerID: 1, BrokerEpoch: 1}, code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},
		{name: "fence at current epoch", setup: threeBrokers(), rec: FenceBroker{BrokerID: 3, BrokerEpoch: 3},
			check: func(t *testing.T, im *Image, res Result) {
				if !im.Brokers[3].Fenced {
					t.Error("not fenced")
				}
			}},
		{name: "fence with stale epoch", setup: threeBrokers(), rec: FenceBroker{BrokerID: 3, BrokerEpoch: 2},
			code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},
		{name: "fence with future epoch", setup: threeBrokers(), rec: FenceBroker{BrokerID: 3, BrokerEpoch: 99},
			code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},
		{name: "fence unknown broker", setup: threeBrokers(), rec: FenceBroker{BrokerID: 9, BrokerEpoch: 1},
			code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},

		// CreateTopic.
		{name: "create topic: ISR = live replicas, leader = first", setup: threeBrokers(),
			rec: CreateTopic{Name: "t", TopicID: "id", Configs: map[string]string{"retention.ms": "1"},
				Partitions: []PartitionAssignment{{Replicas: []int32{2, 3, 1}}, {Replicas: []int32{3, 1, 2}}}},
			check: func(t *testing.T, im *Image, res Result) {
				tp := im.Topics["t"]
				want := &PartitionState{Replicas: []int32{3, 1, 2}, Leader: 3, ISR: []int32{3, 1, 2}}
				if !reflect.DeepEqual(tp.Partitions[1], want) || tp.Configs["retention.ms"] != "1" || tp.ID != "id" {
					t.Errorf("topic = %+v, p1 = %+v", tp, tp.Partitions[1])
				}
			}},
		{name: "create topic with a fenced replica leaves it out of the ISR",
			setup: append(threeBrokers(), FenceBroker{BrokerID: 2, BrokerEpoch: 2}),
			rec:   CreateTopic{Name: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{2, 3}}}},
			check: func(t *testing.T, im *Image, res Result) {
				if p := im.Partition("t", 0); p.Leader != 3 || !reflect.DeepEqual(p.ISR, []int32{3}) {
					t.Errorf("partition = %+v", p)
				}
			}},
		{name: "create topic with all replicas fenced is offline",
			setup: []Record{reg(1, "")},
			rec:   CreateTopic{Name: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			check: func(t *testing.T, im *Image, res Result) {
				if p := im.Partition("t", 0); p.Leader != NoLeader || !reflect.DeepEqual(p.ISR, []int32{1}) {
					t.Errorf("partition = %+v", p)
				}
			}},
		{name: "create existing topic", setup: withTopic(),
			rec:  CreateTopic{Name: "t", TopicID: "id2", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS},
		{name: "create topic with a used topic id", setup: withTopic(),
			rec:  CreateTopic{Name: "u", TopicID: "id-t", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "create topic on unknown broker", setup: threeBrokers(),
			rec:  CreateTopic{Name: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{1, 7}}}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "create topic with duplicate replica", setup: threeBrokers(),
			rec:  CreateTopic{Name: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{1, 1}}}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "create topic with uneven replication", setup: threeBrokers(),
			rec: CreateTopic{Name: "t", TopicID: "id",
				Partitions: []PartitionAssignment{{Replicas: []int32{1, 2}}, {Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "create topic without partitions", setup: threeBrokers(),
			rec: CreateTopic{Name: "t", TopicID: "id"}, code: sluicev1.ErrorCode_INVALID_PARTITIONS},
		{name: "create topic with bad name", setup: threeBrokers(),
			rec:  CreateTopic{Name: "a/b", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{1}}}},
			code: sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION},

		// DeleteTopic.
		{name: "delete topic", setup: withTopic(), rec: DeleteTopic{Name: "t"},
			check: func(t *testing.T, im *Image, res Result) {
				if im.Topics["t"] != nil {
					t.Error("topic still there")
				}
			}},
		{name: "delete unknown topic", setup: withTopic(), rec: DeleteTopic{Name: "u"},
			code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},

		// PartitionChange: compare-and-set on the epochs.
		{name: "ISR shrink bumps partition epoch only", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1, 3}},
			check: func(t *testing.T, im *Image, res Result) {
				want := &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, ISR: []int32{1, 3}, PartitionEpoch: 1}
				if p := im.Partition("t", 0); !reflect.DeepEqual(p, want) || !reflect.DeepEqual(res.Partition, want) {
					t.Errorf("partition = %+v, result %+v", p, res.Partition)
				}
			}},
		{name: "leader change bumps leader and partition epoch", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: 2, ISR: []int32{3, 2}},
			check: func(t *testing.T, im *Image, res Result) {
				want := &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 1, ISR: []int32{2, 3}, PartitionEpoch: 1}
				if p := im.Partition("t", 0); !reflect.DeepEqual(p, want) {
					t.Errorf("partition = %+v", p)
				}
			}},
		{name: "going offline bumps leader epoch", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoLeader, ISR: []int32{1}},
			check: func(t *testing.T, im *Image, res Result) {
				if p := im.Partition("t", 0); p.Leader != NoLeader || p.LeaderEpoch != 1 {
					t.Errorf("partition = %+v", p)
				}
			}},
		{name: "reassignment", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2}, ISR: []int32{1, 2}},
			check: func(t *testing.T, im *Image, res Result) {
				if p := im.Partition("t", 0); !reflect.DeepEqual(p.Replicas, []int32{1, 2}) || p.PartitionEpoch != 1 {
					t.Errorf("partition = %+v", p)
				}
			}},
		{name: "stale partition epoch is rejected",
			setup: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1, 2}}),
			rec:   PartitionChange{Topic: "t", PartitionEpoch: 0, Leader: NoChange, ISR: []int32{1, 3}},
			code:  sluicev1.ErrorCode_INVALID_UPDATE_VERSION},
		{name: "future partition epoch is rejected", setup: withTopic(),
			rec:  PartitionChange{Topic: "t", PartitionEpoch: 5, Leader: NoChange, ISR: []int32{1}},
			code: sluicev1.ErrorCode_INVALID_UPDATE_VERSION},
		{name: "stale leader epoch is fenced",
			setup: append(withTopic(), PartitionChange{Topic: "t", Leader: 2}),
			rec:   PartitionChange{Topic: "t", PartitionEpoch: 1, LeaderEpoch: 0, Leader: NoChange, ISR: []int32{2}},
			code:  sluicev1.ErrorCode_FENCED_LEADER_EPOCH},
		{name: "leader outside ISR", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: 2, ISR: []int32{1, 3}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "ISR shrink that drops the leader", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{2, 3}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "ISR member not a replica", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1, 4}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "empty ISR", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Leader: NoLeader, ISR: []int32{}}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "fenced new leader", setup: append(withTopic(), FenceBroker{BrokerID: 2, BrokerEpoch: 2}),
			rec: PartitionChange{Topic: "t", Leader: 2}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "unknown partition", setup: withTopic(),
			rec: PartitionChange{Topic: "t", Partition: 1, Leader: NoChange}, code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},

		// ProducerIDsBlock: exactly the next start; first block is 1000.
		{name: "first producer id block starts at 1000", setup: threeBrokers(),
			rec: ProducerIDsBlock{BrokerID: 1, NextBlockStart: 1000},
			check: func(t *testing.T, im *Image, res Result) {
				if res.ProducerIDStart != 1000 || res.ProducerIDEnd != 2000 || im.NextProducerIDBlockStart != 2000 {
					t.Errorf("result %+v, next %d", res, im.NextProducerIDBlockStart)
				}
			}},
		{name: "producer id block 0 is never allocated", setup: threeBrokers(),
			rec: ProducerIDsBlock{BrokerID: 1, NextBlockStart: 0}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "replayed producer id block is rejected",
			setup: append(threeBrokers(), ProducerIDsBlock{BrokerID: 1, NextBlockStart: 1000}),
			rec:   ProducerIDsBlock{BrokerID: 2, NextBlockStart: 1000}, code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "producer id block for unknown broker", setup: threeBrokers(),
			rec: ProducerIDsBlock{BrokerID: 9, NextBlockStart: 1000}, code: sluicev1.ErrorCode_INVALID_REQUEST},

		// FeatureLevel.
		{name: "finalize transaction.version 2", rec: FeatureLevel{Name: FeatureTransactionVersion, Level: 2},
			check: func(t *testing.T, im *Image, res Result) {
				if im.Features[FeatureTransactionVersion] != 2 {
					t.Errorf("features = %v", im.Features)
				}
			}},
		{name: "transaction.version 3 is unsupported", rec: FeatureLevel{Name: FeatureTransactionVersion, Level: 3},
			code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "unknown feature", rec: FeatureLevel{Name: "x.version", Level: 1}, code: sluicev1.ErrorCode_INVALID_REQUEST},

		// ConfigChange.
		{name: "set topic config", setup: withTopic(), rec: ConfigChange{Topic: "t", Key: "k", Value: "v"},
			check: func(t *testing.T, im *Image, res Result) {
				if im.Topics["t"].Configs["k"] != "v" {
					t.Errorf("configs = %v", im.Topics["t"].Configs)
				}
			}},
		{name: "empty value deletes", setup: append(withTopic(), ConfigChange{Topic: "t", Key: "k", Value: "v"}),
			rec: ConfigChange{Topic: "t", Key: "k"},
			check: func(t *testing.T, im *Image, res Result) {
				if _, ok := im.Topics["t"].Configs["k"]; ok {
					t.Errorf("configs = %v", im.Topics["t"].Configs)
				}
			}},
		{name: "cluster config", rec: ConfigChange{Key: ConfigUncleanLeaderElection, Value: "true"},
			check: func(t *testing.T, im *Image, res Result) {
				if im.Configs[ConfigUncleanLeaderElection] != "true" {
					t.Errorf("configs = %v", im.Configs)
				}
			}},
		{name: "config of unknown topic", rec: ConfigChange{Topic: "u", Key: "k", Value: "v"},
			code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "config with empty key", rec: ConfigChange{Key: "", Value: "v"}, code: sluicev1.ErrorCode_INVALID_CONFIG},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.setup...)
			before := im.Clone()
			offset := uint64(len(tc.setup) + 1)
			res, err := Apply(im, tc.rec, offset)
			if got := errs.Code(err); got != tc.code {
				t.Fatalf("Apply(%+v) error = %v, want code %v", tc.rec, err, tc.code)
			}
			if err != nil {
				// A rejected record leaves the image exactly as it was.
				if !reflect.DeepEqual(im, before) {
					t.Errorf("rejected record changed the image:\n got %+v\nwant %+v", im, before)
				}
				return
			}
			if im.Offset != offset || res.Offset != offset {
				t.Errorf("offset = %d, result offset %d, want %d", im.Offset, res.Offset, offset)
			}
			if tc.check != nil {
				tc.check(t, im, res)
			}
		})
	}
}

func TestApplyRejectsNonIncreasingOffset(t *testing.T) {
	im := build(t, reg(1, ""))
	if _, err := Apply(im, reg(2, ""), 1); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("err = %v, want INVALID_REQUEST", err)
	}
}

// Two partition changes computed from the same view: only the first wins.
func TestConcurrentPartitionChangesFromSameView(t *testing.T) {
	im := build(t, withTopic()...)
	p := im.Partition("t", 0)
	a := PartitionChange{Topic: "t", PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch, Leader: NoChange, ISR: []int32{1, 2}}
	b := PartitionChange{Topic: "t", PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch, Leader: 3, ISR: []int32{3}}
	if _, err := Apply(im, a, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(im, b, 101); err == nil {
		t.Fatal("second change from a stale view was accepted")
	}
	if got := im.Partition("t", 0); got.Leader != 1 || !reflect.DeepEqual(got.ISR, []int32{1, 2}) {
		t.Errorf("partition = %+v", got)
	}
}

// Producer-id blocks never overlap, even with duplicate (replayed or racing)
// proposals in the log, and never include producer id 0.
func TestProducerIDBlocksNeverOverlap(t *testing.T) {
	im := build(t, threeBrokers()...)
	offset := uint64(100)
	type block struct{ start, end int64 }
	var got []block
	for i := 0; i < 50; i++ {
		next := im.NextProducerIDBlockStart
		// Two brokers race with the same view; then a replay of an old one.
		for _, r := range []ProducerIDsBlock{{BrokerID: 1, NextBlockStart: next}, {BrokerID: 2, NextBlockStart: next}, {BrokerID: 3, NextBlockStart: 1000}} {
			offset++
			res, err := Apply(im, r, offset)
			if err == nil {
				got = append(got, block{res.ProducerIDStart, res.ProducerIDEnd})
			}
		}
	}
	if len(got) != 50 {
		t.Fatalf("%d blocks allocated, want 50", len(got))
	}
	for i, a := range got {
		if a.start <= 0 || a.end-a.start != ProducerIDBlockSize {
			t.Errorf("block %d = %+v", i, a)
		}
		for _, b := range got[:i] {
			if a.start < b.end && b.start < a.end {
				t.Errorf("blocks %+v and %+v overlap", a, b)
			}
		}
	}
}

// Applying the same log twice yields equal images: Apply is deterministic.
func TestApplyIsDeterministic(t *testing.T) {
	log := append(withTopic(), ConfigChange{Topic: "t", Key: "a", Value: "b"},
		PartitionChange{Topic: "t", Leader: 2, ISR: []int32{2, 3}},
		ProducerIDsBlock{BrokerID: 1, NextBlockStart: 1000}, FeatureLevel{Name: FeatureTransactionVersion, Level: 2})
	a, b := build(t, log...), build(t, log...)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("images differ:\n%+v\n%+v", a, b)
	}
	ea, _ := EncodeSnapshot(a)
	eb, _ := EncodeSnapshot(b)
	if string(ea) != string(eb) {
		t.Fatal("snapshots of equal images differ")
	}
}

// withFourthBroker is withTopic plus an unfenced broker 4 (epoch 8) that
// holds no replica of t-0.
func withFourthBroker() []Record {
	return append(withTopic(), reg(4, ""), UnfenceBroker{BrokerID: 4, BrokerEpoch: 8})
}

// reassigning is withFourthBroker with t-0 being moved from 1,2,3 to
// 1,2,4: replicas 1,2,4,3, adding 4, removing 3 (partition epoch 1).
func reassigning() []Record {
	return append(withFourthBroker(), PartitionChange{Topic: "t", Leader: NoChange,
		Replicas: []int32{1, 2, 4, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}})
}

// KIP-455 rules of PartitionChange (applyPartitionChange /
// reassignmentAfter): the adding and removing sets are subsets of the new
// replicas, disjoint and duplicate-free, leave a non-empty target, are
// kept by changes that do not name them, replaced together by changes
// that do, and emptied by ClearReassignment.
func TestApplyReassignmentRules(t *testing.T) {
	cases := []struct {
		name  string
		setup []Record
		rec   PartitionChange
		code  sluicev1.ErrorCode
		want  *PartitionState // t-0 after an accepted change
	}{
		{name: "start: target first, then the removing replicas", setup: withFourthBroker(),
			rec: PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 4, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}},
			want: &PartitionState{Replicas: []int32{1, 2, 4, 3}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 1,
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}}},
		{name: "a change that names neither list keeps the reassignment", setup: reassigning(),
			rec: PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange, ISR: []int32{1, 2, 3, 4}},
			want: &PartitionState{Replicas: []int32{1, 2, 4, 3}, Leader: 1, ISR: []int32{1, 2, 4, 3}, PartitionEpoch: 2,
				AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}}},
		{name: "naming one list sets both (the other becomes empty)", setup: reassigning(),
			rec: PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange, AddingReplicas: []int32{4}},
			want: &PartitionState{Replicas: []int32{1, 2, 4, 3}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 2,
				AddingReplicas: []int32{4}}},
		{name: "clear empties both", setup: reassigning(),
			rec:  PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange, Replicas: []int32{1, 2, 4}, ISR: []int32{1, 2}, ClearReassignment: true},
			want: &PartitionState{Replicas: []int32{1, 2, 4}, Leader: 1, ISR: []int32{1, 2}, PartitionEpoch: 2}},
		{name: "clear without a reassignment is a no-op on the lists", setup: withTopic(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, ClearReassignment: true},
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, ISR: []int32{1, 2, 3}, PartitionEpoch: 1}},
		{name: "clear and set at once", setup: reassigning(),
			rec:  PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange, AddingReplicas: []int32{4}, ClearReassignment: true},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "adding replica not in the replicas", setup: withFourthBroker(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, AddingReplicas: []int32{4}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "removing replica not in the replicas", setup: withFourthBroker(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 4}, ISR: []int32{1, 2}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "a replica both added and removed", setup: withFourthBroker(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 4, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{4, 3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "duplicate adding replica", setup: withFourthBroker(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 4, 3}, AddingReplicas: []int32{4, 4}, RemovingReplicas: []int32{3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "duplicate removing replica", setup: withFourthBroker(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 4, 3}, AddingReplicas: []int32{4}, RemovingReplicas: []int32{3, 3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "every replica removed leaves no target", setup: withTopic(),
			rec:  PartitionChange{Topic: "t", Leader: NoChange, RemovingReplicas: []int32{1, 2, 3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "dropping a replica still being added without clearing", setup: reassigning(),
			rec:  PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoChange, Replicas: []int32{1, 2, 3}},
			code: sluicev1.ErrorCode_INVALID_REPLICA_ASSIGNMENT},
		{name: "epoch checks still come first", setup: reassigning(),
			rec:  PartitionChange{Topic: "t", PartitionEpoch: 0, Leader: NoChange, ClearReassignment: true},
			code: sluicev1.ErrorCode_INVALID_UPDATE_VERSION},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.setup...)
			before := im.Clone()
			res, err := Apply(im, tc.rec, im.Offset+1)
			if got := errs.Code(err); got != tc.code {
				t.Fatalf("Apply(%+v) error = %v, want code %v", tc.rec, err, tc.code)
			}
			if err != nil {
				if !reflect.DeepEqual(im, before) {
					t.Errorf("rejected record changed the image:\n got %+v\nwant %+v", im, before)
				}
				return
			}
			if got := im.Partition("t", 0); !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(res.Partition, tc.want) {
				t.Errorf("partition = %+v, result %+v, want %+v", got, res.Partition, tc.want)
			}
			// The image survives a snapshot round trip unchanged (no empty
			// non-nil lists that JSON would turn into nil).
			data, err := EncodeSnapshot(im)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := DecodeSnapshot(data); err != nil || !reflect.DeepEqual(back, im.Clone()) {
				t.Errorf("snapshot round trip: %v\n got %+v\nwant %+v", err, back.Partition("t", 0), im.Partition("t", 0))
			}
		})
	}
}
