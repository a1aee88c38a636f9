package storage

import (
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// headersBefore yields the headers of batches wholly below offset.
func headersBefore(hs []batch.Header, offset int64) iter.Seq[batch.Header] {
	return func(yield func(batch.Header) bool) {
		for _, h := range hs {
			if h.LastOffset() >= offset || !yield(h) {
				return
			}
		}
	}
}

// headersFrom yields the headers of batches at or after offset.
func headersFrom(hs []batch.Header, offset int64) iter.Seq[batch.Header] {
	return func(yield func(batch.Header) bool) {
		for _, h := range hs {
			if h.BaseOffset >= offset && !yield(h) {
				return
			}
		}
	}
}

// simClient is one simulated producer: idempotent or transactional (TV2:
// a marker with epoch+1 ends each transaction and the client restarts at
// sequence 0 under that epoch).
type simClient struct {
	id    int64
	txn   bool
	epoch int16
	seq   int32
	open  bool
	sent  []batch.Header // for retries
}

// simulate runs a deterministic random workload through a producerLog: new
// batches, retries of recent ones (duplicates or, once forgotten, refusals),
// epoch bumps, transactions and their markers, plain producers, a sequence
// wrapping past MaxInt32. At every 10th stored batch it records the state's
// snapshot and the log end offset.
func simulate(t *testing.T, seed uint64, clients, steps, maxProducers int) (l *producerLog, snaps map[int64][]byte, st simStats) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	l = newProducerLog(maxProducers)
	snaps = map[int64][]byte{0: l.s.Snapshot()}
	cs := make([]*simClient, clients)
	for i := range cs {
		cs[i] = &simClient{id: int64(i + 1), txn: i%2 == 1}
	}
	cs[0].seq = math.MaxInt32 - 20 // an unknown producer may start anywhere
	for range steps {
		if r.IntN(10) == 0 {
			l.send(t, dataHeader(-1, 0, 0, int32(1+r.IntN(3)), false))
			continue
		}
		c := cs[r.IntN(len(cs))]
		switch {
		case len(c.sent) > 0 && r.IntN(6) == 0: // a retry of one of the last 7 batches
			h := c.sent[max(0, len(c.sent)-1-r.IntN(7))]
			st.count(l.send(t, h))
		case c.txn && c.open && r.IntN(4) == 0: // the coordinator ends the transaction
			if _, err := l.marker(t, c.id, c.epoch+1); err == nil {
				c.epoch, c.seq, c.open = c.epoch+1, 0, false
				st.markers++
			}
		default:
			if !c.txn && r.IntN(15) == 0 {
				c.epoch, c.seq = c.epoch+1, 0
			}
			n := int32(1 + r.IntN(4))
			h := dataHeader(c.id, c.epoch, c.seq, n, c.txn)
			base, dup, err := l.send(t, h)
			st.count(base, dup, err)
			if err == nil && !dup {
				c.seq = l.headers[len(l.headers)-1].LastSequence() + 1
				if c.seq < 0 {
					c.seq = 0
				}
				c.open = c.txn
				c.sent = append(c.sent, h)
			}
		}
		if len(l.headers)%10 == 0 {
			snaps[l.next] = l.s.Snapshot()
		}
	}
	return l, snaps, st
}

// simStats counts what a simulated workload exercised.
type simStats struct{ stored, duplicates, refused, markers int }

func (s *simStats) count(_ int64, dup bool, err error) {
	switch {
	case err != nil:
		s.refused++
	case dup:
		s.duplicates++
	default:
		s.stored++
	}
}

// TestProducerReplayEqualsIncrementalUpdates: replaying the stored batch
// headers (what a follower or a recovery does) gives the same state, byte for
// byte, as the leader's Check/Update path; and so does the rebuild contract
// from any intermediate snapshot.
func TestProducerReplayEqualsIncrementalUpdates(t *testing.T) {
	for _, tc := range []struct {
		name         string
		seed         uint64
		clients, max int
	}{
		{"unbounded", 1, 6, 0},
		{"bounded with evictions", 2, 9, 4},
		{"many producers", 3, 40, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, snaps, st := simulate(t, tc.seed, tc.clients, 600, tc.max)
			t.Logf("%+v", st)
			if st.duplicates == 0 || st.refused == 0 || st.markers == 0 {
				t.Fatalf("workload %+v lacks duplicates, refusals or markers", st)
			}
			if tc.max > 0 && l.s.Len() > tc.max {
				t.Errorf("Len %d above the bound %d", l.s.Len(), tc.max)
			}
			want := l.s.Snapshot()

			full := NewProducerState(tc.max)
			if err := Replay(full, slices.Values(l.headers)); err != nil {
				t.Fatal(err)
			}
			if got := full.Snapshot(); string(got) != string(want) {
				t.Fatalf("Replay differs from incremental updates:\n got %+v\nwant %+v", full.Producers(), l.s.Producers())
			}

			for off, snap := range snaps {
				s, err := LoadSnapshot(snap)
				if err != nil {
					t.Fatal(err)
				}
				s.SetMaxProducers(tc.max)
				if err := Replay(s, headersFrom(l.headers, off)); err != nil {
					t.Fatal(err)
				}
				if got := s.Snapshot(); string(got) != string(want) {
					t.Fatalf("rebuild from the snapshot at %d differs:\n got %+v\nwant %+v", off, s.Producers(), l.s.Producers())
				}
			}
		})
	}
}

