//go:build !linux

package storage

import "os"

// startWriteback is a no-op where sync_file_range does not exist: the
// kernel's own writeback applies.
func startWriteback(*os.File, int64, int64) {}

// dropCache is a no-op where posix_fadvise is not available: the page
// cache is left to the kernel.
func dropCache(*os.File, int64, int64) {}
