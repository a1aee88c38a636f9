package group

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
)

// layout renders an assignors' result as "m1=t:0,1 | m2=-" in member order.
func layout(members []MemberSubscription, out map[string]Assignment) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m.MemberID + "=" + out[m.MemberID].String()
	}
	return strings.Join(parts, " | ")
}

func subs(spec ...string) []MemberSubscription {
	// "id[/instance][@rack]:t,u[=current]"
	var out []MemberSubscription
	for _, s := range spec {
		head, current, _ := strings.Cut(s, "=")
		head, topics, _ := strings.Cut(head, ":")
		head, rack, _ := strings.Cut(head, "@")
		id, inst, _ := strings.Cut(head, "/")
		m := MemberSubscription{MemberID: id, InstanceID: inst, RackID: rack, Topics: sortedUnique(strings.Split(topics, ","))}
		if current != "" {
			m.Current = parseAssignment(strings.ReplaceAll(current, ";", " "))
		}
		out = append(out, m)
	}
	return out
}

func TestRangeLayouts(t *testing.T) {
	tests := []struct {
		name    string
		members []MemberSubscription
		topics  map[string]TopicMetadata
		want    string
	}{
		{"7 over 3: the first gets one more", subs("m1:t", "m2:t", "m3:t"), meta("t", 7),
			"m1=t:0,1,2 | m2=t:3,4 | m3=t:5,6"},
		{"co-partitioned topics get the same numbers", subs("m1:t,u", "m2:t,u"), meta("t", 4, "u", 4),
			"m1=t:0,1 u:0,1 | m2=t:2,3 u:2,3"},
		{"per topic over its subscribers", subs("m1:t", "m2:t,u", "m3:u"), meta("t", 3, "u", 2),
			"m1=t:0,1 | m2=t:2 u:0 | m3=u:1"},
		{"instance ids order static members", subs("a/z:t", "b/y:t", "c:t"), meta("t", 3),
			"a=t:2 | b=t:1 | c=t:0"},
		{"more members than partitions", subs("m1:t", "m2:t", "m3:t"), meta("t", 2),
			"m1=t:0 | m2=t:1 | m3=-"},
		{"missing topic: no partitions", subs("m1:t,x", "m2:t"), meta("t", 2),
			"m1=t:0 | m2=t:1"},
		{"previous assignment kept", subs("m1:t=t:1", "m2:t=t:0"), meta("t", 2),
			"m1=t:1 | m2=t:0"},
		{"a joiner that sorts first does not shift the others' ranges", subs("a:t", "b:t=t:0,1,2", "c:t=t:3,4,5"), meta("t", 6),
			"a=t:2,3 | b=t:0,1 | c=t:4,5"},
		{"a member leaving: each keeps the range it holds most of", subs("a:t=t:0,1", "c:t=t:4,5"), meta("t", 6),
			"a=t:0,1,2 | c=t:3,4,5"},
		{"holdings count over co-partitioned topics together", subs("m1:t,u=t:0 u:0", "m2:t,u=t:1 u:1", "m3:t,u"), meta("t", 2, "u", 2),
			"m1=t:0 u:0 | m2=t:1 u:1 | m3=-"},
		{"the longer ranges stay first", subs("m1:t=t:3,4", "m2:t=t:0,1,2"), meta("t", 5),
			"m1=t:3,4 | m2=t:0,1,2"},
		{"partitions held that are gone are ignored", subs("m1:t=t:7", "m2:t=t:1"), meta("t", 2),
			"m1=t:0 | m2=t:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := RangeAssignor{}.Assign(tc.members, tc.topics)
			if got := layout(tc.members, out); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			checkAssignment(t, tc.members, tc.topics, out)
		})
	}
}

