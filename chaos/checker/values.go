package checker

import (
	"cmp"
	"fmt"
	"slices"
)

// The checks in this file follow one value at a time: a value identifies
// one write, so where (and whether) it was read says what became of it.

// checkAcks finds OK writes whose value nobody read, and tells lost writes
// (consumers read the partition as far as the acknowledged offset and the
// value was not there) from unseen acknowledgements (the reads stopped
// short, so the history cannot tell).
//
// "As far as" includes the acknowledged offset itself: a consumer that read
// that very offset and found another value did reach it. (That case is an
// inconsistent-offset too.)
func (x *index) checkAcks(lost, unseen *Finding) {
	for i, w := range x.h.Writes {
		if x.outcome[i] != OK || x.writeOf[w.Value] != i || w.Txn != "" {
			continue // a transactional write is judged by checkTxns
		}
		if _, read := x.values[w.Value]; read {
			continue
		}
		end, partitionRead := x.readEnd[w.Partition]
		switch {
		case partitionRead && end >= w.Offset:
			lost.add(func() string {
				return fmt.Sprintf("value %q from %s never read, though p%d was read up to offset %d",
					w.Value, x.writeText(i), w.Partition, end)
			})
		case partitionRead:
			unseen.add(func() string {
				return fmt.Sprintf("value %q from %s never read; reads of p%d stop at offset %d",
					w.Value, x.writeText(i), w.Partition, end)
			})
		default:
			unseen.add(func() string {
				return fmt.Sprintf("value %q from %s never read; p%d was never read", w.Value, x.writeText(i), w.Partition)
			})
		}
	}
}

// checkValues finds values read at several positions (duplicate), Failed
// writes that were read anyway, values nobody wrote, and values read in a
// partition other than their write's.
func (x *index) checkValues(dup, failed, unknown, wrong *Finding) {
	// Per write, in history order.
	for i, w := range x.h.Writes {
		if x.writeOf[w.Value] != i {
			continue
		}
		v, read := x.values[w.Value]
		if !read {
			continue
		}
		if x.outcome[i] == Failed {
			failed.add(func() string {
				return fmt.Sprintf("value %q from %s read at %s", w.Value, x.writeText(i), x.placementText(v.first))
			})
		}
		if p, ok := v.find(func(p placement) bool { return !p.pos.in(w.Partition) }); ok {
			wrong.add(func() string {
				return fmt.Sprintf("value %q from %s read at %s", w.Value, x.writeText(i), x.placementText(p))
			})
		}
	}

	// Per value read. Map order is random, so the anomalies are collected
	// and sorted by where they were first read before examples are taken.
	var dups, unknowns []string
	for value, v := range x.values {
		if len(v.others) > 0 {
			dups = append(dups, value)
		}
		if _, known := x.writeOf[value]; !known {
			unknowns = append(unknowns, value)
		}
	}
	byFirstRead := func(a, b string) int {
		pa, pb := x.values[a].first, x.values[b].first
		return cmp.Or(comparePositions(pa.pos, pb.pos), cmp.Compare(pa.read, pb.read))
	}
	slices.SortFunc(dups, byFirstRead)
	slices.SortFunc(unknowns, byFirstRead)

	for _, value := range dups {
		dup.add(func() string {
			v := x.values[value]
			s := fmt.Sprintf("value %q", value)
			if i, known := x.writeOf[value]; known {
				s += " from " + x.writeText(i)
			}
			s += " read at " + x.placementText(v.first)
			for _, p := range v.others {
				s += " and " + x.placementText(p)
			}
			return s
		})
	}
	for _, value := range unknowns {
		unknown.add(func() string {
			v := x.values[value]
			s := fmt.Sprintf("value %q, written by nobody, read at %s", value, x.placementText(v.first))
			if len(v.others) > 0 {
				s += fmt.Sprintf(" and %d more positions", len(v.others))
			}
			return s
		})
	}
}

// comparePositions orders positions by partition, then offset.
func comparePositions(a, b position) int {
	return cmp.Or(cmp.Compare(a.partition, b.partition), cmp.Compare(a.offset, b.offset))
}
