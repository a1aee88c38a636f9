package storage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// benchBatch is a batch of 100 records of 100-byte values.
func benchBatch() []byte {
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	v := make([]byte, 100)
	for i := 0; i < 100; i++ {
		bl.Add(t0.UnixMilli(), []byte(fmt.Sprintf("key-%03d", i)), v, nil)
	}
	return bl.Finish(batch.PlainProducer, 0)
}

// BenchmarkAppend measures appends into the default 1 GiB segments (so
// rolls and their fsyncs are rare, as in production).
func BenchmarkAppend(b *testing.B) {
	cfg := DefaultConfig()
	l := openLog(b, b.TempDir(), cfg)
	// Close fsyncs everything written; that is not part of the measured
	// path (appends do not fsync by default).
	defer func() { b.StopTimer(); l.Close() }()
	src := benchBatch()
	buf := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(buf, src)
		if _, err := l.Append(buf, 1, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkRead(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 64 << 20
	l := openLog(b, b.TempDir(), cfg)
	// Close fsyncs everything written; that is not part of the measured
	// path (appends do not fsync by default).
	defer func() { b.StopTimer(); l.Close() }()
	src := benchBatch()
	for l.Size() < 64<<20 {
		if _, err := l.Append(append([]byte(nil), src...), 1, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	off := int64(0)
	for i := 0; i < b.N; i++ {
		res, err := l.Read(off, 1<<20, 1<<62)
		if err != nil {
			b.Fatal(err)
		}
		off = res.NextOffset
		if off >= l.EndOffset() {
			off = 0
		}
	}
}

// BenchmarkReadNewest reads the batch just appended, as a follower's fetch
// does after every append: single-record batches of 100 bytes, the default
// index interval, so the read starts up to ~25 frames after the last index
// entry unless the segment remembers where the batch starts.
func BenchmarkReadNewest(b *testing.B) {
	l := openLog(b, b.TempDir(), DefaultConfig())
	defer func() { b.StopTimer(); l.Close() }()
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	bl.Add(t0.UnixMilli(), []byte("key"), make([]byte, 100), nil)
	src := bl.Finish(batch.PlainProducer, 0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := l.Append(append([]byte(nil), src...), 1, t0)
		if err != nil {
			b.Fatal(err)
		}
		got, err := l.Read(res.BaseOffset, 1<<20, 1<<62)
		if err != nil || len(got.Batches) != 1 {
			b.Fatalf("read %d: %d batches, %v", res.BaseOffset, len(got.Batches), err)
		}
	}
}

// BenchmarkReadConsumer is BenchmarkRead through the consumer read
// (read_committed, no transactions): the cost of judging every batch by
// its header and looking up aborted transactions.
func BenchmarkReadConsumer(b *testing.B) {
	cfg := DefaultConfig()
	cfg.SegmentBytes = 64 << 20
	l := openLog(b, b.TempDir(), cfg)
	defer func() { b.StopTimer(); l.Close() }()
	src := benchBatch()
	for l.Size() < 64<<20 {
		if _, err := l.Append(append([]byte(nil), src...), 1, t0); err != nil {
			b.Fatal(err)
		}
	}
	l.SetHighWatermark(l.EndOffset())
	b.SetBytes(1 << 20)
	b.ResetTimer()
	off := int64(0)
	for i := 0; i < b.N; i++ {
		res, err := l.ReadConsumer(off, 1<<20, ReadCommitted)
		if err != nil {
			b.Fatal(err)
		}
		off = res.NextOffset
		if off >= l.EndOffset() {
			off = 0
		}
	}
}

// BenchmarkAppendLarge appends batches of 256 records of 1 KiB values
// (about 260 KB, what a producer of 1 KiB records sends under load).
func BenchmarkAppendLarge(b *testing.B) {
	cfg := DefaultConfig()
	l := openLog(b, b.TempDir(), cfg)
	defer func() { b.StopTimer(); l.Close() }()
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	v := make([]byte, 1024)
	for i := 0; i < 256; i++ {
		bl.Add(t0.UnixMilli(), nil, v, nil)
	}
	src := bl.Finish(batch.PlainProducer, 0)
	buf := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(buf, src)
		if _, err := l.Append(buf, 1, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClean measures one cleaning pass over about 32 MiB of sealed
// segments (8 MiB each) of 100-record batches with 100-byte values over
// 10,000 keys, every key written about 30 times: the offset map, the
// rewrite into merged segments, the fsyncs and the swaps. Bytes are the
// .log bytes read.
func BenchmarkClean(b *testing.B) {
	cfg := DefaultConfig()
	cfg.CleanupPolicy = PolicyCompact
	cfg.SegmentBytes = 8 << 20
	proto := b.TempDir()
	l := openLog(b, proto, cfg)
	v := make([]byte, 100)
	var bl batch.Builder
	key := 0
	for l.Size() < 32<<20 {
		bl.Reset(t0.UnixMilli())
		for i := 0; i < 100; i++ {
			bl.Add(t0.UnixMilli(), []byte(fmt.Sprintf("key-%05d", key%10000)), v, nil)
			key += 7
		}
		if _, err := l.Append(bl.Finish(batch.PlainProducer, 0), 1, t0); err != nil {
			b.Fatal(err)
		}
	}
	forceRoll(b, l)
	l.SetHighWatermark(l.EndOffset())
	size := l.Size()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	var st CleanStats
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := b.TempDir()
		copyDir(b, proto, dir)
		c := openLog(b, dir, cfg)
		b.StartTimer()
		var err error
		if st, err = c.Clean(context.Background(), t0); err != nil || !st.Cleaned {
			b.Fatalf("Clean: %+v, %v", st, err)
		}
		b.StopTimer()
		c.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(st.RecordsRead)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(st.BytesWritten)/float64(st.BytesRead)*100, "%kept")
}

// BenchmarkAppendFlushEach appends with flush.messages=1 (an fsync per
// batch): "own-file" checkpoints the recovery point in the log's own file
// at every flush, as every log did before decision 57 (temp file, fsync,
// rename, directory fsync: two more fsyncs per batch); "shared" records
// it in the data directory's checkpoint, written on an interval.
func BenchmarkAppendFlushEach(b *testing.B) {
	for _, mode := range []string{"own-file", "shared"} {
		b.Run(mode, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.FlushMessages = 1
			dir := b.TempDir()
			var opts Options
			if mode == "shared" {
				rps, err := OpenRecoveryPoints(dir)
				if err != nil {
					b.Fatal(err)
				}
				opts.RecoveryPoints = rps
			}
			l, err := OpenWith(filepath.Join(dir, "t-0"), cfg, t0, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { b.StopTimer(); l.Close() }()
			src := benchBatch()
			buf := make([]byte, len(src))
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				copy(buf, src)
				if _, err := l.Append(buf, 1, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCreateLog measures the open of a new, empty log, as a broker
// creates one per replica of a new partition (issue 31: 10,000 of them on
// a node), with the data directory's shared checkpoints and a file
// budget. The partition.metadata the replica manager writes first is not
// part of it.
func BenchmarkCreateLog(b *testing.B) {
	dir := b.TempDir()
	hws, err := OpenHighWatermarks(dir)
	if err != nil {
		b.Fatal(err)
	}
	rps, err := OpenRecoveryPoints(dir)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Files: NewFileCache(5000), HighWatermarks: hws, RecoveryPoints: rps}
	logs := make([]*Log, 0, b.N)
	defer func() {
		b.StopTimer()
		for _, l := range logs {
			l.Close()
		}
	}()
	for i := range b.N {
		l, err := OpenWith(filepath.Join(dir, fmt.Sprintf("t-%d", i)), DefaultConfig(), t0, opts)
		if err != nil {
			b.Fatal(err)
		}
		logs = append(logs, l)
	}
}
