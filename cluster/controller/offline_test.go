package controller

import (
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func offline(broker int32, epoch int64, partitions ...int32) OfflineReplicas {
	r := OfflineReplicas{BrokerID: broker, BrokerEpoch: epoch}
	for _, p := range partitions {
		r.Replicas = append(r.Replicas, OfflineReplica{Topic: "t", TopicID: "id-t", Partition: p, Path: "/data/logs/t-0", Error: "write /data/logs/t-0/x.log: input/output error"})
	}
	return r
}

// Decision 42: a replica its broker reports offline (a disk failure)
// leaves the ISR and leadership moves to another ISR member, exactly as if
// its broker were fenced for that partition alone; with no other ISR
// member the partition is offline and the ISR remembers the failed
// replica, so it leads again (in a new epoch) once its broker comes back
// with a healthy disk, that is registers again.
func TestReelectChangesAfterOfflineReplica(t *testing.T) {
	cases := []struct {
		name string
		log  []Record
		want *PartitionState // t-0 after the changes
	}{
		{name: "leader's replica offline: next ISR member leads, it leaves the ISR",
			log:  append(withTopic(), offline(1, 1, 0)),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 1, ISR: []int32{2, 3}, PartitionEpoch: 1}},
		{name: "follower's replica offline: ISR shrinks, leader kept",
			log:  append(withTopic(), offline(3, 3, 0)),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, ISR: []int32{1, 2}, PartitionEpoch: 1}},
		{name: "another partition offline on the leader: nothing moves",
			log:  append(withTopic(), offline(1, 1, 5)),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, ISR: []int32{1, 2, 3}}},
		{name: "only ISR member offline: partition offline, ISR remembers it",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0)),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: NoLeader, LeaderEpoch: 1, ISR: []int32{1}, PartitionEpoch: 2}},
		{name: "only ISR member offline, then its broker restarts: it leads again",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0),
				PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoLeader},
				RegisterBroker{BrokerID: 1, Address: "b1:9400", IncarnationID: "inc-1-restarted"},
				UnfenceBroker{BrokerID: 1, BrokerEpoch: 11}),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 2, ISR: []int32{1}, PartitionEpoch: 3}},
		{name: "report cleared (empty set): the replica may lead again",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0),
				PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoLeader},
				offline(1, 1)),
			want: &PartitionState{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 2, ISR: []int32{1}, PartitionEpoch: 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.log...)
			for i, c := range ReelectChanges(im) {
				if _, err := Apply(im, c, im.Offset+1); err != nil {
					t.Fatalf("change %d %+v rejected: %v", i, c, err)
				}
			}
			if got := im.Partition("t", 0); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("partition = %+v, want %+v", got, tc.want)
			}
			if again := ReelectChanges(im); len(again) != 0 {
				t.Errorf("not converged: %+v", again)
			}
		})
	}
}

// The OfflineReplicas record: epoch-checked like fencing, kept sorted,
// replaced whole, cleared by a new registration, and carried by Clone.
// No rule may make an offline replica leader or put it back in the ISR.
func TestOfflineReplicasRules(t *testing.T) {
	im := build(t, withTopic()...)
	if _, err := Apply(im, offline(1, 99, 0), im.Offset+1); errs.Code(err) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		t.Fatalf("stale epoch: %v, want STALE_BROKER_EPOCH", err)
	}
	dup := offline(1, 1, 0, 0)
	if _, err := Apply(im, dup, im.Offset+1); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("duplicate partition: %v, want INVALID_REQUEST", err)
	}
	if _, err := Apply(im, offline(2, 2, 3, 0), im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if got := im.Brokers[2].OfflineReplicas; len(got) != 2 || got[0].Partition != 0 || got[1].Partition != 3 {
		t.Fatalf("offline replicas %+v, want partitions 0 and 3 in order", got)
	}
	if !im.Brokers[2].ReplicaOffline("id-t", 0) || im.Brokers[2].ReplicaOffline("id-other", 0) || im.ReplicaLive("t", 0, 2) || !im.ReplicaLive("t", 1, 2) {
		t.Fatal("ReplicaOffline/ReplicaLive disagree with the record")
	}
	c := im.Clone()
	c.Brokers[2].OfflineReplicas[0].Path = "changed"
	if im.Brokers[2].OfflineReplicas[0].Path == "changed" {
		t.Fatal("Clone shares the offline replicas")
	}
	// An offline replica cannot be elected nor rejoin the ISR.
	if _, err := Apply(im, PartitionChange{Topic: "t", Leader: 2}, im.Offset+1); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("electing an offline replica: %v, want INVALID_REQUEST", err)
	}
	if _, err := Apply(im, PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1, 3}}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckAlterPartition(im, AlterPartitionRequest{BrokerID: 1, BrokerEpoch: 1, Topic: "t", PartitionEpoch: 1, NewISR: []int32{1, 2, 3}}); errs.Code(err) != sluicev1.ErrorCode_INELIGIBLE_REPLICA {
		t.Fatalf("offline replica rejoining the ISR: %v, want INELIGIBLE_REPLICA", err)
	}
	if _, ok := preferredEligible(im, "t", 0, &PartitionState{Replicas: []int32{2, 1}, Leader: 1, ISR: []int32{1, 2}}); ok {
		t.Fatal("an offline preferred replica is eligible to lead")
	}
	// A new incarnation starts with none.
	if _, err := Apply(im, RegisterBroker{BrokerID: 2, Address: "b2:9400", IncarnationID: "inc-2-new"}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if got := im.Brokers[2].OfflineReplicas; got != nil {
		t.Fatalf("offline replicas after re-registration: %+v", got)
	}
	// The record round-trips through the encoding.
	data, err := EncodeRecord(offline(1, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRecord(data)
	if err != nil || !reflect.DeepEqual(back, Record(offline(1, 1, 0))) {
		t.Fatalf("decoded %+v (%v)", back, err)
	}
}
