package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// checkReplicas compares the replicas of each partition after healing.
//
// The committed end H of a partition is the highest HighWatermark among its
// replicas: the leader's. Followers checkpoint the high watermark lazily, so
// a lower checkpoint alone is no anomaly; what matters is the log:
//   - a replica whose log end offset (highest record offset + 1) is below H
//     has not caught up: replica-behind;
//   - replicas that did catch up must hold the same record at every offset
//     below H: any offset where one differs or is missing is a
//     replica-divergence. Records at or above H are uncommitted and may
//     legitimately differ (a deposed leader's tail before truncation).
//
// It returns notes on the replica logs themselves.
func (x *index) checkReplicas(divergent, behind *Finding) []string {
	var notes []string
	byPartition := make(map[int32][]ReplicaLog)
	for _, rl := range x.h.Replicas {
		byPartition[rl.Partition] = append(byPartition[rl.Partition], rl)
	}
	partitions := make([]int32, 0, len(byPartition))
	for p := range byPartition {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)

	// A partition that was written or read must have replicas to compare.
	seen := make(map[int32]bool)
	for _, w := range x.h.Writes {
		seen[w.Partition] = true
	}
	for p := range x.readEnd {
		seen[p] = true
	}
	var missing []int32
	for p := range seen {
		if _, ok := byPartition[p]; !ok {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	for _, p := range missing {
		notes = append(notes, fmt.Sprintf("p%d was written or read but has no replica log; its replicas were not checked", p))
	}

	for _, p := range partitions {
		logs := byPartition[p]
		// Node order makes examples read the same from run to run.
		slices.SortStableFunc(logs, func(a, b ReplicaLog) int { return cmp.Compare(a.Node, b.Node) })
		for i := 1; i < len(logs); i++ {
			if logs[i].Node == logs[i-1].Node {
				notes = append(notes, fmt.Sprintf("p%d node %d has more than one replica log; each is checked", p, logs[i].Node))
			}
		}

		leader := logs[0]
		for _, rl := range logs[1:] {
			if rl.HighWatermark > leader.HighWatermark {
				leader = rl
			}
		}
		committed := leader.HighWatermark

		var caughtUp []ReplicaLog
		for _, rl := range logs {
			if end := logEnd(rl); end < committed {
				behind.add(func() string {
					return fmt.Sprintf("p%d node %d: log end offset %d (high watermark %d) < committed end %d (high watermark of node %d)",
						p, rl.Node, end, rl.HighWatermark, committed, leader.Node)
				})
				continue
			}
			caughtUp = append(caughtUp, rl)
		}
		x.compareReplicas(p, committed, caughtUp, divergent)
	}
	return notes
}

// logEnd returns the offset after the highest record of rl (its log end
// offset), 0 for an empty log. Records need not be sorted.
func logEnd(rl ReplicaLog) int64 {
	var end int64
	for _, r := range rl.Records {
		end = max(end, r.Offset+1)
	}
	return end
}

// compareReplicas reports every offset below committed at which the
// caught-up replicas of partition p do not all hold the same value.
func (x *index) compareReplicas(p int32, committed int64, logs []ReplicaLog, divergent *Finding) {
	if len(logs) < 2 {
		return
	}
	bad := make(map[int64]struct{})
	held := make([]map[int64]string, len(logs)) // offset → value, below committed
	for i, rl := range logs {
		m := make(map[int64]string, len(rl.Records))
		for _, r := range rl.Records {
			if r.Offset >= committed {
				continue
			}
			if v, dup := m[r.Offset]; dup {
				// One log holding two records at one offset is corrupt
				// whatever the others hold; the first one stays in m.
				if v != r.Value {
					bad[r.Offset] = struct{}{}
				}
				continue
			}
			m[r.Offset] = r.Value
		}
		held[i] = m
	}
	// Comparing every log with the first in both directions finds every
	// offset where any two differ: if two agree with the first, they agree
	// with each other.
	ref := held[0]
	for _, m := range held[1:] {
		for o, v := range m {
			if rv, ok := ref[o]; !ok || rv != v {
				bad[o] = struct{}{}
			}
		}
		for o := range ref {
			if _, ok := m[o]; !ok {
				bad[o] = struct{}{}
			}
		}
	}

	offsets := make([]int64, 0, len(bad))
	for o := range bad {
		offsets = append(offsets, o)
	}
	slices.Sort(offsets)
	for _, o := range offsets {
		divergent.add(func() string {
			parts := make([]string, len(logs))
			for i, rl := range logs {
				if v, ok := held[i][o]; ok {
					parts[i] = fmt.Sprintf("node %d %q", rl.Node, v)
				} else {
					parts[i] = fmt.Sprintf("node %d missing", rl.Node)
				}
			}
			return fmt.Sprintf("%v below committed end %d: %s", at(p, o), committed, strings.Join(parts, ", "))
		})
	}
}
