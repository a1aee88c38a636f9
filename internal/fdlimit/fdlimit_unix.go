//go:build unix

package fdlimit

import (
	"os"
	"syscall"
)

// Get returns the process's soft (current) and hard (maximum) limits on
// open file descriptors. The Go runtime raises the soft limit to the hard
// one when the process starts (Go 1.19 and later, on Unix systems but
// macOS's hard-limit caveat aside), so soft is normally already hard.
func Get() (soft, hard uint64, err error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, 0, err
	}
	return uint64(l.Cur), uint64(l.Max), nil
}

// Open counts the process's open file descriptors by listing
// /proc/self/fd (Linux) or /dev/fd; ok is false when neither can be
// listed (listing needs a descriptor itself: at the limit it fails).
func Open() (n int, ok bool) {
	for _, dir := range []string{"/proc/self/fd", "/dev/fd"} {
		if es, err := os.ReadDir(dir); err == nil {
			return len(es) - 1, true // less the one listing it
		}
	}
	return 0, false
}
