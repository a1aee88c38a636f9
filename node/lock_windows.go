//go:build windows

package node

import (
	"os"

	"golang.org/x/sys/windows"
)

// flock takes an exclusive lock on the first byte of f without blocking;
// the lock goes with the file's close (or the process's end).
func flock(f *os.File) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY,
		0, 1, 0, new(windows.Overlapped))
}
