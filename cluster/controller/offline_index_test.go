package controller

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// The indexed liveness (ReplicaLive's binary search, ReelectChanges'
// per-broker sets, issue 29) answers as a scan of the broker's reports
// does, for reports about several topics, a re-created topic's old id
// and fenced brokers.
func TestOfflineReplicaIndexMatchesScan(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 1))
	for round := 0; round < 20; round++ {
		im := NewImage()
		recs := []Record{reg(1, ""), reg(2, ""), reg(3, ""),
			UnfenceBroker{BrokerID: 1, BrokerEpoch: 1},
			UnfenceBroker{BrokerID: 2, BrokerEpoch: 2},
			UnfenceBroker{BrokerID: 3, BrokerEpoch: 3}}
		names := []string{"a", "b", "c.d", "e-f"}
		for _, name := range names {
			ct := CreateTopic{Name: name, TopicID: "id-" + name}
			for p := 0; p < 20; p++ {
				rs := []int32{1, 2, 3}
				r.Shuffle(3, func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
				ct.Partitions = append(ct.Partitions, PartitionAssignment{Replicas: rs})
			}
			recs = append(recs, ct)
		}
		for id := int32(1); id <= 3; id++ {
			off := OfflineReplicas{BrokerID: id, BrokerEpoch: int64(id)}
			for _, name := range names {
				for p := int32(0); p < 20; p++ {
					if r.IntN(3) == 0 {
						topicID := "id-" + name
						if r.IntN(4) == 0 {
							topicID = "old-id-" + name // a report about an earlier topic of that name
						}
						off.Replicas = append(off.Replicas, OfflineReplica{Topic: name, TopicID: topicID, Partition: p})
					}
				}
			}
			recs = append(recs, off)
		}
		if round%2 == 1 {
			recs = append(recs, FenceBroker{BrokerID: 3, BrokerEpoch: 3})
		}
		for i, rec := range recs {
			if _, err := Apply(im, rec, uint64(i+1)); err != nil {
				t.Fatalf("record %d (%T): %v", i, rec, err)
			}
		}
		lv := newReplicaLiveness(im)
		for _, name := range names {
			tp := im.Topics[name]
			for p := int32(0); p < 20; p++ {
				for id := int32(1); id <= 4; id++ { // 4: not registered
					b := im.Brokers[id]
					want := b != nil && !b.Fenced && !b.ReplicaOffline(tp.ID, p)
					if got := im.ReplicaLive(name, p, id); got != want {
						t.Fatalf("round %d: ReplicaLive(%s, %d, %d) = %v, the scan says %v", round, name, p, id, got, want)
					}
					if got := lv.live(tp, p, id); got != want {
						t.Fatalf("round %d: indexed live(%s, %d, %d) = %v, the scan says %v", round, name, p, id, got, want)
					}
				}
			}
		}
	}
}

// ReelectChanges with thousands of offline replicas (issue 29) moves
// every leadership and ISR membership off them, as with one.
func TestReelectChangesManyOfflineReplicas(t *testing.T) {
	const n = 3000
	im := offlineImage(t, n)
	changes := ReelectChanges(im)
	if len(changes) != n {
		t.Fatalf("%d changes, want %d (every partition has a replica on broker 2)", len(changes), n)
	}
	for _, pc := range changes {
		if _, err := Apply(im, pc, im.Offset+1); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range im.Topics["t"].Partitions {
		if p.Leader == 2 || p.Leader == NoLeader {
			t.Fatalf("partition %d: leader %d", i, p.Leader)
		}
		for _, id := range p.ISR {
			if id == 2 {
				t.Fatalf("partition %d: ISR %v keeps the offline replica", i, p.ISR)
			}
		}
	}
	if rest := ReelectChanges(im); len(rest) != 0 {
		t.Fatalf("%d changes left: %v", len(rest), fmt.Sprint(rest[0]))
	}
}
