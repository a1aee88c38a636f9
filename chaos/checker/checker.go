package checker

import (
	"fmt"
	"slices"
)

// Check judges h and returns one Finding per anomaly class (see Classes),
// each with a count and bounded examples, plus Stats and Notes.
//
// Contract:
//   - h is only read, never modified; Check keeps no reference to it after
//     returning except through the strings of the Report.
//   - Values identify writes: if two writes carry the same value, the first
//     one in h.Writes is used and a Note says so.
//   - A write whose Complete time is zero was still in flight when the run
//     ended and is judged as Unknown, whatever its Outcome field says
//     (Outcome's zero value is OK, so an unfinished record would otherwise
//     pose as an acknowledgement at offset 0). An Outcome value outside
//     OK/Failed/Unknown is judged as Unknown too.
//   - h.Reads must be in the order each consumer session received them; the
//     order across sessions does not matter.
//   - The result is deterministic for a given h (examples included).
//
// Cost, for W writes, R reads and N replica records: O(W + R + N) map
// operations, plus sorting the writes per producer and the anomalies found
// (so O(n log n) at worst); O(W + R + N) memory.
func Check(h History) Report {
	x := newIndex(&h)
	r := Report{Stats: x.stats, Notes: x.notes}
	for _, c := range Classes() {
		r.Findings = append(r.Findings, Finding{Class: c})
	}
	find := func(c Class) *Finding { return &r.Findings[slices.Index(Classes(), c)] }

	x.checkAcks(find(LostWrite), find(UnseenAck))
	x.checkValues(find(Duplicate), find(FailedWriteRead), find(UnknownValue), find(WrongPartition))
	x.checkPositions(find(InconsistentOffset))
	x.checkProducerOrder(find(NonMonotonicProducer))
	x.checkConsumerOrder(find(NonMonotonicConsumer))
	x.checkTxns(find(AbortedRead), find(PrecommittedRead), find(TornTxn), find(TxnLostWrite))
	if len(h.Watermarks) == 0 {
		find(StuckLSO).Skipped = "history has no watermark samples"
	} else {
		x.checkLSO(find(StuckLSO))
	}
	if h.Copier == nil {
		find(CopyNotExactlyOnce).Skipped = "history has no copier"
	} else {
		r.Notes = append(r.Notes, x.checkCopier(find(CopyNotExactlyOnce)))
	}

	if len(h.Replicas) == 0 {
		const why = "history has no replica logs"
		find(ReplicaDivergence).Skipped = why
		find(ReplicaBehind).Skipped = why
		r.Notes = append(r.Notes, "replicas not checked: "+why)
	} else {
		r.ReplicasChecked = true
		r.Notes = append(r.Notes, x.checkReplicas(find(ReplicaDivergence), find(ReplicaBehind))...)
	}
	return r
}

// position is one slot of one partition's log. Build it with at.
type position struct {
	// partition is an int32 widened to int64 so that the struct has no
	// padding: Go then hashes and compares it as plain memory rather than
	// field by field, which shows in the map of a million read positions.
	partition int64
	offset    int64
}

// at returns the position of offset in partition.
func at(partition int32, offset int64) position { return position{int64(partition), offset} }

// in reports whether p is a position of partition.
func (p position) in(partition int32) bool { return p.partition == int64(partition) }

func (p position) String() string { return fmt.Sprintf("p%d@%d", p.partition, p.offset) }

// placement is one distinct position at which a value was read; read is the
// index in History.Reads of the first read of the value there.
type placement struct {
	pos  position
	read int
}

// valueReads is where one value was read. Values normally sit at one
// position, so the first placement is kept inline and others allocates
// only for duplicates.
type valueReads struct {
	first  placement
	others []placement // further distinct positions, in order of first read
}

// find returns the first placement, in order of first read, that
// satisfies match. It does not allocate: it runs once per write.
func (v valueReads) find(match func(placement) bool) (placement, bool) {
	if match(v.first) {
		return v.first, true
	}
	for _, p := range v.others {
		if match(p) {
			return p, true
		}
	}
	return placement{}, false
}

// observation is one value seen at a position: either claimed by an OK
// write's acknowledgement (write >= 0, read == -1) or returned by a read
// (read >= 0, write == -1).
type observation struct {
	value string
	write int
	read  int
}

// positionValues is what was seen at one position. Like valueReads, the
// common case (one value) does not allocate.
type positionValues struct {
	first  observation
	others []observation // further distinct values, in order of observation
}

