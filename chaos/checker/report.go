package checker

import (
	"fmt"
	"strings"
)

// Class names one kind of anomaly. The string is the name printed in
// summaries; it is stable so that scripts may grep for it.
type Class string

// The anomaly classes, in report order. A single fault may show up in more
// than one class (an acknowledged write overwritten in place is both a
// lost-write and an inconsistent-offset): classes are views of the history,
// not root causes.
const (
	// LostWrite: an OK write whose value no consumer read, although
	// consumers read its partition up to or past the acknowledged offset.
	LostWrite Class = "lost-write"
	// UnseenAck: an OK write whose value no consumer read, and no consumer
	// read its partition as far as the acknowledged offset. Not proof of
	// loss (the reads stopped short) but after a full final read it must
	// not happen.
	UnseenAck Class = "unseen-ack"
	// Duplicate: one value read at two or more distinct (partition, offset)
	// positions. Counted once per value.
	Duplicate Class = "duplicate"
	// InconsistentOffset: one position with two or more distinct values
	// (across reads and OK acknowledgements), counted once per position;
	// plus each OK value read in its partition at an offset other than the
	// acknowledged one, counted once per write.
	InconsistentOffset Class = "inconsistent-offset"
	// NonMonotonicProducer: within one producer and partition, a write
	// whose position is not after that of every write with a smaller Seq.
	// Counted once per offending (later-Seq) write.
	NonMonotonicProducer Class = "non-monotonic-producer"
	// NonMonotonicConsumer: within one consumer session and partition, a
	// read whose offset is not greater than that of the read received just
	// before it. Counted once per backward (or repeated) step.
	NonMonotonicConsumer Class = "non-monotonic-consumer"
	// FailedWriteRead: a Failed write whose value was read. Counted once
	// per write.
	FailedWriteRead Class = "failed-write-read"
	// UnknownValue: a value read that no write in the history carries.
	// Counted once per value.
	UnknownValue Class = "unknown-value"
	// WrongPartition: a known write's value read in a partition other than
	// the one it was written to. Counted once per write. (Not in the
	// original list of classes: without it a misrouted Unknown write would
	// go unnoticed, and a misrouted OK write would be blurred into
	// inconsistent-offset.)
	WrongPartition Class = "wrong-partition"
	// ReplicaDivergence: below a partition's committed end H (the highest
	// HighWatermark among its replicas), replicas whose logs reach H-1
	// disagree on an offset: different values, or one holds a record
	// another lacks. Counted once per (partition, offset).
	ReplicaDivergence Class = "replica-divergence"
	// ReplicaBehind: a replica whose log does not reach its partition's
	// committed end H-1 after healing. Counted once per replica.
	ReplicaBehind Class = "replica-behind"
	// AbortedRead: a value of an aborted transaction (or of one whose
	// commit was never invoked) read by a read_committed session. Counted
	// once per value.
	AbortedRead Class = "aborted-read"
	// PrecommittedRead: a value of a transaction not judged aborted, read
	// by a read_committed session before the transaction's commit was
	// invoked. Counted once per value.
	PrecommittedRead Class = "precommitted-read"
	// TornTxn: a committed or unknown transaction partly visible to
	// read_committed sessions: some of its values read, others missing
	// although the sessions read their partition past them (across
	// partitions or within one). Counted once per transaction.
	TornTxn Class = "torn-transaction"
	// TxnLostWrite: a value of a committed transaction that no
	// read_committed session read, although they read its partition up to
	// or past its offset. Counted once per value.
	TxnLostWrite Class = "txn-lost-write"
	// StuckLSO: a partition whose last stable offset had not passed an
	// offset its high watermark had reached, History.LSOBound after the
	// later of that sample and the heal. Counted once per partition.
	StuckLSO Class = "stuck-lso"
	// CopyNotExactlyOnce: an input record of the copier below its final
	// committed position whose copies visible to read_committed sessions
	// are not exactly one, or one at or above it with a visible copy.
	// Counted once per input record.
	CopyNotExactlyOnce Class = "copy-not-exactly-once"
)

// Classes returns every anomaly class in report order. The caller owns the
// returned slice.
func Classes() []Class {
	return []Class{
		LostWrite, UnseenAck, Duplicate, InconsistentOffset,
		NonMonotonicProducer, NonMonotonicConsumer, FailedWriteRead,
		UnknownValue, WrongPartition, ReplicaDivergence, ReplicaBehind,
		AbortedRead, PrecommittedRead, TornTxn, TxnLostWrite, StuckLSO,
		CopyNotExactlyOnce,
	}
}

