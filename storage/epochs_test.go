package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Rule (KIP-101): every append records the first offset of a new leader
// epoch; a leader appending under an epoch below the latest is fenced,
// and a follower's verbatim copy of a lower-epoch batch (it skipped the
// truncation to the divergence point) is refused the same way; nothing is
// written on refusal.
func TestAppendEpochRules(t *testing.T) {
	cfg := truncationConfig()
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	defer l.Close()
	if l.LatestEpoch() != -1 || len(l.EpochEntries()) != 0 {
		t.Fatalf("new log: latest %d, entries %v", l.LatestEpoch(), l.EpochEntries())
	}
	bs := appendEpochs(t, l, []int32{0, 0, 3, 3, 3, 5, 6, 6}, 10_000, 100)
	want := []EpochEntry{{0, bs[0].base}, {3, bs[2].base}, {5, bs[5].base}, {6, bs[6].base}}
	if got := l.EpochEntries(); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	if l.LatestEpoch() != 6 {
		t.Fatalf("latest epoch %d", l.LatestEpoch())
	}
	data, err := os.ReadFile(filepath.Join(dir, epochCheckpointFile))
	if err != nil || string(data) != string(encodeEpochCheckpoint(epochCache{want})) {
		t.Fatalf("checkpoint %q (%v), want %q", data, err, encodeEpochCheckpoint(epochCache{want}))
	}

	end, size := l.EndOffset(), l.Size()
	refuse := func(name string, code sluicev1.ErrorCode, err error) {
		t.Helper()
		wantCode(t, err, code)
		if l.EndOffset() != end || l.Size() != size || !slices.Equal(l.EpochEntries(), want) {
			t.Fatalf("%s: refused append changed the log", name)
		}
	}
	_, err = l.Append(makeBatch(1, 1, "stale"), 5, t0)
	refuse("stale leader", sluicev1.ErrorCode_FENCED_LEADER_EPOCH, err)
	_, err = l.Append(makeBatch(1, 1, "none"), -1, t0)
	refuse("no epoch", sluicev1.ErrorCode_INVALID_RECORD, err)

	// A follower copying the leader's bytes gets the same cache.
	f := openLog(t, t.TempDir(), cfg)
	defer f.Close()
	for _, b := range bs {
		if _, err := f.AppendVerbatim(append([]byte(nil), b.bytes...), t0); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(f.EpochEntries(), want) {
		t.Fatalf("follower entries %v, want %v", f.EpochEntries(), want)
	}
	// A lower-epoch batch at the follower's end (the leader epoch is not
	// covered by the CRC, so the copy stays valid).
	low := append([]byte(nil), bs[0].bytes...)
	batch.SetBaseOffset(low, f.EndOffset())
	batch.SetPartitionLeaderEpoch(low, 4)
	fend, fsize := f.EndOffset(), f.Size()
	_, err = f.AppendVerbatim(low, t0)
	wantCode(t, err, sluicev1.ErrorCode_FENCED_LEADER_EPOCH)
	if f.EndOffset() != fend || f.Size() != fsize || !slices.Equal(f.EpochEntries(), want) {
		t.Fatal("refused verbatim append changed the follower")
	}
	// After truncating to where epoch 5 starts, epoch 4 is fine.
	if err := f.TruncateTo(bs[5].base); err != nil {
		t.Fatal(err)
	}
	batch.SetBaseOffset(low, f.EndOffset())
	if _, err := f.AppendVerbatim(low, t0); err != nil {
		t.Fatal(err)
	}
	if got := f.EpochEntries(); !slices.Equal(got, []EpochEntry{{0, 0}, {3, bs[2].base}, {4, bs[5].base}}) {
		t.Fatalf("follower entries after truncation %v", got)
	}
}

// Rule (KIP-101): the cache records the first offset of every leader
// epoch appended, in epoch order; an empty log has none. (Where an epoch
// ends, OffsetForLeaderEpoch, is replication.EndOffsetForEpoch over these
// entries.)
func TestEpochEntriesFollowAppends(t *testing.T) {
	l := openLog(t, t.TempDir(), truncationConfig())
	defer l.Close()
	if e := l.EpochEntries(); len(e) != 0 || l.LatestEpoch() != UndefinedEpoch {
		t.Fatalf("empty log: entries %v, latest %d", e, l.LatestEpoch())
	}
	bs := appendEpochs(t, l, []int32{2, 2, 4, 4, 4, 7}, 10_000, 100)
	want := []EpochEntry{{2, bs[0].base}, {4, bs[2].base}, {7, bs[5].base}}
	if got := l.EpochEntries(); !slices.Equal(got, want) || l.LatestEpoch() != 7 {
		t.Fatalf("entries %v latest %d, want %v and 7", got, l.LatestEpoch(), want)
	}
}

// Rule: the epoch cache is a cache of the batch headers: when its
// checkpoint is missing, unreadable or disagrees with the log, Open
// rebuilds it from the segments and rewrites the file; entries past the
// recovered log end are dropped.
func TestEpochCheckpointRebuild(t *testing.T) {
	cfg := truncationConfig()
	src := t.TempDir()
	l := openLog(t, src, cfg)
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	end := l.EndOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	good := wantEntries(all, 0)
	ck := func(pairs ...int64) []byte { return encodeEpochCheckpoint(cacheOf(pairs...)) }
	withEntry := func(e EpochEntry) []byte {
		return encodeEpochCheckpoint(epochCache{append(slices.Clone(good), e)})
	}
	cases := []struct {
		name  string
		write []byte // nil: remove the file
	}{
		{"missing", nil},
		{"garbage", []byte("not a checkpoint\n")},
		{"unknown version", []byte("7\n0\n")},
		{"empty file", []byte{}},
		{"empty cache for a full log", ck()},
		{"last epoch missing (an older checkpoint)", encodeEpochCheckpoint(epochCache{good[:len(good)-1]})},
		{"wrong epoch at a start", ck(0, 0, 2, int64(all[5].base), 4, int64(all[13].base))},
		{"start inside a batch", ck(0, 0, 2, int64(all[7].base+1))},
		{"first entry after the log start", ck(2, int64(all[5].base), 3, int64(all[13].base), 5, int64(all[14].base), 8, int64(all[29].base))},
		{"entry past the log end (dropped)", withEntry(EpochEntry{Epoch: 12, StartOffset: end + 10})},
	}
	for _, tc := range cases {
		for _, crashed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s crashed=%v", tc.name, crashed), func(t *testing.T) {
				dir := t.TempDir()
				copyDir(t, src, dir)
				path := filepath.Join(dir, epochCheckpointFile)
				if tc.write == nil {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(path, tc.write, 0o644); err != nil {
					t.Fatal(err)
				}
				if crashed {
					os.Remove(filepath.Join(dir, cleanShutdownFile))
					os.Remove(filepath.Join(dir, recoveryPointFile))
				}
				r := openLog(t, dir, cfg)
				defer r.Close()
				if got := r.EpochEntries(); !slices.Equal(got, good) {
					t.Fatalf("entries %v, want %v", got, good)
				}
				data, err := os.ReadFile(path)
				if err != nil || string(data) != string(encodeEpochCheckpoint(epochCache{good})) {
					t.Fatalf("checkpoint not rewritten: %q (%v)", data, err)
				}
				checkContents(t, r, all)
			})
		}
	}
	// An entry exactly at the log end is an epoch with no batch (a crash
	// between the checkpoint and the batch, or retention): it is kept, so
	// the latest epoch is not forgotten.
	dir := t.TempDir()
	copyDir(t, src, dir)
	if err := os.WriteFile(filepath.Join(dir, epochCheckpointFile), withEntry(EpochEntry{Epoch: 12, StartOffset: end}), 0o644); err != nil {
		t.Fatal(err)
	}
	r := openLog(t, dir, cfg)
	defer r.Close()
	if r.LatestEpoch() != 12 {
		t.Fatalf("latest epoch %d, want 12", r.LatestEpoch())
	}
	if _, err := r.Append(makeBatch(1, 1, "x"), 11, t0); err == nil {
		t.Fatal("append under epoch 11 after epoch 12 accepted")
	}
	if _, err := r.Append(makeBatch(1, 1_000_000, "x"), 12, t0); err != nil {
		t.Fatal(err)
	}
	if got := r.EpochEntries(); !slices.Equal(got, append(slices.Clone(good), EpochEntry{Epoch: 12, StartOffset: end})) {
		t.Fatalf("entries %v", got)
	}
}

