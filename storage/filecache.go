package storage

import (
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/internal/fdlimit"
)

// Segment files are opened under a node-wide budget (issue 29, decision
// 50 in docs/design.md).
//
// A segment has four files (.log, .index, .timeindex, .txnindex), and
// every one of them used to stay open for the life of the segment: about
// 4,900 partitions, or one topic of 6,000, took every descriptor of a
// process with a limit of 20,000, and a node with that many partitions on
// disk could not even restart (it opened them all). Yet a partition needs
// few of them most of the time: the indexes are held in memory (index.go)
// and their files are only appended to, once per index interval, by the
// active segment; a sealed segment's .log is read only by consumers
// behind the tail. So the files are opened on demand through a FileCache
// shared by every Log of the process, as RocksDB's table cache bounds a
// database's open table files (max_open_files):
//
//   - every segment file is a segFile: a path and, while the file is in
//     the cache, its *os.File. Each operation acquires it (opening it if
//     it was closed), does its system call, and releases it; a file in use
//     is never closed under its user (reference counts), so a reader
//     never sees its file closed by an eviction;
//   - the cache keeps at most its budget of files open: past it, a file
//     no one uses and no one used since the last sweep is closed (the
//     CLOCK approximation of least-recently-used; an acquire costs one
//     uncontended per-file mutex and no cache-wide lock, so reads of many
//     partitions do not serialise on the cache). Files in use are never
//     closed, so the budget can be exceeded by the files being used at
//     that instant (a bounded number: one or two per storage operation in
//     progress);
//   - a file is reopened by its path, without O_CREATE or O_TRUNC: a
//     segment file that disappeared fails its operation (a disk failure,
//     as any lost file is) rather than come back empty. Before a segment's
//     file is deleted or renamed by the log, the segment's segFile is
//     closed (segment.close: later operations get os.ErrClosed, as on a
//     closed *os.File) or renamed through it (segFile.rename), so a reopen
//     never finds another file under the old name;
//   - an fsync is done only if the segFile was written since the last one
//     (dirty): a file evicted with unsynced writes is reopened to be
//     synced. Its dirty pages belong to the inode, not the descriptor, so
//     the fsync of a new descriptor writes them; a writeback error that
//     happened while no descriptor was open is reported to the next
//     opener's fsync (Linux 4.16 and later report an error no one has seen
//     yet), so durability is as before.
//
// Running out of descriptors while reopening is a resource error, not a
// disk failure (resource.go): the operation fails retriably and the log
// stays online.

// FileCache bounds the segment files open at once across the logs that
// share it. Safe for concurrent use. Lock order: FileCache.mu before a
// segFile's mu, and the sweep, which holds FileCache.mu, takes a
// segFile's only with TryLock (skipping a file whose lock is held); a
// segFile's holder never takes FileCache.mu.
type FileCache struct {
	budget int

	open      atomic.Int64  // descriptors open now (in the ring or held by users)
	opens     atomic.Uint64 // files opened (reopens included), for metrics and tests
	evictions atomic.Uint64 // files closed to stay within the budget
	// over is set when a sweep left the cache above its budget (every
	// candidate was in use); the next release sweeps again.
	over atomic.Bool

	mu   sync.Mutex // guards the following
	hand *segFile   // the CLOCK hand; nil when the ring is empty
	n    int        // files in the ring
}

// NewFileCache returns a cache that keeps at most budget segment files
// open (at least 8: a log needs its active segment's four files and a
// roll opens four more).
func NewFileCache(budget int) *FileCache {
	return &FileCache{budget: max(budget, 8)}
}

// Budget is the cache's limit on open files.
func (c *FileCache) Budget() int { return c.budget }

// Open is how many segment files are open now.
func (c *FileCache) Open() int { return int(c.open.Load()) }

// Opens counts the files the cache opened since it was created, reopens
// after an eviction included.
func (c *FileCache) Opens() uint64 { return c.opens.Load() }

// Evictions counts the files closed to keep within the budget.
func (c *FileCache) Evictions() uint64 { return c.evictions.Load() }

// DefaultOpenFilesShare is the share of the process's open-files limit
// (RLIMIT_NOFILE) that the default FileCache uses: a quarter, 5,000 of
// 20,000. The connection limits take up to 61% (node/connlimit.go: half
// for clients, a tenth for the internal listener, a hundredth for HTTP),
// leaving 14% to Raft, gossip, outgoing connections and the checkpoint
// files storage writes (one open at a time per operation).
const DefaultOpenFilesShare = 4

// DefaultMaxOpenFiles is the default FileCache budget for a process whose
// open-files limit is nofile: nofile/DefaultOpenFilesShare, at least 64.
func DefaultMaxOpenFiles(nofile int) int {
	return max(nofile/DefaultOpenFilesShare, 64)
}

