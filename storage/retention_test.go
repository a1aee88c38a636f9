package storage

import (
	"os"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestRetentionByTime(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionMs = 60_000
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	base := t0.UnixMilli()
	// Old records, then records a minute and a half later.
	fill(t, l, 30, 3, base)
	oldEnd := l.EndOffset()
	fill(t, l, 30, 3, base+90_000)
	segsBefore := len(l.Segments())
	n, err := retainCommitted(l, time.UnixMilli(base+90_000+30_000))
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(l.Segments()) != segsBefore-n {
		t.Fatalf("deleted %d of %d segments", n, segsBefore)
	}
	start := l.StartOffset()
	if start == 0 || start > oldEnd {
		t.Fatalf("start offset %d, want in (0, %d]", start, oldEnd)
	}
	if l.Segments()[0].BaseOffset != start {
		t.Fatalf("first segment %d != start %d", l.Segments()[0].BaseOffset, start)
	}
	_, err = l.Read(0, 100, 1<<62)
	wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
	readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, crashed := range []bool{false, true} {
		l = openLog(t, dir, cfg)
		if l.StartOffset() != start {
			t.Fatalf("after reopen (crashed=%v) start %d, want %d", crashed, l.StartOffset(), start)
		}
		readAll(t, l)
		crash(t, l)
	}
}

func TestRetentionBySize(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 3000
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	fill(t, l, 80, 3, t0.UnixMilli())
	if l.Size() <= 3000 {
		t.Fatalf("log only %d bytes", l.Size())
	}
	n, err := retainCommitted(l, t0)
	if err != nil || n == 0 {
		t.Fatalf("EnforceRetention: %d, %v", n, err)
	}
	segs := l.Segments()
	if l.Size() < 3000-cfg.SegmentBytes || l.Size()-segs[0].Size >= 3000 {
		t.Fatalf("size %d after retention (first segment %d)", l.Size(), segs[0].Size)
	}
	if l.StartOffset() != segs[0].BaseOffset {
		t.Fatalf("start %d, first segment %d", l.StartOffset(), segs[0].BaseOffset)
	}
	start := l.StartOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if l.StartOffset() != start {
		t.Fatalf("after reopen start %d, want %d", l.StartOffset(), start)
	}
	readAll(t, l)
}

func TestRetentionNeverDeletesActiveSegment(t *testing.T) {
	cfg := testConfig()
	cfg.RetentionMs = 0
	cfg.RetentionBytes = 0
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 5, 2, 1)
	n, err := retainCommitted(l, t0.Add(time.Hour))
	if err != nil || n != 0 || l.StartOffset() != 0 {
		t.Fatalf("deleted %d (err %v), start %d", n, err, l.StartOffset())
	}
}

// Rule: retention checkpoints the start offset before removing files, and
// Open finishes removing segments wholly below it (a crash in between).
func TestRecoveryFinishesInterruptedRetention(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	fill(t, l, 40, 3, t0.UnixMilli())
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	crash(t, l)
	if err := writeCheckpoint(dir+"/"+startOffsetFile, segs[2].BaseOffset+1); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if l.StartOffset() != segs[2].BaseOffset+1 || l.Segments()[0].BaseOffset != segs[2].BaseOffset {
		t.Fatalf("start %d first segment %d", l.StartOffset(), l.Segments()[0].BaseOffset)
	}
	_, err := l.Read(segs[2].BaseOffset, 1, 1<<62)
	wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
	res, err := l.Read(segs[2].BaseOffset+1, 1, 1<<62)
	if err != nil || len(res.Batches) != 1 {
		t.Fatalf("read at start: %v", err)
	}
}

