package node

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDataDir takes an exclusive lock file so that two processes never
// share a data dir.
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir %s is in use by another process: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
