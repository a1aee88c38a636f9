package storage

import (
	"os"
	"path/filepath"
	"testing"
)

// Rule: the high watermark stays within [log start, log end] and only
// advances through SetHighWatermark; an advance wakes Changed waiters, a
// refused move does not.
func TestHighWatermarkClamp(t *testing.T) {
	l := openLog(t, t.TempDir(), truncationConfig())
	defer l.Close()
	if err := l.TruncateFullyAndStartAt(10); err != nil {
		t.Fatal(err)
	}
	appendEpochs(t, l, []int32{1, 1, 1, 1}, 1000, 10) // offsets [10, 20)
	end := l.EndOffset()
	steps := []struct {
		name string
		set  int64
		want int64
	}{
		{"below the start clamps to the start", 3, 10},
		{"advance", 14, 14},
		{"backwards is ignored", 12, 14},
		{"same is a no-op", 14, 14},
		{"past the end clamps to the end", end + 100, end},
		{"negative is ignored", -5, end},
	}
	for _, st := range steps {
		before := l.HighWatermark()
		ch := l.Changed()
		l.SetHighWatermark(st.set)
		if got := l.HighWatermark(); got != st.want {
			t.Fatalf("%s: SetHighWatermark(%d) -> %d, want %d", st.name, st.set, got, st.want)
		}
		woke := false
		select {
		case <-ch:
			woke = true
		default:
		}
		if woke != (st.want > before) {
			t.Fatalf("%s: Changed woke %v, advance %v", st.name, woke, st.want > before)
		}
	}
}

// Rule: the high watermark persists in high-watermark-checkpoint, written
// by CheckpointHighWatermark and Close; Open restores it clamped to the
// recovered log, and a missing file means the log start offset.
func TestHighWatermarkPersisted(t *testing.T) {
	cfg := truncationConfig()
	dir := t.TempDir()
	l := openLog(t, dir, cfg)
	if l.HighWatermark() != 0 {
		t.Fatalf("new log high watermark %d", l.HighWatermark())
	}
	all := appendEpochs(t, l, truncationEpochs, 10_000, 100)
	l.SetHighWatermark(all[20].base)
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	l.SetHighWatermark(all[30].base) // not checkpointed
	abandon(l)
	l = openLog(t, dir, cfg)
	if hw := l.HighWatermark(); hw != all[20].base {
		t.Fatalf("after a crash: %d, want the checkpointed %d", hw, all[20].base)
	}
	l.SetHighWatermark(all[30].base)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckpointHighWatermark(); err != ErrClosed {
		t.Fatalf("CheckpointHighWatermark on a closed log: %v", err)
	}
	l = openLog(t, dir, cfg)
	if hw := l.HighWatermark(); hw != all[30].base {
		t.Fatalf("after Close: %d, want %d", hw, all[30].base)
	}

	// TruncateTo below it lowers it, durably: a crash right after the
	// truncation does not bring back the old value.
	if err := l.TruncateTo(all[25].base); err != nil {
		t.Fatal(err)
	}
	if hw := l.HighWatermark(); hw != all[25].base {
		t.Fatalf("after TruncateTo: %d, want %d", hw, all[25].base)
	}
	more := appendEpochs(t, l, []int32{9, 9, 9, 9, 9, 9, 9, 9}, 1_000_000, 10)
	abandon(l)
	l = openLog(t, dir, cfg)
	if hw := l.HighWatermark(); hw != all[25].base {
		t.Fatalf("after TruncateTo and a crash: %d, want %d", hw, all[25].base)
	}

	// A checkpoint past a log that recovery cut is clamped to its end.
	l.SetHighWatermark(more[len(more)-1].last + 1)
	if err := l.CheckpointHighWatermark(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	act := segs[len(segs)-1]
	abandon(l)
	if err := os.Truncate(act.Path, 0); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	if hw, end := l.HighWatermark(), l.EndOffset(); hw != end || end != act.BaseOffset {
		t.Fatalf("after a cut tail: high watermark %d, end %d, want both %d", hw, end, act.BaseOffset)
	}

	// Missing checkpoint: the log start offset.
	cfg.RetentionBytes, cfg.RetentionMs = 2000, -1
	l.SetConfig(cfg)
	if n, err := l.EnforceRetention(t0); err != nil || n == 0 {
		t.Fatalf("EnforceRetention: %d, %v", n, err)
	}
	start := l.StartOffset()
	if hw := l.HighWatermark(); hw < start {
		t.Fatalf("high watermark %d below the start %d after retention", hw, start)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, highWatermarkFile)); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, cfg)
	defer l.Close()
	if hw := l.HighWatermark(); hw != start {
		t.Fatalf("without a checkpoint: %d, want the start %d", hw, start)
	}
}
