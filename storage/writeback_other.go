//go:build !linux

package storage

import "os"

// startWriteback is a no-op where sync_file_range does not exist: the
// kernel's own writeback applies.
func startWriteback(*os.File, int64, int64) {}
