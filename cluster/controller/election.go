package controller

import (
	"slices"
)

// ElectLeader picks a leader for p given which brokers are live (registered
// and unfenced). It is pure.
//
// Rule (DESIGN §6): the first replica, in assignment order, that is both in
// the ISR and live. If there is none, the partition is offline (NoLeader)
// unless unclean election is allowed, in which case the first live replica
// is chosen and uncleanElected is true: the caller must then shrink the ISR
// to that leader alone, since it may lack acknowledged records.
func ElectLeader(p *PartitionState, live func(id int32) bool, unclean bool) (leader int32, uncleanElected bool) {
	for _, id := range p.Replicas {
		if slices.Contains(p.ISR, id) && live(id) {
			return id, false
		}
	}
	if unclean {
		for _, id := range p.Replicas {
			if live(id) {
				return id, true
			}
		}
	}
	return NoLeader, false
}

// allLive reports whether every id in ids is live.
func allLive(ids []int32, live func(int32) bool) bool {
	for _, id := range ids {
		if !live(id) {
			return false
		}
	}
	return true
}

// UncleanElectionEnabled reports whether topic allows unclean leader
// election: its own ConfigUncleanLeaderElection if set, else the cluster's;
// off by default.
func UncleanElectionEnabled(im *Image, topic string) bool {
	if t := im.Topics[topic]; t != nil {
		if v, ok := t.Configs[ConfigUncleanLeaderElection]; ok {
			return v == "true"
		}
	}
	return im.Configs[ConfigUncleanLeaderElection] == "true"
}

// ReelectChanges returns the PartitionChanges that bring every partition in
// line with the current replica liveness (Image.ReplicaLive: the broker
// unfenced and the replica not reported offline, decision 42), in
// topic-name then partition order (deterministic). It is what the
// controller proposes after fencing or unfencing a broker, and after a
// broker reports offline replicas:
//
//   - replicas that are not live (fenced brokers, offline replicas) leave
//     the ISR, except that the ISR never becomes empty:
//     its last member stays, so a clean election is possible when it returns;
//   - a partition whose leader is fenced or offline gets ElectLeader's choice
//     (an unclean choice also sets ISR = [leader]).
//
// Each change carries the partition's current epochs, so it is rejected if
// the partition changed in between. Partitions already in line yield none.
// It costs O(replicas + offline reports) (replicaLiveness), and allocates
// only for the changes.
func ReelectChanges(im *Image) []PartitionChange {
	var out []PartitionChange
	lv := newReplicaLiveness(im)
	for _, name := range im.TopicNames() {
		unclean := UncleanElectionEnabled(im, name)
		t := im.Topics[name]
		for i, p := range t.Partitions {
			live := func(id int32) bool { return lv.live(t, int32(i), id) }
			if p.Leader != NoLeader && live(p.Leader) && allLive(p.ISR, live) {
				continue // in line: nothing to compute
			}
			isr := make([]int32, 0, len(p.ISR))
			for _, id := range p.ISR {
				if live(id) {
					isr = append(isr, id)
				}
			}
			if len(isr) == 0 {
				isr = []int32{p.ISR[len(p.ISR)-1]}
				if slices.Contains(p.ISR, p.Leader) {
					// Prefer keeping the last leader as the remembered member.
					isr = []int32{p.Leader}
				}
			}
			leader := p.Leader
			if leader == NoLeader || !live(leader) {
				var wasUnclean bool
				leader, wasUnclean = ElectLeader(&PartitionState{Replicas: p.Replicas, ISR: isr}, live, unclean)
				if wasUnclean {
					isr = []int32{leader}
				}
			}
			if leader == p.Leader && slices.Equal(isr, p.ISR) {
				continue
			}
			out = append(out, PartitionChange{
				Topic: name, Partition: int32(i),
				PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch,
				Leader: leader, ISR: isr,
			})
		}
	}
	return out
}
