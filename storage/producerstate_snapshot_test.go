package storage

import (
	"encoding/binary"
	"errors"
	"flag"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The golden snapshot pins format version 2: a change to the encoding that
// does not bump the version fails TestProducerSnapshotGolden. The version 1
// golden (written before version 2 existed) must still load. Regenerate
// (after bumping the version) with
//
//	go test ./storage/ -run ProducerSnapshotGolden -update
//
// The flag is registered only if no other test file of the package has
// registered -update already (package variables are initialised before any
// init function runs).
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

const (
	goldenProducerSnapshot   = "producerstate-v2.snapshot"
	goldenProducerSnapshotV1 = "producerstate-v1.snapshot"
)

// richProducerLog builds a state with every kind of entry: a full window
// with a batch wrapping past MaxInt32, an open transaction, a marker-only
// producer, an epoch bump, and a plain producer (absent from the state).
func richProducerLog(t *testing.T) *producerLog {
	t.Helper()
	l := newProducerLog(0)
	l.apply(t, []step{
		data(1, 0, math.MaxInt32-5, 3),
		data(2, 4, 0, 2),
		data(1, 0, math.MaxInt32-2, 2),
		data(1, 0, math.MaxInt32, 4), // wraps: MaxInt32, 0, 1, 2
		txnData(3, 0, 0, 1),
		data(-1, 0, 0, 10),
		data(1, 0, 3, 1),
		markerFrom(3, 1, 6), // producer 3: epoch 1, nothing remembered, closed, coordinator epoch 6
		data(2, 5, 0, 1),
		data(1, 0, 4, 2),
		data(1, 0, 6, 1),
		txnData(4, 7, 0, 3),
		txnData(4, 7, 3, 1),
	})
	return l
}

func TestProducerSnapshotRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *producerLog
	}{{"empty", newProducerLog(0)}, {"rich", richProducerLog(t)}} {
		t.Run(tc.name, func(t *testing.T) {
			snap := tc.l.s.Snapshot()
			got, err := LoadSnapshot(snap)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Producers(), tc.l.s.Producers()) || got.Len() != tc.l.s.Len() {
				t.Fatalf("loaded %+v\nwant %+v", got.Producers(), tc.l.s.Producers())
			}
			if again := got.Snapshot(); string(again) != string(snap) {
				t.Error("snapshot of the loaded state differs")
			}
		})
	}

	// After a restart every remembered batch is still a duplicate (Kafka's
	// snapshot keeps only the last one) and the open transaction is still
	// open.
	l := richProducerLog(t)
	s, err := LoadSnapshot(l.s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Check(BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: math.MaxInt32 - 2, LastSeq: math.MaxInt32 - 1}); err != nil || !d.Duplicate || d.FirstOffset != 5 {
		t.Errorf("oldest remembered batch of producer 1 after load: %+v, %v; want a duplicate at 5", d, err)
	}
	if d, err := s.Check(BatchInfo{ProducerID: 1, Epoch: 0, FirstSeq: math.MaxInt32, LastSeq: 2}); err != nil || !d.Duplicate {
		t.Errorf("wrapping batch after load: %+v, %v; want a duplicate", d, err)
	}
	if _, err := s.Check(BatchInfo{ProducerID: 4, Epoch: 7, FirstSeq: 4, LastSeq: 4}); code(err) != "INVALID_TXN_STATE" {
		t.Errorf("plain write of producer 4 after load: %v; want INVALID_TXN_STATE (transaction still open)", err)
	}
}

func TestProducerSnapshotGolden(t *testing.T) {
	path := filepath.Join("testdata", goldenProducerSnapshot)
	got := richProducerLog(t).s.Snapshot()
	if updateGolden() {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("snapshot encoding changed without a version bump:\n got %x\nwant %x", got, want)
	}
	s, err := LoadSnapshot(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Producers(), richProducerLog(t).s.Producers()) {
		t.Errorf("golden snapshot loads as %+v", s.Producers())
	}
}

// A version 1 snapshot (no coordinator epochs, no transaction start
// times) still loads: the same producers, no coordinator epoch, and the
// open transaction dated by its first batch.
func TestProducerSnapshotReadsVersion1(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("testdata", goldenProducerSnapshotV1))
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSnapshot(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := richProducerLog(t).s.Producers()
	for i := range want {
		want[i].CoordinatorEpoch = NoCoordinatorEpoch
	}
	if !reflect.DeepEqual(s.Producers(), want) {
		t.Fatalf("version 1 loads as %+v\nwant %+v", s.Producers(), want)
	}
	if p4, _ := s.Producer(4); p4.TxnFirstOffset < 0 || p4.TxnStartTime != p4.Batches[0].MaxTimestamp {
		t.Fatalf("producer 4 from version 1: %+v; want its open transaction dated by its first batch", p4)
	}
	if again, err := LoadSnapshot(s.Snapshot()); err != nil || !reflect.DeepEqual(again.Producers(), want) {
		t.Fatalf("rewritten as version 2: %v", err)
	}
}

