//go:build darwin || linux || openbsd

package storage

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writeFrame writes a frame, header hdr then batch b, at pos of f with
// one pwritev: the batch goes from the caller's buffer (for a produce or
// a replica fetch, the received gRPC message) to the file without being
// copied into a frame first.
func writeFrame(f *os.File, hdr, b []byte, pos int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Pwritev(int(fd), [][]byte{hdr, b}, pos)
			if !errors.Is(werr, unix.EINTR) {
				return true
			}
		}
	}); err != nil {
		return err
	}
	if werr != nil {
		return &os.PathError{Op: "pwritev", Path: f.Name(), Err: werr}
	}
	// A short write (rare on a regular file): the rest with WriteAt,
	// which loops until done or fails.
	if n < len(hdr) {
		if _, err := f.WriteAt(hdr[n:], pos+int64(n)); err != nil {
			return err
		}
		n = len(hdr)
	}
	if n < len(hdr)+len(b) {
		_, err := f.WriteAt(b[n-len(hdr):], pos+int64(n))
		return err
	}
	return nil
}
