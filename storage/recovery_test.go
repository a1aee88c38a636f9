package storage

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// activePath is the .log of the active segment.
func activePath(l *Log) string { s := l.Segments(); return s[len(s)-1].Path }

// Rule: after a crash that tore the active segment's tail, every batch
// fully written before the cut is readable and intact, nothing else is
// served, and appends continue at the offset after the last intact batch.
func TestRecoveryTruncatesTornTail(t *testing.T) {
	cfg := testConfig()
	rng := rand.New(rand.NewSource(42))
	for iter := 0; iter < 50; iter++ {
		dir := t.TempDir()
		l := openLog(t, dir, cfg)
		want := fill(t, l, 40, 4, t0.UnixMilli())
		segs := l.Segments()
		act := segs[len(segs)-1]
		path := act.Path
		crash(t, l)
		cut := rng.Int63n(act.Size + 1)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		// Expected: batches ending at or before the cut survive.
		var pos int64
		var keep []stored
		for _, w := range want {
			if w.base < act.BaseOffset {
				keep = append(keep, w)
				continue
			}
			pos += int64(batch.FrameSize(len(w.bytes)))
			if pos <= cut {
				keep = append(keep, w)
			}
		}
		l = openLog(t, dir, cfg)
		got := readAll(t, l)
		if len(got) != len(keep) {
			t.Fatalf("iter %d cut %d: %d batches survive, want %d", iter, cut, len(got), len(keep))
		}
		for i := range keep {
			if !sameBatch(got[i], keep[i].bytes) {
				t.Fatalf("iter %d: batch %d differs", iter, i)
			}
		}
		wantNext := act.BaseOffset
		if len(keep) > 0 {
			wantNext = keep[len(keep)-1].last + 1
		}
		res, err := l.Append(makeBatch(2, 1, "after"), appendEpoch(l), t0)
		if err != nil || res.BaseOffset != wantNext {
			t.Fatalf("iter %d: append after recovery at %d (%v), want %d", iter, res.BaseOffset, err, wantNext)
		}
		readAll(t, l)
		l.Close()
	}
}

// Rule: a corrupt batch (CRC or framing) ends the log at that point, even
// in a middle segment: no batch failing its CRC is served, everything
// before it is intact, and later segments are discarded.
func TestRecoveryDiscardsFromFirstCorruptBatch(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 2048
	rng := rand.New(rand.NewSource(7))
	for iter := 0; iter < 40; iter++ {
		dir := t.TempDir()
		l := openLog(t, dir, cfg)
		want := fill(t, l, 60, 4, t0.UnixMilli())
		segs := l.Segments()
		crash(t, l)
		si := rng.Intn(len(segs))
		s := segs[si]
		at := rng.Int63n(s.Size)
		data, err := os.ReadFile(s.Path)
		if err != nil {
			t.Fatal(err)
		}
		data[at] ^= byte(1 + rng.Intn(255))
		if err := os.WriteFile(s.Path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		// The batch whose frame holds the flipped byte.
		var pos int64
		bad := -1
		for i, w := range want {
			if w.base < s.BaseOffset || w.base >= s.NextOffset {
				continue
			}
			n := int64(batch.FrameSize(len(w.bytes)))
			if at >= pos && at < pos+n {
				bad = i
				break
			}
			pos += n
		}
		l = openLog(t, dir, cfg)
		got := readAll(t, l) // checks Verify and contiguity of everything served
		if len(got) < bad {
			t.Fatalf("iter %d: %d batches survive, want at least the %d before the flip", iter, len(got), bad)
		}
		for i := 0; i < bad; i++ {
			if !sameBatch(got[i], want[i].bytes) {
				t.Fatalf("iter %d: batch %d differs", iter, i)
			}
		}
		if len(got) > bad {
			// Only a flip outside the CRC (the leader epoch) can keep the
			// batch; nothing after a dropped batch may survive.
			for i := bad; i < len(got); i++ {
				g, _ := batch.ParseHeader(got[i])
				w, _ := batch.ParseHeader(want[i].bytes)
				if g.BaseOffset != w.BaseOffset || g.CRC != w.CRC {
					t.Fatalf("iter %d: batch %d is not the original", iter, i)
				}
			}
		}
		if _, err := l.Append(makeBatch(1, 1, "x"), appendEpoch(l), t0); err != nil {
			t.Fatal(err)
		}
		readAll(t, l)
		l.Close()
	}
}

// Rule: index files are a cache; missing or garbage ones are rebuilt,
// with or without a clean shutdown.
func TestRecoveryRebuildsIndexes(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 2048
	cfg.IndexIntervalBytes = 200
	cases := []struct {
		name  string
		clean bool
		spoil func(path string) error
	}{
		{"deleted", true, os.Remove},
		{"deleted after crash", false, os.Remove},
		{"garbage", true, func(p string) error { return os.WriteFile(p, []byte("not an index at all!!!"), 0o644) }},
		{"plausible but wrong", true, func(p string) error {
			// Strictly increasing entries pointing at the wrong places.
			var b []byte
			for i := 0; i < 3; i++ {
				b = append(b, encodeIndex(indexEntry{rel: uint32(i * 2), pos: uint32(i * 10)})...)
			}
			return os.WriteFile(p, b, 0o644)
		}},
		{"truncated", true, func(p string) error { return os.Truncate(p, 5) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			want := fill(t, l, 80, 4, t0.UnixMilli())
			if tc.clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				crash(t, l)
			}
			matches, _ := filepath.Glob(filepath.Join(dir, "*.index"))
			tmatches, _ := filepath.Glob(filepath.Join(dir, "*.timeindex"))
			for _, p := range append(matches, tmatches...) {
				if err := tc.spoil(p); err != nil {
					t.Fatal(err)
				}
			}
			l = openLog(t, dir, cfg)
			defer l.Close()
			got := readAll(t, l)
			if len(got) != len(want) {
				t.Fatalf("%d batches, want %d", len(got), len(want))
			}
			rng := rand.New(rand.NewSource(3))
			for i := 0; i < 200; i++ {
				j := rng.Intn(len(want))
				res, err := l.Read(want[j].base, 1, 1<<62)
				if err != nil || len(res.Batches) != 1 || !sameBatch(res.Batches[0], want[j].bytes) {
					t.Fatalf("Read(%d) wrong: %v", want[j].base, err)
				}
			}
			off, ts, found, err := l.OffsetForTimestamp(want[40].bytesTS())
			if err != nil || !found || off != want[40].base || ts != want[40].bytesTS() {
				t.Fatalf("OffsetForTimestamp after rebuild: %d %d %v %v", off, ts, found, err)
			}
			for _, p := range matches {
				st, err := os.Stat(p)
				if err != nil || st.Size() == 0 || st.Size()%indexEntrySize != 0 {
					t.Fatalf("index %s not rebuilt: %v", p, err)
				}
			}
		})
	}
}

