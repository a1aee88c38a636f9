package storage

import (
	"math/rand"
	"os"
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
	res, err := l.Append(makeBatch(2, 5, "after"), 0, t0)
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