func TestUniformLayouts(t *testing.T) {
	racks := func(n int, rs ...string) TopicMetadata {
		md := TopicMetadata{Partitions: int32(n)}
		for i := 0; i < n; i++ {
			md.Racks = append(md.Racks, []string{rs[i%len(rs)]})
		}
		return md
	}
	tests := []struct {
		name    string
		members []MemberSubscription
		topics  map[string]TopicMetadata
		want    string
	}{
		{"fresh: round robin, first members take the remainder", subs("m1:t", "m2:t", "m3:t"), meta("t", 7),
			"m1=t:0,3,6 | m2=t:1,4 | m3=t:2,5"},
		{"sticky: a member joins, only the excess moves", subs("m1:t=t:0,1,2,3,4,5", "m2:t=t:6,7,8,9,10,11", "m3:t"), meta("t", 12),
			"m1=t:0,1,2,3 | m2=t:6,7,8,9 | m3=t:4,5,10,11"},
		{"sticky: a member leaves, only its partitions move", subs("m1:t=t:0,1,2,3", "m3:t=t:8,9,10,11"), meta("t", 12),
			"m1=t:0,1,2,3,4,6 | m3=t:5,7,8,9,10,11"},
		{"sticky: the remainder goes to who holds more", subs("m1:t=t:0", "m2:t=t:1,2,3"), meta("t", 5),
			"m1=t:0,4 | m2=t:1,2,3"},
		{"balance over several topics", subs("m1:t,u", "m2:t,u"), meta("t", 3, "u", 1),
			"m1=t:0,2 | m2=t:1 u:0"},
		{"gone partitions and unsubscribed topics are dropped", subs("m1:t=t:0,1,5;v:0", "m2:t"), meta("t", 4, "v", 1),
			"m1=t:0,1 | m2=t:2,3"},
		{"rack aware: each member its rack's partitions", subs("m1@r2:t", "m2@r1:t"), map[string]TopicMetadata{"t": racks(4, "r1", "r2")},
			"m1=t:1,3 | m2=t:0,2"},
		{"rack aware never breaks balance", subs("m1@r1:t", "m2@r2:t"), map[string]TopicMetadata{"t": racks(4, "r1")},
			"m1=t:0,1 | m2=t:2,3"},
		{"rack aware: the excess released is off-rack", subs("m1@r1:t=t:0,1,2,3", "m2@r2:t"), map[string]TopicMetadata{"t": racks(4, "r1", "r2")},
			"m1=t:0,2 | m2=t:1,3"},
		{"heterogeneous: balanced within eligibility", subs("m1:t,u", "m2:t", "m3:u"), meta("t", 4, "u", 4),
			"m1=t:0,2 u:2 | m2=t:1,3 | m3=u:0,1,3"},
		{"heterogeneous: sticky", subs("m1:t,u=t:0,1,2,3;u:0,1,2,3", "m2:t", "m3:u"), meta("t", 4, "u", 4),
			"m1=t:0,1 u:3 | m2=t:2,3 | m3=u:0,1,2"},
		{"heterogeneous: constrained partitions first", subs("m1:t,u", "m2:u"), meta("t", 2, "u", 2),
			"m1=t:0,1 | m2=u:0,1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := UniformAssignor{}.Assign(tc.members, tc.topics)
			if got := layout(tc.members, out); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			checkAssignment(t, tc.members, tc.topics, out)
		})
	}
}

// checkAssignment asserts the Assignor contract: every existing partition
// of a subscribed topic goes to exactly one subscriber, nothing else is
// given, every member has an entry.
func checkAssignment(t testing.TB, members []MemberSubscription, topics map[string]TopicMetadata, out map[string]Assignment) {
	t.Helper()
	seen := map[topicPartition]string{}
	for _, m := range members {
		a, ok := out[m.MemberID]
		if !ok || a == nil {
			t.Fatalf("no entry for %s", m.MemberID)
		}
		for tp, ps := range a {
			if !subscribes(m.Topics, tp) {
				t.Fatalf("%s got %s without subscribing", m.MemberID, tp)
			}
			if !sort.SliceIsSorted(ps, func(i, j int) bool { return ps[i] < ps[j] }) || len(ps) == 0 {
				t.Fatalf("%s: %s:%v not ascending or empty", m.MemberID, tp, ps)
			}
			for _, p := range ps {
				k := topicPartition{tp, p}
				if p < 0 || p >= topics[tp].Partitions {
					t.Fatalf("%s got %s:%d which does not exist", m.MemberID, tp, p)
				}
				if o, dup := seen[k]; dup {
					t.Fatalf("%s:%d to %s and %s", tp, p, o, m.MemberID)
				}
				seen[k] = m.MemberID
			}
		}
	}
	for _, tp := range subscribedUnion(members) {
		for p := int32(0); p < topics[tp].Partitions; p++ {
			if _, ok := seen[topicPartition{tp, p}]; !ok {
				t.Fatalf("%s:%d unassigned", tp, p)
			}
		}
	}
}