// DefaultMaxReplicas is how many partition replicas a broker whose
// open-files limit is nofile accepts by default (the controller refuses a
// topic creation or reassignment that would place more on it): twice its
// segment-file budget, nofile/2 — 10,000 with a limit of 20,000. A written
// partition keeps its active segment's .log open (and its index files
// while appends reach an index interval); with up to half of the replicas
// written at once their files stay in the cache, beyond that appends
// reopen their files (a few microseconds each) instead of failing.
func DefaultMaxReplicas(nofile int) int {
	return 2 * DefaultMaxOpenFiles(nofile)
}

// OpenFilesLimit is the open-files limit the budgets derive from
// (fdlimit.Limit).
func OpenFilesLimit() int { return fdlimit.Limit() }

var (
	defaultCacheOnce sync.Once
	defaultCache     *FileCache
)

// DefaultFileCache is the process's cache for logs opened without
// Options.Files: budget DefaultMaxOpenFiles(OpenFilesLimit()), read at its
// first use. The open-files limit is the process's, so one cache for all
// its logs is what bounds them.
func DefaultFileCache() *FileCache {
	defaultCacheOnce.Do(func() { defaultCache = NewFileCache(DefaultMaxOpenFiles(OpenFilesLimit())) })
	return defaultCache
}

// link adds sf, just opened, to the ring (unless it is already there or
// closed for good) and sweeps if the cache is over its budget.
func (c *FileCache) link(sf *segFile) {
	c.mu.Lock()
	if !sf.linked && !sf.gone.Load() {
		sf.linked = true
		if c.hand == nil {
			sf.prev, sf.next = sf, sf
			c.hand = sf
		} else {
			// Behind the hand: the last file the sweep reaches.
			sf.prev, sf.next = c.hand.prev, c.hand
			c.hand.prev.next = sf
			c.hand.prev = sf
		}
		c.n++
	}
	victims := c.sweepLocked()
	c.mu.Unlock()
	closeAll(victims)
}

// unlink removes sf from the ring if it is there.
func (c *FileCache) unlink(sf *segFile) {
	c.mu.Lock()
	c.unlinkLocked(sf)
	c.mu.Unlock()
}

func (c *FileCache) unlinkLocked(sf *segFile) {
	if !sf.linked {
		return
	}
	sf.linked = false
	c.n--
	if c.n == 0 {
		c.hand = nil
	} else {
		if c.hand == sf {
			c.hand = sf.next
		}
		sf.prev.next = sf.next
		sf.next.prev = sf.prev
	}
	sf.prev, sf.next = nil, nil
}

// sweep closes unused files until the cache is within its budget.
func (c *FileCache) sweep() {
	c.mu.Lock()
	victims := c.sweepLocked()
	c.mu.Unlock()
	closeAll(victims)
}

// sweepLocked moves the CLOCK hand until the cache is within its budget
// or two turns of the ring found nothing to close: a file in use is
// skipped, a file used since the hand last passed loses its mark and is
// skipped, an unmarked unused file is taken out of the ring and returned
// to be closed (after c.mu is released). Files already closed (by their
// segment) leave the ring as the hand passes them. The caller holds c.mu.
func (c *FileCache) sweepLocked() []*os.File {
	var victims []*os.File
	for steps := 2 * c.n; steps > 0 && c.hand != nil && c.open.Load() > int64(c.budget); steps-- {
		sf := c.hand
		c.hand = sf.next
		if !sf.mu.TryLock() {
			continue // being acquired or released: in use
		}
		switch {
		case sf.f == nil:
			c.unlinkLocked(sf)
		case sf.refs > 0:
		case sf.used:
			sf.used = false
		default:
			victims = append(victims, sf.f)
			sf.f = nil
			c.open.Add(-1)
			c.evictions.Add(1)
			c.unlinkLocked(sf)
		}
		sf.mu.Unlock()
	}
	c.over.Store(c.open.Load() > int64(c.budget))
	return victims
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close() // only read or written through; fsyncs are explicit
	}
}

// segFile is one file of a segment, opened on demand through a FileCache.
// Safe for concurrent use; its methods mirror *os.File's, each acquiring
// the file for the duration of its system call.
type segFile struct {
	cache *FileCache
	// gone is set once by close: the file is never opened again. It is
	// also read by FileCache.link under the cache's lock.
	gone atomic.Bool

	mu    sync.Mutex // guards the following
	path  string
	flag  int      // os.OpenFile flags of the next open: O_CREATE (and O_TRUNC) only the first time
	f     *os.File // nil while closed
	refs  int      // users holding f
	used  bool     // acquired since the CLOCK hand last passed
	dirty bool     // written since the last successful fsync

	// ring links, guarded by cache.mu
	prev, next *segFile
	linked     bool
}

// openSegFile opens the file at path with flag (the first open: it may
// create or truncate it) into cache and returns it, unused: the open's
// error, EMFILE included, comes back here rather than at a later use.
func openSegFile(cache *FileCache, path string, flag int) (*segFile, error) {
	sf := newSegFile(cache, path, flag)
	if _, err := sf.acquire(); err != nil {
		return nil, err
	}
	sf.release()
	return sf, nil
}