// reseal recomputes the CRC of a modified snapshot, to reach the checks
// behind it.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint32(b[6:], crc32.Checksum(b[10:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestProducerSnapshotRefusesCorruption(t *testing.T) {
	good := richProducerLog(t).s.Snapshot()
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	le := binary.LittleEndian
	firstEntry := producerSnapshotHeader
	tests := []struct {
		name string
		data []byte
	}{
		{"nil", nil},
		{"header only, short", good[:producerSnapshotHeader-1]},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b })},
		{"wrong version", mutate(func(b []byte) []byte { le.PutUint16(b[4:], 3); return b })},
		{"version 1 label on a version 2 body", mutate(func(b []byte) []byte { le.PutUint16(b[4:], 1); return b })},
		{"version 0", mutate(func(b []byte) []byte { le.PutUint16(b[4:], 0); return reseal(b) })},
		{"trailing bytes", mutate(func(b []byte) []byte { return reseal(append(b, 0)) })},
		{"count too large for the body", mutate(func(b []byte) []byte { le.PutUint32(b[10:], 1<<31); return reseal(b) })},
		{"count one too many", mutate(func(b []byte) []byte { le.PutUint32(b[10:], le.Uint32(b[10:])+1); return reseal(b) })},
		{"unknown flag", mutate(func(b []byte) []byte { b[firstEntry+10] |= 0x80; return reseal(b) })},
		{"six batches", mutate(func(b []byte) []byte { b[firstEntry+11] = 6; return reseal(b) })},
		{"producer id 0", mutate(func(b []byte) []byte { le.PutUint64(b[firstEntry:], 0); return reseal(b) })},
		{"negative epoch", mutate(func(b []byte) []byte { le.PutUint16(b[firstEntry+8:], 0xffff); return reseal(b) })},
		{"batch offsets backwards", mutate(func(b []byte) []byte {
			le.PutUint64(b[firstEntry+producerSnapshotEntry+16:], 0) // first batch's last offset below its first
			le.PutUint64(b[firstEntry+producerSnapshotEntry+8:], 5)
			return reseal(b)
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := LoadSnapshot(tc.data); !errors.Is(err, ErrCorruptProducerSnapshot) {
				t.Fatalf("LoadSnapshot = %v, %v; want ErrCorruptProducerSnapshot", s, err)
			}
		})
	}

	t.Run("every bit flip", func(t *testing.T) {
		for i := range good {
			for bit := 0; bit < 8; bit++ {
				b := append([]byte(nil), good...)
				b[i] ^= 1 << bit
				if _, err := LoadSnapshot(b); !errors.Is(err, ErrCorruptProducerSnapshot) {
					t.Fatalf("flip of bit %d of byte %d accepted (err %v)", bit, i, err)
				}
			}
		}
	})
	t.Run("every truncation", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			if _, err := LoadSnapshot(good[:n]); !errors.Is(err, ErrCorruptProducerSnapshot) {
				t.Fatalf("snapshot cut to %d of %d bytes accepted (err %v)", n, len(good), err)
			}
		}
	})
	if _, err := LoadSnapshot(good); err != nil {
		t.Fatalf("the good snapshot: %v", err)
	}
}

func TestProducerSnapshotFileName(t *testing.T) {
	if got := SnapshotFileName(0); got != "00000000000000000000.snapshot" {
		t.Errorf("SnapshotFileName(0) = %q", got)
	}
	if got := SnapshotFileName(1234); got != "00000000000000001234.snapshot" {
		t.Errorf("SnapshotFileName(1234) = %q", got)
	}
	for _, off := range []int64{0, 1, 17, 1 << 40, math.MaxInt64} {
		if got, ok := ParseSnapshotFileName(SnapshotFileName(off)); !ok || got != off {
			t.Errorf("round trip of %d: %d, %v", off, got, ok)
		}
	}
	for _, name := range []string{
		"", ".snapshot", "0.snapshot", "0000000000000000001.snapshot", "000000000000000000001.snapshot",
		"00000000000000000001.snapshot.tmp", "00000000000000000001.log", "+0000000000000000001.snapshot",
		"-0000000000000000001.snapshot", "0000000000000000000a.snapshot", "99999999999999999999.snapshot",
		"dir/00000000000000000001.snapshot",
	} {
		if off, ok := ParseSnapshotFileName(name); ok {
			t.Errorf("ParseSnapshotFileName(%q) = %d, true; want false", name, off)
		}
	}
}

func TestProducerLatestSnapshotOffset(t *testing.T) {
	offsets := []int64{30, 10, 20}
	tests := []struct {
		x    int64
		want int64
		ok   bool
	}{{5, 0, false}, {10, 10, true}, {19, 10, true}, {25, 20, true}, {30, 30, true}, {1 << 50, 30, true}}
	for _, tc := range tests {
		if got, ok := LatestSnapshotOffset(offsets, tc.x); got != tc.want || ok != tc.ok {
			t.Errorf("LatestSnapshotOffset(%v, %d) = %d, %v; want %d, %v", offsets, tc.x, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := LatestSnapshotOffset(nil, 10); ok {
		t.Error("no snapshots: ok")
	}
}

func TestProducerStaleSnapshots(t *testing.T) {
	got := StaleSnapshots([]int64{0, 100, 200, 300, 400}, 200, 300)
	if !reflect.DeepEqual(got, []int64{0, 100, 400}) {
		t.Errorf("StaleSnapshots = %v; want the ones below the log start 200 and above the end 300", got)
	}
	if got := StaleSnapshots([]int64{5}, 5, 5); got != nil {
		t.Errorf("snapshot at the start of an empty log: %v, want kept", got)
	}
}
