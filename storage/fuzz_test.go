package storage

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// FuzzRecovery writes a log of several segments, mutates its files as the
// input says, reopens it (with or without a clean-shutdown marker) and
// checks the invariants: no panic, every served batch passes batch.Verify,
// offsets are contiguous from the start offset, and appends continue at
// the end offset.
//
// Input: byte 0 selects the mode (bit 0: keep the clean marker; bit 1:
// spoil the indexes instead of the logs), then 5-byte edits: a uint32
// position over the concatenated .log files and a xor mask (0 = cut the
// file there).
func FuzzRecovery(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0, 0, 0, 0, 100, 0x01})
	f.Add([]byte{0, 0, 0, 0x10, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 8, 0xff, 0, 0, 0, 40, 0x80})
	cfg := testConfig()
	cfg.SegmentBytes = 2048
	cfg.IndexIntervalBytes = 200
	// Build the two starting logs once (Close fsyncs, which would
	// otherwise dominate each execution) and copy them per input.
	templates := map[bool]string{}
	for _, clean := range []bool{false, true} {
		dir := filepath.Join(f.TempDir(), "log")
		l := openLog(f, dir, cfg)
		fill(f, l, 40, 4, t0.UnixMilli())
		if clean {
			if err := l.Close(); err != nil {
				f.Fatal(err)
			}
		} else {
			crash(f, l)
		}
		templates[clean] = dir
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		clean, spoilIndex := in[0]&1 != 0, in[0]&2 != 0
		dir := t.TempDir()
		copyDir(t, templates[clean], dir)
		pattern := "*.log"
		if spoilIndex {
			pattern = "*index"
		}
		files, _ := filepath.Glob(filepath.Join(dir, pattern))
		var total int64
		sizes := make([]int64, len(files))
		for i, p := range files {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			sizes[i] = st.Size()
			total += st.Size()
		}
		for e := in[1:]; len(e) >= 5 && total > 0; e = e[5:] {
			at := int64(binary.BigEndian.Uint32(e)) % total
			i := 0
			for at >= sizes[i] {
				at -= sizes[i]
				i++
			}
			data, err := os.ReadFile(files[i])
			if err != nil {
				t.Fatal(err)
			}
			if e[4] == 0 {
				data = data[:at]
				total -= sizes[i] - at
				sizes[i] = at
			} else {
				data[at] ^= e[4]
			}
			if err := os.WriteFile(files[i], data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Open(dir, cfg, t0)
		if err != nil {
			t.Fatalf("Open after mutation: %v", err)
		}
		defer l.Delete() // closes without the fsyncs of Close
		if clean && !spoilIndex {
			// A clean marker vouches for sealed segments, so corruption
			// there is not looked for (as in Kafka); only the tail is.
			// Reads must still not panic or loop.
			for off := l.StartOffset(); off < l.EndOffset(); {
				res, err := l.Read(off, 4096, 1<<62)
				if err != nil || res.NextOffset <= off {
					break
				}
				off = res.NextOffset
			}
			return
		}
		readAll(t, l)
		end := l.EndOffset()
		res, err := l.Append(makeBatch(2, 1, "after"), appendEpoch(l), t0)
		if err != nil || res.BaseOffset != end {
			t.Fatalf("append after recovery: %+v %v, want base %d", res, err, end)
		}
		got := readAll(t, l)
		if len(got) > 0 {
			if h, _ := batch.ParseHeader(got[len(got)-1]); h.NextOffset() != l.EndOffset() {
				t.Fatalf("last batch ends at %d, end offset %d", h.NextOffset(), l.EndOffset())
			}
		}
	})
}

// copyDir copies the regular files of src into dst.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
