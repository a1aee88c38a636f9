package group

import (
	"sort"
	"time"
)

// Expire fences every member whose deadline ran out by now (a deadline
// equal to now has run out):
//   - its session: no heartbeat for its session timeout (a departed static
//     member: its session timeout since it left);
//   - its rebalance timeout: in UnrevokedPartitions for that long without
//     reporting the revoked partitions released.
//
// Fenced members are removed and their partitions freed; if any was, the
// group epoch bumps once and the target is recomputed against topics. It
// returns the fenced member ids, sorted (nil when none).
func (g *Group) Expire(now time.Time, topics map[string]TopicMetadata) []string {
	var fenced []string
	for len(g.deadlines) > 0 && !now.Before(g.deadlines[0].deadline()) {
		m := g.deadlines[0]
		fenced = append(fenced, m.id)
		g.removeMember(m)
	}
	if len(fenced) == 0 {
		if g.epoch > g.assignmentEpoch && !g.dead { // Assigning after RestoreEpoch
			g.computeTarget(topics)
		}
		return nil
	}
	g.bump(topics)
	sort.Strings(fenced)
	return fenced
}
