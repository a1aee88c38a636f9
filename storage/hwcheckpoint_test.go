package storage

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// openShared opens the log dir/name with the directory's shared
// high-watermark checkpoint hws.
func openShared(t *testing.T, dir, name string, hws *OffsetCheckpoint) *Log {
	t.Helper()
	l, err := OpenWith(filepath.Join(dir, name), truncationConfig(), t0, Options{HighWatermarks: hws})
	if err != nil {
		t.Fatalf("Open %s: %v", name, err)
	}
	return l
}

func mustOpenHighWatermarks(t *testing.T, dir string) *OffsetCheckpoint {
	t.Helper()
	hws, err := OpenHighWatermarks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return hws
}

// countingFaults counts the writes of the shared file Flush announces.
type countingFaults struct{ writes atomic.Int64 }

func (f *countingFaults) Fault(op Op, path string) error {
	if op == OpWrite && strings.HasSuffix(path, HighWatermarkFile) {
		f.writes.Add(1)
	}
	return nil
}

// Rule (issue 31): the logs of a directory share one high-watermark
// checkpoint. CheckpointHighWatermark records in memory; Flush writes one
// file, only when a value changed; Open restores each log's value clamped
// to its log. A crash between two flushes restores the last flushed
// values; a truncation below the high watermark is flushed before it
// removes anything; a deleted log's line goes at the next flush.
func TestSharedHighWatermarks(t *testing.T) {
	dir := t.TempDir()
	hws := mustOpenHighWatermarks(t, dir)
	a, b := openShared(t, dir, "orders-0", hws), openShared(t, dir, "orders.eu-12", hws)
	as := appendEpochs(t, a, truncationEpochs, 10_000, 100)
	bs := appendEpochs(t, b, truncationEpochs, 20_000, 100)
	a.SetHighWatermark(as[20].base)
	b.SetHighWatermark(bs[10].base)
	for _, l := range []*Log{a, b} {
		if err := l.CheckpointHighWatermark(); err != nil {
			t.Fatal(err)
		}
	}
	var faults countingFaults
	if err := hws.Flush(&faults); err != nil {
		t.Fatal(err)
	}
	// Nothing changed: no write, however often the interval comes.
	for range 3 {
		for _, l := range []*Log{a, b} {
			if err := l.CheckpointHighWatermark(); err != nil {
				t.Fatal(err)
			}
		}
		if err := hws.Flush(&faults); err != nil {
			t.Fatal(err)
		}
	}
	if n := faults.writes.Load(); n != 1 {
		t.Fatalf("%d writes for one change, want 1", n)
	}
	data, _ := os.ReadFile(filepath.Join(dir, HighWatermarkFile))
	want := "0\n2\norders 0 " + itoa(as[20].base) + "\norders.eu 12 " + itoa(bs[10].base) + "\n"
	if string(data) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", data, want)
	}
	for _, name := range []string{"orders-0", "orders.eu-12"} {
		if _, err := os.Stat(filepath.Join(dir, name, highWatermarkFile)); !os.IsNotExist(err) {
			t.Fatalf("%s has a file of its own: %v", name, err)
		}
	}

	// Advanced and recorded, but the interval's flush never came: a crash
	// restores the flushed values.
	a.SetHighWatermark(as[30].base)
	if err := a.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	abandon(a)
	abandon(b)
	hws = mustOpenHighWatermarks(t, dir)
	a, b = openShared(t, dir, "orders-0", hws), openShared(t, dir, "orders.eu-12", hws)
	if hw := a.HighWatermark(); hw != as[20].base {
		t.Fatalf("a after a crash between flushes: %d, want the flushed %d", hw, as[20].base)
	}
	if hw := b.HighWatermark(); hw != bs[10].base {
		t.Fatalf("b after a crash: %d, want %d", hw, bs[10].base)
	}

	// A truncation below the high watermark is durable before the data
	// goes: a crash right after it does not bring the old value back.
	a.SetHighWatermark(as[30].base)
	if err := a.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	if err := hws.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if err := a.TruncateTo(as[25].base); err != nil {
		t.Fatal(err)
	}
	appendEpochs(t, a, []int32{9, 9, 9, 9}, 1_000_000, 10)
	abandon(a)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.SetHighWatermark(0) // closed: no effect
	if err := hws.Flush(nil); err != nil {
		t.Fatal(err)
	}
	hws = mustOpenHighWatermarks(t, dir)
	a, b = openShared(t, dir, "orders-0", hws), openShared(t, dir, "orders.eu-12", hws)
	if hw := a.HighWatermark(); hw != as[25].base {
		t.Fatalf("after TruncateTo and a crash: %d, want %d", hw, as[25].base)
	}

	// A deleted log's line goes at the next flush.
	if err := b.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := hws.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := hws.Flush(nil); err != nil {
		t.Fatal(err)
	}
	hws = mustOpenHighWatermarks(t, dir)
	if _, ok := hws.Get("orders.eu-12"); ok || hws.Len() != 1 {
		t.Fatalf("after deleting b: %d entries, b's kept %v", hws.Len(), ok)
	}
}

