package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// lockDataDir takes an exclusive lock on dir/.lock so that two processes
// (or two nodes of one process) never share a data dir: flock on Unix,
// LockFileEx on Windows. The returned function releases it.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("data dir %s: no exclusive file lock on %s, so no node starts here", dir, runtime.GOOS)
		}
		return nil, fmt.Errorf("data dir %s is in use by another process: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
