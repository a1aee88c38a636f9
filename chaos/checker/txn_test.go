package checker

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// at0 is t0 plus d, for transaction timelines.
func at0(d time.Duration) time.Time { return t0.Add(d) }

// txw is a write of transaction txn: acknowledged at offset when offset >=
// 0, unknown otherwise.
func txw(txn, producer string, seq int64, p int32, offset int64, value string) Write {
	w := ok(producer, seq, p, offset, value)
	if offset < 0 {
		w = unknown(producer, seq, p, value)
	}
	w.Txn = txn
	return w
}

// rc and ru are reads by a read_committed and a read_uncommitted session.
func rc(session string, p int32, offset int64, value string, when time.Duration) Read {
	return Read{Consumer: session, Partition: p, Offset: offset, Value: value, Time: at0(when), Committed: true}
}

func ru(session string, p int32, offset int64, value string) Read {
	return Read{Consumer: session, Partition: p, Offset: offset, Value: value, Time: at0(6 * time.Second)}
}

// cleanTxns is a transactional history with no anomaly and every
// non-anomaly the transaction checks must accept:
//   - T1 committed over p0 and p1, read by the read_committed session c;
//   - T2 aborted before its commit was invoked (the producer gave up), T6
//     aborted after its commit failed as abortable: both acknowledged and
//     read by the read_uncommitted session u only;
//   - T3 unknown and invisible; T4 unknown and visible in full (its writes
//     unknown too, placed by u's reads);
//   - the LSO lags the high watermark while transactions are open and
//     catches up within the bound after the heal.
func cleanTxns() History {
	return History{
		Txns: []Txn{
			{ID: "T1", Producer: "t1", Begin: t0, CommitInvoke: at0(time.Second), Complete: at0(1100 * time.Millisecond), Outcome: TxnCommitted},
			{ID: "T2", Producer: "t2", Begin: t0, Complete: at0(1500 * time.Millisecond), Outcome: TxnAborted},
			{ID: "T3", Producer: "t1", Begin: at0(2 * time.Second), CommitInvoke: at0(3 * time.Second)},
			{ID: "T4", Producer: "t2", Begin: at0(2 * time.Second), CommitInvoke: at0(3 * time.Second), Complete: at0(4 * time.Second), Outcome: TxnUnknown},
			{ID: "T6", Producer: "t3", Begin: t0, CommitInvoke: at0(time.Second), Complete: at0(2 * time.Second), Outcome: TxnAborted, Err: "abortable"},
		},
		Writes: []Write{
			txw("T1", "t1", 0, 0, 0, "A1"), txw("T1", "t1", 1, 1, 0, "A2"),
			txw("T2", "t2", 0, 0, 1, "B1"), txw("T2", "t2", 1, 1, 1, "B2"),
			txw("T3", "t1", 2, 0, -1, "C1"), txw("T3", "t1", 3, 1, -1, "C2"),
			txw("T4", "t2", 2, 0, -1, "D1"), txw("T4", "t2", 3, 1, -1, "D2"),
			txw("T6", "t3", 0, 0, 2, "F1"),
		},
		Reads: []Read{
			rc("c", 0, 0, "A1", 5*time.Second), rc("c", 1, 0, "A2", 5*time.Second),
			rc("c", 0, 4, "D1", 5*time.Second), rc("c", 1, 3, "D2", 5*time.Second),
			ru("u", 0, 0, "A1"), ru("u", 0, 1, "B1"), ru("u", 0, 2, "F1"), ru("u", 0, 4, "D1"),
			ru("u", 1, 0, "A2"), ru("u", 1, 1, "B2"), ru("u", 1, 3, "D2"),
		},
		Watermarks: []Watermark{
			{Partition: 0, Time: t0, HighWatermark: 5, LastStableOffset: 1},
			{Partition: 0, Time: at0(8 * time.Second), HighWatermark: 5, LastStableOffset: 3},
			{Partition: 0, Time: at0(20 * time.Second), HighWatermark: 6, LastStableOffset: 6},
			{Partition: 1, Time: at0(20 * time.Second), HighWatermark: 4, LastStableOffset: 4},
		},
		HealedAt: at0(10 * time.Second),
		LSOBound: 5 * time.Second,
	}
}

// dropRead removes the reads of value by session.
func dropRead(h *History, session, value string) {
	h.Reads = slices.DeleteFunc(h.Reads, func(r Read) bool { return r.Consumer == session && r.Value == value })
}

