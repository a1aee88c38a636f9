package storage

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// Reads that start at a remembered frame (the newest batches) return what
// an index walk returns, at every offset, and stay right after truncations
// that reuse the same positions for different batches.
func TestReadNewestBatchesFromRememberedFrames(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20 // one segment: positions are reused after the cut
	cfg.IndexIntervalBytes = 1 << 16
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()

	check := func(when string, want []stored) {
		t.Helper()
		for _, w := range want {
			for off := w.base; off <= w.last; off++ {
				res, err := l.Read(off, 1, 1<<62)
				if err != nil {
					t.Fatalf("%s: Read(%d): %v", when, off, err)
				}
				if len(res.Batches) != 1 {
					t.Fatalf("%s: Read(%d) returned %d batches", when, off, len(res.Batches))
				}
				h, err := batch.ParseHeader(res.Batches[0])
				if err != nil || h.BaseOffset != w.base || !bytes.Equal(res.Batches[0][batch.HeaderSize:], w.bytes[batch.HeaderSize:]) {
					t.Fatalf("%s: Read(%d) = batch at %d (%v), want the one at %d", when, off, h.BaseOffset, err, w.base)
				}
			}
		}
	}
	all := fill(t, l, 40, 3, t0.UnixMilli())
	check("after appends", all)

	// Cut to the middle, then append batches of other sizes: the old
	// positions now hold other frames.
	cut := all[25].base
	if err := l.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	// Fewer appends than the remembered frames: stale positions of the
	// cut batches would still be there to mislead a read.
	var again []stored
	for i := 0; i < 6; i++ {
		b := makeBatch(1+(i*7)%5, t0.UnixMilli()+int64(i), fmt.Sprintf("again-%d-%s", i, bytes.Repeat([]byte("x"), i*3)))
		res, err := l.Append(b, fillEpoch, t0)
		if err != nil {
			t.Fatalf("append after the cut: %v", err)
		}
		again = append(again, stored{res.BaseOffset, res.LastOffset, append([]byte(nil), b...)})
	}
	check("after a cut and new appends", append(all[:25:25], again...))

	// Emptied and restarted: nothing remembered survives either.
	next := l.EndOffset() + 100
	if err := l.TruncateFullyAndStartAt(next); err != nil {
		t.Fatal(err)
	}
	fresh := fill(t, l, 10, 4, t0.UnixMilli())
	check("after a full truncation", fresh)
}

// DataChanged wakes at appends and truncations, not at high-watermark
// advances (which Changed wakes at).
func TestDataChangedIgnoresHighWatermark(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	fill(t, l, 3, 2, t0.UnixMilli())
	data, any := l.DataChanged(), l.Changed()
	l.SetHighWatermark(l.EndOffset())
	if closed(data) || !closed(any) {
		t.Fatalf("high watermark advance: DataChanged closed %v (want false), Changed closed %v (want true)", closed(data), closed(any))
	}
	data = l.DataChanged()
	fill(t, l, 1, 1, t0.UnixMilli())
	if !closed(data) {
		t.Fatal("append: DataChanged not closed")
	}
	data = l.DataChanged()
	if err := l.TruncateTo(l.EndOffset() - 1); err != nil {
		t.Fatal(err)
	}
	if !closed(data) {
		t.Fatal("truncation: DataChanged not closed")
	}
}

// Appends hand each written MiB of a segment to the kernel's writeback
// (startWriteback) behind them; a truncation pulls the mark back within
// the segment.
func TestWritebackFollowsAppends(t *testing.T) {
	cfg := DefaultConfig()
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	for i := 0; i < 64; i++ {
		bl.Add(t0.UnixMilli(), []byte(fmt.Sprintf("k%d", i)), bytes.Repeat([]byte("v"), 1000), nil)
	}
	src := bl.Finish(batch.PlainProducer, 0)
	var mid int64
	for i := 0; l.Size() < 3*writebackChunk+1; i++ {
		res, err := l.Append(append([]byte(nil), src...), 1, t0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			mid = res.BaseOffset
		}
	}
	s := l.active()
	if s.wbFrom <= 0 || s.wbFrom > s.size || s.size-s.wbFrom >= writebackChunk {
		t.Fatalf("writeback started up to %d of %d bytes, want within %d bytes of the end", s.wbFrom, s.size, writebackChunk)
	}
	if err := l.TruncateTo(mid); err != nil {
		t.Fatal(err)
	}
	if s := l.active(); s.wbFrom > s.size {
		t.Fatalf("after the cut the writeback mark %d is past the segment's %d bytes", s.wbFrom, s.size)
	}
}
