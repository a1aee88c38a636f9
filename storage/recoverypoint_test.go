package storage

import (
	"os"
	"path/filepath"
	"testing"
)

func mustOpenRecoveryPoints(t *testing.T, dir string) *OffsetCheckpoint {
	t.Helper()
	rps, err := OpenRecoveryPoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rps
}

// openWithRecoveryPoints opens the log dir/name with the directory's
// shared recovery-point checkpoint rps.
func openWithRecoveryPoints(t *testing.T, dir, name string, rps *OffsetCheckpoint, faults FaultInjector) *Log {
	t.Helper()
	l, err := OpenWith(filepath.Join(dir, name), truncationConfig(), t0, Options{RecoveryPoints: rps, Faults: faults})
	if err != nil {
		t.Fatalf("Open %s: %v", name, err)
	}
	return l
}

// waitSealedSyncs waits for the background fsyncs of l's rolled segments.
func waitSealedSyncs(l *Log) {
	l.appendMu.Lock()
	l.sealedSyncs.Wait()
	l.appendMu.Unlock()
}

// flipBatch flips the last byte of the batch at base (a record byte:
// only a CRC check sees it), so that a recovery that scans its segment
// cuts the log there and one that trusts the segment keeps it.
func flipBatch(t *testing.T, l *Log, base int64) {
	t.Helper()
	for _, seg := range l.Segments() {
		if base < seg.BaseOffset || base >= seg.NextOffset {
			continue
		}
		data, err := os.ReadFile(seg.Path)
		if err != nil {
			t.Fatal(err)
		}
		for pos := 0; pos < len(data); {
			h, n, err := peekFrame(data[pos:], int64(len(data)-pos))
			if err != nil {
				t.Fatal(err)
			}
			if h.BaseOffset == base {
				data[pos+n-1] ^= 0xff
				if err := os.WriteFile(seg.Path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			pos += n
		}
	}
	t.Fatalf("no batch starts at %d", base)
}

// readRecoveryPointFile parses the shared checkpoint on disk.
func readRecoveryPointFile(t *testing.T, dir, name string) (int64, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, RecoveryPointFile))
	if os.IsNotExist(err) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	vals, err := parseOffsetCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := vals[name]
	return v, ok
}

// Rule (decision 57): the recovery point advances when a rolled segment's
// background fsync is done, to that segment's end; the shared checkpoint
// records it in memory and its Flush writes it. After a crash recovery
// scans only the segments past the checkpointed value: a record byte
// flipped below it is not looked at (Kafka trusts the same bytes), one
// past it cuts the log there.
func TestRecoveryPointAdvancesAtRoll(t *testing.T) {
	dir := t.TempDir()
	rps := mustOpenRecoveryPoints(t, dir)
	l := openWithRecoveryPoints(t, dir, "orders-0", rps, nil)
	appendEpochs(t, l, truncationEpochs, 10_000, 100)
	waitSealedSyncs(l)
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	active := segs[len(segs)-1]
	if rp := l.RecoveryPoint(); rp != active.BaseOffset {
		t.Fatalf("recovery point %d after the rolls' fsyncs, want the active segment's base %d", rp, active.BaseOffset)
	}
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := readRecoveryPointFile(t, dir, "orders-0"); !ok || v != active.BaseOffset {
		t.Fatalf("checkpoint holds %d (%v), want %d", v, ok, active.BaseOffset)
	}
	if _, err := os.Stat(filepath.Join(l.dir, recoveryPointFile)); !os.IsNotExist(err) {
		t.Fatalf("the log wrote a file of its own: %v", err)
	}
	end := l.EndOffset()
	abandon(l)

	flipBatch(t, l, segs[1].BaseOffset) // below the recovery point
	r := openWithRecoveryPoints(t, dir, "orders-0", mustOpenRecoveryPoints(t, dir), nil)
	if r.EndOffset() != end {
		t.Fatalf("end %d after a crash, want %d: a segment below the recovery point was scanned", r.EndOffset(), end)
	}
	abandon(r)
	flipBatch(t, l, active.BaseOffset) // past it
	r = openWithRecoveryPoints(t, dir, "orders-0", mustOpenRecoveryPoints(t, dir), nil)
	defer r.Close()
	if r.EndOffset() != active.BaseOffset {
		t.Fatalf("end %d after a crash, want %d: the segment past the recovery point was not scanned", r.EndOffset(), active.BaseOffset)
	}
}

