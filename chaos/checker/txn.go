package checker

import (
	"fmt"
	"slices"
	"time"
)

// TxnOutcome is what a transactional producer learned about one
// transaction.
type TxnOutcome int

const (
	// TxnCommitted: CommitTransaction returned nil. Every write of the
	// transaction must be visible to read_committed readers, once each.
	TxnCommitted TxnOutcome = iota
	// TxnAborted: AbortTransaction returned nil (possibly after a commit
	// that failed as abortable), or the producer gave the transaction up
	// before invoking its commit. Nothing of it may be visible to
	// read_committed readers.
	TxnAborted
	// TxnUnknown: the commit was invoked and its answer never came (the
	// call was interrupted, or the producer failed while committing). The
	// transaction may be visible or not, but all or nothing.
	TxnUnknown
)

func (o TxnOutcome) String() string {
	switch o {
	case TxnCommitted:
		return "committed"
	case TxnAborted:
		return "aborted"
	case TxnUnknown:
		return "unknown"
	}
	return "txn-outcome?"
}

// Txn is one transaction of one transactional producer, from
// BeginTransaction to the answer of its commit or abort.
type Txn struct {
	ID       string // unique across the run; Write.Txn refers to it
	Producer string
	Begin    time.Time
	// CommitInvoke is when CommitTransaction was first called; zero if it
	// never was. A transaction whose commit was never invoked cannot have
	// committed (TV2 commits only on EndTxn(commit)), so it is judged
	// aborted whatever Outcome says.
	CommitInvoke time.Time
	// Complete is when the outcome became known; zero for a transaction
	// still open at the end of the run (judged unknown once its commit was
	// invoked, aborted otherwise).
	Complete time.Time
	Outcome  TxnOutcome
	Err      string
}

// Watermark is one sample of a partition's high watermark and last stable
// offset, as its leader answered at Time.
type Watermark struct {
	Partition        int32
	Time             time.Time
	HighWatermark    int64
	LastStableOffset int64
}

// judgeTxn returns the outcome a transaction is judged by (see Txn).
func judgeTxn(t Txn) TxnOutcome {
	switch {
	case t.CommitInvoke.IsZero():
		return TxnAborted
	case t.Complete.IsZero():
		return TxnUnknown
	}
	switch t.Outcome {
	case TxnCommitted, TxnAborted:
		return t.Outcome
	}
	return TxnUnknown
}

// txnIndex is the transactional part of the history rearranged for the
// checks: each transaction's writes, and what read_committed readers saw.
type txnIndex struct {
	txns    map[string]int   // Txn.ID → index in h.Txns
	writes  map[string][]int // Txn.ID → indexes in h.Writes (first write of each value)
	outcome []TxnOutcome     // judged, indexed like h.Txns
	// committedRead maps a value to the first read of it by a
	// read_committed session; committedEnd is, per partition, the highest
	// offset such a session read.
	committedRead map[string]int
	committedEnd  map[int32]int64
}

func (x *index) newTxnIndex() *txnIndex {
	h := x.h
	t := &txnIndex{txns: make(map[string]int, len(h.Txns)), writes: map[string][]int{},
		outcome: make([]TxnOutcome, len(h.Txns)), committedRead: map[string]int{}, committedEnd: map[int32]int64{}}
	for i, tx := range h.Txns {
		t.txns[tx.ID] = i
		t.outcome[i] = judgeTxn(tx)
	}
	for i, w := range h.Writes {
		if w.Txn != "" && x.writeOf[w.Value] == i {
			t.writes[w.Txn] = append(t.writes[w.Txn], i)
		}
	}
	for j, rd := range h.Reads {
		if !rd.Committed {
			continue
		}
		if _, ok := t.committedRead[rd.Value]; !ok {
			t.committedRead[rd.Value] = j
		}
		if end, ok := t.committedEnd[rd.Partition]; !ok || rd.Offset > end {
			t.committedEnd[rd.Partition] = rd.Offset
		}
	}
	return t
}

// txnOf returns the transaction of write i, if it names a known one.
func (t *txnIndex) txnOf(h *History, i int) (int, bool) {
	k, ok := t.txns[h.Writes[i].Txn]
	return k, ok && h.Writes[i].Txn != ""
}

// txnText names transaction k and its judged outcome.
func (x *index) txnText(t *txnIndex, k int) string {
	tx := x.h.Txns[k]
	return fmt.Sprintf("txn %q of %q (%v, begun %s, commit invoked %s, completed %s)",
		tx.ID, tx.Producer, t.outcome[k], clock(tx.Begin), clock(tx.CommitInvoke), clock(tx.Complete))
}

// knownOffset is where write i is known to sit in its partition: its
// acknowledged offset, or the lowest offset any session read it at there.
func (x *index) knownOffset(i int) (int64, bool) {
	p, ok := x.placeWrite(i)
	return p.offset, ok
}

