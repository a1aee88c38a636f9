package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// restartBenchBytes is how much BenchmarkOpenAfterCrash writes per layout:
// SLUICE_BENCH_RESTART_BYTES (`make bench-restart` sets 10 GiB, the
// issue's "10 GB in 1,000 segments"), else 512 MiB so that `make bench`
// stays short. The segment count is the same either way.
func restartBenchBytes(b *testing.B) int64 {
	if v := os.Getenv("SLUICE_BENCH_RESTART_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1<<20 {
			b.Fatalf("SLUICE_BENCH_RESTART_BYTES=%q", v)
		}
		return n
	}
	return 512 << 20
}

// restartBatch is a batch of 16 records of 1 KiB values (~16.5 KiB), a
// producer's typical batch.
func restartBatch() []byte {
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	v := bytes.Repeat([]byte("v"), 1024)
	for i := range 16 {
		bl.Add(t0.UnixMilli()+int64(i), []byte(fmt.Sprintf("key-%02d", i)), v, nil)
	}
	return bl.Finish(batch.PlainProducer, 0)
}

// buildCrashedLogs writes partitions logs of segments segments each
// (total bytes in all) under dir/t-<i>, as a running broker would, and
// abandons them as a SIGKILL would: no Close, so no clean-shutdown
// marker, nothing flushed beyond what the running logs wrote themselves
// (the rolled segments' background fsyncs, and whatever checkpoints they
// keep up on their own). The page cache keeps what was written, as after
// a SIGKILL. It returns the log directories.
func buildCrashedLogs(b *testing.B, dir string, partitions, segments int, total int64) []string {
	cfg := DefaultConfig()
	cfg.SegmentBytes = total / int64(partitions*segments)
	src := restartBatch()
	buf := make([]byte, len(src))
	cache := NewFileCache(256)
	var dirs []string
	for p := range partitions {
		d := filepath.Join(dir, fmt.Sprintf("t-%d", p)) // "topic-partition", for the shared checkpoints
		l, err := OpenWith(d, cfg, t0, benchRestartOptions(cache, dir))
		if err != nil {
			b.Fatal(err)
		}
		for ts := t0; len(l.segments) < segments || l.active().size+int64(len(src)) < cfg.SegmentBytes; ts = ts.Add(time.Millisecond) {
			copy(buf, src)
			if _, err := l.Append(buf, fillEpoch, ts); err != nil {
				b.Fatal(err)
			}
		}
		abandonSynced(l)
		dirs = append(dirs, d)
	}
	benchRestartCheckpoint(b, dir)
	return dirs
}

// abandonSynced is abandon (a crash) once the background fsyncs l
// started have finished, as the kernel would have finished them.
func abandonSynced(l *Log) {
	l.appendMu.Lock()
	l.sealedSyncs.Wait()
	l.appendMu.Unlock()
	abandon(l)
}

// BenchmarkOpenAfterCrash measures how long opening logs takes after an
// unclean shutdown (issue 31: "a node with 10 GB in 1,000 segments after a
// SIGKILL serving again within 15 s"): one op opens every log of the
// layout, one after the other as a node does, and then abandons them
// again (not timed), so every op recovers the same crashed directory.
// "warm" leaves the page cache as a SIGKILL does; "cold" drops the
// directory's pages before each op, as after a power loss or reboot.
// The directory is built once per layout under $TMPDIR and removed.
func BenchmarkOpenAfterCrash(b *testing.B) {
	total := restartBenchBytes(b)
	for _, lay := range []struct{ partitions, segments int }{{1, 1000}, {100, 10}} {
		dir, err := os.MkdirTemp("", "sluice-restart-bench-")
		if err != nil {
			b.Fatal(err)
		}
		dirs := buildCrashedLogs(b, dir, lay.partitions, lay.segments, total)
		for _, cache := range []string{"warm", "cold"} {
			name := fmt.Sprintf("%dx%d/%dMiB/%s", lay.partitions, lay.segments, total>>20, cache)
			b.Run(name, func(b *testing.B) {
				files := NewFileCache(5000)
				for range b.N {
					b.StopTimer()
					if cache == "cold" {
						if err := dropPageCache(dir); err != nil {
							b.Skip("page cache cannot be dropped here:", err)
						}
					}
					b.StartTimer()
					logs := make([]*Log, 0, len(dirs))
					for _, d := range dirs {
						l, err := OpenWith(d, DefaultConfig(), t0, benchRestartOptions(files, dir))
						if err != nil {
							b.Fatal(err)
						}
						logs = append(logs, l)
					}
					b.StopTimer()
					for _, l := range logs {
						abandonSynced(l)
					}
					benchRestartCheckpoint(b, dir)
					b.StartTimer()
				}
				b.ReportMetric(float64(files.Opens())/float64(b.N), "file-opens/op")
			})
		}
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// benchStores are the shared checkpoints of the benchmark's data
// directories, opened from disk at the first open of a log there after
// each crash (benchRestartCheckpoint), as at a node's start.
var benchStores = map[string][2]*OffsetCheckpoint{}

// benchRestartOptions are the options a node opens its logs in dataDir
// with, as far as the restart benchmark needs them: the file budget and
// the directory's shared checkpoints.
func benchRestartOptions(files *FileCache, dataDir string) Options {
	st, ok := benchStores[dataDir]
	if !ok {
		hws, err := OpenHighWatermarks(dataDir)
		if err != nil {
			panic(err)
		}
		rps, err := OpenRecoveryPoints(dataDir)
		if err != nil {
			panic(err)
		}
		st = [2]*OffsetCheckpoint{hws, rps}
		benchStores[dataDir] = st
	}
	return Options{Files: files, HighWatermarks: st[0], RecoveryPoints: st[1]}
}

// benchRestartCheckpoint does what a node's checkpoint interval does for
// the logs of dataDir before the crash (the worst case is a crash just
// before it: what rolled in the interval is scanned again), and forgets
// the checkpoints in memory, which the crash loses.
func benchRestartCheckpoint(b *testing.B, dataDir string) {
	for _, st := range benchStores[dataDir] {
		if err := st.Flush(nil); err != nil {
			b.Fatal(err)
		}
	}
	delete(benchStores, dataDir)
}