// Rule: a crash between two writes of the shared checkpoint restores the
// last value written, and recovery scans every segment from there on —
// the segments rolled since were synced, but nothing on disk says so.
func TestRecoveryPointCrashBetweenCheckpoints(t *testing.T) {
	dir := t.TempDir()
	rps := mustOpenRecoveryPoints(t, dir)
	l := openWithRecoveryPoints(t, dir, "orders-0", rps, nil)
	appendEpochs(t, l, truncationEpochs[:12], 10_000, 100)
	waitSealedSyncs(l)
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	written := l.RecoveryPoint()
	if written == 0 {
		t.Fatal("no roll in the first appends")
	}
	appendEpochs(t, l, truncationEpochs[12:], 20_000, 100)
	waitSealedSyncs(l)
	if l.RecoveryPoint() <= written {
		t.Fatalf("recovery point %d did not advance past %d", l.RecoveryPoint(), written)
	}
	// The interval's write never comes.
	abandon(l)
	if v, _ := readRecoveryPointFile(t, dir, "orders-0"); v != written {
		t.Fatalf("checkpoint on disk %d, want the last written %d", v, written)
	}
	// The first batch past the written value, in a segment synced since.
	var at int64 = -1
	for _, s := range l.Segments() {
		if s.BaseOffset >= written && s.BaseOffset < l.Segments()[len(l.Segments())-1].BaseOffset {
			at = s.BaseOffset
			break
		}
	}
	if at < 0 {
		t.Fatal("no sealed segment past the written recovery point")
	}
	flipBatch(t, l, at)
	r := openWithRecoveryPoints(t, dir, "orders-0", mustOpenRecoveryPoints(t, dir), nil)
	defer r.Close()
	if r.RecoveryPoint() != written {
		t.Fatalf("recovery point %d after the crash, want %d", r.RecoveryPoint(), written)
	}
	if r.EndOffset() != at {
		t.Fatalf("end %d, want the log cut at the flipped batch %d", r.EndOffset(), at)
	}
	readAll(t, r)
}

// Rule: a truncation lowers the recovery point durably before it cuts
// (the shared file is written at once): a crash after the cut, once new
// batches were appended below the old value, rescans them.
func TestRecoveryPointLoweredBeforeTruncation(t *testing.T) {
	dir := t.TempDir()
	rps := mustOpenRecoveryPoints(t, dir)
	l := openWithRecoveryPoints(t, dir, "orders-0", rps, nil)
	want := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	cut := want[10].base
	var onDisk int64 = -1
	l.truncateHook = func(step string) {
		if step == "recovery point lowered" {
			onDisk, _ = readRecoveryPointFile(t, dir, "orders-0")
		}
	}
	if err := l.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	if onDisk != cut {
		t.Fatalf("checkpoint on disk before the cut: %d, want %d", onDisk, cut)
	}
	again := appendEpochs(t, l, []int32{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, 50_000, 100)
	abandon(l) // the interval's write never comes
	flipBatch(t, l, again[0].base)
	r := openWithRecoveryPoints(t, dir, "orders-0", mustOpenRecoveryPoints(t, dir), nil)
	defer r.Close()
	if r.EndOffset() != cut {
		t.Fatalf("end %d after a crash, want %d: the batches appended after the cut were trusted", r.EndOffset(), cut)
	}
	readAll(t, r)
}

// Rule: a log written before the shared checkpoint existed keeps its
// recovery point: its own file is read once, moved into the shared file
// at the next flush, and removed; a deleted log's line goes.
func TestRecoveryPointMigratesOwnFile(t *testing.T) {
	dir := t.TempDir()
	old := openLog(t, filepath.Join(dir, "legacy-3"), truncationConfig())
	appendEpochs(t, old, truncationEpochs, 10_000, 100)
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}
	end := old.EndOffset()
	abandon(old)
	own := filepath.Join(dir, "legacy-3", recoveryPointFile)
	if v, err := readCheckpoint(own); err != nil || v != end {
		t.Fatalf("own file %d %v, want %d", v, err, end)
	}
	rps := mustOpenRecoveryPoints(t, dir)
	l := openWithRecoveryPoints(t, dir, "legacy-3", rps, nil)
	if rp := l.RecoveryPoint(); rp != end {
		t.Fatalf("recovery point %d, want the own file's %d", rp, end)
	}
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := readRecoveryPointFile(t, dir, "legacy-3"); !ok || v != end {
		t.Fatalf("shared file %d %v, want %d", v, ok, end)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Fatalf("own file still there after the flush: %v", err)
	}
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := readRecoveryPointFile(t, dir, "legacy-3"); ok {
		t.Fatal("a deleted log's line stayed")
	}
}

// Rule: Close records the log end as the recovery point (everything is
// synced) without a write of its own; the shared file's owner writes it
// once for every log.
func TestRecoveryPointAtClose(t *testing.T) {
	dir := t.TempDir()
	rps := mustOpenRecoveryPoints(t, dir)
	a := openWithRecoveryPoints(t, dir, "a-0", rps, nil)
	b := openWithRecoveryPoints(t, dir, "b-0", rps, nil)
	appendEpochs(t, a, truncationEpochs, 10_000, 100)
	appendEpochs(t, b, truncationEpochs[:5], 10_000, 100)
	for _, l := range []*Log{a, b} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(l.dir, recoveryPointFile)); !os.IsNotExist(err) {
			t.Fatalf("%s wrote a file of its own: %v", l.dir, err)
		}
	}
	if err := rps.Flush(nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*Log{a, b} {
		if v, ok := readRecoveryPointFile(t, dir, filepath.Base(l.dir)); !ok || v != l.EndOffset() {
			t.Fatalf("%s: checkpoint %d %v, want its end %d", l.dir, v, ok, l.EndOffset())
		}
	}
}