// randomGroup returns members (sorted by id) and topics for seed.
func randomGroup(r *rand.Rand, homogeneous bool) ([]MemberSubscription, map[string]TopicMetadata) {
	topics := map[string]TopicMetadata{}
	names := []string{"a", "b", "c", "d"}
	racks := []string{"r1", "r2", "r3"}
	for _, n := range names {
		md := TopicMetadata{Partitions: int32(r.Intn(12))}
		if r.Intn(2) == 0 {
			for p := int32(0); p < md.Partitions; p++ {
				md.Racks = append(md.Racks, []string{racks[r.Intn(3)], racks[r.Intn(3)]})
			}
		}
		topics[n] = md
	}
	n := 1 + r.Intn(8)
	var members []MemberSubscription
	common := sortedUnique([]string{names[r.Intn(4)], names[r.Intn(4)]})
	for i := 0; i < n; i++ {
		m := MemberSubscription{MemberID: fmt.Sprintf("m%02d", i), Topics: common}
		if !homogeneous {
			m.Topics = sortedUnique([]string{names[r.Intn(4)], names[r.Intn(4)], names[r.Intn(4)]})
		}
		if r.Intn(2) == 0 {
			m.RackID = racks[r.Intn(3)]
		}
		members = append(members, m)
	}
	return members, topics
}

// Properties of both assignors over random groups: the contract, balance
// (uniform, homogeneous: counts within one; range: Kafka's range sizes,
// contiguous, co-partitioned), determinism, and stability (assigning again
// from its own result changes nothing).
func TestAssignorProperties(t *testing.T) {
	for seed := int64(0); seed < 400; seed++ {
		r := rand.New(rand.NewSource(seed))
		homogeneous := seed%2 == 0
		members, topics := randomGroup(r, homogeneous)
		for _, a := range []Assignor{UniformAssignor{}, RangeAssignor{}} {
			out := a.Assign(members, topics)
			checkAssignment(t, members, topics, out)
			if again := a.Assign(members, topics); layout(members, again) != layout(members, out) {
				t.Fatalf("seed %d %s: not deterministic", seed, a.Name())
			}
			sticky := append([]MemberSubscription(nil), members...)
			for i := range sticky {
				sticky[i].Current = out[sticky[i].MemberID]
			}
			if again := a.Assign(sticky, topics); layout(members, again) != layout(members, out) {
				t.Fatalf("seed %d %s: not stable:\n%s\n%s", seed, a.Name(), layout(members, out), layout(members, again))
			}
			if a.Name() == RangeAssignorName {
				checkRanges(t, members, topics, out)
				continue
			}
			min, max := 1<<30, -1
			for _, m := range members {
				n := out[m.MemberID].Len()
				if n < min {
					min = n
				}
				if n > max {
					max = n
				}
			}
			if homogeneous && max-min > 1 {
				t.Fatalf("seed %d: counts %d..%d: %s", seed, min, max, layout(members, out))
			}
		}
	}
}

// Uniform moves the minimum when one member joins or leaves a balanced
// homogeneous group: exactly the partitions that must change hands.
func TestUniformMinimalMovement(t *testing.T) {
	topics := meta("a", 37, "b", 23)
	var members []MemberSubscription
	for i := 0; i < 7; i++ {
		members = append(members, MemberSubscription{MemberID: fmt.Sprintf("m%d", i), Topics: []string{"a", "b"}})
	}
	out := UniformAssignor{}.Assign(members, topics)
	for i := range members {
		members[i].Current = out[members[i].MemberID]
	}
	// Join: the newcomer gets ⌊60/8⌋ = 7 partitions, all taken from others.
	joined := append(append([]MemberSubscription(nil), members...), MemberSubscription{MemberID: "m9", Topics: []string{"a", "b"}})
	after := UniformAssignor{}.Assign(joined, topics)
	if moved := movedPartitions(members, after); moved != after["m9"].Len() || moved != 7 {
		t.Fatalf("join moved %d, newcomer has %d", moved, after["m9"].Len())
	}
	// Leave: only the leaver's partitions move; nobody else loses one.
	left := members[1:]
	after = UniformAssignor{}.Assign(left, topics)
	if moved := movedPartitions(left, after); moved != 0 {
		t.Fatalf("leave took %d partitions from members that stayed", moved)
	}
}

// movedPartitions counts partitions of members' Current not kept in out.
func movedPartitions(members []MemberSubscription, out map[string]Assignment) int {
	moved := 0
	for _, m := range members {
		for tp, ps := range m.Current {
			for _, p := range ps {
				if !out[m.MemberID].Contains(tp, p) {
					moved++
				}
			}
		}
	}
	return moved
}