// newSegFile is openSegFile without the open: the file is opened (with
// flag: created, if O_CREATE) at its first use. A file created so is
// dirty until synced, so a Sync creates it at the latest.
func newSegFile(cache *FileCache, path string, flag int) *segFile {
	return &segFile{cache: cache, path: path, flag: flag, dirty: flag&(os.O_CREATE|os.O_TRUNC) != 0}
}

// acquire returns the open file, opening it if needed; the caller must
// call release once done with it and must not close it.
func (sf *segFile) acquire() (*os.File, error) {
	sf.mu.Lock()
	if sf.gone.Load() {
		sf.mu.Unlock()
		return nil, &fs.PathError{Op: "open", Path: sf.path, Err: os.ErrClosed}
	}
	if sf.f != nil {
		sf.refs++
		sf.used = true
		f := sf.f
		sf.mu.Unlock()
		return f, nil
	}
	f, err := os.OpenFile(sf.path, sf.flag, 0o644)
	if err != nil {
		sf.mu.Unlock()
		return nil, err
	}
	sf.flag &^= os.O_CREATE | os.O_TRUNC | os.O_EXCL
	sf.f, sf.refs, sf.used = f, sf.refs+1, true
	c := sf.cache
	c.open.Add(1)
	c.opens.Add(1)
	sf.mu.Unlock()
	c.link(sf)
	return f, nil
}

// release ends a use that acquire began. The last user of a file closed
// meanwhile (close) closes it.
func (sf *segFile) release() {
	sf.mu.Lock()
	sf.refs--
	var f *os.File
	if sf.refs == 0 && sf.f != nil && sf.gone.Load() {
		f, sf.f = sf.f, nil
		sf.cache.open.Add(-1)
	}
	sf.mu.Unlock()
	if f != nil {
		_ = f.Close()
	} else if sf.cache.over.Load() {
		sf.cache.sweep()
	}
}

// close closes the file for good: later operations fail with
// os.ErrClosed. A user still holding the file keeps it until its release.
func (sf *segFile) close() error {
	if sf == nil {
		return nil
	}
	sf.mu.Lock()
	if sf.gone.Load() {
		sf.mu.Unlock()
		return nil
	}
	sf.gone.Store(true)
	var f *os.File
	if sf.refs == 0 && sf.f != nil {
		f, sf.f = sf.f, nil
		sf.cache.open.Add(-1)
	}
	sf.mu.Unlock()
	sf.cache.unlink(sf)
	if f != nil {
		return f.Close()
	}
	return nil
}

// rename renames the file to newPath (os.Rename) and reopens it by that
// name from then on; the descriptor, if open, stays valid.
func (sf *segFile) rename(newPath string) error {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if err := os.Rename(sf.path, newPath); err != nil {
		// A file not created yet (newSegFile) is empty wherever it is:
		// it is created at the new path at its first use.
		if !errors.Is(err, os.ErrNotExist) || sf.f != nil || sf.flag&os.O_CREATE == 0 {
			return err
		}
	}
	sf.path = newPath
	return nil
}

// Name is the file's current path.
func (sf *segFile) Name() string {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return sf.path
}

// markDirty notes a write, for the next Sync.
func (sf *segFile) markDirty() {
	sf.mu.Lock()
	sf.dirty = true
	sf.mu.Unlock()
}

// ReadAt is (*os.File).ReadAt.
func (sf *segFile) ReadAt(p []byte, off int64) (int, error) {
	f, err := sf.acquire()
	if err != nil {
		return 0, err
	}
	defer sf.release()
	return f.ReadAt(p, off)
}

// WriteAt is (*os.File).WriteAt.
func (sf *segFile) WriteAt(p []byte, off int64) (int, error) {
	f, err := sf.acquire()
	if err != nil {
		return 0, err
	}
	defer sf.release()
	n, err := f.WriteAt(p, off)
	if n > 0 || err == nil {
		sf.markDirty()
	}
	return n, err
}

// Truncate is (*os.File).Truncate, skipped when the file already has
// that size: ext4 flushes a file truncated to 0 when it is closed
// (auto_da_alloc), which an eviction of a new segment's index files
// would otherwise pay for.
func (sf *segFile) Truncate(size int64) error {
	f, err := sf.acquire()
	if err != nil {
		return err
	}
	defer sf.release()
	if st, err := f.Stat(); err == nil && st.Size() == size {
		return nil
	}
	sf.markDirty()
	return f.Truncate(size)
}

// Sync is (*os.File).Sync, skipped when nothing was written since the
// last successful one.
func (sf *segFile) Sync() error {
	sf.mu.Lock()
	dirty := sf.dirty
	sf.dirty = false
	sf.mu.Unlock()
	if !dirty {
		return nil
	}
	f, err := sf.acquire()
	if err == nil {
		err = f.Sync()
		sf.release()
	}
	if err != nil {
		sf.markDirty()
	}
	return err
}

// Stat is (*os.File).Stat.
func (sf *segFile) Stat() (os.FileInfo, error) {
	f, err := sf.acquire()
	if err != nil {
		return nil, err
	}
	defer sf.release()
	return f.Stat()
}
