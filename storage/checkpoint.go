package storage

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// writeCheckpoint durably replaces the file at path with the decimal value.
func writeCheckpoint(path string, v int64) error {
	return WriteFileAtomic(path, []byte(strconv.FormatInt(v, 10)+"\n"))
}

// WriteFileAtomic durably replaces the file at path with data: temp file,
// fsync, rename, directory fsync. A crash leaves the old or the new file,
// never a torn one.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, os.O_TRUNC, data); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// WriteFileNew durably creates the file at path, which must not exist,
// with data: create, write, fsync, directory fsync — WriteFileAtomic
// without the temp file and rename. A crash may leave the file torn or
// empty, so it is for a file whose readers treat an unreadable one as
// absent and that nothing depends on until this returns: a new log
// directory's partition.metadata, written before the log holds a byte
// (issue 31: a creation writes thousands).
func WriteFileNew(path string, data []byte) error {
	if err := writeSynced(path, os.O_EXCL, data); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeSynced creates path (os.O_CREATE|os.O_WRONLY|flag) with data and
// fsyncs it.
func writeSynced(path string, flag int, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|flag, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readCheckpoint reads a checkpoint; a missing or unreadable one is 0.
func readCheckpoint(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || v < 0 {
		return 0, err
	}
	return v, nil
}
