package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Rule: the time index is as sparse as the offset index (an entry only
// where an offset-index entry goes, when the running maximum grew, plus a
// sealing entry per segment), and timestamp lookups still answer exactly —
// with timestamps out of order, across rolled segments, after a clean
// reopen (sealed segments trusted without a scan), after a crash (every
// segment rescanned) and after a truncation (the kept maximum recomputed).
func TestSparseTimeIndexAnswersExactly(t *testing.T) {
	cfg := testConfig() // 4 KiB segments
	// An index entry per ~10 batches: a segment's last batches are past
	// its last index entry.
	cfg.IndexIntervalBytes = 1000
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	defer func() { l.Close() }()
	rng := rand.New(rand.NewPCG(7, 19))
	tsOf := map[int64]int64{}
	appendN := func(n int) {
		for i := 0; i < n; i++ {
			ts := 1000 + int64(len(tsOf))*10 + rng.Int64N(400) - 200 // out of order, mostly rising
			if rng.IntN(29) == 0 {
				ts += 5000 // peaks, often after a segment's last index entry
			}
			res, err := l.Append(makeBatch(1, ts, "x"), fillEpoch, t0)
			if err != nil {
				t.Fatal(err)
			}
			tsOf[res.BaseOffset] = ts
		}
	}
	check := func(stage string) {
		t.Helper()
		first := func(target int64) (int64, int64, bool) {
			for o := l.StartOffset(); o < l.EndOffset(); o++ {
				if tsOf[o] >= target {
					return o, tsOf[o], true
				}
			}
			return -1, -1, false
		}
		targets := []int64{-1, 0}
		maxOff, maxTS := int64(-1), int64(-1)
		for o := l.StartOffset(); o < l.EndOffset(); o++ {
			targets = append(targets, tsOf[o]-1, tsOf[o], tsOf[o]+1)
			if tsOf[o] > maxTS {
				maxOff, maxTS = o, tsOf[o]
			}
		}
		for _, target := range targets {
			wo, wt, wf := first(target)
			o, ts, f, err := l.OffsetForTimestamp(target)
			if err != nil || o != wo || ts != wt || f != wf {
				t.Fatalf("%s: OffsetForTimestamp(%d) = %d,%d,%v,%v want %d,%d,%v", stage, target, o, ts, f, err, wo, wt, wf)
			}
		}
		if o, ts := l.MaxTimestampOffset(); o != maxOff || ts != maxTS {
			t.Fatalf("%s: MaxTimestampOffset = %d,%d want %d,%d", stage, o, ts, maxOff, maxTS)
		}
		// Each segment's maximum (retention by time uses it) is exact.
		l.mu.RLock()
		defer l.mu.RUnlock()
		for i, s := range l.segments {
			want, wantBase := int64(-1), int64(-1)
			for o := s.base; o < s.next; o++ {
				if tsOf[o] > want {
					want, wantBase = tsOf[o], o
				}
			}
			if s.maxTS != want || s.maxTSBase != wantBase {
				t.Fatalf("%s: segment %d (base %d) max %d at %d, want %d at %d", stage, i, s.base, s.maxTS, s.maxTSBase, want, wantBase)
			}
		}
	}
	timeEntries := func() (entries, batches int) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "*.timeindex"))
		for _, f := range files {
			st, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			entries += int(st.Size()) / timeIndexEntrySize
		}
		return entries, int(l.EndOffset() - l.StartOffset())
	}

	appendN(400)
	if n := len(l.Segments()); n < 8 {
		t.Fatalf("%d segments, want several", n)
	}
	check("appended")
	// About one entry per 256 bytes of ~80-byte batches, not one per batch.
	if e, b := timeEntries(); e*2 > b {
		t.Fatalf("%d time-index entries for %d batches: not sparse", e, b)
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	check("reopened after a clean close")

	crash(t, l)
	l = openLog(t, dir, cfg)
	check("recovered after a crash")
	appendN(50)
	check("appended after recovery")

	// A peak in a batch that gets no index entry (nor a time entry),
	// then two more; the cut keeps the peak and one batch after it, so
	// the kept maximum is known only from the batches' headers.
	for {
		s := l.active()
		if s.size > 0 && s.sinceIdx < cfg.IndexIntervalBytes-100 && s.size+300 < int64(cfg.SegmentBytes) {
			break
		}
		appendN(1)
	}
	res, err := l.Append(makeBatch(1, 1<<40, "peak"), fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	tsOf[res.BaseOffset] = 1 << 40
	appendN(2)
	cut := res.BaseOffset + 2
	if err := l.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	for o := range tsOf {
		if o >= cut {
			delete(tsOf, o)
		}
	}
	check(fmt.Sprintf("truncated to %d", cut))
	appendN(40)
	check("appended after truncation")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	check("reopened at the end")
	if e, b := timeEntries(); e*2 > b {
		t.Fatalf("%d time-index entries for %d batches at the end", e, b)
	}
}

// Rule: a cleaned segment is sealed like a rolled one: reopened cleanly
// (its indexes trusted, no scan), it has the maximum timestamp it had
// when written, though its newest batches are past its last index entry.
func TestCleanedSegmentKeepsItsMaxTimestamp(t *testing.T) {
	cfg := compactConfig()
	cfg.IndexIntervalBytes = 1 << 20 // one index entry per segment: the first batch's
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	for s := 0; s < 3; s++ {
		for i := 0; i < 12; i++ {
			ts := t0.UnixMilli() + int64(s*100+i*7%12) // out of order within the segment
			mustAppend(t, l, plainKV(ts, fmt.Sprintf("k%d=s%d-%d", i%5, s, i)))
		}
		if s == 2 {
			mustAppend(t, l, plainKV(t0.UnixMilli()+1000, "last=newest")) // a key of its own: kept
		}
		forceRoll(t, l)
	}
	l.SetHighWatermark(l.EndOffset())
	if st := mustClean(t, l, t0); !st.Cleaned {
		t.Fatalf("nothing cleaned: %+v", st)
	}
	type max struct{ base, ts, at int64 }
	maxes := func() []max {
		l.mu.RLock()
		defer l.mu.RUnlock()
		var out []max
		for _, s := range l.segments {
			out = append(out, max{s.base, s.maxTS, s.maxTSBase})
		}
		return out
	}
	want := maxes()
	if want[0].at == want[0].base {
		t.Fatalf("the cleaned segment's maximum is in its first batch (%+v): the test needs it later", want[0])
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if got := maxes(); !slices.Equal(got, want) {
		t.Fatalf("maxima after a clean reopen %+v, want %+v", got, want)
	}
}
