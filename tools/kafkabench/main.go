// Command kafkabench is the Kafka door's load generator for the
// benchmarks (scripts/bench-cluster.sh, docs/benchmarks.md): franz-go,
// unmodified, producing or consuming through Sluice's Kafka listener, with
// output in the form of `sluice bench` so the two doors compare line by
// line.
//
//	kafkabench produce --brokers 127.0.0.1:9092 --topic t --records 1000000 --record-size 1024 --acks all
//	kafkabench produce --brokers 127.0.0.1:9092 --topic t --transactional-id b --commit-interval 100ms
//	kafkabench consume --brokers 127.0.0.1:9092 --topic t --records 1000000
//
// With --transactional-id the records are produced in transactions, each
// committed once --commit-interval has passed since it began (its records
// flushed first, as a Kafka transactional producer must), the last one at
// the end: the throughput then includes every commit.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "produce" && os.Args[1] != "consume") {
		fmt.Fprintln(os.Stderr, "usage: kafkabench produce|consume --brokers B --topic T [--records N] [--record-size B] [--acks all|1|0] [--compression none|gzip|snappy|lz4|zstd] [--partition P] [--max-buffered-records N] [--transactional-id ID --commit-interval D | --flush-interval D]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma separated")
	topic := fs.String("topic", "", "topic (required)")
	records := fs.Int("records", 1000000, "records to produce or consume")
	size := fs.Int("record-size", 100, "value size in bytes")
	acks := fs.String("acks", "all", "all, 1 or 0")
	compression := fs.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	partition := fs.Int("partition", -1, "partition to produce to (-1: franz-go's default partitioner)")
	linger := fs.Duration("linger", 5*time.Millisecond, "producer linger")
	batchBytes := fs.Int("batch-bytes", 1000012, "producer batch size (franz-go's default, which fits Kafka's default max.message.bytes)")
	txnID := fs.String("transactional-id", "", "produce in transactions with this transactional id")
	every := fs.Duration("commit-interval", 100*time.Millisecond, "with --transactional-id: commit a transaction this long after it began")
	flushEvery := fs.Duration("flush-interval", 0, "without --transactional-id: flush the idempotent producer this long after the last flush ended, as a transactional producer flushes before each commit (a control for the transactional runs: the client's half of a commit without the transaction)")
	buffered := fs.Int("max-buffered-records", 1<<16, "records the producer buffers before Produce blocks (franz-go's MaxBufferedRecords); a transaction's flush waits for all of them")
	fs.Parse(os.Args[2:])
	if *topic == "" {
		fmt.Fprintln(os.Stderr, "--topic is required")
		os.Exit(2)
	}
	if *flushEvery > 0 && *txnID != "" {
		fmt.Fprintln(os.Stderr, "--flush-interval is for the idempotent producer; a transactional one flushes before each commit (--commit-interval)")
		os.Exit(2)
	}
	if *flushEvery < 0 {
		fmt.Fprintln(os.Stderr, "--flush-interval must not be negative")
		os.Exit(2)
	}
	if *txnID == "" {
		*every = *flushEvery
	}
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(*brokers, ",")...), kgo.RetryTimeout(time.Minute)}
	var err error
	if mode == "produce" {
		err = produce(opts, *topic, *records, *size, *acks, *compression, int32(*partition), *linger, int32(*batchBytes), *buffered, *txnID, *every)
	} else {
		err = consume(opts, *topic, *records)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkabench:", err)
		os.Exit(1)
	}
}

// words make values that compress about as well as text does, so the
// codecs' runs are neither flattered nor starved.
var words = strings.Fields("the quick brown fox jumps over a lazy dog while sluice writes every record once order payment customer " +
	"invoice shipped 2026 12 05 ok pending failed retry eu-west us-east item sku 10494 92817 price 17.50 EUR")

