package storage

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// epochBatch is a stored batch with the leader epoch it was appended under
// and the timestamp of its first record (records of a batch are 1 ms
// apart; tests keep timestamps increasing along the log).
type epochBatch struct {
	stored
	epoch int32
	ts    int64
}

// appendEpochs appends one batch per element of epochs, of 1..3 records,
// with first-record timestamps ts, ts+step, ...
func appendEpochs(t testing.TB, l *Log, epochs []int32, ts, step int64) []epochBatch {
	t.Helper()
	var out []epochBatch
	for i, e := range epochs {
		bts := ts + int64(i)*step
		b := makeBatch(1+i%3, bts, fmt.Sprintf("e%d-%d", e, bts))
		res, err := l.Append(b, e, t0)
		if err != nil {
			t.Fatalf("Append %d under epoch %d: %v", i, e, err)
		}
		out = append(out, epochBatch{stored{res.BaseOffset, res.LastOffset, append([]byte(nil), b...)}, e, bts})
	}
	return out
}

// wantEntries is the epoch cache a log holding bs (from the log start
// offset start) must have.
func wantEntries(bs []epochBatch, start int64) []EpochEntry {
	var out []EpochEntry
	for _, b := range bs {
		if b.last < start {
			continue
		}
		if len(out) == 0 || b.epoch > out[len(out)-1].Epoch {
			out = append(out, EpochEntry{Epoch: b.epoch, StartOffset: max(b.base, start)})
		}
	}
	return out
}

// checkContents verifies every observable of a log holding exactly bs:
// offsets, batch bytes, the epoch cache, reads through the offset index at
// every offset, and time lookups through the time index.
func checkContents(t testing.TB, l *Log, bs []epochBatch) {
	t.Helper()
	start := l.StartOffset()
	end := start
	if len(bs) > 0 {
		end = bs[len(bs)-1].last + 1
	}
	if l.EndOffset() != end {
		t.Fatalf("EndOffset %d, want %d", l.EndOffset(), end)
	}
	got := readAll(t, l)
	if len(got) != len(bs) {
		t.Fatalf("%d batches stored, want %d", len(got), len(bs))
	}
	for i := range bs {
		if !sameBatch(got[i], bs[i].bytes) {
			t.Fatalf("batch %d (base %d) differs", i, bs[i].base)
		}
	}
	if e := wantEntries(bs, start); !slices.Equal(l.EpochEntries(), e) {
		t.Fatalf("epoch entries %v, want %v", l.EpochEntries(), e)
	}
	for i, b := range bs {
		for off := b.base; off <= b.last; off++ {
			res, err := l.Read(off, 1, 1<<62)
			if err != nil || len(res.Batches) != 1 || !sameBatch(res.Batches[0], b.bytes) {
				t.Fatalf("Read(%d): %v, %d batches; want batch %d", off, err, len(res.Batches), i)
			}
		}
		off, ts, found, err := l.OffsetForTimestamp(b.ts)
		if err != nil || !found || off != b.base || ts != b.ts {
			t.Fatalf("OffsetForTimestamp(%d) = %d, %d, %v, %v; want %d", b.ts, off, ts, found, err, b.base)
		}
	}
	if len(bs) == 0 {
		if off, ts := l.MaxTimestampOffset(); off != -1 || ts != -1 {
			t.Fatalf("MaxTimestampOffset of an empty log = %d, %d", off, ts)
		}
		return
	}
	last := bs[len(bs)-1]
	lastTS := last.ts + last.last - last.base
	if _, _, found, _ := l.OffsetForTimestamp(lastTS + 1); found {
		t.Fatalf("OffsetForTimestamp past the newest record found something")
	}
	if off, ts := l.MaxTimestampOffset(); off != last.last || ts != lastTS {
		t.Fatalf("MaxTimestampOffset = %d, %d; want %d, %d", off, ts, last.last, lastTS)
	}
}

// abandon simulates a crash: the files are closed without a flush, a
// checkpoint or the clean-shutdown marker, and l is unusable.
func abandon(l *Log) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	l.closed = true
	segs := l.segments
	l.mu.Unlock()
	for _, s := range segs {
		s.close()
	}
}

