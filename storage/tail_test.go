package storage

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/sluice-io/sluice/proto/batch"
)

// inTail reports whether p is a slice of the active segment's in-memory
// tail (the read was served from memory, not from the file).
func inTail(l *Log, p []byte) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	tail := l.active().tail
	if len(p) == 0 || len(tail) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(tail)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return at >= start && at < start+uintptr(len(tail))
}

// The newest small batches are read from the segment's in-memory copy and
// equal what the file holds; a batch larger than the copy's bound is read
// from the file, and the copy starts again after it.
func TestNewestFramesAreReadFromMemory(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 30
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	all := fill(t, l, 30, 3, t0.UnixMilli())
	for _, w := range all[len(all)-5:] {
		res, err := l.Read(w.base, 1<<20, 1<<62)
		if err != nil || len(res.Batches) == 0 {
			t.Fatalf("Read(%d): %d batches, %v", w.base, len(res.Batches), err)
		}
		if !inTail(l, res.Batches[0]) {
			t.Fatalf("Read(%d) of a newest batch was not served from memory", w.base)
		}
		if !bytes.Equal(res.Batches[0][batch.HeaderSize:], w.bytes[batch.HeaderSize:]) {
			t.Fatalf("Read(%d) from memory differs from the batch appended", w.base)
		}
	}

	// A batch over tailMax: read from the file, and the copy is empty.
	big := makeBatch(1, t0.UnixMilli(), string(bytes.Repeat([]byte("B"), tailMax+1)))
	res, err := l.Append(big, fillEpoch, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(res.BaseOffset, 1<<20, 1<<62)
	if err != nil || len(got.Batches) != 1 || inTail(l, got.Batches[0]) {
		t.Fatalf("Read of the large batch: %d batches, in memory %v, %v", len(got.Batches), len(got.Batches) > 0 && inTail(l, got.Batches[0]), err)
	}
	if !bytes.Equal(got.Batches[0][batch.HeaderSize:], big[batch.HeaderSize:]) {
		t.Fatal("large batch read back differs")
	}
	after := fill(t, l, 3, 2, t0.UnixMilli())
	got, err = l.Read(after[0].base, 1<<20, 1<<62)
	if err != nil || len(got.Batches) != 3 || !inTail(l, got.Batches[0]) {
		t.Fatalf("Read after the large batch: %d batches, %v (want 3 from memory)", len(got.Batches), err)
	}

	// What memory served is what the file holds: reopen and compare.
	want := readAll(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	fromFile := readAll(t, l)
	if len(fromFile) != len(want) {
		t.Fatalf("reopened log has %d batches, want %d", len(fromFile), len(want))
	}
	for i := range want {
		if !bytes.Equal(want[i], fromFile[i]) {
			t.Fatalf("batch %d read before the reopen differs from the file", i)
		}
	}
}

// A reader keeps the slices it was given while later appends fill the
// copy and start a new one, and a truncation drops it: reads after the cut
// see the new batches, never the cut ones.
func TestTailSlicesStayValidAndTruncationDropsThem(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 30
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	first := fill(t, l, 5, 2, t0.UnixMilli())
	res, err := l.Read(first[4].base, 1<<20, 1<<62)
	if err != nil || len(res.Batches) != 1 || !inTail(l, res.Batches[0]) {
		t.Fatalf("Read newest: %d batches, %v", len(res.Batches), err)
	}
	held := res.Batches[0]
	saved := append([]byte(nil), held...)
	// Appends that fill tailMax several times over.
	pad := string(bytes.Repeat([]byte("p"), 3000))
	for i := 0; i < 3*tailMax/3000; i++ {
		if _, err := l.Append(makeBatch(1, t0.UnixMilli(), fmt.Sprintf("%s-%d", pad, i)), fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(held, saved) {
		t.Fatal("a slice a reader held changed under later appends")
	}

	// Cut back to first[2] and append different batches at the same
	// positions.
	if err := l.TruncateTo(first[2].base); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		b := makeBatch(2, t0.UnixMilli(), fmt.Sprintf("new-%d", i))
		r, err := l.Append(b, fillEpoch, t0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Read(r.BaseOffset, 1<<20, 1<<62)
		if err != nil || len(got.Batches) != 1 {
			t.Fatalf("Read(%d) after the cut: %d batches, %v", r.BaseOffset, len(got.Batches), err)
		}
		if !bytes.Equal(got.Batches[0][batch.HeaderSize:], b[batch.HeaderSize:]) {
			t.Fatalf("Read(%d) after the cut returned another batch than the one appended there", r.BaseOffset)
		}
	}
}

// Readers of the newest batches race with the appender (run under -race):
// every batch read is the one appended at its offset.
func TestTailReadsRaceWithAppends(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 256 << 10 // a few rolls on the way
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	var appended sync.Map // base offset -> batch bytes as appended
	const n = 1500
	done := make(chan struct{})
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				end := l.EndOffset()
				if end == 0 {
					continue
				}
				res, err := l.Read(max(end-3, l.StartOffset()), 1<<20, 1<<62)
				if err != nil {
					errc <- err
					return
				}
				for _, b := range res.Batches {
					h, err := batch.ParseHeader(b)
					if err != nil {
						errc <- err
						return
					}
					w, ok := appended.Load(h.BaseOffset)
					if !ok {
						errc <- fmt.Errorf("read batch at %d before its append returned", h.BaseOffset)
						return
					}
					if !bytes.Equal(b[batch.HeaderSize:], w.([]byte)[batch.HeaderSize:]) {
						errc <- fmt.Errorf("batch at %d read back differs from the one appended", h.BaseOffset)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		b := makeBatch(1+i%3, t0.UnixMilli(), fmt.Sprintf("race-%d-%s", i, bytes.Repeat([]byte("v"), i%700)))
		// Recorded under the offset it will get before the append
		// publishes it (only this goroutine appends).
		appended.Store(l.EndOffset(), append([]byte(nil), b...))
		if _, err := l.Append(b, fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