// A log written before the shared file existed keeps its high watermark:
// its own file is read once, moved into the shared file at the next
// flush, and removed.
func TestSharedHighWatermarksReadOldFiles(t *testing.T) {
	dir := t.TempDir()
	old := openLog(t, filepath.Join(dir, "legacy-3"), truncationConfig())
	recs := appendEpochs(t, old, truncationEpochs, 10_000, 100)
	old.SetHighWatermark(recs[15].base)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	hws := mustOpenHighWatermarks(t, dir)
	l := openShared(t, dir, "legacy-3", hws)
	if hw := l.HighWatermark(); hw != recs[15].base {
		t.Fatalf("from the old file: %d, want %d", hw, recs[15].base)
	}
	ownFile := filepath.Join(dir, "legacy-3", highWatermarkFile)
	if _, err := os.Stat(ownFile); err != nil {
		t.Fatalf("the old file went before the shared one has the value: %v", err)
	}
	if err := hws.Flush(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ownFile); !os.IsNotExist(err) {
		t.Fatalf("the old file is still there after the flush: %v", err)
	}
	abandon(l)
	l = openShared(t, dir, "legacy-3", mustOpenHighWatermarks(t, dir))
	defer l.Close()
	if hw := l.HighWatermark(); hw != recs[15].base {
		t.Fatalf("after the move: %d, want %d", hw, recs[15].base)
	}
}

// A directory that is not "topic-partition" keeps a file of its own.
func TestSharedHighWatermarksOtherNames(t *testing.T) {
	dir := t.TempDir()
	hws := mustOpenHighWatermarks(t, dir)
	for _, name := range []string{"plain", "topic-", "topic-01", "-3"} {
		l := openShared(t, dir, name, hws)
		appendEpochs(t, l, []int32{1}, 1000, 10)
		l.SetHighWatermark(1)
		if err := l.CheckpointHighWatermark(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, name, highWatermarkFile)); err != nil {
			t.Errorf("%s: no file of its own: %v", name, err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if hws.Len() != 0 {
		t.Fatalf("%d entries in the shared file", hws.Len())
	}
}

// A file that cannot be parsed is refused with the reason, not read as
// empty.
func TestHighWatermarksParseErrors(t *testing.T) {
	for name, body := range map[string]string{
		"version":     "1\n0\n",
		"count":       "0\nmany\n",
		"short entry": "0\n1\norders 0\n",
		"bad offset":  "0\n1\norders 0 -4\n",
		"missing":     "0\n2\norders 0 4\n",
		"extra":       "0\n1\norders 0 4\norders 1 5\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, HighWatermarkFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenHighWatermarks(dir); err == nil || !strings.Contains(err.Error(), HighWatermarkFile) {
			t.Errorf("%s: %v, want an error naming the file", name, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, HighWatermarkFile), []byte("0\n2\na-b 3 7\nc 0 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hws := mustOpenHighWatermarks(t, dir)
	if v, ok := hws.Get("a-b-3"); !ok || v != 7 {
		t.Fatalf("a-b-3: %d %v", v, ok)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