func TestAssignorByName(t *testing.T) {
	for _, n := range []string{"uniform", "range"} {
		if a, ok := AssignorByName(n); !ok || a.Name() != n {
			t.Errorf("%s: %v %v", n, a, ok)
		}
	}
	if _, ok := AssignorByName("sticky"); ok {
		t.Error("sticky")
	}
}

// checkRanges: range's result gives, for each topic, its subscribers
// contiguous ranges of Kafka's sizes (P/N each, the first P mod N ranges
// one longer, in partition order), and topics with the same subscribers
// and partition count are co-partitioned (each member gets the same
// partitions of each).
func checkRanges(t *testing.T, members []MemberSubscription, topics map[string]TopicMetadata, out map[string]Assignment) {
	t.Helper()
	for _, tp := range subscribedUnion(members) {
		n := topics[tp].Partitions
		if n <= 0 {
			continue
		}
		var subs []string
		for _, m := range members {
			if subscribes(m.Topics, tp) {
				subs = append(subs, m.MemberID)
			}
		}
		k := int32(len(subs))
		// Ranges by start: their sizes must be Kafka's, in order.
		sizes := map[int32]int32{}
		for _, id := range subs {
			ps := out[id][tp]
			for i := 1; i < len(ps); i++ {
				if ps[i] != ps[i-1]+1 {
					t.Fatalf("%s: %s:%v is not contiguous", id, tp, ps)
				}
			}
			if len(ps) > 0 {
				sizes[ps[0]] = int32(len(ps))
			}
		}
		start := int32(0)
		for i := int32(0); i < k && start < n; i++ {
			want := n / k
			if i < n%k {
				want++
			}
			if sizes[start] != want {
				t.Fatalf("%s: the range at %d has %d partitions, want %d (%d over %d)", tp, start, sizes[start], want, n, k)
			}
			start += want
		}
	}
	subscribers := func(tp string) string {
		var ids []string
		for _, m := range members {
			if subscribes(m.Topics, tp) {
				ids = append(ids, m.MemberID)
			}
		}
		return strings.Join(ids, ",")
	}
	for _, m := range members {
		for _, a := range m.Topics {
			for _, b := range m.Topics {
				if topics[a].Partitions != topics[b].Partitions || topics[a].Partitions <= 0 || subscribers(a) != subscribers(b) {
					continue
				}
				if fmt.Sprint(out[m.MemberID][a]) != fmt.Sprint(out[m.MemberID][b]) {
					t.Fatalf("%s: %s:%v and %s:%v are not co-partitioned", m.MemberID, a, out[m.MemberID][a], b, out[m.MemberID][b])
				}
			}
		}
	}
}

// TestRangeStickyUnderChurn: over random groups where one member joins or
// one leaves, range given the previous assignment keeps Kafka's ranges
// (checkRanges) and moves fewer partitions in all than the same ranges
// handed out in member order (Kafka 4's RangeAssignor: no Current).
func TestRangeStickyUnderChurn(t *testing.T) {
	moved := func(before, after map[string]Assignment) int {
		n := 0
		for id, a := range after {
			for tp, ps := range a {
				for _, p := range ps {
					if !slices.Contains(before[id][tp], p) {
						n++
					}
				}
			}
		}
		return n
	}
	var sticky, ordered int
	for seed := int64(0); seed < 400; seed++ {
		r := rand.New(rand.NewSource(seed))
		members, topics := randomGroup(r, seed%2 == 0)
		before := RangeAssignor{}.Assign(members, topics)
		next := append([]MemberSubscription(nil), members...)
		if r.Intn(2) == 0 && len(next) > 1 {
			i := r.Intn(len(next))
			next = append(next[:i:i], next[i+1:]...)
		} else {
			// A joiner whose id sorts anywhere among the others.
			next = append(next, MemberSubscription{MemberID: fmt.Sprintf("m%02d~", r.Intn(len(next)+1)), Topics: next[0].Topics})
			sort.Slice(next, func(i, j int) bool { return next[i].MemberID < next[j].MemberID })
		}
		plain := RangeAssignor{}.Assign(next, topics)
		for i := range next {
			next[i].Current = before[next[i].MemberID]
		}
		out := RangeAssignor{}.Assign(next, topics)
		checkAssignment(t, next, topics, out)
		checkRanges(t, next, topics, out)
		sticky += moved(before, out)
		ordered += moved(before, plain)
	}
	t.Logf("partitions moved over 400 changes: %d sticky, %d in member order", sticky, ordered)
	if sticky >= ordered {
		t.Fatalf("sticky range moved %d partitions, member order %d", sticky, ordered)
	}
}
