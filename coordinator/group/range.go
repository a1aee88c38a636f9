package group

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// RangeAssignor is the per-topic range assignment, sticky: for each topic,
// its subscribers split the partitions into contiguous ranges, the first
// P mod N ranges one partition longer (Kafka's layout); which member gets
// which range is decided by what the members held before (Current): a
// range goes to the member that held the most of it, so a member joining
// or leaving moves only the partitions the new range bounds move, not
// every range after it. Without a previous assignment (a new group), the
// subscribers sorted by instance id when they have one, else member id,
// take the ranges in order — exactly Kafka's RangeAssignor; static members
// keep their place across restarts either way.
//
// Topics with the same subscribers and the same partition count share one
// choice of member per range, so such members get the same partition
// numbers of every one of them (co-partitioned joins), and a member's
// previous holdings count over all of them together. It ignores racks.
//
// Kafka 4's server-side RangeAssignor gives the ranges in member order
// whatever was held (Kafka 3.7's kept each member's previous partitions
// within its quota, at the cost of contiguous ranges); Sluice keeps
// contiguous, co-partitioned ranges and moves fewer of them (decision 75).
type RangeAssignor struct{}

// Name returns "range".
func (RangeAssignor) Name() string { return RangeAssignorName }

// Assign implements Assignor.
func (RangeAssignor) Assign(members []MemberSubscription, topics map[string]TopicMetadata) map[string]Assignment {
	out := make(map[string]Assignment, len(members))
	for _, m := range members {
		out[m.MemberID] = Assignment{}
	}
	// Group the subscribed topics that exist by (subscribers, partition
	// count): each group shares one range-to-member choice.
	type class struct {
		subs   []MemberSubscription // sorted by rangeKey
		n      int32
		topics []string
	}
	var order []string
	classes := map[string]*class{}
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
		var key strings.Builder
		key.WriteString(strconv.Itoa(int(n)))
		for _, m := range subs {
			key.WriteByte(0)
			key.WriteString(m.MemberID)
		}
		c := classes[key.String()]
		if c == nil {
			c = &class{subs: subs, n: n}
			classes[key.String()] = c
			order = append(order, key.String())
		}
		c.topics = append(c.topics, t)
	}
	for _, k := range order {
		c := classes[k]
		starts, owners := rangeOwners(c.subs, c.n, c.topics)
		for i, m := range owners {
			if m < 0 {
				continue
			}
			lo, hi := starts[i], starts[i+1]
			id := c.subs[m].MemberID
			for _, t := range c.topics {
				ps := make([]int32, 0, hi-lo)
				for p := lo; p < hi; p++ {
					ps = append(ps, p)
				}
				out[id][t] = ps
			}
		}
	}
	return out
}

// rangeOwners splits n partitions into len(subs) ranges (Kafka's sizes:
// the first n mod len(subs) one longer; empty ranges when there are more
// members than partitions) and picks each range's member: range i is
// [starts[i], starts[i+1]) and goes to subs[owners[i]] (-1: an empty
// range, nobody). The ranges are handed out by how much of each a member
// held in topics before, most first (ties: the earlier member, then the
// earlier range); the members that held none of theirs take the ranges
// left in order.
func rangeOwners(subs []MemberSubscription, n int32, topics []string) (starts []int32, owners []int) {
	k := int32(len(subs))
	per, extra := n/k, n%k
	starts = make([]int32, k+1)
	for i := int32(0); i < k; i++ {
		size := per
		if i < extra {
			size++
		}
		starts[i+1] = starts[i] + size
	}
	owners = make([]int, k)
	for i := range owners {
		owners[i] = -1
	}
	// Partitions each member held of each range, over topics.
	type pair struct{ member, rng int }
	held := map[pair]int32{}
	for mi, m := range subs {
		for _, t := range topics {
			for _, p := range m.Current[t] {
				if p < 0 || p >= n {
					continue
				}
				// The range holding p: the first whose end is above p.
				ri := sort.Search(int(k), func(i int) bool { return starts[i+1] > p })
				if ri < int(k) {
					held[pair{mi, ri}]++
				}
			}
		}
	}
	// Most held first; ties: the earlier member, then the earlier range.
	pairs := slices.SortedFunc(maps.Keys(held), func(a, b pair) int {
		if c := cmp.Compare(held[b], held[a]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.member, b.member); c != 0 {
			return c
		}
		return cmp.Compare(a.rng, b.rng)
	})
	taken := make([]bool, k)
	for _, p := range pairs {
		if owners[p.rng] >= 0 || taken[p.member] {
			continue
		}
		owners[p.rng] = p.member
		taken[p.member] = true
	}
	next := 0
	for mi := range subs {
		if taken[mi] {
			continue
		}
		for next < int(k) && (owners[next] >= 0 || starts[next+1] == starts[next]) {
			next++
		}
		if next == int(k) {
			break
		}
		owners[next] = mi
		taken[mi] = true
	}
	return starts, owners
}

// rangeKey orders members for RangeAssignor: the instance id when set.
func rangeKey(m MemberSubscription) string {
	if m.InstanceID != "" {
		return m.InstanceID
	}
	return m.MemberID
}
