package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const benchUsage = `usage: sluice bench produce --topic T [--records N] [--record-size B] [--acks all|1|0] [--create-partitions N] [--sync]
                           [--transactional-id ID [--commit-interval D]]
       sluice bench consume --topic T [--records N]
`

// benchResult is the final summary of a benchmark (cmd/sluice/output).
type benchResult = output.BenchResult

func (e *env) bench(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "produce" && args[0] != "consume") {
		fmt.Fprint(e.stderr, benchUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return errUsage
	}
	if args[0] == "produce" {
		return e.benchProduce(ctx, args[1:])
	}
	return e.benchConsume(ctx, args[1:])
}

// latencies collects samples; safe for concurrent use.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// percentiles returns the p50, p99 and p99.9 samples and the mean, in
// milliseconds (zeros without samples).
func (l *latencies) percentiles() (p50, p99, p999, mean float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0, 0, 0
	}
	slices.Sort(l.d)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(l.d))), len(l.d)-1)
		return float64(l.d[i]) / 1e6
	}
	var sum time.Duration
	for _, d := range l.d {
		sum += d
	}
	return at(0.50), at(0.99), at(0.999), float64(sum) / float64(len(l.d)) / 1e6
}

// progress prints a live line on stderr once a second until stop is
// closed; done is closed when it has returned.
func (e *env) progress(what string, count *atomic.Int64, bytes *atomic.Int64, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	var lastN, lastB int64
	last := start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			n, b := count.Load(), bytes.Load()
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(e.stderr, "%s: %s, %.0f records/s, %.1f MB/s (%.0fs)\n", what, plural(n, "record"), float64(n-lastN)/dt, float64(b-lastB)/dt/1e6, now.Sub(start).Seconds())
			lastN, lastB, last = n, b, now
		}
	}
}

func (e *env) printBench(r benchResult) error {
	if e.g.json() {
		return json.NewEncoder(e.stdout).Encode(r)
	}
	fmt.Fprintf(e.stdout, "%s %s: %s in %.2fs: %.0f records/s, %.1f MB/s; %s p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, mean %.3f ms; errors %d\n",
		r.Mode, r.Topic, plural(r.Records, "record"), r.Seconds, r.RecordsPerSec, r.MBPerSec, r.LatencyWhat, r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyP999Ms, r.LatencyMeanMs, r.Errors)
	if r.ThrottledRequests > 0 {
		fmt.Fprintf(e.stdout, "throttled by quotas: %s, %.0f ms in all, at most %.0f ms\n",
			plural(r.ThrottledRequests, "answer"), r.ThrottleTotalMs, r.ThrottleMaxMs)
	}
	return nil
}

// withThrottle is r with the throttles a client quota answered.
func withThrottle(r benchResult, st client.ThrottleStats) benchResult {
	r.ThrottledRequests = st.Count
	r.ThrottleTotalMs = float64(st.Total) / 1e6
	r.ThrottleMaxMs = float64(st.Max) / 1e6
	return r
}

