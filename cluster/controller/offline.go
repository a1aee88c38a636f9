package controller

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// StorageOffline returns, for a partition with no leader, the offline
// replica reports that keep it so: one per ISR member, in ISR order, when
// every member of its ISR is on a registered, unfenced broker that reported
// its replica of the partition offline after a disk error (decision 42).
// No broker can then serve the partition until an operator fixes a disk
// and restarts one of those brokers (which registers it anew, clearing its
// reports): ReelectChanges keeps the last failed member in the ISR, and
// unclean election, where allowed, would already have chosen another live
// replica. brokers[i] is the broker of reports[i].
//
// It returns nothing for a partition that has a leader, that does not
// exist, or whose ISR has a member that is fenced, unregistered or healthy:
// a fenced broker may come back by itself (a restart), so that partition
// is LEADER_NOT_AVAILABLE, not a storage failure. It is pure.
func (im *Image) StorageOffline(topic string, partition int32) (brokers []int32, reports []OfflineReplica) {
	t := im.Topics[topic]
	p := im.Partition(topic, partition)
	if t == nil || p == nil || p.Leader != NoLeader || len(p.ISR) == 0 {
		return nil, nil
	}
	for _, id := range p.ISR {
		b := im.Brokers[id]
		if b == nil || b.Fenced {
			return nil, nil
		}
		i := offlineReplicaIndex(b.OfflineReplicas, topic, t.ID, partition)
		if i < 0 {
			return nil, nil
		}
		brokers = append(brokers, id)
		reports = append(reports, b.OfflineReplicas[i])
	}
	return brokers, reports
}

// offlineReplicaIndex is the index in rs, a broker's reports in the
// image's order (sorted by topic, then partition: applyOfflineReplicas),
// of the report about partition of topic, whose id is topicID, or -1. A
// binary search: Metadata asks for every leaderless partition, and a
// broker out of file descriptors reported thousands (issue 29).
func offlineReplicaIndex(rs []OfflineReplica, topic, topicID string, partition int32) int {
	i, found := slices.BinarySearchFunc(rs, OfflineReplica{Topic: topic, Partition: partition}, compareOfflineReplicas)
	if !found || rs[i].TopicID != topicID {
		return -1
	}
	return i
}

// compareOfflineReplicas orders reports by topic, then partition: the
// order a broker's reports are kept in.
func compareOfflineReplicas(a, b OfflineReplica) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// StorageOfflineError is the KAFKA_STORAGE_ERROR that Metadata and every
// broker's produce, fetch and list offsets answer for a partition that
// StorageOffline reports, or nil when it reports nothing. The message is
// for operators: it names each failed broker, its log directory and the
// OS error, and what to do ("partition orders-0 is offline: broker 1's
// log directory /data/logs/orders-0 failed: write
// /data/logs/orders-0/….log: no space left on device; it was the only
// in-sync replica: fix the disk and restart broker 1").
func (im *Image) StorageOfflineError(topic string, partition int32) error {
	brokers, reports := im.StorageOffline(topic, partition)
	if len(brokers) == 0 {
		return nil
	}
	var b strings.Builder
	for i, id := range brokers {
		if i > 0 {
			b.WriteString(", and ")
		}
		r := reports[i]
		fmt.Fprintf(&b, "broker %d's log directory %s failed", id, r.Path)
		if r.Error != "" {
			b.WriteString(": " + r.Error)
		}
	}
	todo := fmt.Sprintf("it was the only in-sync replica: fix the disk and restart broker %d", brokers[0])
	if len(brokers) > 1 {
		todo = "they were the only in-sync replicas: fix a disk and restart its broker"
	}
	return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "partition %s-%d is offline: %s; %s", topic, partition, b.String(), todo)
}

// replicaLiveness answers Image.ReplicaLive for every replica of every
// partition in one pass (ReelectChanges): a broker's offline reports are
// indexed by topic id and partition the first time one of its replicas
// is asked about, so the pass costs O(replicas + reports). Scanning a
// broker's reports for each of its replicas made it quadratic: with 5,000
// replicas reported offline (a broker out of file descriptors, issue 29)
// the controller spent over a core re-computing it at every heartbeat.
type replicaLiveness struct {
	im *Image
	// offline holds, per broker asked about, its reports as a set.
	offline map[int32]map[replicaKey]struct{}
}

type replicaKey struct {
	topicID   string
	partition int32
}

func newReplicaLiveness(im *Image) *replicaLiveness {
	return &replicaLiveness{im: im}
}

// live is Image.ReplicaLive(t.Name, partition, id).
func (lv *replicaLiveness) live(t *Topic, partition, id int32) bool {
	b := lv.im.Brokers[id]
	if b == nil || b.Fenced {
		return false
	}
	if len(b.OfflineReplicas) == 0 {
		return true
	}
	set, ok := lv.offline[id]
	if !ok {
		set = make(map[replicaKey]struct{}, len(b.OfflineReplicas))
		for _, r := range b.OfflineReplicas {
			set[replicaKey{r.TopicID, r.Partition}] = struct{}{}
		}
		if lv.offline == nil {
			lv.offline = make(map[int32]map[replicaKey]struct{})
		}
		lv.offline[id] = set
	}
	_, off := set[replicaKey{t.ID, partition}]
	return !off
}
