package storage

import (
	"bytes"
	"testing"
	"unsafe"
)

// ReadInto returns what Read returns, with the batches read from the file
// inside the buffers alloc handed out, whatever those held before.
func TestReadIntoUsesTheCallersBuffers(t *testing.T) {
	cfg := testConfig()
	cfg.SegmentBytes = 1 << 20
	l := openLog(t, t.TempDir(), cfg)
	defer l.Close()
	fill(t, l, 600, 4, t0.UnixMilli()) // far more than a segment keeps in memory

	var handed [][]byte
	alloc := func(n int) []byte {
		b := bytes.Repeat([]byte{0xab}, n+100) // stale contents, longer than asked
		handed = append(handed, b)
		return b[:n]
	}
	inHanded := func(b []byte) bool {
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		for _, h := range handed {
			s := uintptr(unsafe.Pointer(unsafe.SliceData(h)))
			if p >= s && p+uintptr(len(b)) <= s+uintptr(len(h)) {
				return true
			}
		}
		return false
	}
	fromFile := 0
	for off := l.StartOffset(); off < l.EndOffset(); off += 7 {
		for _, maxBytes := range []int{1, 700, 5000} {
			want, err := l.Read(off, maxBytes, 1<<62)
			if err != nil {
				t.Fatal(err)
			}
			before := len(handed)
			got, err := l.ReadInto(off, maxBytes, 1<<62, alloc)
			if err != nil {
				t.Fatal(err)
			}
			if got.NextOffset != want.NextOffset || len(got.Batches) != len(want.Batches) {
				t.Fatalf("ReadInto(%d, %d): next %d, %d batches; Read: next %d, %d batches", off, maxBytes,
					got.NextOffset, len(got.Batches), want.NextOffset, len(want.Batches))
			}
			for i := range want.Batches {
				if !bytes.Equal(got.Batches[i], want.Batches[i]) {
					t.Fatalf("ReadInto(%d, %d): batch %d differs from Read's", off, maxBytes, i)
				}
				if len(handed) > before {
					if !inHanded(got.Batches[i]) {
						t.Fatalf("ReadInto(%d, %d): batch %d is not in a buffer alloc handed out", off, maxBytes, i)
					}
					fromFile++
				}
			}
		}
	}
	if fromFile == 0 {
		t.Fatal("no read went to the file: the test reads nothing through alloc")
	}
}
