package group

import (
	"container/heap"
	"sort"
)

// UniformAssignor spreads partitions evenly over members and is sticky
// (Kafka's UniformAssignor, written anew):
//
//  1. Keep: every member keeps the partitions of its previous target
//     that still exist and that it still subscribes to.
//  2. Homogeneous subscriptions (every member subscribes to the same
//     topics): each member's quota is ⌊P/N⌋, and the P mod N members that
//     kept the most (ties: member id order) get one more. A member above
//     its quota releases the excess — partitions none of whose replicas
//     are on its rack first, then the highest topic/partition. Free
//     partitions go first to a member with room on one of the partition's
//     replica racks, then round-robin over members with room in member
//     id order. Counts differ by at most one; a partition moves only when
//     balance requires it.
//  3. Heterogeneous subscriptions: free partitions, the most constrained
//     first (fewest eligible members), go to the eligible member with the
//     fewest partitions (ties: a rack match, then member id order); then
//     a partition moves from a member to an eligible one with at least two
//     fewer partitions until no such move remains.
//
// Rack awareness applies when some member has a rack and some subscribed
// partition has replica racks; it never overrides the quotas.
type UniformAssignor struct{}

// Name returns "uniform".
func (UniformAssignor) Name() string { return UniformAssignorName }

type uniformRun struct {
	members   []MemberSubscription
	topics    map[string]TopicMetadata
	owner     map[string][]int // topic -> partition -> member index, -1 free
	held      [][]topicPartition
	rackAware bool
}

// Assign implements Assignor.
func (UniformAssignor) Assign(members []MemberSubscription, topics map[string]TopicMetadata) map[string]Assignment {
	out := make(map[string]Assignment, len(members))
	if len(members) == 0 {
		return out
	}
	u := &uniformRun{members: members, topics: topics, owner: map[string][]int{}, held: make([][]topicPartition, len(members))}
	union := subscribedUnion(members)
	total := 0
	for _, t := range union {
		if n := topics[t].Partitions; n > 0 {
			total += int(n)
		}
	}
	all := make([]topicPartition, 0, total)
	anyRacks := false
	for _, t := range union {
		md := topics[t]
		if md.Partitions <= 0 {
			continue
		}
		own := make([]int, md.Partitions)
		for p := range own {
			own[p] = -1
			all = append(all, topicPartition{t, int32(p)})
			if p < len(md.Racks) && len(md.Racks[p]) > 0 {
				anyRacks = true
			}
		}
		u.owner[t] = own
	}
	for _, m := range members {
		if m.RackID != "" {
			u.rackAware = anyRacks
			break
		}
	}

	// 1. Keep.
	homogeneous := true
	for i, m := range members {
		if i > 0 && !equalStrings(m.Topics, members[0].Topics) {
			homogeneous = false
		}
		for _, t := range m.Current.topics() {
			own := u.owner[t]
			if own == nil || !subscribes(m.Topics, t) {
				continue
			}
			for _, p := range m.Current[t] {
				if p < 0 || int(p) >= len(own) || own[p] != -1 {
					continue
				}
				own[p] = i
				u.held[i] = append(u.held[i], topicPartition{t, p})
			}
		}
	}

	if homogeneous {
		u.quotas(all)
	} else {
		u.balance(all)
	}
	for i, m := range members {
		out[m.MemberID] = fromPartitions(u.held[i])
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// rackMatch reports whether one of tp's replicas is on member i's rack.
func (u *uniformRun) rackMatch(i int, tp topicPartition) bool {
	if !u.rackAware || u.members[i].RackID == "" {
		return false
	}
	racks := u.topics[tp.topic].Racks
	if int(tp.partition) >= len(racks) {
		return false
	}
	for _, r := range racks[tp.partition] {
		if r == u.members[i].RackID {
			return true
		}
	}
	return false
}

func (u *uniformRun) give(i int, tp topicPartition) {
	u.owner[tp.topic][tp.partition] = i
	u.held[i] = append(u.held[i], tp)
}

func lessTP(a, b topicPartition) bool {
	if a.topic != b.topic {
		return a.topic < b.topic
	}
	return a.partition < b.partition
}

// quotas is step 2 (homogeneous subscriptions).
func (u *uniformRun) quotas(all []topicPartition) {
	n := len(u.members)
	q, r := len(all)/n, len(all)%n
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(u.held[order[a]]) > len(u.held[order[b]]) })
	quota := make([]int, n)
	for k, i := range order {
		quota[i] = q
		if k < r {
			quota[i]++
		}
	}
	// Release the excess: rack mismatches first, then the highest.
	for i := range u.members {
		excess := len(u.held[i]) - quota[i]
		if excess <= 0 {
			continue
		}
		h := u.held[i]
		sort.SliceStable(h, func(a, b int) bool {
			ma, mb := u.rackMatch(i, h[a]), u.rackMatch(i, h[b])
			if ma != mb {
				return ma // matches first: kept
			}
			return lessTP(h[a], h[b])
		})
		for _, tp := range h[len(h)-excess:] {
			u.owner[tp.topic][tp.partition] = -1
		}
		u.held[i] = h[:len(h)-excess]
	}
	var pool []topicPartition
	for _, tp := range all {
		if u.owner[tp.topic][tp.partition] == -1 {
			pool = append(pool, tp)
		}
	}
	// Rack pass: a member with room on one of the partition's racks.
	if u.rackAware && len(pool) > 0 {
		byRack := map[string][]int{}
		for i, m := range u.members {
			if m.RackID != "" && len(u.held[i]) < quota[i] {
				byRack[m.RackID] = append(byRack[m.RackID], i)
			}
		}
		rest := pool[:0:0]
		for _, tp := range pool {
			placed := false
			racks := u.topics[tp.topic].Racks
			if int(tp.partition) < len(racks) {
				for _, rack := range racks[tp.partition] {
					list := byRack[rack]
					for len(list) > 0 && len(u.held[list[0]]) >= quota[list[0]] {
						list = list[1:]
					}
					byRack[rack] = list
					if len(list) > 0 {
						u.give(list[0], tp)
						placed = true
						break
					}
				}
			}
			if !placed {
				rest = append(rest, tp)
			}
		}
		pool = rest
	}
	// Round-robin over members with room, in member order.
	var room []int
	for i := range u.members {
		if len(u.held[i]) < quota[i] {
			room = append(room, i)
		}
	}
	k := 0
	for _, tp := range pool {
		// Quotas add up to len(all), so room is never empty here.
		if k >= len(room) {
			k = 0
		}
		i := room[k]
		u.give(i, tp)
		if len(u.held[i]) >= quota[i] {
			room = append(room[:k], room[k+1:]...)
		} else {
			k++
		}
	}
}