// TestProducerTruncateToExactMatchesRebuild checks TruncateTo's exact flag
// at every batch boundary of a simulated log: when it says exact, the state
// equals a replay of the prefix. Many short-lived producers make both
// outcomes occur.
func TestProducerTruncateToExactMatchesRebuild(t *testing.T) {
	l, _, _ := simulate(t, 4, 60, 300, 0)
	snap := l.s.Snapshot()
	var exact, inexact int
	for _, h := range append(l.headers, batch.Header{BaseOffset: l.next}) {
		cut := h.BaseOffset
		s, err := LoadSnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		if !s.TruncateTo(cut) {
			inexact++
			continue
		}
		exact++
		rebuilt := NewProducerState(0)
		if err := Replay(rebuilt, headersBefore(l.headers, cut)); err != nil {
			t.Fatal(err)
		}
		if string(rebuilt.Snapshot()) != string(s.Snapshot()) {
			t.Fatalf("TruncateTo(%d) said exact but differs from a rebuild:\n got %+v\nwant %+v", cut, s.Producers(), rebuilt.Producers())
		}
	}
	if exact == 0 || inexact == 0 {
		t.Fatalf("exact %d, inexact %d: the workload does not exercise both", exact, inexact)
	}
}

func TestProducerReplayRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		hs   []batch.Header
		want string
	}{
		{"offsets going back", []batch.Header{{BaseOffset: 5, ProducerID: 1, BaseSequence: 0}, {BaseOffset: 5, ProducerID: 1, BaseSequence: 1}}, "CORRUPT_RECORD"},
		{"overlapping batches", []batch.Header{{BaseOffset: 0, LastOffsetDelta: 3, ProducerID: -1}, {BaseOffset: 2, ProducerID: -1}}, "CORRUPT_RECORD"},
		{"epoch beyond int16", []batch.Header{{ProducerID: 1, ProducerEpoch: math.MaxInt16 + 1}}, "INVALID_RECORD"},
		{"negative sequence", []batch.Header{{ProducerID: 1, BaseSequence: -1}}, "INVALID_RECORD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := Replay(NewProducerState(0), slices.Values(tc.hs)); code(err) != tc.want {
				t.Fatalf("Replay = %v, want %s", err, tc.want)
			}
		})
	}
}

func TestProducerBatchInfoFromHeader(t *testing.T) {
	tests := []struct {
		name string
		h    batch.Header
		want BatchInfo
	}{
		{"plain producer", batch.Header{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, LastOffsetDelta: 4}, BatchInfo{ProducerID: -1}},
		{"idempotent", batch.Header{ProducerID: 7, ProducerEpoch: 2, BaseSequence: 10, LastOffsetDelta: 4}, BatchInfo{ProducerID: 7, Epoch: 2, FirstSeq: 10, LastSeq: 14}},
		{"wrapping", batch.Header{ProducerID: 7, BaseSequence: math.MaxInt32 - 1, LastOffsetDelta: 3}, BatchInfo{ProducerID: 7, FirstSeq: math.MaxInt32 - 1, LastSeq: 1}},
		{"transactional", batch.Header{ProducerID: 7, ProducerEpoch: math.MaxInt16, Attributes: batch.AttrTransactional}, BatchInfo{ProducerID: 7, Epoch: math.MaxInt16, IsTransactional: true}},
		{"marker", markerHeader(7, 3), BatchInfo{ProducerID: 7, Epoch: 3, FirstSeq: -1, LastSeq: -1, IsTransactional: true, IsControl: true, CoordinatorEpoch: NoCoordinatorEpoch}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := info(t, tc.h); got != tc.want {
				t.Errorf("BatchInfoFromHeader = %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, h := range []batch.Header{{ProducerID: 1, ProducerEpoch: -1}, {ProducerID: 1, ProducerEpoch: 1 << 16}, {ProducerID: 1, BaseSequence: -5}} {
		if _, err := BatchInfoFromHeader(h); code(err) != "INVALID_RECORD" {
			t.Errorf("BatchInfoFromHeader(%+v) = %v, want INVALID_RECORD", h, err)
		}
	}
}