// checkTxns finds, per transactional write or transaction:
//   - aborted reads: a value of an aborted transaction read by a
//     read_committed session (once per value);
//   - precommitted reads: a value of a transaction not judged aborted,
//     read by a read_committed session before the transaction's commit
//     was invoked (once per value);
//   - torn transactions: a committed or unknown transaction some of whose
//     values read_committed sessions saw while they missed others that sit
//     at or below where they read their partition up to (once per
//     transaction);
//   - lost transactional writes: a value of a committed transaction no
//     read_committed session saw although they read its partition up to
//     or past its known offset (once per value).
//
// Duplicates and non-monotonic reads of transactional values are the
// duplicate and non-monotonic-consumer classes, which cover every session.
func (x *index) checkTxns(aborted, precommitted, torn, lost *Finding) {
	h := x.h
	t := x.newTxnIndex()
	for k, tx := range h.Txns {
		var seen, missing []int // writes visible / judgeably missing
		for _, i := range t.writes[tx.ID] {
			w := h.Writes[i]
			j, read := t.committedRead[w.Value]
			switch {
			case read && t.outcome[k] == TxnAborted:
				aborted.add(func() string {
					return fmt.Sprintf("value %q of %s from %s, %s at %v", w.Value, x.txnText(t, k), x.writeText(i),
						x.readText(j), at(h.Reads[j].Partition, h.Reads[j].Offset))
				})
			case read && (tx.CommitInvoke.IsZero() || h.Reads[j].Time.Before(tx.CommitInvoke)):
				precommitted.add(func() string {
					return fmt.Sprintf("value %q of %s %s at %v, before the commit was invoked", w.Value, x.txnText(t, k),
						x.readText(j), at(h.Reads[j].Partition, h.Reads[j].Offset))
				})
			}
			if t.outcome[k] == TxnAborted {
				continue
			}
			if read {
				seen = append(seen, i)
				continue
			}
			off, known := x.knownOffset(i)
			end, partitionRead := t.committedEnd[w.Partition]
			if known && partitionRead && end >= off {
				missing = append(missing, i)
				if t.outcome[k] == TxnCommitted {
					lost.add(func() string {
						return fmt.Sprintf("value %q of %s from %s at p%d@%d never read by a read_committed session, though they read p%d up to offset %d",
							w.Value, x.txnText(t, k), x.writeText(i), w.Partition, off, w.Partition, end)
					})
				}
			}
		}
		if len(seen) > 0 && len(missing) > 0 {
			torn.add(func() string {
				return fmt.Sprintf("%s: %d values read by read_committed sessions (e.g. %q in p%d), %d missing below their read end (e.g. %q in p%d)",
					x.txnText(t, k), len(seen), h.Writes[seen[0]].Value, h.Writes[seen[0]].Partition,
					len(missing), h.Writes[missing[0]].Value, h.Writes[missing[0]].Partition)
			})
		}
	}
}

// checkLSO finds partitions whose last stable offset stays below an offset
// the high watermark had reached, for longer than h.LSOBound after both
// that sample and h.HealedAt: every transaction open at the sample should
// have been completed (committed, aborted, or aborted on its timeout) by
// then. Counted once per partition; the example is the first such sample.
// A sample is judged only if a later sample exists at or past its deadline.
func (x *index) checkLSO(stuck *Finding) {
	h := x.h
	byPartition := map[int32][]Watermark{}
	for _, s := range h.Watermarks {
		byPartition[s.Partition] = append(byPartition[s.Partition], s)
	}
	parts := make([]int32, 0, len(byPartition))
	for p := range byPartition {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		ss := byPartition[p]
		slices.SortStableFunc(ss, func(a, b Watermark) int { return a.Time.Compare(b.Time) })
		for i, s := range ss {
			start := s.Time
			if start.Before(h.HealedAt) {
				start = h.HealedAt
			}
			deadline := start.Add(h.LSOBound)
			// The first sample at or past the deadline.
			j, _ := slices.BinarySearchFunc(ss[i:], deadline, func(w Watermark, t time.Time) int { return w.Time.Compare(t) })
			if i+j >= len(ss) {
				continue
			}
			later := ss[i+j]
			if later.LastStableOffset < s.HighWatermark && later.HighWatermark >= s.HighWatermark {
				stuck.add(func() string {
					return fmt.Sprintf("p%d: high watermark %d at %s, yet at %s (%v after the later of that sample and the heal at %s) the LSO is %d with the high watermark at %d",
						p, s.HighWatermark, clock(s.Time), clock(later.Time), later.Time.Sub(start).Round(time.Millisecond),
						clock(h.HealedAt), later.LastStableOffset, later.HighWatermark)
				})
				break
			}
		}
	}
}
