package group

import (
	"fmt"
	"sort"
	"strings"
)

// Assignment is a member's partitions: topic -> ascending partition ids.
// Every Assignment this package returns is the caller's to keep (a fresh
// copy), has no empty topic entries, and lists partitions ascending.
type Assignment map[string][]int32

// TopicMetadata is what the assignors know about a topic.
type TopicMetadata struct {
	Partitions int32
	// Racks[p] are the racks of partition p's replicas; nil when unknown.
	Racks [][]string
}

// topicPartition names one partition.
type topicPartition struct {
	topic     string
	partition int32
}

// Clone returns a deep copy of a (nil for nil).
func (a Assignment) Clone() Assignment {
	if a == nil {
		return nil
	}
	out := make(Assignment, len(a))
	for t, ps := range a {
		out[t] = append([]int32(nil), ps...)
	}
	return out
}

// Len returns the number of partitions in a.
func (a Assignment) Len() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

// Contains reports whether a holds topic/partition.
func (a Assignment) Contains(topic string, partition int32) bool {
	ps := a[topic]
	i := sort.Search(len(ps), func(i int) bool { return ps[i] >= partition })
	return i < len(ps) && ps[i] == partition
}

// Equal reports whether a and b hold the same partitions (nil and empty
// are equal).
func (a Assignment) Equal(b Assignment) bool {
	if a.Len() != b.Len() {
		return false
	}
	for t, ps := range a {
		qs := b[t]
		if len(ps) != len(qs) {
			return false
		}
		for i := range ps {
			if ps[i] != qs[i] {
				return false
			}
		}
	}
	return true
}

// String renders a as "t0:0,1 t1:2" with topics sorted ("-" when empty):
// the form traces and test messages use.
func (a Assignment) String() string {
	if a.Len() == 0 {
		return "-"
	}
	var b strings.Builder
	for i, t := range a.topics() {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t)
		b.WriteByte(':')
		for j, p := range a[t] {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, p)
		}
	}
	return b.String()
}

// topics returns a's non-empty topics, sorted.
func (a Assignment) topics() []string {
	ts := make([]string, 0, len(a))
	for t, ps := range a {
		if len(ps) > 0 {
			ts = append(ts, t)
		}
	}
	sort.Strings(ts)
	return ts
}

// normalized returns a copy of a with partitions sorted and deduplicated
// and empty topics dropped (nil when a is empty).
func (a Assignment) normalized() Assignment {
	var out Assignment
	for t, ps := range a {
		if len(ps) == 0 {
			continue
		}
		qs := append([]int32(nil), ps...)
		sort.Slice(qs, func(i, j int) bool { return qs[i] < qs[j] })
		k := 0
		for i, p := range qs {
			if i == 0 || p != qs[k-1] {
				qs[k] = p
				k++
			}
		}
		if out == nil {
			out = Assignment{}
		}
		out[t] = qs[:k]
	}
	return out
}

// intersects reports whether a and b share a partition.
func (a Assignment) intersects(b Assignment) bool {
	for t, ps := range a {
		qs := b[t]
		if len(qs) == 0 {
			continue
		}
		for _, p := range ps {
			if b.Contains(t, p) {
				return true
			}
		}
	}
	return false
}

// subsetOf reports whether every partition of a is in b.
func (a Assignment) subsetOf(b Assignment) bool {
	for t, ps := range a {
		for _, p := range ps {
			if !b.Contains(t, p) {
				return false
			}
		}
	}
	return true
}

// fromPartitions builds a normalized Assignment from a list (which it
// sorts): one backing array for every topic's partitions.
func fromPartitions(tps []topicPartition) Assignment {
	if len(tps) == 0 {
		return Assignment{}
	}
	sort.Slice(tps, func(i, j int) bool { return lessTP(tps[i], tps[j]) })
	topics := 1
	for i := 1; i < len(tps); i++ {
		if tps[i].topic != tps[i-1].topic {
			topics++
		}
	}
	out := make(Assignment, topics)
	ps := make([]int32, len(tps))
	start := 0
	for i, tp := range tps {
		ps[i] = tp.partition
		if i+1 == len(tps) || tps[i+1].topic != tp.topic {
			out[tp.topic] = ps[start : i+1 : i+1]
			start = i + 1
		}
	}
	return out
}

// equalMetadata reports whether two topics' metadata are the same for the
// assignors: partition count and every partition's racks.
func equalMetadata(a, b TopicMetadata) bool {
	if a.Partitions != b.Partitions || len(a.Racks) != len(b.Racks) {
		return false
	}
	for i := range a.Racks {
		x, y := a.Racks[i], b.Racks[i]
		if len(x) != len(y) {
			return false
		}
		for j := range x {
			if x[j] != y[j] {
				return false
			}
		}
	}
	return true
}

// cloneMetadata deep-copies m, so a caller changing its slices later does
// not change the group's snapshot.
func cloneMetadata(m TopicMetadata) TopicMetadata {
	if m.Racks == nil {
		return m
	}
	racks := make([][]string, len(m.Racks))
	for i, r := range m.Racks {
		racks[i] = append([]string(nil), r...)
	}
	return TopicMetadata{Partitions: m.Partitions, Racks: racks}
}
