package checker

import (
	"cmp"
	"fmt"
	"slices"
)

// producerKey identifies one idempotent producer's stream into one
// partition, the scope within which Sluice promises send order.
type producerKey struct {
	producer  string
	partition int32
}

// consumerKey identifies one consumer session's stream from one partition,
// the scope within which offsets must strictly increase.
type consumerKey struct {
	consumer  string
	partition int32
}

// placed is a write with the offset it ended up at.
type placed struct {
	write  int
	offset int64
	acked  bool // offset is the acknowledged one, not where it was read
}

// checkProducerOrder finds writes that landed before (or at) a write the
// same producer sent earlier to the same partition. An idempotent producer
// appends in Seq order even across retries, so offsets must grow with Seq.
//
// A write's offset is its acknowledged one if OK; otherwise the lowest
// offset at which it was read in its own partition (the first append; a
// later one is a duplicate, reported as such); a write with neither is
// skipped. Each write is compared with the highest offset among writes of
// strictly smaller Seq, which finds every offending write in O(n log n)
// rather than comparing all pairs.
func (x *index) checkProducerOrder(nonMonotonic *Finding) {
	var order []producerKey // first-appearance order, for deterministic examples
	streams := make(map[producerKey][]placed)
	for i, w := range x.h.Writes {
		if x.writeOf[w.Value] != i {
			continue
		}
		p, ok := x.placeWrite(i)
		if !ok {
			continue
		}
		k := producerKey{w.Producer, w.Partition}
		if _, seen := streams[k]; !seen {
			order = append(order, k)
		}
		streams[k] = append(streams[k], p)
	}

	for _, k := range order {
		ws := streams[k]
		seq := func(p placed) int64 { return x.h.Writes[p.write].Seq }
		// Stable, so that equal Seqs (a broken history) keep history order.
		slices.SortStableFunc(ws, func(a, b placed) int { return cmp.Compare(seq(a), seq(b)) })

		var highest placed // highest offset among writes of smaller Seq
		have := false
		for i := 0; i < len(ws); {
			// Writes of equal Seq are not ordered with each other; compare
			// the whole group with what came before it, then fold it in.
			j := i
			for j < len(ws) && seq(ws[j]) == seq(ws[i]) {
				j++
			}
			for _, w := range ws[i:j] {
				if have && w.offset <= highest.offset {
					nonMonotonic.add(func() string {
						return fmt.Sprintf("producer %q p%d: seq %d (value %q) %s offset %d, not after seq %d (value %q) %s offset %d",
							k.producer, k.partition,
							seq(w), x.h.Writes[w.write].Value, how(w), w.offset,
							seq(highest), x.h.Writes[highest.write].Value, how(highest), highest.offset)
					})
				}
			}
			for _, w := range ws[i:j] {
				if !have || w.offset > highest.offset {
					highest, have = w, true
				}
			}
			i = j
		}
	}
}

// how says how a placed write's offset is known.
func how(p placed) string {
	if p.acked {
		return "acked at"
	}
	return "read at"
}

// placeWrite returns the offset write i ended up at, if known (see
// checkProducerOrder).
func (x *index) placeWrite(i int) (placed, bool) {
	w := x.h.Writes[i]
	if x.outcome[i] == OK {
		return placed{write: i, offset: w.Offset, acked: true}, true
	}
	v, read := x.values[w.Value]
	if !read {
		return placed{}, false
	}
	p, found := placed{write: i}, false
	consider := func(pl placement) {
		if pl.pos.in(w.Partition) && (!found || pl.pos.offset < p.offset) {
			p.offset, found = pl.pos.offset, true
		}
	}
	consider(v.first)
	for _, pl := range v.others {
		consider(pl)
	}
	return p, found
}

// checkConsumerOrder finds reads whose offset is not above that of the
// read the same session received just before from the same partition.
// Comparing with the previous read rather than the highest so far counts a
// rewind once, not once per record re-read after it.
func (x *index) checkConsumerOrder(nonMonotonic *Finding) {
	last := make(map[consumerKey]int) // index of the previous read
	for j, rd := range x.h.Reads {
		k := consumerKey{rd.Consumer, rd.Partition}
		if prev, ok := last[k]; ok && rd.Offset <= x.h.Reads[prev].Offset {
			nonMonotonic.add(func() string {
				p := x.h.Reads[prev]
				return fmt.Sprintf("consumer %q p%d: offset %d (value %q at %s) received after offset %d (value %q at %s)",
					rd.Consumer, rd.Partition, rd.Offset, rd.Value, clock(rd.Time), p.Offset, p.Value, clock(p.Time))
			})
		}
		last[k] = j
	}
}
