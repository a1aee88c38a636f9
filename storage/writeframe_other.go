//go:build !(darwin || linux || openbsd)

package storage

import "os"

// writeFrame writes a frame, header hdr then batch b, at pos of f.
func writeFrame(f *os.File, hdr, b []byte, pos int64) error {
	frame := make([]byte, 0, len(hdr)+len(b))
	frame = append(append(frame, hdr...), b...)
	_, err := f.WriteAt(frame, pos)
	return err
}
