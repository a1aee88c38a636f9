package group

import (
	"errors"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

var tp0 = TopicPartition{Topic: "in", Partition: 0}

func TestKeysRoundTrip(t *testing.T) {
	k, err := DecodeKey(OffsetKey("g", "topic", 7))
	if err != nil || k != (RecordKey{Type: KeyOffset, Group: "g", Topic: "topic", Partition: 7}) {
		t.Fatalf("offset key: %+v %v", k, err)
	}
	k, err = DecodeKey(GroupKey("grp"))
	if err != nil || k != (RecordKey{Type: KeyGroup, Group: "grp"}) {
		t.Fatalf("group key: %+v %v", k, err)
	}
	for _, bad := range [][]byte{nil, {0}, {0, 9, 0, 0}, append(GroupKey("g"), 1), OffsetKey("g", "t", 1)[:9]} {
		if _, err := DecodeKey(bad); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("DecodeKey(%x) = %v, want ErrCorruptRecord", bad, err)
		}
	}
	o, err := DecodeOffsetValue(OffsetValue(Offset{Offset: 42, LeaderEpoch: 3, Metadata: "m", CommitTimeMs: 9}))
	if err != nil || o != (Offset{Offset: 42, LeaderEpoch: 3, Metadata: "m", CommitTimeMs: 9, RecordOffset: -1}) {
		t.Fatalf("offset value: %+v %v", o, err)
	}
	if _, err := DecodeOffsetValue([]byte(`{"version":2,"offset":1}`)); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("a newer version must be refused, got %v", err)
	}
	g, err := DecodeGroupValue(GroupValue(GroupRecord{Epoch: 5, TimeMs: 1}))
	if err != nil || g.Epoch != 5 {
		t.Fatalf("group value: %+v %v", g, err)
	}
}

func TestLaterRecordWins(t *testing.T) {
	s := NewOffsetsState()
	s.Commit("g", tp0, Offset{Offset: 10, RecordOffset: 5})
	s.Commit("g", tp0, Offset{Offset: 7, RecordOffset: 3}) // an older record reported late
	if o, _ := s.Offset("g", tp0); o.Offset != 10 {
		t.Fatalf("offset %d, want 10 (the later record)", o.Offset)
	}
	s.DeleteOffset("g", tp0, 4) // older tombstone: ignored
	if _, ok := s.Offset("g", tp0); !ok {
		t.Fatal("an older tombstone deleted a newer offset")
	}
	s.DeleteOffset("g", tp0, 6)
	if _, ok := s.Offset("g", tp0); ok || len(s.Groups()) != 0 {
		t.Fatalf("tombstone kept the offset; groups %v", s.Groups())
	}
}

// KIP-447: offsets of a transaction are invisible until its COMMIT marker
// and dropped by its ABORT marker; require_stable sees them pending.
func TestPendingOffsetsFollowTheMarker(t *testing.T) {
	s := NewOffsetsState()
	s.Commit("g", tp0, Offset{Offset: 1, RecordOffset: 0})
	s.AddPending(100, "g", tp0, Offset{Offset: 5, RecordOffset: 1})
	if o, _ := s.Offset("g", tp0); o.Offset != 1 || !s.HasPending("g", tp0) {
		t.Fatalf("pending offset visible (%d) or not pending", o.Offset)
	}
	s.CompleteTxn(100, false, 2)
	if o, _ := s.Offset("g", tp0); o.Offset != 1 || s.HasPending("g", tp0) {
		t.Fatalf("after abort: offset %d pending %v", o.Offset, s.HasPending("g", tp0))
	}
	s.AddPending(100, "g", tp0, Offset{Offset: 9, RecordOffset: 3})
	s.AddPending(100, "g", TopicPartition{Topic: "in", Partition: 1}, Offset{Offset: 4, RecordOffset: 6})
	s.CompleteTxn(100, true, 5) // closes only what came before offset 5
	if o, _ := s.Offset("g", tp0); o.Offset != 9 {
		t.Fatalf("after commit: offset %d, want 9", o.Offset)
	}
	if !s.HasPending("g", TopicPartition{Topic: "in", Partition: 1}) || s.PendingCount("g") != 1 {
		t.Fatal("the next transaction's offset was completed by an earlier marker")
	}
}