func (s stored) bytesTS() int64 { h, _ := batch.ParseHeader(s.bytes); return h.BaseTimestamp }

// values decodes the record values of b with their offsets, for checking
// that recovered batches carry the values written.
func values(t testing.TB, b []byte) []string {
	t.Helper()
	var out []string
	if err := batch.ForEachRecord(b, func(r batch.Record) error {
		out = append(out, fmt.Sprintf("%d=%s", r.Offset, r.Value))
		return nil
	}); err != nil {
		t.Fatalf("ForEachRecord: %v", err)
	}
	return out
}

// frameEnds returns, for each batch of want in the segment [base, next),
// the file position just past its frame (-1 for batches elsewhere).
func frameEnds(want []stored, base, next int64) []int64 {
	ends := make([]int64, len(want))
	var pos int64
	for i, w := range want {
		ends[i] = -1
		if w.base >= base && w.base < next {
			pos += int64(batch.FrameSize(len(w.bytes)))
			ends[i] = pos
		}
	}
	return ends
}

// Rule: a crash is the *Log abandoned without Close (files left open, no
// clean-shutdown marker), after a Flush (recovery point at the end: only
// the active segment is rescanned) or without one (everything is). A tail
// cut at any point keeps exactly the batches wholly before the cut, with
// their values, and appends continue right after them.
func TestRecoveryAfterAbandonedLogWithTornTail(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flushed bool
	}{{"unflushed", false}, {"flushed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.SegmentBytes = 2048
			rng := rand.New(rand.NewSource(50))
			for iter := 0; iter < 50; iter++ {
				dir := t.TempDir()
				l := openLog(t, dir, cfg)
				want := fill(t, l, 50, 4, t0.UnixMilli())
				if tc.flushed {
					if err := l.Flush(); err != nil {
						t.Fatal(err)
					}
				}
				segs := l.Segments()
				act := segs[len(segs)-1]
				// Abandon l: no Close, so no marker and no final flush.
				cut := rng.Int63n(act.Size + 1)
				if err := os.Truncate(act.Path, cut); err != nil {
					t.Fatal(err)
				}
				ends := frameEnds(want, act.BaseOffset, act.NextOffset)
				var keep []stored
				for i, w := range want {
					if ends[i] < 0 || ends[i] <= cut {
						keep = append(keep, w)
					}
				}
				r := openLog(t, dir, cfg)
				got := readAll(t, r)
				if len(got) != len(keep) {
					t.Fatalf("iter %d cut %d/%d: %d batches survive, want %d", iter, cut, act.Size, len(got), len(keep))
				}
				for i := range keep {
					if !sameBatch(got[i], keep[i].bytes) || !slices.Equal(values(t, got[i]), values(t, keep[i].bytes)) {
						t.Fatalf("iter %d: batch %d differs", iter, i)
					}
				}
				wantEnd := act.BaseOffset
				if len(keep) > 0 {
					wantEnd = keep[len(keep)-1].last + 1
				}
				if r.EndOffset() != wantEnd {
					t.Fatalf("iter %d: EndOffset %d, want %d", iter, r.EndOffset(), wantEnd)
				}
				nb := makeBatch(3, t0.UnixMilli(), "after")
				res, err := r.Append(nb, appendEpoch(r), t0)
				if err != nil || res.BaseOffset != wantEnd || res.LastOffset != wantEnd+2 {
					t.Fatalf("iter %d: append after recovery %+v %v, want base %d", iter, res, err, wantEnd)
				}
				rr, err := r.Read(wantEnd, 1, 1<<62)
				if err != nil || len(rr.Batches) != 1 || !sameBatch(rr.Batches[0], nb) {
					t.Fatalf("iter %d: appended batch not readable: %v", iter, err)
				}
				readAll(t, r)
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Rule: random byte flips in the active segment of an abandoned log never
// get a batch failing batch.Verify served, and every batch ending before
// the first flipped byte survives intact.
func TestRecoveryAfterAbandonedLogWithFlippedBytes(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 4096
	rng := rand.New(rand.NewSource(30))
	for iter := 0; iter < 30; iter++ {
		dir := t.TempDir()
		l := openLog(t, dir, cfg)
		want := fill(t, l, 60, 4, t0.UnixMilli())
		if iter%2 == 0 {
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		segs := l.Segments()
		act := segs[len(segs)-1]
		data, err := os.ReadFile(act.Path)
		if err != nil {
			t.Fatal(err)
		}
		first := int64(len(data))
		for k := 0; k < 1+rng.Intn(3); k++ {
			at := rng.Int63n(int64(len(data)))
			data[at] ^= byte(1 + rng.Intn(255))
			first = min(first, at)
		}
		if err := os.WriteFile(act.Path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ends := frameEnds(want, act.BaseOffset, act.NextOffset)
		intact := 0
		for i := range want {
			if ends[i] < 0 || ends[i] <= first {
				intact = i + 1
			} else {
				break
			}
		}
		r := openLog(t, dir, cfg)
		got := readAll(t, r) // every served batch passes Verify, contiguous
		if len(got) < intact {
			t.Fatalf("iter %d: %d batches survive, want at least %d", iter, len(got), intact)
		}
		for i := 0; i < intact; i++ {
			if !sameBatch(got[i], want[i].bytes) {
				t.Fatalf("iter %d: batch %d before the flip differs", iter, i)
			}
		}
		for i := intact; i < len(got); i++ {
			// Survivors past the flip can only differ outside the CRC.
			g, _ := batch.ParseHeader(got[i])
			w, _ := batch.ParseHeader(want[i].bytes)
			if g.BaseOffset != w.BaseOffset || g.CRC != w.CRC || !slices.Equal(values(t, got[i]), values(t, want[i].bytes)) {
				t.Fatalf("iter %d: batch %d is not the original", iter, i)
			}
		}
		end := r.EndOffset()
		if res, err := r.Append(makeBatch(1, 1, "x"), appendEpoch(r), t0); err != nil || res.BaseOffset != end {
			t.Fatalf("iter %d: append after recovery %+v %v, want base %d", iter, res, err, end)
		}
		readAll(t, r)
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Rule: index files of any content are only a cache. After a clean close,
// same-length garbage (random or zero-filled) in .index or .timeindex is
// detected and the indexes rebuilt: reads, OffsetForTimestamp and
// MaxTimestampOffset still answer as before.
func TestRecoveryRebuildsSameLengthGarbageIndexes(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	for _, tc := range []struct {
		name    string
		pattern string
		zero    bool
	}{
		{"zeroed timeindex", "*.timeindex", true},
		{"zeroed index", "*.index", true},
		{"random timeindex", "*.timeindex", false},
		{"random index", "*.index", false},
		{"deleted both", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			// Batches of equal timestamps except a peak in the middle, so
			// segments have single-entry time indexes.
			var want []stored
			for i := 0; i < 40; i++ {
				ts := int64(5000)
				if i == 17 {
					ts = 9000
				}
				b := makeBatch(2, ts, fmt.Sprintf("g%d", i))
				res, err := l.Append(b, 0, t0)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, stored{res.BaseOffset, res.LastOffset, append([]byte(nil), b...)})
			}
			if len(l.Segments()) < 3 {
				t.Fatalf("%d segments", len(l.Segments()))
			}
			type answers struct{ maxOff, maxTS, off5000, off9000, off9001 int64 }
			ask := func(l *Log) answers {
				var a answers
				a.maxOff, a.maxTS = l.MaxTimestampOffset()
				a.off5000, _, _, _ = l.OffsetForTimestamp(5000)
				a.off9000, _, _, _ = l.OffsetForTimestamp(9000)
				a.off9001, _, _, _ = l.OffsetForTimestamp(9002)
				return a
			}
			before := ask(l)
			if before != (answers{want[17].base + 1, 9001, 0, want[17].base, -1}) {
				t.Fatalf("answers before close %+v", before)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewSource(9))
			var files []string
			if tc.pattern == "" {
				a, _ := filepath.Glob(filepath.Join(dir, "*.index"))
				b, _ := filepath.Glob(filepath.Join(dir, "*.timeindex"))
				for _, p := range append(a, b...) {
					if err := os.Remove(p); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				files, _ = filepath.Glob(filepath.Join(dir, tc.pattern))
			}
			for _, p := range files {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				g := make([]byte, st.Size())
				if !tc.zero {
					rng.Read(g)
				}
				if err := os.WriteFile(p, g, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l = openLog(t, dir, cfg)
			defer l.Close()
			if got := ask(l); got != before {
				t.Fatalf("answers after rebuild %+v, want %+v", got, before)
			}
			got := readAll(t, l)
			if len(got) != len(want) {
				t.Fatalf("%d batches, want %d", len(got), len(want))
			}
			for i := range want {
				res, err := l.Read(want[i].base+1, 1, 1<<62)
				if err != nil || len(res.Batches) != 1 || !sameBatch(res.Batches[0], want[i].bytes) {
					t.Fatalf("Read(%d) wrong: %v", want[i].base+1, err)
				}
			}
		})
	}
}

// Rule: a corrupt batch in a middle segment ends the log there: that
// segment is truncated before the batch, all later segments are deleted
// from disk, and appends continue at the corrupt batch's base offset.
func TestRecoveryCorruptMiddleSegmentDropsLaterSegments(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	want := fill(t, l, 60, 3, t0.UnixMilli())
	segs := l.Segments()
	if len(segs) < 5 {
		t.Fatalf("%d segments", len(segs))
	}
	mid := segs[2]
	// Corrupt the second batch of the middle segment (its last byte is a
	// record byte covered by the CRC).
	ends := frameEnds(want, mid.BaseOffset, mid.NextOffset)
	second := -1
	for i, e := range ends {
		if e >= 0 {
			if second == -2 {
				second = i
				break
			}
			second = -2
		}
	}
	data, err := os.ReadFile(mid.Path)
	if err != nil {
		t.Fatal(err)
	}
	data[ends[second]-1] ^= 0x5a
	if err := os.WriteFile(mid.Path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Abandon l without Flush or Close: a crash, so everything is rescanned.
	r := openLog(t, dir, cfg)
	defer r.Close()
	if r.EndOffset() != want[second].base {
		t.Fatalf("EndOffset %d, want %d", r.EndOffset(), want[second].base)
	}
	got := r.Segments()
	if len(got) != 3 || got[2].BaseOffset != mid.BaseOffset || got[2].Size != ends[second-1] {
		t.Fatalf("segments after recovery %+v", got)
	}
	for _, s := range segs[3:] {
		for _, ext := range []string{".log", ".index", ".timeindex"} {
			if _, err := os.Stat(segmentName(dir, s.BaseOffset, ext)); !os.IsNotExist(err) {
				t.Fatalf("later segment file %d%s still exists: %v", s.BaseOffset, ext, err)
			}
		}
	}
	all := readAll(t, r)
	if len(all) != second {
		t.Fatalf("%d batches, want %d", len(all), second)
	}
	for i := range all {
		if !sameBatch(all[i], want[i].bytes) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if res, err := r.Append(makeBatch(2, 1, "y"), appendEpoch(r), t0); err != nil || res.BaseOffset != want[second].base {
		t.Fatalf("append after recovery %+v %v", res, err)
	}
	readAll(t, r)
}

// A new log creates only its log file; its index files come at their
// first use (createFirstSegment). A log abandoned before they exist (a
// SIGKILL after a few small appends) recovers whole, and one that rolls
// has every file of its sealed segment once that is synced.
func TestNewLogCreatesIndexFilesAtFirstUse(t *testing.T) {
	indexes := []string{".index", ".timeindex", ".txnindex"}
	exist := func(dir string, base int64) (out []string) {
		for _, ext := range append([]string{".log"}, indexes...) {
			if fileExists(segmentName(dir, base, ext)) {
				out = append(out, ext)
			}
		}
		return out
	}
	dir := t.TempDir()
	l := openLog(t, dir, testConfig())
	if got := exist(dir, 0); !slices.Equal(got, []string{".log"}) {
		t.Fatalf("a new log created %v, want the log file alone", got)
	}
	want := fill(t, l, 3, 2, t0.UnixMilli())
	// Abandoned: no Close, no flush.
	l2 := openLog(t, dir, testConfig())
	got := readAll(t, l2)
	if len(got) != len(want) {
		t.Fatalf("recovered %d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameBatch(got[i], want[i].bytes) {
			t.Fatalf("batch %d differs after recovery", i)
		}
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := exist(dir, 0); len(got) != 4 {
		t.Fatalf("after a clean close %v exist, want all four files", got)
	}

	cfg := testConfig()
	cfg.SegmentBytes = 1024
	dir = t.TempDir()
	l3 := openLog(t, dir, cfg)
	defer l3.Close()
	fill(t, l3, 40, 4, t0.UnixMilli())
	if err := l3.Flush(); err != nil {
		t.Fatal(err)
	}
	segs := l3.Segments()
	if len(segs) < 2 {
		t.Fatalf("%d segments, want a roll", len(segs))
	}
	if got := exist(dir, segs[0].BaseOffset); len(got) != 4 {
		t.Fatalf("the first segment, sealed and flushed, has %v, want all four files", got)
	}
}

// A log opened as just created (Options.Created) is an empty log at 0, as
// an empty directory recovers to, and resets what the shared checkpoints
// still say under its name (a deleted log of the same name whose entries
// a crash kept): a stale recovery point would make the next unclean open
// trust unsynced bytes.
func TestCreatedLogStartsEmptyAndResetsStaleCheckpoints(t *testing.T) {
	base := t.TempDir()
	hws, err := OpenHighWatermarks(base)
	if err != nil {
		t.Fatal(err)
	}
	rps, err := OpenRecoveryPoints(base)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "t-0")
	name := sharedCheckpointName(dir)
	hws.Set(name, 400)
	rps.Set(name, 500)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := Options{HighWatermarks: hws, RecoveryPoints: rps, Files: NewFileCache(100)}
	created := opts
	created.Created = true
	l, err := OpenWith(dir, testConfig(), t0, created)
	if err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 0 || l.EndOffset() != 0 || l.HighWatermark() != 0 || l.RecoveryPoint() != 0 || l.LatestEpoch() >= 0 {
		t.Fatalf("created log: start %d end %d hw %d recovery point %d epoch %d", l.StartOffset(), l.EndOffset(), l.HighWatermark(), l.RecoveryPoint(), l.LatestEpoch())
	}
	for what, c := range map[string]*OffsetCheckpoint{"high watermark": hws, "recovery point": rps} {
		if v, ok := c.Get(name); !ok || v != 0 {
			t.Fatalf("shared %s entry %d %v, want reset to 0", what, v, ok)
		}
	}
	want := fill(t, l, 5, 3, t0.UnixMilli())
	// Abandoned (a SIGKILL): the next open scans from the reset recovery point.
	l2, err := OpenWith(dir, testConfig(), t0, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	got := readAll(t, l2)
	if len(got) != len(want) {
		t.Fatalf("recovered %d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameBatch(got[i], want[i].bytes) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

// WriteFileNew creates a file durably and refuses one that exists (it
// must never replace data: that is WriteFileAtomic's job).
func TestWriteFileNewCreatesOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "partition.metadata")
	if err := WriteFileNew(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileNew(path, []byte("two")); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second create: %v, want ErrExist", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "one" {
		t.Fatalf("file holds %q (%v), want the first write", got, err)
	}
}
