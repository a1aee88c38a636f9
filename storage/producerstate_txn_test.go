package storage

import (
	"testing"
	"time"
)

// Rules of the producer state's open transactions (Kafka
// ProducerStateManager.firstUnstableOffset and lastStableOffset(completedTxn)):
// the first unstable offset is the first offset of the oldest open
// transaction; a marker ends its producer's transaction, and the last
// stable offset it records is the oldest other open transaction's first
// offset, or the marker's offset + 1.
func TestFirstUnstableOffsetAndEndingTxn(t *testing.T) {
	l := newProducerLog(0)
	if _, ok := l.s.FirstUnstableOffset(); ok {
		t.Fatal("empty state has an open transaction")
	}
	l.apply(t, []step{
		data(1, 0, 0, 2),    // 0-1 plain idempotent: no transaction
		txnData(2, 0, 0, 2), // 2-3 producer 2 opens at 2
		txnData(3, 0, 0, 1), // 4   producer 3 opens at 4
		txnData(2, 0, 2, 1), // 5   producer 2 continues
	})
	if off, ok := l.s.FirstUnstableOffset(); !ok || off != 2 {
		t.Fatalf("first unstable %d %v, want 2", off, ok)
	}
	if got, ok := l.s.EndingTxn(2, 6); !ok || got != (AbortedTxn{ProducerID: 2, FirstOffset: 2, LastOffset: 6, LastStableOffset: 4}) {
		t.Fatalf("ending producer 2's transaction: %+v %v", got, ok)
	}
	if _, ok := l.s.EndingTxn(1, 6); ok {
		t.Fatal("a producer without a transaction has one to end")
	}
	l.apply(t, []step{marker(2, 1)}) // 6
	if off, ok := l.s.FirstUnstableOffset(); !ok || off != 4 {
		t.Fatalf("after producer 2's marker: first unstable %d %v, want 4", off, ok)
	}
	if got, ok := l.s.EndingTxn(3, 7); !ok || got.LastStableOffset != 8 {
		t.Fatalf("ending the last open transaction: %+v %v, want last stable offset 8", got, ok)
	}

	// A snapshot round trip keeps the open transactions.
	st, err := LoadSnapshot(l.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if off, ok := st.FirstUnstableOffset(); !ok || off != 4 {
		t.Fatalf("loaded snapshot: first unstable %d %v, want 4", off, ok)
	}
	// Truncating the open transaction away closes it.
	st.TruncateTo(4)
	if off, ok := st.FirstUnstableOffset(); ok {
		t.Fatalf("after truncating producer 3's transaction: first unstable %d", off)
	}
	// Eviction and expiration never drop an open transaction.
	l.s.SetMaxProducers(1)
	l.s.ExpireBefore(time.UnixMilli(1<<50), time.Millisecond)
	if off, ok := l.s.FirstUnstableOffset(); !ok || off != 4 || l.s.Len() != 1 {
		t.Fatalf("after eviction and expiration: first unstable %d %v with %d producers, want 4 with 1", off, ok, l.s.Len())
	}
}
