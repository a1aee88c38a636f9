package storage

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkReadSealedSegments reads the first batch (in a sealed segment)
// of 64 logs in turn through a FileCache that holds every file open
// ("fits") and through one of 8 files, where nearly every read reopens
// its .log after an eviction ("evicts"): the price of a node with more
// files in use than its budget.
func BenchmarkReadSealedSegments(b *testing.B) {
	for _, bc := range []struct {
		name   string
		budget int
	}{{"fits", 1024}, {"evicts", 8}} {
		b.Run(bc.name, func(b *testing.B) {
			cache := NewFileCache(bc.budget)
			cfg := DefaultConfig()
			cfg.SegmentBytes = 1 << 20
			const n = 64
			logs := make([]*Log, n)
			root := b.TempDir()
			src := benchBatch()
			for i := range logs {
				l, err := OpenWith(filepath.Join(root, fmt.Sprintf("t-%d", i)), cfg, t0, Options{Files: cache})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				for len(l.Segments()) < 2 {
					if _, err := l.Append(append([]byte(nil), src...), 1, t0); err != nil {
						b.Fatal(err)
					}
				}
				logs[i] = l
			}
			opens := cache.Opens()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := logs[i%n].Read(0, 1, 1<<62)
				if err != nil || len(res.Batches) != 1 {
					b.Fatalf("read: %d batches, %v", len(res.Batches), err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cache.Opens()-opens)/float64(b.N), "opens/op")
		})
	}
}
