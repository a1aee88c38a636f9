//go:build linux

package storage

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing the range [off, off+n)
// of f to disk now, without waiting for it (sync_file_range with
// SYNC_FILE_RANGE_WRITE only). It promises nothing about durability —
// only fsync (flush.messages, flush.ms, segment rolls) does — and errors
// are ignored: it only spreads the kernel's writeback out behind the
// appends, instead of letting gigabytes of dirty pages build up until the
// kernel throttles every writer at once.
func startWriteback(f *os.File, off, n int64) {
	withFD(f, func(fd int) { _ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE) })
}

// dropCache asks the kernel to drop the page-cache pages of [off, off+n)
// of f (posix_fadvise POSIX_FADV_DONTNEED): clean pages go at once, dirty
// ones are left (their writeback is only started). Advisory; errors are
// ignored. Bytes read later come from the disk.
func dropCache(f *os.File, off, n int64) {
	withFD(f, func(fd int) { _ = unix.Fadvise(fd, off, n, unix.FADV_DONTNEED) })
}

// withFD runs advise with f's descriptor (nothing when f has none: both
// callers are advisory).
func withFD(f *os.File, advise func(fd int)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) { advise(int(fd)) })
}