// balance is step 3 (heterogeneous subscriptions).
func (u *uniformRun) balance(all []topicPartition) {
	eligible := map[string][]int{}
	for i, m := range u.members {
		for _, t := range m.Topics {
			if u.owner[t] != nil {
				eligible[t] = append(eligible[t], i)
			}
		}
	}
	var pool []topicPartition
	for _, tp := range all {
		if u.owner[tp.topic][tp.partition] == -1 {
			pool = append(pool, tp)
		}
	}
	sort.SliceStable(pool, func(a, b int) bool { return len(eligible[pool[a].topic]) < len(eligible[pool[b].topic]) })
	// best returns the eligible member for tp with the fewest partitions
	// (ties: rack match, then member order), skipping skip.
	best := func(tp topicPartition, skip int) int {
		b := -1
		for _, i := range eligible[tp.topic] {
			if i == skip {
				continue
			}
			if b == -1 || len(u.held[i]) < len(u.held[b]) ||
				(len(u.held[i]) == len(u.held[b]) && u.rackMatch(i, tp) && !u.rackMatch(b, tp)) {
				b = i
			}
		}
		return b
	}
	if u.rackAware {
		for _, tp := range pool {
			u.give(best(tp, -1), tp)
		}
	} else {
		// Without racks, best is the (count, member order) minimum: a
		// heap per topic instead of a scan per partition.
		for i := 0; i < len(pool); {
			j := i
			for j < len(pool) && pool[j].topic == pool[i].topic {
				j++
			}
			h := &loadHeap{held: u.held, members: append([]int(nil), eligible[pool[i].topic]...)}
			heap.Init(h)
			for _, tp := range pool[i:j] {
				m := h.members[0]
				u.give(m, tp)
				heap.Fix(h, 0)
			}
			i = j
		}
	}
	// Move while a move narrows the spread; Σ count² falls strictly at
	// every move, so this ends.
	for changed := true; changed; {
		changed = false
		// No member has fewer than min partitions; min only grows during
		// a pass, so a member with at most min+1 has no move to make.
		min := len(u.held[0])
		for _, h := range u.held {
			if len(h) < min {
				min = len(h)
			}
		}
		for a := range u.members {
			h := u.held[a]
			if len(h) <= min+1 {
				continue
			}
			sort.SliceStable(h, func(x, y int) bool {
				mx, my := u.rackMatch(a, h[x]), u.rackMatch(a, h[y])
				if mx != my {
					return !mx // mismatches move first
				}
				return lessTP(h[y], h[x]) // then the highest
			})
			kept := h[:0:0]
			for k, tp := range h {
				if len(h)-k+len(kept) <= min+1 {
					kept = append(kept, h[k:]...)
					break
				}
				b := best(tp, a)
				if b >= 0 && len(u.held[b])+1 < len(h)-k+len(kept) {
					u.give(b, tp)
					changed = true
					continue
				}
				kept = append(kept, tp)
			}
			u.held[a] = kept
		}
	}
}

// loadHeap orders member indices by partitions held, then index.
type loadHeap struct {
	held    [][]topicPartition
	members []int
}

func (h *loadHeap) Len() int { return len(h.members) }
func (h *loadHeap) Less(i, j int) bool {
	a, b := h.members[i], h.members[j]
	if len(h.held[a]) != len(h.held[b]) {
		return len(h.held[a]) < len(h.held[b])
	}
	return a < b
}
func (h *loadHeap) Swap(i, j int) { h.members[i], h.members[j] = h.members[j], h.members[i] }
func (h *loadHeap) Push(x any)    { h.members = append(h.members, x.(int)) }
func (h *loadHeap) Pop() any {
	x := h.members[len(h.members)-1]
	h.members = h.members[:len(h.members)-1]
	return x
}
