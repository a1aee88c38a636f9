package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/sluice-io/sluice/internal/fdlimit"
)

// openCount is the process's open descriptors, skipping the test where
// they cannot be counted.
func openCount(t testing.TB) int {
	t.Helper()
	n, ok := fdlimit.Open()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("cannot count open file descriptors in /proc/self/fd")
		}
		t.Skip("no /proc/self/fd to count open file descriptors on " + runtime.GOOS)
	}
	return n
}

// segFiles creates n files of 64 bytes each (file i holds byte i%256
// repeated) in cache.
func segFiles(t testing.TB, cache *FileCache, n int) []*segFile {
	t.Helper()
	dir := t.TempDir()
	out := make([]*segFile, n)
	for i := range out {
		sf, err := openSegFile(cache, filepath.Join(dir, fmt.Sprintf("%d", i)), os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sf.WriteAt(bytes.Repeat([]byte{byte(i)}, 64), 0); err != nil {
			t.Fatal(err)
		}
		out[i] = sf
	}
	t.Cleanup(func() {
		for _, sf := range out {
			sf.close()
		}
	})
	return out
}

func checkRead(t testing.TB, sf *segFile, i int) {
	t.Helper()
	buf := make([]byte, 64)
	if _, err := sf.ReadAt(buf, 0); err != nil {
		t.Fatalf("read file %d: %v", i, err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{byte(i)}, 64)) {
		t.Fatalf("file %d reads %v", i, buf[:4])
	}
}

// The cache keeps at most its budget of files open once no file is in
// use, however many files pass through it; files evicted are reopened by
// the next use with their contents.
func TestFileCacheKeepsOpenFilesWithinBudget(t *testing.T) {
	cache := NewFileCache(16)
	before := openCount(t)
	files := segFiles(t, cache, 200)
	if got := cache.Open(); got > cache.Budget() {
		t.Fatalf("%d files open after creating 200, budget %d", got, cache.Budget())
	}
	for round := 0; round < 3; round++ {
		for i, sf := range files {
			checkRead(t, sf, i)
		}
	}
	if got := cache.Open(); got > cache.Budget() {
		t.Fatalf("%d files open, budget %d", got, cache.Budget())
	}
	if got := openCount(t) - before; got > cache.Budget()+2 {
		t.Fatalf("%d descriptors open for a cache of budget %d", got, cache.Budget())
	}
	if cache.Evictions() == 0 || cache.Opens() <= 200 {
		t.Fatalf("opens %d, evictions %d: expected reopens after evictions", cache.Opens(), cache.Evictions())
	}
	// A file read over and over stays open: the CLOCK hand skips it.
	hot := files[0]
	opens := cache.Opens()
	for i := 1; i < len(files); i++ {
		checkRead(t, hot, 0)
		checkRead(t, files[i], i)
	}
	// CLOCK approximates LRU: a sweep that finds every file marked clears
	// them all and may take the hot one, rarely.
	if reopened := cache.Opens() - opens; reopened > uint64(len(files)-1+5) {
		t.Fatalf("%d opens for %d cold reads: the hot file was reopened with them", reopened, len(files)-1)
	}
}

// A file in use is never closed by an eviction: its user reads it after
// the cache opened and evicted many others.
func TestFileCacheNeverClosesAFileInUse(t *testing.T) {
	cache := NewFileCache(8)
	files := segFiles(t, cache, 64)
	f, err := files[3].acquire()
	if err != nil {
		t.Fatal(err)
	}
	for i, sf := range files {
		checkRead(t, sf, i)
	}
	buf := make([]byte, 64)
	if _, err := f.ReadAt(buf, 0); err != nil || buf[0] != 3 {
		t.Fatalf("the held file reads %v, %v after evictions", buf[:1], err)
	}
	// Closed for good while held: the holder keeps it until its release,
	// a new use gets os.ErrClosed.
	files[3].close()
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("held file closed under its user: %v", err)
	}
	if _, err := files[3].ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read of a closed segment file: %v, want os.ErrClosed", err)
	}
	open := cache.Open()
	files[3].release()
	if cache.Open() != open-1 {
		t.Fatalf("the last release of a closed file left it open (%d → %d)", open, cache.Open())
	}
}

// A reopen does not create: a segment file deleted behind the log's back
// fails its next use instead of coming back empty.
func TestSegFileReopenDoesNotCreate(t *testing.T) {
	cache := NewFileCache(8)
	files := segFiles(t, cache, 32) // file 0 is evicted by the later ones
	if err := os.Remove(files[0].Name()); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(files); i++ {
		checkRead(t, files[i], i)
	}
	if _, err := files[0].ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read of a deleted, evicted file: %v, want ENOENT", err)
	}
	if _, err := os.Stat(files[0].Name()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the reopen recreated the file: %v", err)
	}
}

// A renamed file is reopened by its new name.
func TestSegFileRenameReopensByNewName(t *testing.T) {
	cache := NewFileCache(8)
	files := segFiles(t, cache, 32)
	newPath := files[0].Name() + ".renamed"
	if err := files[0].rename(newPath); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		checkRead(t, files[i], i)
	}
	if files[0].Name() != newPath {
		t.Fatalf("name %s, want %s", files[0].Name(), newPath)
	}
}

// Sync skips a file not written since its last fsync, so that syncing a
// segment does not reopen its evicted, unchanged index files; a file
// evicted with unsynced writes is reopened and synced.
func TestSegFileSyncOnlyWhenDirty(t *testing.T) {
	cache := NewFileCache(8)
	files := segFiles(t, cache, 32) // all written: dirty
	for _, sf := range files {
		if err := sf.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	opens := cache.Opens()
	for _, sf := range files {
		if err := sf.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if cache.Opens() != opens {
		t.Fatalf("syncing clean files opened %d", cache.Opens()-opens)
	}
}

// Concurrent readers, writers and closers of files in a cache much
// smaller than the files in use: every read returns its file's bytes or
// os.ErrClosed (after close), never another file's, and the cache ends
// within its budget. Run with -race.
func TestFileCacheConcurrentUse(t *testing.T) {
	cache := NewFileCache(8)
	files := segFiles(t, cache, 64)
	var wg sync.WaitGroup
	var closed sync.Map
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 64)
			for k := 0; k < 2000; k++ {
				i := r.IntN(len(files))
				switch {
				case g == 0 && k%100 == 99:
					closed.Store(i, true) // before: a reader may see the close at once
					files[i].close()
				case g == 1 && k%10 == 0:
					if _, err := files[i].WriteAt(bytes.Repeat([]byte{byte(i)}, 64), 0); err != nil && !errors.Is(err, os.ErrClosed) {
						t.Errorf("write %d: %v", i, err)
					}
				default:
					_, err := files[i].ReadAt(buf, 0)
					if errors.Is(err, os.ErrClosed) {
						if _, ok := closed.Load(i); !ok {
							t.Errorf("read %d: closed but not by the test", i)
						}
						continue
					}
					if err != nil || !bytes.Equal(buf, bytes.Repeat([]byte{byte(i)}, 64)) {
						t.Errorf("read %d: %v %v", i, buf[:2], err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if cache.Open() > cache.Budget() {
		t.Fatalf("%d open after the users left, budget %d", cache.Open(), cache.Budget())
	}
}
