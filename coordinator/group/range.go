package group

import "sort"

// RangeAssignor is the classic per-topic range assignment (Kafka's
// RangeAssignor without its co-partitioning stickiness): for each topic,
// its subscribers sorted by instance id when they have one, else member id
// (static members keep their place across restarts), split the partitions
// into contiguous ranges; the first P mod N members get one more. Members
// subscribed to the same topics with equal partition counts get the same
// partition numbers of every topic (co-partitioned joins). It ignores
// racks and the previous assignment.
type RangeAssignor struct{}

// Name returns "range".
func (RangeAssignor) Name() string { return RangeAssignorName }

// Assign implements Assignor.
func (RangeAssignor) Assign(members []MemberSubscription, topics map[string]TopicMetadata) map[string]Assignment {
	out := make(map[string]Assignment, len(members))
	for _, m := range members {
		out[m.MemberID] = Assignment{}
	}
	for _, t := range subscribedUnion(members) {
		n := topics[t].Partitions
		if n <= 0 {
			continue
		}
		var subs []MemberSubscription
		for _, m := range members {
			if subscribes(m.Topics, t) {
				subs = append(subs, m)
			}
		}
		sort.SliceStable(subs, func(i, j int) bool {
			ki, kj := rangeKey(subs[i]), rangeKey(subs[j])
			if ki != kj {
				return ki < kj
			}
			return subs[i].MemberID < subs[j].MemberID
		})
		per, extra := n/int32(len(subs)), n%int32(len(subs))
		start := int32(0)
		for i, m := range subs {
			count := per
			if int32(i) < extra {
				count++
			}
			if count == 0 {
				continue
			}
			ps := make([]int32, count)
			for j := range ps {
				ps[j] = start + int32(j)
			}
			out[m.MemberID][t] = ps
			start += count
		}
	}
	return out
}

// rangeKey orders members for RangeAssignor: the instance id when set.
func rangeKey(m MemberSubscription) string {
	if m.InstanceID != "" {
		return m.InstanceID
	}
	return m.MemberID
}
