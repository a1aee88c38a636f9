package storage

import (
	"math/rand"
	"os"
	"path/filepath"
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
		res, err := l.Append(makeBatch(2, 1, "after"), 0, t0)
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
		if _, err := l.Append(makeBatch(1, 1, "x"), 0, t0); err != nil {
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
