//go:build linux

package storage

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages returns how many pages of [from, to) of the file at path
// are in the page cache (mincore on a shared mapping).
func residentPages(t *testing.T, path string, from, to int64) (resident, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(to), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (to+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for i := from / page; i < int64(len(vec)); i++ {
		total++
		if vec[i]&1 != 0 {
			resident++
		}
	}
	return resident, total
}

// appendBytes appends about n bytes in batches of ~64 KiB.
func appendBytes(t *testing.T, l *Log, n int, tag string) {
	t.Helper()
	value := bytes.Repeat([]byte("v"), 64<<10)
	for i := 0; i*len(value) < n; i++ {
		b := makeBatch(1, t0.UnixMilli(), fmt.Sprintf("%s-%d-%s", tag, i, value))
		if _, err := l.Append(b, fillEpoch, t0); err != nil {
			t.Fatal(err)
		}
	}
}

// With a page-cache window, the written-back bytes of a segment older than
// the window leave the page cache while the newest stay; reads of the
// dropped range still return every batch (from the disk). Without one
// the pages stay.
func TestPageCacheWindowDropsOlderPages(t *testing.T) {
	const window = 2 << 20
	cfg := DefaultConfig()
	for _, w := range []int64{window, 0} {
		t.Run(fmt.Sprintf("window=%d", w), func(t *testing.T) {
			dir := t.TempDir()
			l, err := OpenWith(dir, cfg, t0, Options{PageCacheWindow: w})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			appendBytes(t, l, 8<<20, "first")
			// Clean pages are dropped, dirty ones are not: make the first
			// 8 MiB clean, then append on so that the drops come.
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			appendBytes(t, l, 4<<20, "second")
			path := l.active().path
			size := l.Size()
			old, oldTotal := residentPages(t, path, 0, 6<<20)
			newest, newTotal := residentPages(t, path, size-window/2, size)
			t.Logf("resident: %d of %d pages of the first 6 MiB, %d of %d of the newest MiB", old, oldTotal, newest, newTotal)
			if newest < newTotal*9/10 {
				t.Fatalf("only %d of %d pages of the newest bytes are cached", newest, newTotal)
			}
			if w > 0 && old > oldTotal/10 {
				t.Fatalf("%d of %d pages older than the window are still cached", old, oldTotal)
			}
			if w == 0 && old < oldTotal*9/10 {
				t.Fatalf("without a window only %d of %d pages are cached (the test machine evicts on its own)", old, oldTotal)
			}
			if got := readAll(t, l); len(got) == 0 {
				t.Fatal("nothing read back")
			}
		})
	}
}
