package storage

import (
	"fmt"
	"maps"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestAppendAssignsContiguousOffsetsAndReadsBack(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	want := fill(t, l, 20, 5, t0.UnixMilli())
	var next int64
	for i, w := range want {
		if w.base != next {
			t.Fatalf("batch %d base %d, want %d", i, w.base, next)
		}
		next = w.last + 1
		h, _ := batch.ParseHeader(w.bytes)
		if h.PartitionLeaderEpoch != 7 {
			t.Fatalf("leader epoch %d, want 7", h.PartitionLeaderEpoch)
		}
	}
	if l.EndOffset() != next {
		t.Fatalf("EndOffset %d, want %d", l.EndOffset(), next)
	}
	got := readAll(t, l)
	if len(got) != len(want) {
		t.Fatalf("read %d batches, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameBatch(got[i], want[i].bytes) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

func TestReadBounds(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20 // one segment
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	want := fill(t, l, 10, 3, t0.UnixMilli()) // batches of 1,2,3,1,2,3,...
	frame := func(i int) int { return batch.FrameSize(len(want[i].bytes)) }
	tests := []struct {
		name      string
		offset    int64
		maxBytes  int
		maxOffset int64
		first     int // index of the first batch expected
		count     int
	}{
		{"first batch whole even if maxBytes is 1", 0, 1, 1 << 62, 0, 1},
		{"mid-batch offset returns the containing batch", want[2].base + 1, 1, 1 << 62, 2, 1},
		{"byte bound is inclusive", 0, frame(0) + frame(1), 1 << 62, 0, 2},
		{"byte bound one short", 0, frame(0) + frame(1) - 1, 1 << 62, 0, 1},
		{"maxOffset excludes batches starting at it", 0, 1 << 20, want[3].base, 0, 3},
		{"maxOffset inside a batch includes it", 0, 1 << 20, want[3].base + 1, 0, 4},
		{"offset at maxOffset is empty", want[4].base, 1 << 20, want[4].base, 0, 0},
		{"offset at end is empty", l.EndOffset(), 1 << 20, 1 << 62, 0, 0},
		{"everything", 0, 1 << 20, 1 << 62, 0, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Read(tc.offset, tc.maxBytes, tc.maxOffset)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Batches) != tc.count {
				t.Fatalf("got %d batches, want %d", len(res.Batches), tc.count)
			}
			if tc.count == 0 {
				if res.NextOffset != tc.offset {
					t.Fatalf("NextOffset %d, want %d", res.NextOffset, tc.offset)
				}
				return
			}
			for i, b := range res.Batches {
				if !sameBatch(b, want[tc.first+i].bytes) {
					t.Fatalf("batch %d differs", i)
				}
			}
			if lastW := want[tc.first+tc.count-1]; res.NextOffset != lastW.last+1 {
				t.Fatalf("NextOffset %d, want %d", res.NextOffset, lastW.last+1)
			}
		})
	}
}

func TestReadOutOfRange(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	fill(t, l, 3, 1, t0.UnixMilli())
	for _, off := range []int64{-1, l.EndOffset() + 1, 1 << 40} {
		_, err := l.Read(off, 100, 1<<62)
		wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
	}
}

func TestMessageTooLargeLeavesLogUnchanged(t *testing.T) {
	cfg := testConfig()
	cfg.MaxMessageBytes = 512
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 2, 1, t0.UnixMilli())
	end, size := l.EndOffset(), l.Size()
	big := makeBatch(40, t0.UnixMilli(), "big")
	if len(big) <= 512 {
		t.Fatalf("test batch too small: %d", len(big))
	}
	_, err := l.Append(big, 0, t0)
	wantCode(t, err, sluicev1.ErrorCode_MESSAGE_TOO_LARGE)
	if l.EndOffset() != end || l.Size() != size {
		t.Fatalf("log changed: end %d->%d size %d->%d", end, l.EndOffset(), size, l.Size())
	}
	if st, _ := os.Stat(l.Segments()[0].Path); st.Size() != size {
		t.Fatalf("file size %d, want %d", st.Size(), size)
	}
}

func TestAppendVerbatimRequiresLogEndOffsetAndCRC(t *testing.T) {
	leader := openLog(t, t.TempDir(), testConfig())
	defer leader.Close()
	follower := openLog(t, t.TempDir(), testConfig())
	defer follower.Close()
	want := fill(t, leader, 5, 3, t0.UnixMilli())
	if _, err := follower.AppendVerbatim(append([]byte(nil), want[1].bytes...), t0); err == nil {
		t.Fatal("out-of-order verbatim append accepted")
	}
	for _, w := range want {
		if _, err := follower.AppendVerbatim(append([]byte(nil), w.bytes...), t0); err != nil {
			t.Fatal(err)
		}
	}
	bad := append([]byte(nil), makeBatch(2, 1, "x")...)
	batch.SetBaseOffset(bad, follower.EndOffset())
	bad[len(bad)-1] ^= 0xff
	_, err := follower.AppendVerbatim(bad, t0)
	wantCode(t, err, sluicev1.ErrorCode_CORRUPT_RECORD)
	got := readAll(t, follower)
	for i := range want {
		if !sameBatch(got[i], want[i].bytes) {
			t.Fatalf("batch %d differs", i)
		}
	}
}

func TestSegmentRollsBySize(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 60, 4, t0.UnixMilli())
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	for i, s := range segs {
		if s.Size > cfg.SegmentBytes {
			t.Fatalf("segment %d size %d > %d", i, s.Size, cfg.SegmentBytes)
		}
		if i > 0 && s.BaseOffset != segs[i-1].NextOffset {
			t.Fatalf("segment %d base %d, previous ends at %d", i, s.BaseOffset, segs[i-1].NextOffset)
		}
	}
	readAll(t, l)
}

