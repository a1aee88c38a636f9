package controller

import (
	"fmt"
	"testing"
)

// offlineImage is an image of three brokers and a topic of n partitions
// (replicas 1, 2, 3 rotated, so each broker leads a third) in which
// broker 2 reported every one of its n replicas offline — what a broker
// that ran out of file descriptors used to report (issue 29) — and, when
// fenced, broker 3 is fenced too, so that partitions whose only live
// replica is broker 1 are re-elected as well.
func offlineImage(tb testing.TB, n int) *Image {
	tb.Helper()
	im := NewImage()
	recs := []Record{reg(1, ""), reg(2, ""), reg(3, ""),
		UnfenceBroker{BrokerID: 1, BrokerEpoch: 1},
		UnfenceBroker{BrokerID: 2, BrokerEpoch: 2},
		UnfenceBroker{BrokerID: 3, BrokerEpoch: 3}}
	ct := CreateTopic{Name: "t", TopicID: "id-t"}
	for i := 0; i < n; i++ {
		r := []int32{1, 2, 3}
		r = append(r[i%3:], r[:i%3]...)
		ct.Partitions = append(ct.Partitions, PartitionAssignment{Replicas: r})
	}
	off := OfflineReplicas{BrokerID: 2, BrokerEpoch: 2}
	for i := 0; i < n; i++ {
		off.Replicas = append(off.Replicas, OfflineReplica{Topic: "t", TopicID: "id-t", Partition: int32(i),
			Path: fmt.Sprintf("/data/logs/t-%d", i), Error: "open /data/logs/t-x/0.log: too many open files"})
	}
	recs = append(recs, ct, off)
	for i, r := range recs {
		if _, err := Apply(im, r, uint64(i+1)); err != nil {
			tb.Fatalf("record %d (%T): %v", i, r, err)
		}
	}
	return im
}

// BenchmarkReelectChangesOffline computes the re-elections for 5,000
// offline replicas on one broker, as the controller does at every
// heartbeat of that broker while any is pending (issue 29 measured 1.4
// cores spent here: each replica's liveness scanned the broker's whole
// offline list).
func BenchmarkReelectChangesOffline(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("offline=%d", n), func(b *testing.B) {
			im := offlineImage(b, n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if got := len(ReelectChanges(im)); got != n {
					b.Fatalf("%d changes, want %d", got, n)
				}
			}
		})
	}
}

// BenchmarkReelectChangesInLine is the heartbeat's check once the
// re-elections are done: 5,000 replicas still reported offline, no change
// pending (syncOfflineReplicas runs it at every heartbeat of the broker).
func BenchmarkReelectChangesInLine(b *testing.B) {
	im := offlineImage(b, 5000)
	for _, pc := range ReelectChanges(im) {
		if _, err := Apply(im, pc, im.Offset+1); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := len(ReelectChanges(im)); got != 0 {
			b.Fatalf("%d changes pending, want none", got)
		}
	}
}

// BenchmarkStorageOfflineMetadata answers StorageOffline for every
// partition (a Metadata request for the topic), with 5,000 offline
// replicas on one broker, where the partitions led by broker 2 alone
// have no leader.
func BenchmarkStorageOfflineMetadata(b *testing.B) {
	im := offlineImage(b, 5000)
	for _, pc := range ReelectChanges(im) {
		pc.ISR = []int32{2}
		pc.Leader = NoLeader
		if _, err := Apply(im, pc, im.Offset+1); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		found := 0
		for p := range im.Topics["t"].Partitions {
			if bs, _ := im.StorageOffline("t", int32(p)); len(bs) > 0 {
				found++
			}
		}
		if found != 5000 {
			b.Fatalf("%d partitions storage-offline, want 5000", found)
		}
	}
}