// Reads racing with retention either succeed with verified batches or get
// OFFSET_OUT_OF_RANGE (run under -race).
func TestReadsRacingRetention(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.RetentionBytes = 2048
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := l.Append(makeBatch(1+i%3, int64(i), "r"), 0, t0); err != nil {
				errc <- err
				return
			}
			if _, err := retainCommitted(l, t0); err != nil {
				errc <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	reads := 0
	for time.Now().Before(deadline) {
		off := l.StartOffset()
		res, err := l.Read(off, 2048, 1<<62)
		if err != nil {
			wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
			continue
		}
		for _, b := range res.Batches {
			if _, err := batch.Verify(b); err != nil {
				t.Fatalf("served corrupt batch: %v", err)
			}
		}
		reads++
	}
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if reads == 0 || l.StartOffset() == 0 {
		t.Fatalf("reads %d, start %d: retention or reads did not run", reads, l.StartOffset())
	}
}

// Rule (table): EnforceRetention deletes oldest segments while the oldest
// has its newest timestamp strictly before now-retention.ms, or the log
// without it still holds >= retention.bytes; never the active segment.
// The start offset moves to the first kept segment, survives a clean
// reopen and an abandoned (crashed) log, and appends continue.
func TestRetentionRules(t *testing.T) {
	// 8 sealed segments of one batch each plus the active one: segment i
	// holds one batch of records at 1000*i .. 1000*i+1 (SegmentMs rolls
	// them on every append).
	const segs = 9
	tests := []struct {
		name        string
		retentionMs int64
		retBytes    int64
		now         int64 // ms
		deleted     int
	}{
		{"unlimited", -1, -1, 1 << 40, 0},
		{"time: nothing old enough", 100_000, -1, 9000, 0},
		{"time: boundary kept", 1000, -1, 2001, 1}, // segment 0 max 1 < 1001; segment 1 max 1001 == 1001 kept
		{"time: boundary deleted", 1000, -1, 2002, 2},
		{"time: all but active", 0, -1, 1 << 40, segs - 1},
		{"size: zero keeps the active", -1, 0, 0, segs - 1},
		{"size: huge", -1, 1 << 40, 0, 0},
		{"size: keeps at least retention.bytes", -1, -2, 0, -1}, // filled in below
		{"time or size", 3500, -3, 5000, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.SegmentMs = 1
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			for i := 0; i < segs; i++ {
				if _, err := l.Append(makeBatch(2, int64(1000*i), "r"), 0, t0.Add(time.Duration(i)*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			before := l.Segments()
			if len(before) != segs {
				t.Fatalf("%d segments, want %d", len(before), segs)
			}
			size := before[0].Size
			cfg.RetentionMs, cfg.RetentionBytes = tc.retentionMs, tc.retBytes
			deleted := tc.deleted
			switch tc.retBytes {
			case -2: // just under 4 segments: 5 deleted, 4 kept
				cfg.RetentionBytes = 4*size - 1
				deleted = 5
			case -3: // time removes 2 (max ts 1, 1001 < 1500), size 3 more
				cfg.RetentionBytes = 4 * size
				deleted = 5
			}
			l.SetConfig(cfg)
			n, err := retainCommitted(l, time.UnixMilli(tc.now))
			if err != nil || n != deleted {
				t.Fatalf("EnforceRetention deleted %d (%v), want %d", n, err, deleted)
			}
			after := l.Segments()
			if len(after) != segs-deleted || after[0].BaseOffset != before[deleted].BaseOffset {
				t.Fatalf("segments after retention %+v", after)
			}
			for _, s := range before[:deleted] {
				if _, err := os.Stat(s.Path); !os.IsNotExist(err) {
					t.Fatalf("deleted segment %s still on disk", s.Path)
				}
			}
			start, end := l.StartOffset(), l.EndOffset()
			if start != before[deleted].BaseOffset {
				t.Fatalf("start %d, want %d", start, before[deleted].BaseOffset)
			}
			if again, err := retainCommitted(l, time.UnixMilli(tc.now)); err != nil || again != 0 {
				t.Fatalf("second EnforceRetention deleted %d (%v)", again, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, dir, cfg)
			if l.StartOffset() != start || l.EndOffset() != end {
				t.Fatalf("after reopen [%d,%d), want [%d,%d)", l.StartOffset(), l.EndOffset(), start, end)
			}
			readAll(t, l)
			if res, err := l.Append(makeBatch(1, 1, "z"), 0, t0.Add(time.Hour)); err != nil || res.BaseOffset != end {
				t.Fatalf("append after reopen %+v %v", res, err)
			}
			// Abandon without Close: a crash keeps the start offset too.
			r := openLog(t, dir, cfg)
			defer r.Close()
			if r.StartOffset() != start || r.EndOffset() != end+1 {
				t.Fatalf("after crash [%d,%d), want [%d,%d)", r.StartOffset(), r.EndOffset(), start, end+1)
			}
			_, err = r.Read(start-1, 1, 1<<62)
			if start > 0 {
				wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
			}
			readAll(t, r)
		})
	}
}

// retainCommitted runs retention as on a log whose every record is
// committed (a leader alone in its ISR): the high watermark at the log end.
func retainCommitted(l *Log, now time.Time) (int, error) {
	l.SetHighWatermark(l.EndOffset())
	return l.EnforceRetention(now)
}

// Retention deletes only segments wholly below the high watermark: records
// not yet committed (a follower may still need them) stay, whatever
// retention.ms says; once the high watermark passes a segment's end it
// goes.
func TestRetentionStopsAtHighWatermark(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentMs = 1
	cfg.RetentionMs = 0
	l := openLog(t, t.TempDir(), cfg)
	for i := 0; i < 6; i++ { // six segments of 2 records: bases 0, 2, ..., 10
		if _, err := l.Append(makeBatch(2, int64(1000*i), "r"), 0, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.Segments()); n != 6 {
		t.Fatalf("%d segments, want 6", n)
	}
	now := t0.Add(time.Hour)
	if n, err := l.EnforceRetention(now); err != nil || n != 0 || l.StartOffset() != 0 {
		t.Fatalf("high watermark 0: deleted %d (%v), start %d; want nothing deleted", n, err, l.StartOffset())
	}
	l.SetHighWatermark(5) // inside the segment at 4
	if n, err := l.EnforceRetention(now); err != nil || n != 2 || l.StartOffset() != 4 {
		t.Fatalf("high watermark 5: deleted %d (%v), start %d; want 2 deleted, start 4", n, err, l.StartOffset())
	}
	l.SetHighWatermark(6) // the end of that segment
	if n, err := l.EnforceRetention(now); err != nil || n != 1 || l.StartOffset() != 6 {
		t.Fatalf("high watermark 6: deleted %d (%v), start %d; want 1 deleted, start 6", n, err, l.StartOffset())
	}
	if hw := l.HighWatermark(); hw != 6 {
		t.Fatalf("high watermark %d after retention, want 6 (unchanged)", hw)
	}
}