func TestSegmentRollsByAge(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.SegmentMs = 1000
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	// The first append long after Open does not roll: age counts from the
	// first batch.
	now := t0.Add(time.Hour)
	for _, step := range []struct {
		at   time.Duration
		segs int
	}{{0, 1}, {999 * time.Millisecond, 1}, {1000 * time.Millisecond, 2}, {1500 * time.Millisecond, 2}, {2000 * time.Millisecond, 3}} {
		if _, err := l.Append(makeBatch(1, 1, "a"), 0, now.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		if n := len(l.Segments()); n != step.segs {
			t.Fatalf("after append at +%v: %d segments, want %d", step.at, n, step.segs)
		}
	}
}

func TestIndexLookupAcrossManySegments(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 2048
	cfg.IndexIntervalBytes = 300
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	want := fill(t, l, 400, 7, t0.UnixMilli())
	if n := len(l.Segments()); n < 10 {
		t.Fatalf("only %d segments", n)
	}
	check := func(l *Log) {
		rng := rand.New(rand.NewSource(1))
		for i := 0; i < 500; i++ {
			off := rng.Int63n(l.EndOffset())
			maxBytes := 1 + rng.Intn(1500)
			res, err := l.Read(off, maxBytes, 1<<62)
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			// Linear expectation: the batch holding off, then following
			// batches of the same segment while within maxBytes.
			j := 0
			for want[j].last < off {
				j++
			}
			if len(res.Batches) == 0 || !sameBatch(res.Batches[0], want[j].bytes) {
				t.Fatalf("Read(%d): first batch is not the one holding it (base %d)", off, want[j].base)
			}
			total := 0
			for k, b := range res.Batches {
				if !sameBatch(b, want[j+k].bytes) {
					t.Fatalf("Read(%d): batch %d differs", off, k)
				}
				total += batch.FrameSize(len(b))
			}
			if len(res.Batches) > 1 && total > maxBytes {
				t.Fatalf("Read(%d, %d): %d bytes", off, maxBytes, total)
			}
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	check(l)
}

func TestOffsetForTimestamp(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	if _, _, found, _ := l.OffsetForTimestamp(0); found {
		t.Fatal("found in empty log")
	}
	if off, ts := l.MaxTimestampOffset(); off != -1 || ts != -1 {
		t.Fatalf("MaxTimestampOffset of empty log = %d,%d", off, ts)
	}
	// Batch i has 3 records with timestamps 1000+10i, +1, +2; batch 5 goes
	// back in time (its records are at 900..902).
	var tsOf []int64 // timestamp of each offset
	for i := 0; i < 40; i++ {
		ts := int64(1000 + 10*i)
		if i == 5 {
			ts = 900
		}
		if _, err := l.Append(makeBatch(3, ts, "t"), 0, t0); err != nil {
			t.Fatal(err)
		}
		tsOf = append(tsOf, ts, ts+1, ts+2)
	}
	for _, target := range []int64{0, 900, 901, 1000, 1001, 1002, 1003, 1049, 1050, 1051, 1200, 1391, 1392, 1393, 5000} {
		wantOff, wantTS, wantFound := int64(-1), int64(-1), false
		for o, ts := range tsOf {
			if ts >= target {
				wantOff, wantTS, wantFound = int64(o), ts, true
				break
			}
		}
		off, ts, found, err := l.OffsetForTimestamp(target)
		if err != nil {
			t.Fatal(err)
		}
		if off != wantOff || ts != wantTS || found != wantFound {
			t.Errorf("OffsetForTimestamp(%d) = %d,%d,%v want %d,%d,%v", target, off, ts, found, wantOff, wantTS, wantFound)
		}
	}
	if off, ts := l.MaxTimestampOffset(); off != 119 || ts != 1392 {
		t.Fatalf("MaxTimestampOffset = %d,%d want 119,1392", off, ts)
	}
}

func TestChangedIsClosedOnAppend(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	ch := l.Changed()
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ch
	}()
	if _, err := l.Append(makeBatch(1, 1, "x"), 0, t0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed not closed by Append")
	}
	if l.Changed() == ch {
		t.Fatal("Changed did not renew its channel")
	}
}

// Reads run concurrently with appends and only ever see whole, verified
// batches with contiguous offsets (run under -race).
func TestConcurrentReadsSeeOnlyCommittedBatches(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 8192
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	const batches = 300
	done := make(chan error, 1)
	go func() {
		for i := 0; i < batches; i++ {
			if _, err := l.Append(makeBatch(1+i%5, int64(i), "c"), 0, t0); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var off int64
	deadline := time.Now().Add(30 * time.Second)
	writerDone := false
	for !writerDone || off < l.EndOffset() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			writerDone = true
		default:
		}
		ch := l.Changed()
		res, err := l.Read(off, 4096, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range res.Batches {
			h, err := batch.Verify(b)
			if err != nil || h.BaseOffset != off {
				t.Fatalf("bad batch at %d: %v base %d", off, err, h.BaseOffset)
			}
			off = h.NextOffset()
		}
		if len(res.Batches) == 0 && !writerDone {
			select {
			case <-ch:
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				writerDone = true
			case <-time.After(10 * time.Second):
				t.Fatal("no change signalled")
			}
		}
	}
}

func TestCleanShutdownReopen(t *testing.T) {
	cfg := testConfig()
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	want := fill(t, l, 50, 4, t0.UnixMilli())
	segs := l.Segments()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/" + cleanShutdownFile); err != nil {
		t.Fatal("no clean-shutdown marker after Close")
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if _, err := os.Stat(dir + "/" + cleanShutdownFile); !os.IsNotExist(err) {
		t.Fatal("clean-shutdown marker still present after Open")
	}
	got := readAll(t, l)
	for i := range want {
		if !sameBatch(got[i], want[i].bytes) {
			t.Fatalf("batch %d differs", i)
		}
	}
	if g := l.Segments(); len(g) != len(segs) || g[len(g)-1] != segs[len(segs)-1] {
		t.Fatalf("segments changed: %v vs %v", g, segs)
	}
	res, err := l.Append(makeBatch(2, 5, "after"), appendEpoch(l), t0)
	if err != nil || res.BaseOffset != want[len(want)-1].last+1 {
		t.Fatalf("append after reopen: %+v %v", res, err)
	}
}

func TestClosedLogRejectsOperations(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(makeBatch(1, 1, "x"), 0, t0); err != ErrClosed {
		t.Fatalf("Append after Close: %v", err)
	}
	if _, err := l.Read(0, 1, 1); err != ErrClosed {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestDeleteRemovesDirectory(t *testing.T) {
	dir := t.TempDir() + "/p-0"
	l := openLog(t, dir, testConfig())
	fill(t, l, 3, 2, 1)
	if err := l.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory still exists: %v", err)
	}
}

// Rule: a reopened segment ages from its first batch's timestamp, so
// restarts do not postpone segment.ms rolls.
func TestSegmentAgeSurvivesReopen(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	cfg.SegmentMs = 60_000
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	if _, err := l.Append(makeBatch(1, t0.UnixMilli(), "a"), 0, t0); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(59 * time.Second)
	l, err := Open(dir, cfg, later)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(makeBatch(1, later.UnixMilli(), "b"), 0, later); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Segments()); n != 1 {
		t.Fatalf("%d segments before segment.ms elapsed", n)
	}
	if _, err := l.Append(makeBatch(1, later.UnixMilli(), "c"), 0, t0.Add(60*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Segments()); n != 2 {
		t.Fatalf("%d segments after segment.ms elapsed, want 2", n)
	}
}

// Rule: the active segment rolls exactly when the next frame would take it
// past segment.bytes; random reads (seeded) across all segments return the
// batch holding the offset and then following batches of that segment
// within maxBytes, before and after a clean reopen.
func TestSegmentRollBySizeAndRandomReads(t *testing.T) {
	for _, segBytes := range []int64{1024, 1500, 2048, 4096} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			cfg := testConfig()
			cfg.SegmentBytes = segBytes
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			want := fill(t, l, 300, 6, t0.UnixMilli())
			segs := l.Segments()
			if len(segs) < 4 {
				t.Fatalf("only %d segments", len(segs))
			}
			// segOf[i] is the segment index batch i must be in, replaying
			// the roll rule.
			segOf := make([]int, len(want))
			var size int64
			seg := 0
			for i, w := range want {
				n := int64(batch.FrameSize(len(w.bytes)))
				if size > 0 && size+n > segBytes {
					seg++
					size = 0
				}
				size += n
				segOf[i] = seg
			}
			if seg != len(segs)-1 {
				t.Fatalf("%d segments, roll rule predicts %d", len(segs), seg+1)
			}
			for i, w := range want {
				if s := segs[segOf[i]]; w.base < s.BaseOffset || w.last >= s.NextOffset {
					t.Fatalf("batch %d [%d,%d] not in segment %d [%d,%d)", i, w.base, w.last, segOf[i], s.BaseOffset, s.NextOffset)
				}
			}
			check := func(l *Log) {
				rng := rand.New(rand.NewSource(segBytes))
				for k := 0; k < 400; k++ {
					off := rng.Int63n(l.EndOffset())
					maxBytes := rng.Intn(3 * int(segBytes))
					res, err := l.Read(off, maxBytes, 1<<62)
					if err != nil {
						t.Fatalf("Read(%d): %v", off, err)
					}
					j := 0
					for want[j].last < off {
						j++
					}
					var exp [][]byte
					total := 0
					for i := j; i < len(want) && segOf[i] == segOf[j]; i++ {
						n := batch.FrameSize(len(want[i].bytes))
						if i > j && total+n > maxBytes {
							break
						}
						total += n
						exp = append(exp, want[i].bytes)
					}
					if len(res.Batches) != len(exp) {
						t.Fatalf("Read(%d, %d): %d batches, want %d", off, maxBytes, len(res.Batches), len(exp))
					}
					for i := range exp {
						if !sameBatch(res.Batches[i], exp[i]) {
							t.Fatalf("Read(%d, %d): batch %d differs", off, maxBytes, i)
						}
					}
					if wantNext := want[j+len(exp)-1].last + 1; res.NextOffset != wantNext {
						t.Fatalf("Read(%d): NextOffset %d, want %d", off, res.NextOffset, wantNext)
					}
				}
			}
			check(l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, dir, cfg)
			defer l.Close()
			check(l)
		})
	}
}

// Rule: a batch larger than segment.bytes still gets a segment of its own
// (first batch in a segment never rolls) and is read whole at maxBytes 1.
func TestBatchLargerThanSegmentBytes(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 3, 1, 1)
	big := makeBatch(60, 1, "big")
	if len(big) <= 1024 {
		t.Fatalf("batch of %d bytes", len(big))
	}
	res, err := l.Append(big, appendEpoch(l), t0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Read(res.BaseOffset+30, 1, 1<<62)
	if err != nil || len(r.Batches) != 1 || !sameBatch(r.Batches[0], big) || r.NextOffset != res.LastOffset+1 {
		t.Fatalf("Read big batch: %v", err)
	}
	if _, err := l.Append(makeBatch(1, 1, "next"), appendEpoch(l), t0); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) != 3 || segs[1].BaseOffset != res.BaseOffset || segs[2].BaseOffset != res.LastOffset+1 {
		t.Fatalf("segments %+v", segs)
	}
}

