package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaSeeds is the Kafka listeners of ids.
func (c *testCluster) kafkaSeeds(ids []int32) []string {
	var out []string
	for _, id := range ids {
		out = append(out, c.node(id).KafkaListen)
	}
	return out
}

// TestKafkaIdempotentProduceThroughLeaderKill: franz-go, unmodified,
// bootstrapped on all three nodes, produces idempotently (acks=all, its
// default) to one partition with replication factor 3 while the
// partition's leader is SIGKILLed and later restarted; every record is
// acknowledged, and a consumer reads each exactly once, in order.
func TestKafkaIdempotentProduceThroughLeaderKill(t *testing.T) {
	c := startTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seeds := c.kafkaSeeds(c.ids())
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RetryTimeout(time.Minute), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond })}
	admCl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	const topic = "kafka-kill"
	c.eventually(30*time.Second, "create "+topic, func() error {
		res, err := adm.CreateTopic(ctx, 1, 3, nil, topic)
		if err != nil {
			return err
		}
		if res.Err != nil && !isExists(res.Err) {
			return fmt.Errorf("%v: %s", res.Err, res.ErrMessage)
		}
		return nil
	})
	leader := func() int32 {
		var id int32 = -1
		c.eventually(30*time.Second, "a leader of "+topic, func() error {
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				return err
			}
			p, ok := md.Topics[topic].Partitions[0]
			if !ok || p.Leader < 0 || len(p.ISR) < 3 {
				return fmt.Errorf("partition 0: %+v", p)
			}
			id = p.Leader
			return nil
		})
		return id
	}
	first := leader()

	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.RecordRetries(1000), kgo.ProducerLinger(2*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 30000
	var acked atomic.Int64
	var mu sync.Mutex
	var failures []error
	var wg sync.WaitGroup
	// The faults follow the acknowledgements: the leader dies with a
	// quarter acknowledged and many batches in flight, and comes back
	// once half are.
	faults := make(chan error, 1)
	waitAcked := func(k int64) bool {
		for acked.Load() < k {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(time.Millisecond):
			}
		}
		return true
	}
	go func() {
		if !waitAcked(n / 4) {
			faults <- ctx.Err()
			return
		}
		t.Logf("SIGKILL leader %d with %d records acknowledged", first, acked.Load())
		c.kill(first)
		if !waitAcked(n / 2) {
			faults <- ctx.Err()
			return
		}
		t.Logf("restarting node %d with %d records acknowledged", first, acked.Load())
		if err := c.Restart(first); err != nil {
			faults <- err
			return
		}
		rctx, cancel := context.WithTimeout(ctx, readyTimeout)
		defer cancel()
		faults <- c.WaitReady(rctx, first)
	}()
	for i := range n {
		if i%50 == 49 {
			time.Sleep(10 * time.Millisecond) // about 6 s of producing: the faults land mid-stream
		}
		wg.Add(1)
		prod.Produce(ctx, kgo.StringRecord(strconv.Itoa(i)), func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
				return
			}
			acked.Add(1)
		})
	}
	wg.Wait()
	if err := <-faults; err != nil {
		t.Fatalf("faults: %v", err)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d records failed; first: %v", len(failures), n, failures[0])
	}

	cons, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := 0
	for next < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", next, n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Value) != strconv.Itoa(next) || r.Offset != int64(next) {
				t.Fatalf("record %d: value %q at offset %d (a duplicate or a gap)", next, r.Value, r.Offset)
			}
			next++
		})
	}
	// Nothing after the last record.
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := end.Lookup(topic, 0); o.Offset != n {
		t.Fatalf("end offset %d, want %d", o.Offset, n)
	}
}

// isExists: an earlier attempt created the topic.
func isExists(err error) bool { return errors.Is(err, kerr.TopicAlreadyExists) }