func value(r *rand.Rand, size int) []byte {
	b := make([]byte, 0, size+16)
	for len(b) < size {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b[:size]
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.NoCompression(), fmt.Errorf("unknown compression %q", name)
}

func produce(opts []kgo.Opt, topic string, n, size int, acks, compression string, partition int32, linger time.Duration, batchBytes int32,
	buffered int, txnID string, every time.Duration) error {
	c, err := codec(compression)
	if err != nil {
		return err
	}
	opts = append(opts, kgo.DefaultProduceTopic(topic), kgo.ProducerBatchCompression(c), kgo.ProducerLinger(linger),
		kgo.ProducerBatchMaxBytes(batchBytes), kgo.MaxBufferedRecords(buffered))
	switch acks {
	case "all":
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
	default:
		return fmt.Errorf("unknown acks %q", acks)
	}
	if partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if txnID != "" {
		if acks != "all" {
			return fmt.Errorf("transactions need --acks all")
		}
		opts = append(opts, kgo.TransactionalID(txnID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	// A pool of values, reused: generating them is not what is measured.
	pool := make([][]byte, 1024)
	for i := range pool {
		pool[i] = value(rng, size)
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	txns := 0
	var txnStart time.Time
	var flushes, commits []time.Duration
	// periodic: a transaction committed, or (the control) the idempotent
	// producer flushed, every interval.
	periodic := txnID != "" || every > 0
	// end commits the open transaction, its records flushed first (or
	// only flushes, without a transaction).
	end := func() error {
		t0 := time.Now()
		if err := cl.Flush(ctx); err != nil {
			return err
		}
		t1 := time.Now()
		if txnID == "" {
			flushes = append(flushes, t1.Sub(t0))
			txns++
			return nil
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		flushes, commits = append(flushes, t1.Sub(t0)), append(commits, time.Since(t1))
		txns++
		return nil
	}
	start := time.Now()
	for i := range n {
		if periodic {
			if !txnStart.IsZero() && time.Since(txnStart) >= every {
				if err := end(); err != nil {
					return err
				}
				txnStart = time.Time{}
			}
			if txnStart.IsZero() {
				if txnID != "" {
					if err := cl.BeginTransaction(); err != nil {
						return err
					}
				}
				txnStart = time.Now()
			}
		}
		r := &kgo.Record{Value: pool[i%len(pool)], Partition: partition}
		sent := time.Now()
		sample := i%8 == 0
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err == nil && !sample {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			latencies = append(latencies, time.Since(sent))
		})
	}
	if !txnStart.IsZero() {
		if err := end(); err != nil {
			return err
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[min(int(p*float64(len(latencies))), len(latencies)-1)].Round(100 * time.Microsecond)
	}
	mb := float64(n) * float64(size) / 1e6
	fmt.Printf("%d records (%.0f MB) in %.2f s: %.0f records/s, %.1f MB/s; latency p50 %v p99 %v p99.9 %v",
		n, mb, elapsed.Seconds(), float64(n)/elapsed.Seconds(), mb/elapsed.Seconds(), pct(0.5), pct(0.99), pct(0.999))
	if periodic {
		// The cost of a commit: the flush before it (the last batches'
		// acks=all round trip) and EndTxn (PrepareCommit durable).
		med := func(ds []time.Duration) time.Duration {
			if len(ds) == 0 {
				return 0
			}
			slices.Sort(ds)
			return ds[len(ds)/2].Round(100 * time.Microsecond)
		}
		if txnID == "" {
			fmt.Printf("; %d flushes, flush p50 %v", txns, med(flushes))
		} else {
			fmt.Printf("; %d transactions committed, flush p50 %v, commit p50 %v", txns, med(flushes), med(commits))
		}
	}
	fmt.Println()
	return nil
}

func consume(opts []kgo.Opt, topic string, n int) error {
	opts = append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(50<<20),
		kgo.FetchMaxPartitionBytes(10<<20))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got, bytes := 0, 0
	start := time.Now()
	for got < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consumed %d of %d records: %w", got, n, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("%s-%d: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			bytes += len(r.Value)
		})
	}
	elapsed := time.Since(start)
	mb := float64(bytes) / 1e6
	fmt.Printf("%d records (%.0f MB) in %.2f s: %.0f records/s, %.1f MB/s\n", got, mb, elapsed.Seconds(), float64(got)/elapsed.Seconds(), mb/elapsed.Seconds())
	return nil
}
