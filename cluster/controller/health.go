package controller

import "strconv"

// PartitionHealth is one partition's state as operators count and filter
// it: kafka-topics.sh --describe --under-replicated-partitions and its
// siblings, and the counts of `sluice cluster status`.
type PartitionHealth struct {
	// Unavailable: the partition has no leader, or its leader's broker is
	// not live (fenced, gone, or its replica failed on disk): no produce
	// or fetch is served until the controller elects another.
	Unavailable bool
	// UnderReplicated is PartitionState.UnderReplicated: a replica is out
	// of the ISR (replicas a reassignment is still adding do not count).
	UnderReplicated bool
	// UnderMinISR: fewer in-sync replicas than min.insync.replicas, so an
	// acks=all produce fails (NOT_ENOUGH_REPLICAS). AtMinISR: exactly
	// that many, so one more loss makes it fail.
	UnderMinISR bool
	AtMinISR    bool
}

// PartitionHealth returns the health of partition index of t in im, t
// having min.insync.replicas minISR. The partition must exist.
func (im *Image) PartitionHealth(t *Topic, index int32, minISR int32) PartitionHealth {
	p := t.Partitions[index]
	isr := int32(len(p.ISR))
	return PartitionHealth{
		Unavailable:     p.Leader == NoLeader || !im.ReplicaLive(t.Name, index, p.Leader),
		UnderReplicated: p.UnderReplicated(),
		UnderMinISR:     isr < minISR,
		AtMinISR:        isr == minISR,
	}
}

// MinInsyncReplicas is t's min.insync.replicas: its config, or 1 (the
// value a topic without the config has, as cluster.ParseTopicConfig
// reads it) when unset or unreadable.
func (t *Topic) MinInsyncReplicas() int32 {
	if n, err := strconv.ParseInt(t.Configs[ConfigMinInsyncReplicas], 10, 32); err == nil && n >= 1 {
		return int32(n)
	}
	return 1
}