// Rule: offsets outside [StartOffset, EndOffset] are OFFSET_OUT_OF_RANGE,
// also once retention raised the start; the bounds themselves are fine.
func TestReadOutOfRangeAfterRetention(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 2048
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 60, 3, t0.UnixMilli())
	if n, err := retainCommitted(l, t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention %d %v", n, err)
	}
	start, end := l.StartOffset(), l.EndOffset()
	for _, tc := range []struct {
		off  int64
		code sluicev1.ErrorCode
		n    int
	}{
		{0, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, 0},
		{start - 1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, 0},
		{start, sluicev1.ErrorCode_NONE, 1},
		{end - 1, sluicev1.ErrorCode_NONE, 1},
		{end, sluicev1.ErrorCode_NONE, 0},
		{end + 1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, 0},
	} {
		res, err := l.Read(tc.off, 1, 1<<62)
		if tc.code != sluicev1.ErrorCode_NONE {
			wantCode(t, err, tc.code)
			continue
		}
		if err != nil || len(res.Batches) != tc.n {
			t.Fatalf("Read(%d): %d batches, %v; want %d", tc.off, len(res.Batches), err, tc.n)
		}
		if tc.n == 0 && res.NextOffset != tc.off {
			t.Fatalf("Read(%d) at end: NextOffset %d", tc.off, res.NextOffset)
		}
	}
}

