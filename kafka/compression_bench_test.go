package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// benchValues are n records of about size bytes of JSON-like text, as
// compressible as application events usually are (zstd about 3-4x):
// field names repeat, values are drawn from small vocabularies and
// random numbers.
func benchValues(n, size int) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"checkout", "login", "search", "cart", "payment", "refund", "shipment", "profile", "review", "wishlist"}
	regions := []string{"eu-west-1", "us-east-1", "ap-south-1", "sa-east-1"}
	out := make([][]byte, n)
	for i := range out {
		var v []byte
		for len(v) < size {
			v = fmt.Appendf(v, `{"event":"%s","user":%d,"session":"%016x","region":"%s","amount":%d.%02d,"ts":%d},`,
				words[r.IntN(len(words))], r.IntN(1_000_000), r.Uint64(), regions[r.IntN(len(regions))], r.IntN(10_000), r.IntN(100), 1_700_000_000_000+int64(i))
		}
		out[i] = v[:size]
	}
	return out
}

// BenchmarkKafkaDoorCompression: franz-go produces 1 KiB records to one
// partition of an in-process node through the Kafka door (acks=all,
// idempotent, franz-go's default batches of up to 1 MB, linger 5 ms) with no compression,
// lz4 or zstd, then consumes them back. The batches are stored as sent
// (decision 67): the broker checks each compressed batch once and never
// recompresses. Reported per phase: MB/s of record values, the process's
// CPU per GB of values (client and broker together: they share the
// process) and the bytes stored per record. docs/benchmarks.md, "Kafka
// door".
func BenchmarkKafkaDoorCompression(b *testing.B) {
	const recordSize = 1 << 10
	values := benchValues(4096, recordSize)
	for _, c := range []struct {
		name  string
		codec kgo.CompressionCodec
	}{{"none", kgo.NoCompression()}, {"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()}} {
		b.Run(c.name, func(b *testing.B) {
			s := nodetest.StartSingle(b, b.TempDir(), func(cfg *node.Config) { cfg.KafkaListen = "127.0.0.1:0" })
			addr := s.Node.KafkaAddr()
			s.CreateTopic("bench", 1, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic("bench"), kgo.ProducerBatchCompression(c.codec),
				kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				b.Fatal(err)
			}
			defer prod.Close()
			n := b.N
			b.SetBytes(recordSize)
			b.ResetTimer()
			cpu0, t0 := processCPU(), time.Now()
			var failed atomic.Int64
			for i := range n {
				prod.Produce(ctx, &kgo.Record{Value: values[i%len(values)]}, func(_ *kgo.Record, err error) {
					if err != nil && failed.Add(1) == 1 {
						b.Error(err)
					}
				})
			}
			if err := prod.Flush(ctx); err != nil || failed.Load() > 0 {
				b.Fatalf("%d records failed: %v", failed.Load(), err)
			}
			produceCPU, produceWall := processCPU()-cpu0, time.Since(t0)

			cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"bench": {0: kgo.NewOffset().AtStart()}}),
				kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
			if err != nil {
				b.Fatal(err)
			}
			defer cons.Close()
			cpu1, t1 := processCPU(), time.Now()
			for got := 0; got < n; {
				fs := cons.PollFetches(ctx)
				if ctx.Err() != nil {
					b.Fatalf("consumed %d of %d", got, n)
				}
				fs.EachError(func(_ string, _ int32, err error) { b.Fatal(err) })
				got += fs.NumRecords()
			}
			consumeCPU, consumeWall := processCPU()-cpu1, time.Since(t1)
			b.StopTimer()

			gb := float64(n) * recordSize / 1e9
			part, err := s.Node.Replicas().Replica("bench", 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)*recordSize/1e6/produceWall.Seconds(), "produce-MB/s")
			b.ReportMetric(float64(n)*recordSize/1e6/consumeWall.Seconds(), "consume-MB/s")
			b.ReportMetric(produceCPU.Seconds()/gb, "produce-cpu-s/GB")
			b.ReportMetric(consumeCPU.Seconds()/gb, "consume-cpu-s/GB")
			b.ReportMetric(float64(part.Size())/float64(n), "stored-B/record")
		})
	}
}