// segmentFiles returns the contents of a log directory's segment and
// leader-epoch files by name.
func segmentFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		n := e.Name()
		if ext := filepath.Ext(n); ext == ".log" || ext == ".index" || ext == ".timeindex" || n == epochCheckpointFile {
			data, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			out[n] = data
		}
	}
	return out
}

// truncationEpochs is the epoch plan of the truncation tests: several
// epochs, one of them a single batch, spread over many small segments.
var truncationEpochs = []int32{0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8}

func truncationConfig() Config {
	cfg := testConfig()
	cfg.SegmentBytes = 1024
	cfg.IndexIntervalBytes = 150
	return cfg
}

// Rule: TruncateTo(offset) at any batch boundary leaves exactly the batches
// below offset (bytes, offset and time indexes, epoch cache), and the log
// continues at offset as if those were all it ever held: after more
// appends it is byte for byte the log a follower builds by appending the
// same batches to an empty log, and it stays so across a clean reopen and
// a crash.
func TestTruncateToBoundaries(t *testing.T) {
	cfg := truncationConfig()
	probe := openLog(t, t.TempDir(), cfg)
	all := appendEpochs(t, probe, truncationEpochs, 10_000, 100)
	segs := probe.Segments()
	probe.Close()
	if len(segs) < 5 {
		t.Fatalf("only %d segments; the test needs several", len(segs))
	}
	// Batch index of each segment's first batch.
	segStart := map[int64]bool{}
	for _, s := range segs {
		segStart[s.BaseOffset] = true
	}
	var midSeg, segBase int
	for i, b := range all {
		if segStart[b.base] && i > 0 && segBase == 0 {
			segBase = i
		}
		if segStart[b.base] && i > segBase+1 && midSeg == 0 {
			midSeg = i + 1 // a batch inside a later segment
		}
	}
	cases := []struct {
		name string
		keep int // batches kept
	}{
		{"everything", 0},
		{"inside the first segment", 3},
		{"where epoch 2 starts", 5},
		{"where the one-batch epoch 3 starts", 13},
		{"just after epoch 3", 14},
		{"at a segment base", segBase},
		{"inside a later segment", midSeg},
		{"last batch", len(all) - 1},
		{"log end offset", len(all)},
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			appendEpochs(t, l, truncationEpochs, 10_000, 100)
			l.SetHighWatermark(l.EndOffset())
			offset := l.EndOffset()
			if tc.keep < len(all) {
				offset = all[tc.keep].base
			}
			changed := l.Changed()
			if err := l.TruncateTo(offset); err != nil {
				t.Fatalf("TruncateTo(%d): %v", offset, err)
			}
			select {
			case <-changed:
			default:
				if tc.keep < len(all) {
					t.Fatal("TruncateTo did not wake Changed waiters")
				}
			}
			want := slices.Clone(all[:tc.keep])
			checkContents(t, l, want)
			if hw := l.HighWatermark(); hw != offset {
				t.Fatalf("high watermark %d after truncation to %d", hw, offset)
			}

			// Continue under the kept latest epoch or a new one, with
			// timestamps below the removed batches' (the max-timestamp
			// bookkeeping must forget them).
			next := int32(9)
			if ci%2 == 1 && l.LatestEpoch() >= 0 {
				next = l.LatestEpoch()
			}
			ts := int64(5_000)
			if tc.keep > 0 {
				ts = want[tc.keep-1].ts + 10
			}
			more := appendEpochs(t, l, slices.Repeat([]int32{next}, 12), ts, 10)
			if more[0].base != offset {
				t.Fatalf("append after truncation at %d, want %d", more[0].base, offset)
			}
			want = append(want, more...)
			checkContents(t, l, want)

			// The reference: the same batches appended verbatim to an
			// empty log. A truncation exactly at a segment base keeps that
			// (now empty) segment active, so the layout differs there.
			ref := openLog(t, t.TempDir(), cfg)
			for _, b := range want {
				if _, err := ref.AppendVerbatim(append([]byte(nil), b.bytes...), t0); err != nil {
					t.Fatal(err)
				}
			}
			if err := ref.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if !segStart[offset] || offset == 0 {
				if got, exp := segmentFiles(t, dir), segmentFiles(t, ref.Dir()); !maps.EqualFunc(got, exp, bytes.Equal) {
					t.Fatalf("files differ from a log built without truncation:\n%s", describeDiff(got, exp))
				}
			}

			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, dir, cfg)
			checkContents(t, l, want)
			abandon(l)
			l = openLog(t, dir, cfg)
			checkContents(t, l, want)
			// After a crash with nothing flushed, too.
			crash(t, l)
			l = openLog(t, dir, cfg)
			defer l.Close()
			checkContents(t, l, want)
		})
	}
}

