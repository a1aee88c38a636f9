package checker

import (
	"fmt"
	"slices"
)

// checkPositions finds inconsistent offsets. A log position holds one
// record forever (Sluice never rewrites a committed offset), so:
//   - a position seen with two values, whether by two reads, a read and an
//     OK acknowledgement, or two acknowledgements, is one anomaly;
//   - an OK value read in its partition at an offset other than the
//     acknowledged one is one anomaly per write, even if nothing else was
//     seen at either offset (the producer was told a wrong offset, or the
//     record moved).
//
// A value read in another partition is left to wrong-partition, so one
// misrouting is not counted twice.
func (x *index) checkPositions(inconsistent *Finding) {
	var conflicts []position
	for p, pv := range x.positions {
		if len(pv.others) > 0 {
			conflicts = append(conflicts, p)
		}
	}
	slices.SortFunc(conflicts, comparePositions)
	for _, p := range conflicts {
		inconsistent.add(func() string {
			pv := x.positions[p]
			s := fmt.Sprintf("%v holds %s", p, x.observationText(pv.first))
			for _, o := range pv.others {
				s += " and " + x.observationText(o)
			}
			return s
		})
	}

	for i, w := range x.h.Writes {
		if x.outcome[i] != OK || x.writeOf[w.Value] != i {
			continue
		}
		v, read := x.values[w.Value]
		if !read {
			continue
		}
		acked := at(w.Partition, w.Offset)
		misplaced, found := v.find(func(p placement) bool {
			return p.pos.in(w.Partition) && p.pos != acked
		})
		if !found {
			continue
		}
		inconsistent.add(func() string {
			return fmt.Sprintf("value %q from %s read at %s", w.Value, x.writeText(i), x.placementText(misplaced))
		})
	}
}