func (e *env) benchProduce(ctx context.Context, args []string) error {
	fs := e.newFlags("bench produce", "bench produce --topic T [--records N] [--record-size B] [--acks all|1|0] [--create-partitions N] [--throughput R] [--sync]\n                    [--transactional-id ID [--commit-interval D]]")
	fs.StringVar(&e.g.clientID, "client-id", "", "client id sent with every request (Kafka's client.id), which client quotas may name")
	topic := fs.String("topic", "", "topic to produce to (required)")
	records := fs.Int64("records", 1_000_000, "records to send")
	size := fs.Int("record-size", 100, "value size in bytes")
	acksFlag := fs.String("acks", "1", "acknowledgement: all, 1 or 0")
	create := fs.Int("create-partitions", 0, "create the topic with this many partitions if it does not exist")
	partition := fs.Int("partition", -1, "partition to produce to (-1: sticky across all)")
	linger := fs.Duration("linger", 5*time.Millisecond, "producer linger")
	batchBytes := fs.Int("batch-bytes", 1<<20, "producer batch size")
	sample := fs.Int("latency-sample", 8, "measure the latency of one record in this many")
	throughput := fs.Int("throughput", 0, "target records/s (0: as fast as possible); latency is only meaningful below saturation")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	noIdem := fs.Bool("no-idempotence", false, "send as a plain producer (idempotence is on by default with --acks all)")
	txnID := fs.String("transactional-id", "", "send in transactions with this transactional id (acks all); see --commit-interval")
	commitEvery := fs.Duration("commit-interval", 100*time.Millisecond, "with --transactional-id: commit a transaction this often; the latency reported is CommitTransaction's after a flush (EndTxn)")
	syncMode := fs.Bool("sync", false, "send one record at a time: each is sent alone and the next only after it is acknowledged; every record's latency is measured (with linger 0; --linger, --throughput and --latency-sample do not apply)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *profile != "" {
		stopProfile, err := startProfile(*profile)
		if err != nil {
			return fmt.Errorf("bench produce: %w", err)
		}
		defer stopProfile()
	}
	if *topic == "" || *records <= 0 || *size < 0 || *sample < 1 {
		fs.Usage()
		return errUsage
	}
	acks, err := parseAcks(*acksFlag)
	if err != nil {
		return fmt.Errorf("bench produce: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if *create < 0 {
		return fmt.Errorf("bench produce: --create-partitions must be 0 or more, got %d", *create)
	}
	if *create == 0 {
		// A missing topic is said at once, naming the flag that creates
		// it, not after the producer's max block.
		md, err := c.Metadata(ctx, *topic)
		if err != nil {
			return fmt.Errorf("bench produce: %w", err)
		}
		known := false
		for _, t := range md.Topics {
			known = known || t.Name == *topic && t.ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION
		}
		if !known {
			return fmt.Errorf("bench produce: topic %q does not exist (create it with --create-partitions N, or sluice topic create)", *topic)
		}
	}
	if *create > 0 {
		err := c.CreateTopic(ctx, *topic, int32(*create), 1, nil)
		if err != nil && errs.Code(err) != sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS {
			return fmt.Errorf("bench produce: %w", err)
		}
	}
	if *syncMode {
		*linger = 0 // nothing else will join the batch
	}
	opts := []client.ProducerOption{client.WithAcks(acks), client.WithLinger(*linger), client.WithBatchBytes(*batchBytes)}
	if *txnID != "" {
		if acks != client.AcksAll || *noIdem || *syncMode || *commitEvery <= 0 {
			return fmt.Errorf("bench produce: --transactional-id needs --acks all, idempotence, no --sync and a positive --commit-interval")
		}
		opts = append(opts, client.WithTransactionalID(*txnID))
	}
	if *noIdem {
		opts = append(opts, client.WithIdempotence(false))
	}
	p, err := c.NewProducer(opts...)
	if err != nil {
		return fmt.Errorf("bench produce: %w", err)
	}
	value := make([]byte, *size)
	rand.Read(value)
	if *txnID != "" {
		res, err := e.benchTxn(ctx, p, client.Record{Topic: *topic, Partition: int32(*partition), Value: value}, *records, *size, *commitEvery)
		p.Close()
		if err != nil {
			return err
		}
		return e.printBench(withThrottle(res, p.Throttled()))
	}
	if *syncMode {
		res, err := e.benchSync(ctx, p, client.Record{Topic: *topic, Partition: int32(*partition), Value: value}, *records, *size)
		p.Close()
		if err != nil {
			return err
		}
		return e.printBench(withThrottle(res, p.Throttled()))
	}

	var acked, ackedBytes, failures atomic.Int64
	var firstErr atomic.Pointer[error]
	lat := &latencies{d: make([]time.Duration, 0, *records/int64(*sample)+1)}
	note := func(err error) {
		if err != nil {
			failures.Add(1)
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
		ackedBytes.Add(int64(*size))
	}
	plain := func(_ client.RecordMetadata, err error) { note(err) }
	stop, done := make(chan struct{}), make(chan struct{})
	go e.progress("produce", &acked, &ackedBytes, stop, done)
	start := time.Now()
	for i := int64(0); i < *records && ctx.Err() == nil; i++ {
		if failures.Load() > 0 {
			break
		}
		if *throughput > 0 && i%256 == 0 {
			// Pace in steps of 256 records: sleep until record i is due.
			due := start.Add(time.Duration(float64(i) / float64(*throughput) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		r := client.Record{Topic: *topic, Partition: int32(*partition), Value: value}
		if i%int64(*sample) == 0 {
			sent := time.Now()
			p.Send(ctx, r, func(_ client.RecordMetadata, err error) {
				lat.add(time.Since(sent))
				note(err)
			})
			continue
		}
		p.Send(ctx, r, plain)
	}
	ferr := p.Flush(ctx)
	elapsed := time.Since(start)
	close(stop)
	<-done
	p.Close()
	if ep := firstErr.Load(); ep != nil {
		return fmt.Errorf("bench produce: %s failed, first: %w", plural(failures.Load(), "record"), *ep)
	}
	if ferr != nil {
		return fmt.Errorf("bench produce: %w", ferr)
	}
	n := acked.Load()
	res := benchResult{Mode: "produce", Topic: *topic, Records: n, RecordSize: *size, Bytes: ackedBytes.Load(), Seconds: elapsed.Seconds(),
		RecordsPerSec: float64(n) / elapsed.Seconds(), MBPerSec: float64(ackedBytes.Load()) / elapsed.Seconds() / 1e6,
		LatencyWhat: "send-to-ack", Errors: failures.Load()}
	res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyP999Ms, res.LatencyMeanMs = lat.percentiles()
	return e.printBench(withThrottle(res, p.Throttled()))
}

// benchSync sends records one at a time: each with SendSync, the next only
// after the previous one is acknowledged, timing every record from the
// call to its acknowledgement.
func (e *env) benchSync(ctx context.Context, p *client.Producer, r client.Record, records int64, size int) (benchResult, error) {
	lat := &latencies{d: make([]time.Duration, 0, records)}
	var acked, ackedBytes atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go e.progress("produce", &acked, &ackedBytes, stop, done)
	start := time.Now()
	var err error
	for i := int64(0); i < records && ctx.Err() == nil; i++ {
		sent := time.Now()
		if _, err = p.SendSync(ctx, r); err != nil {
			break
		}
		lat.add(time.Since(sent))
		acked.Add(1)
		ackedBytes.Add(int64(size))
	}
	elapsed := time.Since(start)
	close(stop)
	<-done
	if err != nil {
		return benchResult{}, fmt.Errorf("bench produce: record %d failed: %w", acked.Load(), err)
	}
	n := acked.Load()
	res := benchResult{Mode: "produce", Topic: r.Topic, Records: n, RecordSize: size, Bytes: ackedBytes.Load(), Seconds: elapsed.Seconds(),
		RecordsPerSec: float64(n) / elapsed.Seconds(), MBPerSec: float64(ackedBytes.Load()) / elapsed.Seconds() / 1e6,
		LatencyWhat: "synchronous send-to-ack"}
	res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyP999Ms, res.LatencyMeanMs = lat.percentiles()
	return res, nil
}

// benchTxn sends records in transactions: it begins one, sends for
// commitEvery, flushes, commits, and so on until records are sent; the
// latency measured is each CommitTransaction's after the flush: EndTxn
// until PrepareCommit is durable.
func (e *env) benchTxn(ctx context.Context, p *client.Producer, r client.Record, records int64, size int, commitEvery time.Duration) (benchResult, error) {
	if err := p.InitTransactions(ctx); err != nil {
		return benchResult{}, fmt.Errorf("bench produce: %w", err)
	}
	lat := &latencies{}
	var acked, ackedBytes, failures atomic.Int64
	var firstErr atomic.Pointer[error]
	cb := func(_ client.RecordMetadata, err error) {
		if err != nil {
			failures.Add(1)
			firstErr.CompareAndSwap(nil, &err)
			return
		}
		acked.Add(1)
		ackedBytes.Add(int64(size))
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go e.progress("produce", &acked, &ackedBytes, stop, done)
	start := time.Now()
	var err error
	txns := 0
	for i := int64(0); i < records && ctx.Err() == nil && err == nil; {
		if err = p.BeginTransaction(); err != nil {
			break
		}
		end := time.Now().Add(commitEvery)
		for ; i < records; i++ {
			if i%256 == 0 && !time.Now().Before(end) {
				break
			}
			p.Send(ctx, r, cb)
		}
		// Flush first, so that the time measured is the commit's own
		// (EndTxn until PrepareCommit is durable), not the drain of the
		// records still queued, which CommitTransaction would do first.
		if err = p.Flush(ctx); err != nil {
			break
		}
		t0 := time.Now()
		if err = p.CommitTransaction(ctx); err == nil {
			lat.add(time.Since(t0))
			txns++
		}
	}
	elapsed := time.Since(start)
	close(stop)
	<-done
	if ep := firstErr.Load(); ep != nil {
		return benchResult{}, fmt.Errorf("bench produce: %s failed, first: %w", plural(failures.Load(), "record"), *ep)
	}
	if err != nil {
		return benchResult{}, fmt.Errorf("bench produce: transaction %d: %w", txns+1, err)
	}
	n := acked.Load()
	res := benchResult{Mode: "produce", Topic: r.Topic, Records: n, RecordSize: size, Bytes: ackedBytes.Load(), Seconds: elapsed.Seconds(),
		RecordsPerSec: float64(n) / elapsed.Seconds(), MBPerSec: float64(ackedBytes.Load()) / elapsed.Seconds() / 1e6,
		LatencyWhat: fmt.Sprintf("commit after flush (%s of %v)", plural(txns, "transaction"), commitEvery)}
	res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyP999Ms, res.LatencyMeanMs = lat.percentiles()
	return res, nil
}

func (e *env) benchConsume(ctx context.Context, args []string) error {
	fs := e.newFlags("bench consume", "bench consume --topic T [--records N]\n\nReads from the earliest offset of every partition.")
	fs.StringVar(&e.g.clientID, "client-id", "", "client id sent with every request (Kafka's client.id), which client quotas may name")
	topic := fs.String("topic", "", "topic to read (required)")
	records := fs.Int64("records", 0, "records to read (0: everything up to the current end)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up when no record arrives for this long")
	partMax := fs.Int("partition-max-bytes", 4<<20, "fetch bytes per partition")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *profile != "" {
		stopProfile, err := startProfile(*profile)
		if err != nil {
			return fmt.Errorf("bench consume: %w", err)
		}
		defer stopProfile()
	}
	if *topic == "" || *records < 0 {
		fs.Usage()
		return errUsage
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	md, err := c.Metadata(ctx, *topic)
	if err != nil {
		return fmt.Errorf("bench consume: %w", err)
	}
	nparts := 0
	for _, t := range md.Topics {
		if t.Name == *topic {
			if t.ErrorCode != sluicev1.ErrorCode_NONE {
				return fmt.Errorf("bench consume: topic %q: %w", *topic, &errs.Error{Code: t.ErrorCode, Message: t.ErrorMessage})
			}
			nparts = len(t.Partitions)
		}
	}
	target := *records
	if target == 0 {
		for p := 0; p < nparts; p++ {
			hi, err := c.ListOffsets(ctx, *topic, int32(p), sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
			if err != nil {
				return fmt.Errorf("bench consume: %w", err)
			}
			lo, err := c.ListOffsets(ctx, *topic, int32(p), sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST, 0)
			if err != nil {
				return fmt.Errorf("bench consume: %w", err)
			}
			target += hi - lo
		}
		if target == 0 {
			return fmt.Errorf("bench consume: topic %q is empty", *topic)
		}
	}
	lat := &latencies{}
	co, err := c.NewConsumer(client.WithPartitionMaxBytes(int32(*partMax)), client.WithFetchObserver(func(s client.FetchStats) {
		if s.Bytes > 0 {
			lat.add(s.Latency)
		}
	}))
	if err != nil {
		return fmt.Errorf("bench consume: %w", err)
	}
	defer co.Close()
	for p := 0; p < nparts; p++ {
		if err := co.Assign(*topic, int32(p), client.OffsetEarliest); err != nil {
			return fmt.Errorf("bench consume: %w", err)
		}
	}
	var got, bytes atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go e.progress("consume", &got, &bytes, stop, done)
	start := time.Now()
	var perr error
	for got.Load() < target {
		pctx, cancel := context.WithTimeout(ctx, *timeout)
		recs, err := co.Poll(pctx)
		cancel()
		if err != nil {
			perr = err
			break
		}
		var b int64
		if left := target - got.Load(); int64(len(recs)) > left {
			recs = recs[:left] // count exactly the records asked for
		}
		for i := range recs {
			b += int64(len(recs[i].Value) + len(recs[i].Key))
		}
		got.Add(int64(len(recs)))
		bytes.Add(b)
	}
	elapsed := time.Since(start)
	close(stop)
	<-done
	if perr != nil && got.Load() == 0 {
		return fmt.Errorf("bench consume: %w", perr)
	}
	n := got.Load()
	res := benchResult{Mode: "consume", Topic: *topic, Records: n, Bytes: bytes.Load(), Seconds: elapsed.Seconds(),
		RecordsPerSec: float64(n) / elapsed.Seconds(), MBPerSec: float64(bytes.Load()) / elapsed.Seconds() / 1e6, LatencyWhat: "fetch"}
	res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyP999Ms, res.LatencyMeanMs = lat.percentiles()
	if err := e.printBench(withThrottle(res, co.Throttled())); err != nil {
		return err
	}
	if n < target {
		// The figures above are of a partial run: the exit status says so.
		return fmt.Errorf("bench consume: stopped early after %d of %s: %w", n, plural(target, "record"), perr)
	}
	return nil
}

// startProfile starts a CPU profile into path and returns its stop.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