// An offset whose record committed before a marker, but which the
// coordinator adds after the marker was reported, gets the marker's outcome.
func TestAddPendingAfterItsMarker(t *testing.T) {
	s := NewOffsetsState()
	s.BeginTxnAppend(7)
	s.CompleteTxn(7, true, 10)
	s.AddPending(7, "g", tp0, Offset{Offset: 3, RecordOffset: 9})
	s.EndTxnAppend(7)
	if o, ok := s.Offset("g", tp0); !ok || o.Offset != 3 || s.HasPending("g", tp0) {
		t.Fatalf("offset %+v ok %v pending %v; want committed 3", o, ok, s.HasPending("g", tp0))
	}
	if len(s.markers) != 0 {
		t.Fatal("markers kept after the last append ended")
	}
}

func TestApplyBatchReplaysALog(t *testing.T) {
	var bl batch.Builder
	build := func(base int64, p batch.Producer, attrs uint32, kv ...[]byte) []byte {
		bl.Reset(1)
		for i := 0; i < len(kv); i += 2 {
			bl.Add(1, kv[i], kv[i+1], nil)
		}
		raw := bl.Finish(p, attrs)
		batch.SetBaseOffset(raw, base)
		return raw
	}
	pid := batch.Producer{ID: 100, Epoch: 0, BaseSequence: 0}
	log := [][]byte{
		build(0, batch.PlainProducer, 0, GroupKey("g"), GroupValue(GroupRecord{Epoch: 3}),
			OffsetKey("g", "in", 0), OffsetValue(Offset{Offset: 1})),
		build(2, pid, batch.AttrTransactional, OffsetKey("g", "in", 0), OffsetValue(Offset{Offset: 8})),
		markerAt(3, batch.Producer{ID: 100, Epoch: 1}, batch.ControlAbort),
		build(4, batch.Producer{ID: 100, Epoch: 1}, batch.AttrTransactional, OffsetKey("g", "in", 0), OffsetValue(Offset{Offset: 9})),
		markerAt(5, batch.Producer{ID: 100, Epoch: 2}, batch.ControlCommit),
		build(6, batch.PlainProducer, 0, OffsetKey("g", "in", 1), OffsetValue(Offset{Offset: 4}), OffsetKey("g", "in", 1), nil),
		build(8, pid, batch.AttrTransactional, OffsetKey("h", "in", 2), OffsetValue(Offset{Offset: 2})),
	}
	s := NewOffsetsState()
	for _, raw := range log {
		if skipped, err := s.ApplyBatch(raw); err != nil || skipped != nil {
			t.Fatal(skipped, err)
		}
	}
	if o, _ := s.Offset("g", tp0); o.Offset != 9 || o.RecordOffset != 4 {
		t.Fatalf("g in-0 = %+v, want the committed transaction's 9", o)
	}
	if _, ok := s.Offset("g", TopicPartition{Topic: "in", Partition: 1}); ok {
		t.Fatal("the tombstone did not delete in-1")
	}
	if s.GroupEpoch("g") != 3 || !s.HasPending("h", TopicPartition{Topic: "in", Partition: 2}) {
		t.Fatalf("epoch %d, h pending %v", s.GroupEpoch("g"), s.HasPending("h", TopicPartition{Topic: "in", Partition: 2}))
	}
	// A record that cannot be decoded is left out and reported; the rest
	// of its batch is applied (issue 29).
	skipped, err := s.ApplyBatch(build(9, batch.PlainProducer, 0,
		[]byte{0, 1}, []byte("x"),
		OffsetKey("g", "in", 5), []byte("not an offset"),
		OffsetKey("g", "in", 6), OffsetValue(Offset{Offset: 60})))
	if err != nil || len(skipped) != 2 || skipped[0].Offset != 9 || skipped[1].Offset != 10 ||
		!errors.Is(skipped[0].Err, ErrCorruptRecord) || !errors.Is(skipped[1].Err, ErrCorruptRecord) {
		t.Fatalf("a bad key and a bad value: skipped %v, %v; want offsets 9 and 10 reported", skipped, err)
	}
	if o, ok := s.Offset("g", TopicPartition{Topic: "in", Partition: 6}); !ok || o.Offset != 60 {
		t.Fatalf("the record after the bad ones: %+v %v, want offset 60", o, ok)
	}
	if _, ok := s.Offset("g", TopicPartition{Topic: "in", Partition: 5}); ok {
		t.Fatal("the undecodable offset was applied")
	}
}

func markerAt(base int64, p batch.Producer, c batch.ControlType) []byte {
	raw := batch.MarkerBatch(p, c, 0, 1)
	batch.SetBaseOffset(raw, base)
	return raw
}