func describeDiff(got, exp map[string][]byte) string {
	var names []string
	for k := range got {
		names = append(names, k)
	}
	for k := range exp {
		if _, ok := got[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range slices.Compact(names) {
		g, gok := got[n]
		e, eok := exp[n]
		if !gok || !eok || !bytes.Equal(g, e) {
			fmt.Fprintf(&b, "  %s: %d bytes (present %v), want %d bytes (present %v)\n", n, len(g), gok, len(e), eok)
		}
	}
	return b.String()
}

// Rule: a truncation offset below the log start or past the log end is
// OFFSET_OUT_OF_RANGE, one inside a batch INVALID_REQUEST, and a refused
// truncation changes nothing (files, offsets, epochs, high watermark).
func TestTruncateToRefusals(t *testing.T) {
	cfg := truncationConfig()
	cfg.RetentionBytes = 3000
	cfg.RetentionMs = -1
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	defer l.Close()
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	if n, err := retainCommitted(l, t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention: %d, %v", n, err)
	}
	l.SetHighWatermark(all[30].base)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	start := l.StartOffset()
	var kept []epochBatch
	for _, b := range all {
		if b.base >= start {
			kept = append(kept, b)
		}
	}
	var multi epochBatch // a batch of several records
	for _, b := range kept {
		if b.last > b.base {
			multi = b
			break
		}
	}
	before := segmentFiles(t, dir)
	hw, entries := l.HighWatermark(), l.EpochEntries()
	cases := []struct {
		name   string
		offset int64
		code   sluicev1.ErrorCode
	}{
		{"below the log start", start - 1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
		{"zero, deleted by retention", 0, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
		{"negative", -1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
		{"past the log end", l.EndOffset() + 1, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE},
		{"inside a batch", multi.base + 1, sluicev1.ErrorCode_INVALID_REQUEST},
		{"last record of a batch", multi.last, sluicev1.ErrorCode_INVALID_REQUEST},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, l.TruncateTo(tc.offset), tc.code)
			if l.StartOffset() != start || l.EndOffset() != all[len(all)-1].last+1 || l.HighWatermark() != hw || !slices.Equal(l.EpochEntries(), entries) {
				t.Fatalf("refused truncation changed the log")
			}
			if !maps.EqualFunc(segmentFiles(t, dir), before, bytes.Equal) {
				t.Fatalf("refused truncation changed files:\n%s", describeDiff(segmentFiles(t, dir), before))
			}
			checkContents(t, l, kept)
		})
	}
	// Truncating to the log start is allowed and empties the log.
	if err := l.TruncateTo(start); err != nil {
		t.Fatal(err)
	}
	checkContents(t, l, nil)
	if l.StartOffset() != start || l.LatestEpoch() != -1 {
		t.Fatalf("after truncation to the start: start %d, latest epoch %d", l.StartOffset(), l.LatestEpoch())
	}
	l.Close()
	if err := l.TruncateTo(start); err != ErrClosed {
		t.Fatalf("TruncateTo on a closed log: %v", err)
	}
	if err := l.TruncateFullyAndStartAt(5); err != ErrClosed {
		t.Fatalf("TruncateFullyAndStartAt on a closed log: %v", err)
	}
}

// Rule: whatever a crash leaves of a TruncateTo, Open recovers either the
// untruncated or the truncated log, never a mix: the steps before the cut
// of the segment holding offset only lower checkpoints, and after the cut
// the segments still present past it are dropped as after a torn write.
func TestTruncateToCrashLeftovers(t *testing.T) {
	cfg := truncationConfig()
	full := t.TempDir()
	l := openLog(t, full, cfg)
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	l.SetHighWatermark(l.EndOffset())
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil { // recovery point at the end: trusted segments
		t.Fatal(err)
	}
	segs := l.Segments()
	abandon(l)
	// Cut inside the third segment, so that segments follow it.
	s := segs[2]
	keep := -1
	for i, b := range all {
		if b.base > s.BaseOffset && b.base < s.NextOffset && keep < 0 {
			keep = i + 1
		}
	}
	if keep < 0 || all[keep].base >= s.NextOffset {
		t.Fatalf("no batch boundary inside segment %+v", s)
	}
	offset := all[keep].base

	truncated := t.TempDir()
	copyDir(t, full, truncated)
	l = openLog(t, truncated, cfg)
	if err := l.TruncateTo(offset); err != nil {
		t.Fatal(err)
	}
	abandon(l)

	read := func(dir, name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	write := func(dir, name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := func(o int64) string { return fmt.Sprintf("%020d", o) }
	later := segs[3:]
	cases := []struct {
		name      string
		truncated bool
		make      func(dir string)
	}{
		{"checkpoints lowered, nothing cut", false, func(dir string) {
			copyDir(t, full, dir)
			for _, f := range []string{epochCheckpointFile, highWatermarkFile} {
				write(dir, f, read(truncated, f))
			}
			write(dir, recoveryPointFile, []byte(fmt.Sprint(offset)))
		}},
		{"log cut, its indexes and every later segment left", true, func(dir string) {
			copyDir(t, full, dir)
			for _, f := range []string{epochCheckpointFile, highWatermarkFile} {
				write(dir, f, read(truncated, f))
			}
			write(dir, recoveryPointFile, []byte(fmt.Sprint(offset)))
			write(dir, base(s.BaseOffset)+".log", read(truncated, base(s.BaseOffset)+".log"))
		}},
		{"indexes cut, the last segment deleted, others left", true, func(dir string) {
			copyDir(t, truncated, dir)
			write(dir, recoveryPointFile, []byte(fmt.Sprint(offset)))
			for _, ls := range later[:len(later)-1] {
				for _, ext := range []string{".log", ".index", ".timeindex"} {
					write(dir, base(ls.BaseOffset)+ext, read(full, base(ls.BaseOffset)+ext))
				}
			}
		}},
		{"only the next segment's index files left", true, func(dir string) {
			copyDir(t, truncated, dir)
			for _, ext := range []string{".index", ".timeindex"} {
				write(dir, base(later[0].BaseOffset)+ext, read(full, base(later[0].BaseOffset)+ext))
			}
		}},
		{"done", true, func(dir string) { copyDir(t, truncated, dir) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(dir)
			r := openLog(t, dir, cfg)
			defer r.Close()
			want := all
			if tc.truncated {
				want = all[:keep]
			}
			checkContents(t, r, want)
			if hw := r.HighWatermark(); hw > r.EndOffset() {
				t.Fatalf("high watermark %d past the end %d", hw, r.EndOffset())
			}
			end := r.EndOffset()
			more := appendEpochs(t, r, []int32{9, 9, 9}, 1_000_000, 10)
			if more[0].base != end {
				t.Fatalf("append after recovery at %d, want %d", more[0].base, end)
			}
			checkContents(t, r, append(slices.Clone(want), more...))
		})
	}
}

// Rule: TruncateFullyAndStartAt leaves an empty log whose start and end
// are the given offset, with no epochs and the high watermark there, from
// which appends continue; also across reopen and crash.
func TestTruncateFullyAndStartAt(t *testing.T) {
	cfg := truncationConfig()
	cases := []struct {
		name   string
		offset func(all []epochBatch, segs []SegmentInfo) int64
	}{
		{"past the log end", func(all []epochBatch, _ []SegmentInfo) int64 { return all[len(all)-1].last + 1000 }},
		{"at the log end", func(all []epochBatch, _ []SegmentInfo) int64 { return all[len(all)-1].last + 1 }},
		{"inside the log", func(all []epochBatch, _ []SegmentInfo) int64 { return all[17].base + 1 }},
		{"at a segment base", func(_ []epochBatch, segs []SegmentInfo) int64 { return segs[2].BaseOffset }},
		{"below the log start", func([]epochBatch, []SegmentInfo) int64 { return 3 }},
		{"zero", func([]epochBatch, []SegmentInfo) int64 { return 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, cfg)
			// Start the log at 10 so "below the log start" exists.
			if err := l.TruncateFullyAndStartAt(10); err != nil {
				t.Fatal(err)
			}
			all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
			l.SetHighWatermark(all[20].base)
			offset := tc.offset(all, l.Segments())
			changed := l.Changed()
			if err := l.TruncateFullyAndStartAt(offset); err != nil {
				t.Fatal(err)
			}
			<-changed
			check := func(l *Log, want []epochBatch) {
				t.Helper()
				if l.StartOffset() != offset {
					t.Fatalf("start %d, want %d", l.StartOffset(), offset)
				}
				if hw := l.HighWatermark(); hw != offset {
					t.Fatalf("high watermark %d, want %d", hw, offset)
				}
				if segs := l.Segments(); segs[0].BaseOffset != offset {
					t.Fatalf("segments %+v, want the first at %d", segs, offset)
				}
				checkContents(t, l, want)
				if offset > 0 {
					_, err := l.Read(offset-1, 1, 1<<62)
					wantCode(t, err, sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE)
				}
			}
			check(l, nil)
			if len(l.Segments()) != 1 || l.LatestEpoch() != -1 {
				t.Fatalf("segments %+v, latest epoch %d", l.Segments(), l.LatestEpoch())
			}
			if e := l.EpochEntries(); len(e) != 0 {
				t.Fatalf("epoch entries after a full truncation: %v", e)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openLog(t, dir, cfg)
			check(l, nil)
			more := appendEpochs(t, l, []int32{9, 9, 11}, 1_000_000, 10)
			if more[0].base != offset {
				t.Fatalf("append at %d, want %d", more[0].base, offset)
			}
			check(l, more)
			abandon(l)
			l = openLog(t, dir, cfg)
			check(l, more)
			crash(t, l)
			l = openLog(t, dir, cfg)
			defer l.Close()
			check(l, more)
		})
	}
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	wantCode(t, l.TruncateFullyAndStartAt(-1), sluicev1.ErrorCode_INVALID_REQUEST)
}

// Rule: a crash during TruncateFullyAndStartAt to an offset outside the
// old log recovers the new empty log once the start checkpoint is
// written, whatever segments are left; inside the old log it recovers a
// valid log starting at or after the offset.
func TestTruncateFullyCrashLeftovers(t *testing.T) {
	cfg := truncationConfig()
	old := t.TempDir()
	l := openLog(t, old, cfg)
	if err := l.TruncateFullyAndStartAt(100); err != nil {
		t.Fatal(err)
	}
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	segs := l.Segments()
	end := l.EndOffset()
	abandon(l)
	cases := []struct {
		name   string
		offset int64
		keep   func(i int) bool // old segments left
		fresh  bool             // the new segment file exists
	}{
		{"past the end, nothing deleted yet", end + 50, func(int) bool { return true }, true},
		{"past the end, new segment not created", end + 50, func(int) bool { return true }, false},
		{"past the end, some deleted", end + 50, func(i int) bool { return i < 2 }, true},
		{"below the start, nothing deleted yet", 40, func(int) bool { return true }, true},
		{"below the start, some deleted", 40, func(i int) bool { return i < 3 }, true},
		{"inside, some deleted", all[20].base, func(i int) bool { return i < len(segs)-1 }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, old, dir)
			for i, s := range segs {
				if !tc.keep(i) {
					if err := removeSegmentFiles(dir, s.BaseOffset); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := WriteFileAtomic(filepath.Join(dir, epochCheckpointFile), encodeEpochCheckpoint(epochCache{})); err != nil {
				t.Fatal(err)
			}
			if err := writeCheckpoint(filepath.Join(dir, startOffsetFile), tc.offset); err != nil {
				t.Fatal(err)
			}
			if err := writeCheckpoint(filepath.Join(dir, recoveryPointFile), 0); err != nil {
				t.Fatal(err)
			}
			if tc.fresh {
				s, err := openSegment(DefaultFileCache(), dir, tc.offset, t0)
				if err != nil {
					t.Fatal(err)
				}
				s.close()
			}
			r := openLog(t, dir, cfg)
			defer r.Close()
			if tc.offset < 100 || tc.offset >= end {
				if r.StartOffset() != tc.offset || r.EndOffset() != tc.offset || r.LatestEpoch() != -1 {
					t.Fatalf("recovered [%d, %d) epoch %d, want the empty log at %d", r.StartOffset(), r.EndOffset(), r.LatestEpoch(), tc.offset)
				}
				checkContents(t, r, nil)
			} else {
				if r.StartOffset() < tc.offset {
					t.Fatalf("recovered start %d below %d", r.StartOffset(), tc.offset)
				}
				var want []epochBatch
				for _, b := range all {
					if b.last >= r.StartOffset() && b.base < r.EndOffset() {
						want = append(want, b)
					}
				}
				checkContents(t, r, want)
			}
			end := r.EndOffset()
			more := appendEpochs(t, r, []int32{max(r.LatestEpoch(), 9)}, 2_000_000, 10)
			if more[0].base != end {
				t.Fatalf("append after recovery at %d, want %d", more[0].base, end)
			}
		})
	}
}

// Rule: reads racing with truncations and appends return only whole,
// valid batches from the requested offset on, or OFFSET_OUT_OF_RANGE when
// the offset is gone; never a storage error.
func TestReadsRacingTruncation(t *testing.T) {
	cfg := truncationConfig()
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	appendEpochs(t, l, truncationEpochs, 10_000, 100)
	done := make(chan struct{})
	errc := make(chan error, 4)
	for r := 0; r < 4; r++ {
		go func(r int) {
			for i := 0; ; i++ {
				select {
				case <-done:
					errc <- nil
					return
				default:
				}
				end := l.EndOffset()
				if end == 0 {
					continue
				}
				off := int64((i*7919 + r*104729) % int(end))
				res, err := l.Read(off, 2048, 1<<62)
				if err != nil {
					if c := errs.Code(err); c != sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE {
						errc <- fmt.Errorf("Read(%d): %v", off, err)
						return
					}
					continue
				}
				next := int64(-1)
				for j, b := range res.Batches {
					h, err := batch.Verify(b)
					if err != nil {
						errc <- fmt.Errorf("Read(%d) batch %d: %v", off, j, err)
						return
					}
					if (j == 0 && (h.BaseOffset > off || h.LastOffset() < off)) || (j > 0 && h.BaseOffset != next) {
						errc <- fmt.Errorf("Read(%d) batch %d at %d (after %d)", off, j, h.BaseOffset, next)
						return
					}
					next = h.NextOffset()
				}
			}
		}(r)
	}
	epoch := int32(9)
	for round := 0; round < 40; round++ {
		segs := l.Segments()
		target := segs[len(segs)/2].BaseOffset
		if round%3 == 0 {
			target = l.StartOffset()
		}
		if err := l.TruncateTo(target); err != nil {
			t.Fatal(err)
		}
		epoch++
		appendEpochs(t, l, slices.Repeat([]int32{epoch}, 20), int64(100_000*round), 10)
	}
	close(done)
	for r := 0; r < 4; r++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func BenchmarkTruncateTo(b *testing.B) {
	cfg := DefaultConfig()
	l := openLog(b, b.TempDir(), cfg)
	defer l.Close()
	src := makeBatch(10, t0.UnixMilli(), "bench")
	for b.Loop() {
		b.StopTimer()
		at := l.EndOffset()
		for i := 0; i < 10; i++ {
			if _, err := l.Append(append([]byte(nil), src...), 1, t0); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := l.TruncateTo(at); err != nil {
			b.Fatal(err)
		}
	}
}

// snapshotAt sets l's truncation hook to copy l's directory at every
// step, as a crash at that instant would leave it (the copy sees the
// page cache, so this checks the order of the steps, not the fsyncs).
func snapshotAt(t *testing.T, l *Log) *[]crashSnapshot {
	var snaps []crashSnapshot
	l.truncateHook = func(step string) {
		dir := t.TempDir()
		copyDir(t, l.dir, dir)
		snaps = append(snaps, crashSnapshot{step, dir})
	}
	return &snaps
}

type crashSnapshot struct{ step, dir string }

// Rule: a crash at any step of TruncateTo recovers the untruncated log up
// to the cut of the segment holding the offset and the truncated one from
// it on, even with the recovery point at the old log end (segments
// trusted without a scan) and a high watermark there.
func TestTruncateToCrashAtEveryStep(t *testing.T) {
	cfg := truncationConfig()
	probe := openLog(t, t.TempDir(), cfg)
	all := appendEpochs(t, probe, truncationEpochs, 10_000, 100)
	probe.Close()
	for _, keep := range []int{0, 7, 14, 22, len(all) - 1} {
		offset := all[keep].base
		t.Run(fmt.Sprintf("to %d", offset), func(t *testing.T) {
			l := openLog(t, t.TempDir(), cfg)
			appendEpochs(t, l, truncationEpochs, 10_000, 100)
			l.SetHighWatermark(l.EndOffset())
			if err := l.CheckpointHighWatermark(); err != nil {
				t.Fatal(err)
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			snaps := snapshotAt(t, l)
			if err := l.TruncateTo(offset); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if len(*snaps) < 4 {
				t.Fatalf("only %d crash points", len(*snaps))
			}
			cut := false
			for _, s := range *snaps {
				cut = cut || s.step == "log cut"
				r := openLog(t, s.dir, cfg)
				want := all
				if cut {
					want = all[:keep]
				}
				func() {
					defer r.Close()
					checkContents(t, r, want)
					// The first crash point is after the high watermark
					// checkpoint was lowered.
					if hw := r.HighWatermark(); hw > offset {
						t.Fatalf("crash after %q: high watermark %d above %d", s.step, hw, offset)
					}
					end := r.EndOffset()
					more := appendEpochs(t, r, []int32{20}, 9_000_000, 1)
					if more[0].base != end {
						t.Fatalf("crash after %q: append at %d, want %d", s.step, more[0].base, end)
					}
				}()
			}
			if !cut {
				t.Fatal("no crash point after the cut")
			}
		})
	}
}

// Rule: a crash at any step of TruncateFullyAndStartAt recovers the old
// log before the start checkpoint moves; after it, the new empty log when
// the offset is outside the old log, and otherwise a valid log starting
// at or after the offset.
func TestTruncateFullyCrashAtEveryStep(t *testing.T) {
	cfg := truncationConfig()
	for _, tc := range []struct {
		name   string
		offset func(all []epochBatch) int64
		inside bool
		decide string // the step from which the new log is recovered
	}{
		{"past the end", func(all []epochBatch) int64 { return all[len(all)-1].last + 100 }, false, "start offset moved"},
		{"below the start", func([]epochBatch) int64 { return 20 }, false, "new segment created"},
		{"inside", func(all []epochBatch) int64 { return all[len(all)/2].base }, true, "start offset moved"},
		{"at the start", func([]epochBatch) int64 { return 50 }, true, "start offset moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), cfg)
			if err := l.TruncateFullyAndStartAt(50); err != nil {
				t.Fatal(err)
			}
			all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			offset := tc.offset(all)
			snaps := snapshotAt(t, l)
			if err := l.TruncateFullyAndStartAt(offset); err != nil {
				t.Fatal(err)
			}
			l.Close()
			moved := false
			for _, s := range *snaps {
				moved = moved || s.step == tc.decide
				r := openLog(t, s.dir, cfg)
				func() {
					defer r.Close()
					switch {
					case !moved:
						checkContents(t, r, all)
					case !tc.inside:
						if r.StartOffset() != offset || r.EndOffset() != offset {
							t.Fatalf("crash after %q: [%d, %d), want empty at %d", s.step, r.StartOffset(), r.EndOffset(), offset)
						}
						checkContents(t, r, nil)
					default:
						if r.StartOffset() < offset {
							t.Fatalf("crash after %q: start %d below %d", s.step, r.StartOffset(), offset)
						}
						var want []epochBatch
						for _, b := range all {
							if b.last >= r.StartOffset() && b.base < r.EndOffset() {
								want = append(want, b)
							}
						}
						checkContents(t, r, want)
					}
					end := r.EndOffset()
					more := appendEpochs(t, r, []int32{20}, 9_000_000, 1)
					if more[0].base != end {
						t.Fatalf("crash after %q: append at %d, want %d", s.step, more[0].base, end)
					}
				}()
			}
			if !moved {
				t.Fatal("no crash point after the start checkpoint")
			}
		})
	}
}