// index is the history rearranged for lookups. It is built once, in one
// pass over the writes and one over the reads, and only read afterwards.
type index struct {
	h *History
	// outcome is the judged outcome of each write (see Check on in-flight
	// writes), indexed like h.Writes.
	outcome []Outcome
	// writeOf maps a value to the index of the first write carrying it.
	writeOf map[string]int
	// values maps each value read to the positions it was read at.
	values map[string]valueReads
	// positions maps each position that was read or acknowledged to the
	// distinct values seen there. Acknowledgements go in first so that a
	// conflict names the acknowledgement rather than an arbitrary read.
	positions map[position]positionValues
	// readEnd is, per partition, the highest offset any consumer read.
	readEnd map[int32]int64
	stats   Stats
	notes   []string
}

func newIndex(h *History) *index {
	x := &index{
		h:         h,
		outcome:   make([]Outcome, len(h.Writes)),
		writeOf:   make(map[string]int, len(h.Writes)),
		values:    make(map[string]valueReads, len(h.Writes)),
		positions: make(map[position]positionValues, len(h.Writes)),
		readEnd:   make(map[int32]int64),
	}
	partitions := make(map[int32]struct{})
	producers := make(map[string]struct{})
	consumers := make(map[string]struct{})
	rewritten := 0 // values carried by more than one write

	x.stats.Writes = len(h.Writes)
	for i, w := range h.Writes {
		o := judge(w)
		x.outcome[i] = o
		switch o {
		case OK:
			x.stats.WritesOK++
		case Failed:
			x.stats.WritesFailed++
		default:
			x.stats.WritesUnknown++
		}
		if w.Complete.IsZero() {
			x.stats.WritesInFlight++
		}
		partitions[w.Partition] = struct{}{}
		producers[w.Producer] = struct{}{}
		if first, ok := x.writeOf[w.Value]; ok {
			rewritten++
			if rewritten <= MaxExamples {
				x.notes = append(x.notes, fmt.Sprintf("value %q is carried by two writes: %s and %s; the first is used",
					w.Value, x.writeText(first), x.writeText(i)))
			}
			continue
		}
		x.writeOf[w.Value] = i
		if o == OK {
			x.observe(at(w.Partition, w.Offset), observation{value: w.Value, write: i, read: -1})
		}
	}
	if rewritten > MaxExamples {
		x.notes = append(x.notes, fmt.Sprintf("%d values in all are carried by more than one write", rewritten))
	}

	x.stats.Reads = len(h.Reads)
	for j, rd := range h.Reads {
		p := at(rd.Partition, rd.Offset)
		partitions[rd.Partition] = struct{}{}
		consumers[rd.Consumer] = struct{}{}
		if end, ok := x.readEnd[rd.Partition]; !ok || rd.Offset > end {
			x.readEnd[rd.Partition] = rd.Offset
		}
		x.observe(p, observation{value: rd.Value, write: -1, read: j})

		v, ok := x.values[rd.Value]
		switch {
		case !ok:
			x.values[rd.Value] = valueReads{first: placement{p, j}}
		case v.first.pos == p:
			// Read again at the same position (another consumer, or a
			// re-read after a restart): nothing new.
		default:
			if !slices.ContainsFunc(v.others, func(o placement) bool { return o.pos == p }) {
				v.others = append(v.others, placement{p, j})
				x.values[rd.Value] = v
			}
		}
	}

	for _, rl := range h.Replicas {
		partitions[rl.Partition] = struct{}{}
	}
	x.stats.DistinctValuesRead = len(x.values)
	x.stats.Partitions = len(partitions)
	x.stats.Producers = len(producers)
	x.stats.ConsumerSessions = len(consumers)
	x.stats.ReplicaLogs = len(h.Replicas)
	return x
}

// judge returns the outcome a write is judged by (see Check).
func judge(w Write) Outcome {
	if w.Complete.IsZero() {
		return Unknown
	}
	switch w.Outcome {
	case OK, Failed:
		return w.Outcome
	}
	return Unknown
}

// observe records that o's value was seen at p.
func (x *index) observe(p position, o observation) {
	pv, ok := x.positions[p]
	switch {
	case !ok:
		x.positions[p] = positionValues{first: o}
	case pv.first.value == o.value:
		// Agreement, the common case.
	default:
		if !slices.ContainsFunc(pv.others, func(s observation) bool { return s.value == o.value }) {
			pv.others = append(pv.others, o)
			x.positions[p] = pv
		}
	}
}