func TestTxnClasses(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(h *History)
		want   map[Class]int
		// allowed are other classes the anomaly may show up in too.
		allowed []Class
	}{
		{"clean", func(*History) {}, nil, nil},
		{"aborted read: an aborted transaction's value seen by read_committed", func(h *History) {
			h.Reads = append(h.Reads, rc("c2", 0, 1, "B1", 5*time.Second))
		}, map[Class]int{AbortedRead: 1}, nil},
		{"aborted read: a transaction whose commit failed as abortable", func(h *History) {
			h.Reads = append(h.Reads, rc("c2", 0, 2, "F1", 5*time.Second))
		}, map[Class]int{AbortedRead: 1}, nil},
		{"aborted read: a transaction open at the end whose commit was never invoked", func(h *History) {
			h.Txns = append(h.Txns, Txn{ID: "T7", Producer: "t4", Begin: at0(9 * time.Second)})
			h.Writes = append(h.Writes, txw("T7", "t4", 0, 0, 5, "G1"))
			h.Reads = append(h.Reads, rc("c", 0, 5, "G1", 10*time.Second))
		}, map[Class]int{AbortedRead: 1}, nil},
		{"precommitted read: seen before the commit was invoked", func(h *History) {
			h.Reads[0].Time = at0(500 * time.Millisecond)
		}, map[Class]int{PrecommittedRead: 1}, nil},
		{"no precommitted read: seen after the commit was invoked, before its answer", func(h *History) {
			h.Reads[0].Time = at0(1050 * time.Millisecond)
		}, nil, nil},
		{"torn transaction across partitions", func(h *History) {
			dropRead(h, "c", "A2")
		}, map[Class]int{TornTxn: 1, TxnLostWrite: 1}, nil},
		{"torn transaction within one partition", func(h *History) {
			h.Writes = append(h.Writes, txw("T1", "t1", 9, 0, 3, "A3"))
			h.Reads = append(h.Reads, ru("u", 0, 3, "A3"))
		}, map[Class]int{TornTxn: 1, TxnLostWrite: 1}, []Class{NonMonotonicConsumer}},
		{"torn unknown transaction: all or nothing even when unknown", func(h *History) {
			dropRead(h, "c", "D2")
			h.Writes = append(h.Writes, ok("n", 0, 1, 4, "N1"))
			h.Reads = append(h.Reads, rc("c", 1, 4, "N1", 6*time.Second), ru("u", 1, 4, "N1"))
		}, map[Class]int{TornTxn: 1}, nil},
		{"not torn: an unknown transaction's missing value beyond where read_committed read", func(h *History) {
			dropRead(h, "c", "D2")
		}, nil, nil},
		{"not torn: the missing value sits beyond where read_committed read", func(h *History) {
			h.Writes = append(h.Writes, txw("T1", "t1", 9, 1, 7, "A3"))
		}, nil, nil},
		{"lost writes: a whole committed transaction missing", func(h *History) {
			dropRead(h, "c", "A1")
			dropRead(h, "c", "A2")
		}, map[Class]int{TxnLostWrite: 2}, nil},
		{"duplicate across transactions: a committed value read twice", func(h *History) {
			h.Reads = append(h.Reads, rc("c", 0, 5, "A1", 7*time.Second))
		}, map[Class]int{Duplicate: 1}, []Class{InconsistentOffset}},
		{"non-monotonic read_committed reads", func(h *History) {
			h.Reads = append(h.Reads, rc("c", 0, 0, "A1", 7*time.Second))
		}, map[Class]int{NonMonotonicConsumer: 1}, nil},
		{"stuck LSO: the high watermark passed, the LSO did not within the bound", func(h *History) {
			h.Watermarks[2].LastStableOffset = 3
		}, map[Class]int{StuckLSO: 1}, nil},
		{"LSO not judged without a sample past the deadline", func(h *History) {
			h.Watermarks = h.Watermarks[:2]
			h.Watermarks[1].Time = at0(14 * time.Second)
		}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanTxns()
			tc.mutate(&h)
			r := Check(h)
			for _, f := range r.Findings {
				want := tc.want[f.Class]
				if slices.Contains(tc.allowed, f.Class) || f.Skipped != "" && want == 0 {
					continue
				}
				if f.Count != want {
					t.Errorf("%s: %d, want %d\n%s", f.Class, f.Count, want, strings.Join(r.Summary(), "\n"))
				}
			}
		})
	}
}

// TestTxnWriteNotJudgedAsLostAck: an acknowledged record of an aborted
// transaction is rightly never read by read_committed readers; the plain
// lost-write and unseen-ack checks must leave it to the transaction checks.
func TestTxnWriteNotJudgedAsLostAck(t *testing.T) {
	h := cleanTxns()
	h.Reads = slices.DeleteFunc(h.Reads, func(r Read) bool { return !r.Committed })
	r := Check(h)
	for _, c := range []Class{LostWrite, UnseenAck, AbortedRead, TornTxn, TxnLostWrite} {
		if n := r.For(c).Count; n != 0 {
			t.Errorf("%s: %d, want 0\n%s", c, n, strings.Join(r.Summary(), "\n"))
		}
	}
}