// MaxExamples bounds Finding.Examples: a broken run can hold a million
// anomalies, the reader needs a handful.
const MaxExamples = 5

// Finding is the verdict on one anomaly class.
type Finding struct {
	Class Class
	// Count is the number of anomalies of this class (the unit is given on
	// each Class constant).
	Count int
	// Examples holds min(Count, MaxExamples) human-readable descriptions,
	// naming partitions, offsets, values, producers, consumers and times.
	// Their choice is deterministic for a given History.
	Examples []string
	// Skipped is non-empty when the class was not checked, and says why;
	// Count is then 0.
	Skipped string
}

// add counts one anomaly and keeps its description while fewer than
// MaxExamples are kept. describe is called only then, so the cost of
// formatting stays bounded however many anomalies there are.
func (f *Finding) add(describe func() string) {
	f.Count++
	if len(f.Examples) < MaxExamples {
		f.Examples = append(f.Examples, describe())
	}
}

// Stats describes the size of a history, for a summary line. Write counts
// are by judged outcome (see Check): WritesOK + WritesFailed +
// WritesUnknown == Writes.
type Stats struct {
	Writes        int // len(History.Writes)
	WritesOK      int
	WritesFailed  int
	WritesUnknown int
	// WritesInFlight counts writes with a zero Complete time. They are
	// judged as Unknown whatever their Outcome field says, and are included
	// in WritesUnknown.
	WritesInFlight int
	Reads          int // len(History.Reads)
	// DistinctValuesRead counts distinct values among Reads.
	DistinctValuesRead int
	Producers          int // distinct Write.Producer names
	// ConsumerSessions counts distinct Read.Consumer names.
	ConsumerSessions int
	// Partitions counts distinct partitions among writes, reads and
	// replica logs.
	Partitions  int
	ReplicaLogs int // len(History.Replicas)
}

// String renders s as one line.
func (s Stats) String() string {
	return fmt.Sprintf("writes %d (ok %d, failed %d, unknown %d of which in flight %d), producers %d, "+
		"reads %d (consumer sessions %d, distinct values %d), partitions %d, replica logs %d",
		s.Writes, s.WritesOK, s.WritesFailed, s.WritesUnknown, s.WritesInFlight, s.Producers,
		s.Reads, s.ConsumerSessions, s.DistinctValuesRead, s.Partitions, s.ReplicaLogs)
}

// Report is the verdict on a History.
type Report struct {
	// Findings holds exactly one Finding per class, in Classes() order,
	// including classes with a zero Count.
	Findings []Finding
	Stats    Stats
	// ReplicasChecked is false when the History held no replica logs; the
	// replica classes are then marked Skipped.
	ReplicasChecked bool
	// Notes are remarks on the history itself that are not anomalies of
	// the system under test (e.g. a value written twice, which breaks the
	// workload's uniqueness promise and weakens the checks).
	Notes []string
}

// Anomalies returns the total Count over all classes.
func (r Report) Anomalies() int {
	n := 0
	for _, f := range r.Findings {
		n += f.Count
	}
	return n
}

// OK reports whether no anomaly of any class was found. It does not look
// at Notes or at ReplicasChecked.
func (r Report) OK() bool { return r.Anomalies() == 0 }

// For returns the Finding of class c, or a zero Finding of class c if r
// holds none (only possible for a Report not built by Check).
func (r Report) For(c Class) Finding {
	for _, f := range r.Findings {
		if f.Class == c {
			return f
		}
	}
	return Finding{Class: c}
}

// Summary returns one line per class, in Classes() order:
//
//	lost-write: 0
//	duplicate: 2 (e.g. value "k3/17" at p1@40 and p1@52 ...; ...)
//	replica-divergence: 0 (not checked: ...)
//
// A trailing "; ..." means that more anomalies exist than examples shown.
func (r Report) Summary() []string {
	lines := make([]string, 0, len(r.Findings))
	for _, f := range r.Findings {
		line := fmt.Sprintf("%s: %d", f.Class, f.Count)
		switch {
		case f.Skipped != "":
			line += " (not checked: " + f.Skipped + ")"
		case len(f.Examples) > 0:
			more := ""
			if f.Count > len(f.Examples) {
				more = "; ..."
			}
			line += " (e.g. " + strings.Join(f.Examples, "; ") + more + ")"
		}
		lines = append(lines, line)
	}
	return lines
}
