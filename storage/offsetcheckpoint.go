package storage

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// HighWatermarkFile is the name of a data directory's high-watermark
// checkpoint (Kafka's replication-offset-checkpoint, same format).
const HighWatermarkFile = "replication-offset-checkpoint"

// RecoveryPointFile is the name of a data directory's recovery-point
// checkpoint (Kafka's recovery-point-offset-checkpoint, same format). A
// log written before it existed kept a file of the same name in its own
// directory (recoveryPointFile).
const RecoveryPointFile = "recovery-point-offset-checkpoint"

// offsetCheckpointVersion is the format's version line.
const offsetCheckpointVersion = 0

// OffsetCheckpoint is one offset per log for every log in one directory
// (issue 31): one file holding one line per log — Kafka's
// OffsetCheckpointFile, the format of its replication-offset-checkpoint
// and recovery-point-offset-checkpoint — instead of one file per log.
// Logs opened with one (Options.HighWatermarks, Options.RecoveryPoints)
// record their value here in memory; Flush writes the file, atomically
// and durably, only when a value changed since the last write. So a node
// of 10,000 idle replicas writes nothing per interval, and a busy one one
// file and one fsync, not 10,000.
//
// A log's entry is keyed by its directory's name (the partition's
// "topic-partition"). A log whose entry is missing reads its old
// per-log file instead (logs written before the shared file existed);
// that file is removed once a Flush has written the value here. Safe for
// concurrent use.
type OffsetCheckpoint struct {
	path string
	// legacyFile is the name of the per-log file a log kept before.
	legacyFile string

	mu      sync.Mutex // guards the following; never held across file IO
	vals    map[string]int64
	gen     uint64          // bumped by every change of vals
	legacy  map[string]bool // entries read from a per-log file, removed after the next write
	written uint64          // the gen the file holds

	writeMu sync.Mutex // serialises Flush's writes (taken before mu)
}

// OpenHighWatermarks reads dir's HighWatermarkFile (none: empty). A file
// that cannot be parsed is an error: the logs would otherwise start from
// their log start offsets and serve as committed only what they can
// prove, but an operator should know (rename or remove the file to start
// over; Kafka does the same).
func OpenHighWatermarks(dir string) (*OffsetCheckpoint, error) {
	return openOffsetCheckpoint(dir, HighWatermarkFile, highWatermarkFile)
}

// OpenRecoveryPoints reads dir's RecoveryPointFile (none: empty); a file
// that cannot be parsed is an error, as for OpenHighWatermarks (removing
// it makes every log past its clean-shutdown marker recover from its
// first segment).
func OpenRecoveryPoints(dir string) (*OffsetCheckpoint, error) {
	return openOffsetCheckpoint(dir, RecoveryPointFile, recoveryPointFile)
}

// openOffsetCheckpoint reads dir's file (none: empty); legacy is the name
// of the per-log file it replaces.
func openOffsetCheckpoint(dir, file, legacy string) (*OffsetCheckpoint, error) {
	h := &OffsetCheckpoint{path: filepath.Join(dir, file), legacyFile: legacy, vals: map[string]int64{}, legacy: map[string]bool{}}
	data, err := os.ReadFile(h.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return h, nil
	case err != nil:
		return nil, err
	}
	vals, err := parseOffsetCheckpoint(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.path, err)
	}
	h.vals = vals
	return h, nil
}

// parseOffsetCheckpoint reads the file's format: a version line (0), a count
// line, then count lines "topic partition offset".
func parseOffsetCheckpoint(data []byte) (map[string]int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		return strings.TrimSpace(sc.Text()), true
	}
	v, ok := line()
	if !ok || v != strconv.Itoa(offsetCheckpointVersion) {
		return nil, fmt.Errorf("version %q, want %d", v, offsetCheckpointVersion)
	}
	c, ok := line()
	n, err := strconv.Atoi(c)
	if !ok || err != nil || n < 0 {
		return nil, fmt.Errorf("count %q is not a number", c)
	}
	vals := make(map[string]int64, n)
	for i := range n {
		l, ok := line()
		f := strings.Fields(l)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("entry %d of %d: %q is not \"topic partition offset\"", i+1, n, l)
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		off, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || off < 0 {
			return nil, fmt.Errorf("entry %d of %d: %q is not \"topic partition offset\"", i+1, n, l)
		}
		vals[f[0]+"-"+f[1]] = off
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if extra, ok := line(); ok && extra != "" {
		return nil, fmt.Errorf("more entries than the count %d", n)
	}
	return vals, nil
}

// Path is the file's path.
func (h *OffsetCheckpoint) Path() string { return h.path }

// Get returns the value recorded for the log whose directory is named
// name.
func (h *OffsetCheckpoint) Get(name string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.vals[name]
	return v, ok
}

// Set records hw (the log's value) for the log named name, in memory;
// Flush writes it.
func (h *OffsetCheckpoint) Set(name string, hw int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.vals[name]; ok && cur == hw {
		return
	}
	h.vals[name] = hw
	h.gen++
}

// setLegacy records a value read from name's per-log file, which the next
// Flush removes once the value is in HighWatermarkFile.
func (h *OffsetCheckpoint) setLegacy(name string, hw int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.vals[name] = hw
	h.legacy[name] = true
	h.gen++
}

// Remove forgets the log named name (deleted); the next Flush drops its
// line.
func (h *OffsetCheckpoint) Remove(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vals[name]; ok {
		delete(h.vals, name)
		delete(h.legacy, name)
		h.gen++
	}
}

// Len is the number of logs recorded.
func (h *OffsetCheckpoint) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.vals)
}

// Flush durably writes every recorded value (WriteFileAtomic: temp file,
// fsync, rename, directory fsync) unless the file already holds them. It
// returns once the file holds at least every change made before the
// call: concurrent callers share one write. faults, if not nil, is asked
// first (OpWrite).
func (h *OffsetCheckpoint) Flush(faults FaultInjector) error {
	h.mu.Lock()
	want := h.gen
	h.mu.Unlock()
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	h.mu.Lock()
	if h.written >= want {
		h.mu.Unlock()
		return nil
	}
	gen := h.gen
	names := make([]string, 0, len(h.vals))
	for name := range h.vals {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.Grow(16 + 32*len(names))
	fmt.Fprintf(&b, "%d\n%d\n", offsetCheckpointVersion, len(names))
	for _, name := range names {
		i := strings.LastIndexByte(name, '-')
		b.WriteString(name[:i])
		b.WriteByte(' ')
		b.WriteString(name[i+1:])
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(h.vals[name], 10))
		b.WriteByte('\n')
	}
	var legacy []string
	for name := range h.legacy {
		legacy = append(legacy, name)
	}
	h.mu.Unlock()

	var err error
	if faults != nil {
		err = faults.Fault(OpWrite, h.path)
	}
	if err == nil {
		err = WriteFileAtomic(h.path, b.Bytes())
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.written = gen
	for _, name := range legacy {
		delete(h.legacy, name)
	}
	h.mu.Unlock()
	for _, name := range legacy {
		// Written above: the per-log file is no longer read. A failure
		// leaves a stale file that is only read if this one loses the
		// entry, which only Remove (the log deleted) does.
		_ = os.Remove(filepath.Join(filepath.Dir(h.path), name, h.legacyFile))
	}
	return nil
}