// cleanCopier is a copier history with no anomaly: input p0 holds I0..I3;
// the copier committed copies of I0 and I1 with position 2 (transaction
// X1), aborted a copy of I2 (X2), then committed it again (X3, position
// 3); I3 is not copied yet. Copies go to p1 and are read with
// read_committed; the aborted copy only with read_uncommitted.
func cleanCopier() History {
	cw := func(txn string, seq int64, offset int64, value, of string) Write {
		w := txw(txn, "x", seq, 1, offset, value)
		w.CopyOf = of
		return w
	}
	return History{
		Txns: []Txn{
			{ID: "X1", Producer: "x", Begin: t0, CommitInvoke: at0(time.Second), Complete: at0(time.Second), Outcome: TxnCommitted},
			{ID: "X2", Producer: "x", Begin: at0(time.Second), Complete: at0(2 * time.Second), Outcome: TxnAborted},
			{ID: "X3", Producer: "x", Begin: at0(2 * time.Second), CommitInvoke: at0(3 * time.Second), Complete: at0(3 * time.Second), Outcome: TxnCommitted},
		},
		Writes: []Write{
			ok("P", 0, 0, 0, "I0"), ok("P", 1, 0, 1, "I1"), ok("P", 2, 0, 2, "I2"), ok("P", 3, 0, 3, "I3"),
			cw("X1", 0, 0, "C0", "I0"), cw("X1", 1, 1, "C1", "I1"), cw("X2", 2, 3, "C2a", "I2"), cw("X3", 3, 5, "C2b", "I2"),
		},
		Reads: []Read{
			rc("c", 0, 0, "I0", 4*time.Second), rc("c", 0, 1, "I1", 4*time.Second), rc("c", 0, 2, "I2", 4*time.Second), rc("c", 0, 3, "I3", 4*time.Second),
			rc("c", 1, 0, "C0", 4*time.Second), rc("c", 1, 1, "C1", 4*time.Second), rc("c", 1, 5, "C2b", 4*time.Second),
			ru("u", 1, 0, "C0"), ru("u", 1, 1, "C1"), ru("u", 1, 3, "C2a"), ru("u", 1, 5, "C2b"),
		},
		Copier: &Copier{Ends: map[int32]int64{0: 3}},
	}
}

func TestCopierExactlyOnce(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(h *History)
		want   int
	}{
		{"clean", func(*History) {}, 0},
		{"an input record below the position never copied", func(h *History) {
			dropRead(h, "c", "C1")
		}, 1},
		{"an input record copied twice (both visible)", func(h *History) {
			h.Writes = append(h.Writes, Write{Producer: "x", Partition: 1, Seq: 9, Value: "C0b", Invoke: t0, Complete: at0(time.Second), Offset: 6, Txn: "X3", CopyOf: "I0"})
			h.Reads = append(h.Reads, rc("c", 1, 6, "C0b", 5*time.Second))
		}, 1},
		{"a copy visible beyond the committed position", func(h *History) {
			h.Copier.Ends[0] = 2
		}, 1},
		{"an aborted transaction's input record copied", func(h *History) {
			h.Txns = append(h.Txns, Txn{ID: "Y", Producer: "y", Begin: t0, Complete: at0(time.Second), Outcome: TxnAborted})
			h.Writes = append(h.Writes, txw("Y", "y", 0, 0, 2, "IA"))
			h.Writes = append(h.Writes, Write{Producer: "x", Partition: 1, Seq: 9, Value: "CA", Invoke: t0, Complete: at0(time.Second), Offset: 6, Txn: "X3", CopyOf: "IA"})
			h.Reads = append(h.Reads, ru("u", 0, 2, "IA"), rc("c", 1, 6, "CA", 5*time.Second))
		}, 1},
		{"a committed transaction's input record below the position not copied", func(h *History) {
			h.Txns = append(h.Txns, Txn{ID: "Y", Producer: "y", Begin: t0, CommitInvoke: t0, Complete: at0(time.Second), Outcome: TxnCommitted})
			h.Writes = append(h.Writes, txw("Y", "y", 0, 2, 0, "IC"))
			h.Reads = append(h.Reads, rc("c", 2, 0, "IC", 5*time.Second))
			h.Copier.Ends[2] = 1
		}, 1},
		{"an aborted transaction's input record not copied", func(h *History) {
			h.Txns = append(h.Txns, Txn{ID: "Y", Producer: "y", Begin: t0, Complete: at0(time.Second), Outcome: TxnAborted})
			h.Writes = append(h.Writes, txw("Y", "y", 0, 2, 0, "IA"))
			h.Reads = append(h.Reads, ru("u", 2, 0, "IA"))
			h.Copier.Ends[2] = 1
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := cleanCopier()
			tc.mutate(&h)
			r := Check(h)
			if n := r.For(CopyNotExactlyOnce).Count; n != tc.want {
				t.Errorf("copy-not-exactly-once: %d, want %d\n%s", n, tc.want, strings.Join(r.Summary(), "\n"))
			}
			for _, c := range []Class{AbortedRead, TornTxn, LostWrite} {
				if n := r.For(c).Count; n != 0 && tc.name == "clean" {
					t.Errorf("%s: %d in the clean copier history", c, n)
				}
			}
		})
	}
}