// Rule: OffsetForTimestamp and MaxTimestampOffset look across segments and
// ignore segments removed by retention.
func TestTimestampLookupsAcrossSegmentsAndRetention(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 3000
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	// Batch i: 2 records at 10i and 10i+1, except the peak batch 7.
	tsOf := map[int64]int64{}
	for i := 0; i < 80; i++ {
		ts := int64(10 * i)
		if i == 7 {
			ts = 100_000
		}
		res, err := l.Append(makeBatch(2, ts, "x"), 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		tsOf[res.BaseOffset], tsOf[res.BaseOffset+1] = ts, ts+1
	}
	if len(l.Segments()) < 5 {
		t.Fatalf("%d segments", len(l.Segments()))
	}
	firstAtOrAfter := func(target int64) (int64, int64, bool) {
		for o := l.StartOffset(); o < l.EndOffset(); o++ {
			if tsOf[o] >= target {
				return o, tsOf[o], true
			}
		}
		return -1, -1, false
	}
	maxOf := func() (int64, int64) {
		bo, bt := int64(-1), int64(-1)
		for o := l.StartOffset(); o < l.EndOffset(); o++ {
			if tsOf[o] > bt {
				bo, bt = o, tsOf[o]
			}
		}
		return bo, bt
	}
	check := func(stage string) {
		for _, target := range []int64{-5, 0, 1, 2, 69, 70, 71, 500, 501, 789, 790, 791, 792, 100_000, 100_001, 100_002} {
			wo, wt, wf := firstAtOrAfter(target)
			o, ts, f, err := l.OffsetForTimestamp(target)
			if err != nil || o != wo || ts != wt || f != wf {
				t.Errorf("%s: OffsetForTimestamp(%d) = %d,%d,%v,%v want %d,%d,%v", stage, target, o, ts, f, err, wo, wt, wf)
			}
		}
		wo, wt := maxOf()
		if o, ts := l.MaxTimestampOffset(); o != wo || ts != wt {
			t.Errorf("%s: MaxTimestampOffset = %d,%d want %d,%d", stage, o, ts, wo, wt)
		}
	}
	check("before retention")
	if n, err := retainCommitted(l, t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention %d %v", n, err)
	}
	if l.StartOffset() <= 15 {
		t.Fatalf("start %d: peak batch not removed", l.StartOffset())
	}
	check("after retention")
}

// Rule: ParseConfig rejects every bad value with INVALID_CONFIG naming the
// key, accepts the boundaries, and Map round-trips any valid config.
func TestParseConfigValues(t *testing.T) {
	bad := []struct{ key, val string }{
		{"segment.bytes", "1023"}, {"segment.bytes", "2147483648"}, {"segment.bytes", ""}, {"segment.bytes", "1k"},
		{"segment.ms", "0"}, {"segment.ms", "-1"},
		{"retention.ms", "-2"}, {"retention.bytes", "-2"}, {"retention.bytes", "1.5"},
		{"max.message.bytes", "127"}, {"max.message.bytes", fmt.Sprint(MaxMessageBytesLimit + 1)},
		{"cleanup.policy", "compact,,delete"}, {"cleanup.policy", "Delete"}, {"delete.retention.ms", "-1"}, {"min.cleanable.dirty.ratio", "-0.1"}, {"cleanup.policy", ""},
		{"index.interval.bytes", "-1"}, {"flush.messages", "-1"}, {"flush.ms", "x"},
		{"retention.msec", "1"}, {"", ""},
	}
	for _, tc := range bad {
		_, err := ParseConfig(map[string]string{tc.key: tc.val})
		wantCode(t, err, sluicev1.ErrorCode_INVALID_CONFIG)
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.key)) && !strings.Contains(err.Error(), tc.key+"=") {
			t.Errorf("%s=%q: error %q does not name the key", tc.key, tc.val, err)
		}
	}
	good := map[string]string{
		"segment.bytes": "2147483647", "segment.ms": "1", "retention.ms": "0", "retention.bytes": "0",
		"max.message.bytes": fmt.Sprint(MaxMessageBytesLimit), "cleanup.policy": "delete",
		"index.interval.bytes": "0", "flush.messages": "0", "flush.ms": "0",
		"delete.retention.ms": "0", "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "1",
	}
	c, err := ParseConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(c.Map(), good) {
		t.Fatalf("Map() = %v, want %v", c.Map(), good)
	}
	if m := DefaultConfig().Map(); len(m) != 12 {
		t.Fatalf("default Map has %d keys", len(m))
	}
	if back, err := ParseConfig(DefaultConfig().Map()); err != nil || back != DefaultConfig() {
		t.Fatalf("defaults do not round-trip: %+v %v", back, err)
	}
}

// Rule: Changed is closed (and renewed) by retention and by Close, too.
func TestChangedIsClosedOnRetentionAndClose(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 0
	l := openLog(t, t.TempDir(), cfg)
	fill(t, l, 30, 3, 1)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := l.Changed()
	if closed(ch) {
		t.Fatal("Changed closed before any change")
	}
	if n, err := retainCommitted(l, t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention %d %v", n, err)
	}
	if !closed(ch) {
		t.Fatal("retention did not close Changed")
	}
	ch = l.Changed()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(ch) {
		t.Fatal("Close did not close Changed")
	}
}