// Rule: when crash recovery cuts the log, the epoch cache loses the
// entries of the batches that are gone.
func TestCrashRecoveryTruncatesEpochCache(t *testing.T) {
	cfg := truncationConfig()
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	// Cut the log inside the batches of epoch 5: later epochs (8) vanish.
	var keep int
	for i, b := range all {
		if b.epoch == 5 {
			keep = i + 3
			break
		}
	}
	segs := l.Segments()
	abandon(l)
	// Find the segment and position of batch keep and cut there.
	var s SegmentInfo
	for _, si := range segs {
		if all[keep].base >= si.BaseOffset && all[keep].base < si.NextOffset {
			s = si
		}
	}
	var pos int64
	for _, b := range all {
		if b.base >= s.BaseOffset && b.base < all[keep].base {
			pos += int64(batch.FrameSize(len(b.bytes)))
		}
	}
	if err := os.Truncate(s.Path, pos+3); err != nil { // a torn frame
		t.Fatal(err)
	}
	r := openLog(t, dir, cfg)
	defer r.Close()
	checkContents(t, r, all[:keep])
	if r.LatestEpoch() != 5 {
		t.Fatalf("latest epoch %d after recovery, want 5", r.LatestEpoch())
	}
}

// Rule (Kafka's truncateFromStart): retention moving the log start offset
// drops the epoch entries wholly below it and moves the first kept one up
// to it; an epoch whose batches all went stays as the latest.
func TestRetentionTrimsEpochCache(t *testing.T) {
	cfg := truncationConfig()
	cfg.RetentionBytes = 3000
	cfg.RetentionMs = -1
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	if n, err := retainCommitted(l, t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention: %d, %v", n, err)
	}
	start := l.StartOffset()
	var kept []epochBatch
	for _, b := range all {
		if b.base >= start {
			kept = append(kept, b)
		}
	}
	want := wantEntries(kept, start)
	if want[0].StartOffset != start || len(want) >= len(wantEntries(all, 0)) {
		t.Fatalf("test needs retention inside an epoch: %v", want)
	}
	checkContents(t, l, kept)
	if hw := l.HighWatermark(); hw < start || hw != l.EndOffset() {
		t.Fatalf("high watermark %d, want the log end %d (retention keeps everything at or above it)", hw, l.EndOffset())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	checkContents(t, l, kept)
	abandon(l)
	l = openLog(t, dir, cfg)
	checkContents(t, l, kept)

	// Empty the active segment, then let retention delete every sealed
	// one: the log is empty but still knows its latest epoch.
	segs := l.Segments()
	if len(segs) < 2 {
		t.Fatalf("segments %+v: the test needs a sealed one", segs)
	}
	if err := l.TruncateTo(segs[len(segs)-1].BaseOffset); err != nil {
		t.Fatal(err)
	}
	latest := l.LatestEpoch()
	if latest < 0 {
		t.Fatalf("no epoch left after truncation: %v", l.EpochEntries())
	}
	cfg.RetentionBytes = 0
	l.SetConfig(cfg)
	if _, err := retainCommitted(l, t0); err != nil {
		t.Fatal(err)
	}
	start = l.StartOffset()
	if start != l.EndOffset() || !slices.Equal(l.EpochEntries(), []EpochEntry{{latest, start}}) {
		t.Fatalf("emptied log [%d, %d), entries %v", start, l.EndOffset(), l.EpochEntries())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if !slices.Equal(l.EpochEntries(), []EpochEntry{{latest, start}}) {
		t.Fatalf("after reopen, entries %v", l.EpochEntries())
	}
}
