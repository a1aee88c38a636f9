package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// End-to-end test of the idempotent producer (client/sequence.go) against
// three sluiced processes (testCluster, harness_test.go): records are
// stored exactly once and in send order per partition while a partition's
// leader is SIGKILLed, twice, under a pipelining producer, and while the
// brokers drop some produce responses after writing the batches.

const (
	idemTopic      = "idempotent-e2e"
	idemPartitions = 6
	idemRecords    = 100_000
	idemKeys       = 1000
	// idemRate paces the producer (records/s) so that sending lasts
	// through both leader kills.
	idemRate = 4000
)

// TestIdempotentProducerExactlyOnceAcrossLeaderKills: 3 nodes, a topic of
// 6 partitions with replication factor 3 and min.insync.replicas=2, and one
// idempotent producer (acks=all, up to 5 batches in flight per partition)
// sending 100,000 keyed records. The leader of one partition is SIGKILLed,
// a new leader takes over, the killed node restarts and rejoins the ISR;
// then the same again with the new leader. Batches in flight at a kill are
// retried against the new leader, which has the producer state of what it
// replicated and answers a retry of a batch it already has as a duplicate.
// Afterwards every partition holds each of its records exactly once, in
// send order, and no record failed.
func TestIdempotentProducerExactlyOnceAcrossLeaderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs three sluiced processes")
	}
	// Every node also loses 2% of its produce responses after processing
	// the request (sluiced --fault-drop-produce-responses): the producer
	// retries batches the broker has already written, which must come
	// back as duplicates.
	c := startTestCluster(t, 3, "--fault-drop-produce-responses", "0.02")
	all := c.ids()
	idemCreateTopic(t, c, all)
	target := client.HashPartitioner{}.Partition(idemTopic, []byte(idemKey(0)), idemPartitions)

	addrs := c.addrs(all)
	cl, err := client.New(addrs, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	p, err := cl.NewProducer(client.WithBatchBytes(16<<10), client.WithDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Idempotent() {
		t.Fatal("the default producer is not idempotent")
	}

	var mu sync.Mutex // guards the following
	acked, failed := 0, 0
	var firstErr error
	sent := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(sent)
		for i := 0; i < idemRecords; i++ {
			p.Send(context.Background(), client.Record{Topic: idemTopic, Partition: -1, Key: []byte(idemKey(i)), Value: []byte(idemValue(i))},
				func(_ client.RecordMetadata, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						if firstErr == nil {
							firstErr = err
						}
						return
					}
					acked++
				})
			if i%200 == 199 {
				// Pacing, not waiting for a condition: record i is due at
				// start + i/rate.
				if d := time.Until(start.Add(time.Duration(i) * time.Second / idemRate)); d > 0 {
					time.Sleep(d)
				}
			}
		}
	}()
	ackedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return acked
	}

	// Two rounds: wait for some progress, SIGKILL the partition's leader,
	// wait for a new one, restart the killed node and wait until it is back
	// in the ISR.
	for round, at := range []int{idemRecords / 5, idemRecords / 2} {
		c.eventually(60*time.Second, fmt.Sprintf("round %d: %d records acknowledged", round+1, at), func() error {
			if n := ackedSoFar(); n < at {
				return fmt.Errorf("%d acknowledged", n)
			}
			return nil
		})
		old := idemPartition(t, c, all, target).Leader
		c.kill(old)
		t.Logf("round %d: SIGKILLed node %d, leader of partition %d, with %d records acknowledged (%v in)", round+1, old, target, ackedSoFar(), time.Since(start).Round(time.Millisecond))
		survivors := without(all, old)
		c.eventually(30*time.Second, "a new leader", func() error {
			if l := idemPartition(t, c, survivors, target).Leader; l == old || !slices.Contains(survivors, l) {
				return fmt.Errorf("leader %d", l)
			}
			return nil
		})
		c.restart(old)
		c.eventually(30*time.Second, fmt.Sprintf("node %d back in the ISR", old), func() error {
			return isrFull(idemPartition(t, c, all, target))
		})
		t.Logf("round %d: node %d back in the ISR of partition %d, leader %d (%v in)", round+1, old, target, idemPartition(t, c, all, target).Leader, time.Since(start).Round(time.Millisecond))
	}
	<-sent
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	st := p.Stats()
	t.Logf("producer %d epoch %d: %d retries, %d sequence errors, %d epoch bumps", st.ProducerID, st.Epoch, st.Retries, st.SequenceErrors, st.EpochBumps)
	if st.Retries == 0 {
		t.Error("no batch was retried: the leader kills did not hit batches in flight, the test checked nothing")
	}
	mu.Lock()
	t.Logf("%d records acknowledged, %d failed in %v", acked, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d records failed (first: %v); with a 60 s delivery timeout every record should get through two failovers", failed, firstErr)
	}
	mu.Unlock()

	got := idemReadAll(t, addrs)
	want := map[int32][]int{}
	for i := 0; i < idemRecords; i++ {
		part := client.HashPartitioner{}.Partition(idemTopic, []byte(idemKey(i)), idemPartitions)
		want[part] = append(want[part], i)
	}
	for part := int32(0); part < idemPartitions; part++ {
		if err := checkExactlyOnceInOrder(got[part], want[part]); err != nil {
			t.Errorf("partition %d: %v", part, err)
		}
	}
}

func idemKey(i int) string   { return fmt.Sprintf("key-%04d", i%idemKeys) }
func idemValue(i int) string { return fmt.Sprintf("%s/%06d", idemKey(i), i) }

// idemIndex is the record index in a value of idemValue.
func idemIndex(v string) (int, error) {
	_, n, ok := strings.Cut(v, "/")
	if !ok {
		return 0, fmt.Errorf("value %q is not key/index", v)
	}
	return strconv.Atoi(n)
}

// idemCreateTopic creates idemTopic (6 partitions, replication factor 3,
// min.insync.replicas=2), retrying retriable failures for 20 s, and waits
// until every partition has its three replicas in the ISR.
func idemCreateTopic(t *testing.T, c *testCluster, ids []int32) {
	t.Helper()
	c.createTopic(20*time.Second, ids, idemTopic,
		"--partitions", strconv.Itoa(idemPartitions), "--replication-factor", "3", "--config", "min.insync.replicas=2")
	c.eventually(30*time.Second, "every partition with a full ISR", func() error {
		d, err := c.describe(ids, idemTopic)
		if err != nil {
			return err
		}
		if len(d.Partitions) != idemPartitions {
			return fmt.Errorf("%d partitions", len(d.Partitions))
		}
		for _, p := range d.Partitions {
			if err := isrFull(p); err != nil {
				return fmt.Errorf("partition %d: %w", p.Partition, err)
			}
		}
		return nil
	})
}

// isrFull reports why p does not have three replicas, all in the ISR,
// with the leader among them.
func isrFull(p partitionJSON) error {
	if len(p.Replicas) != 3 || len(p.ISR) != 3 || !slices.Contains(p.ISR, p.Leader) {
		return fmt.Errorf("replicas %v, isr %v, leader %d; want 3 replicas all in the isr", p.Replicas, p.ISR, p.Leader)
	}
	return nil
}

// idemPartition describes partition part of idemTopic through ids; a
// failed describe (a node just killed) is retried for up to 10 s.
func idemPartition(t *testing.T, c *testCluster, ids []int32, part int32) partitionJSON {
	t.Helper()
	var out partitionJSON
	c.eventually(10*time.Second, fmt.Sprintf("describe partition %d", part), func() error {
		d, err := c.describe(ids, idemTopic)
		if err != nil {
			return err
		}
		for _, p := range d.Partitions {
			if p.Partition == part {
				out = p
				return nil
			}
		}
		return fmt.Errorf("no partition %d in %+v", part, d.Partitions)
	})
	return out
}

// idemReadAll reads every partition of idemTopic from the first offset up
// to the high watermark, within 60 s, and returns the record indexes per
// partition in offset order.
func idemReadAll(t *testing.T, addrs []string) map[int32][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(addrs, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	for part := int32(0); part < idemPartitions; part++ {
		if err := co.Assign(idemTopic, part, client.OffsetEarliest); err != nil {
			t.Fatal(err)
		}
	}
	done := func() bool {
		for part := int32(0); part < idemPartitions; part++ {
			pos, ok := co.Position(idemTopic, part)
			if hw := co.HighWatermark(idemTopic, part); !ok || hw < 0 || pos < hw {
				return false
			}
		}
		return true
	}
	out := map[int32][]int{}
	var lastErr error
	for !done() {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		recs, err := co.Poll(pctx)
		pcancel()
		if ctx.Err() != nil {
			t.Fatalf("reading %s: not every partition read to its high watermark within 60s (last error: %v)", idemTopic, lastErr)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			lastErr = err // transient errors are retried by the consumer
		}
		for _, r := range recs {
			i, err := idemIndex(string(r.Value))
			if err != nil {
				t.Fatalf("partition %d offset %d: %v", r.Partition, r.Offset, err)
			}
			out[r.Partition] = append(out[r.Partition], i)
		}
	}
	return out
}

// checkExactlyOnceInOrder reports how got (record indexes in offset order)
// differs from want (the indexes sent to the partition, in send order):
// duplicates, missing records and records out of send order.
func checkExactlyOnceInOrder(got, want []int) error {
	seen := make(map[int]int, len(got))
	var dups, disorder []int
	for j, i := range got {
		if seen[i]++; seen[i] == 2 {
			dups = append(dups, i)
		}
		if j > 0 && i <= got[j-1] && len(disorder) < 10 {
			disorder = append(disorder, j)
		}
	}
	var lost []int
	for _, i := range want {
		if seen[i] == 0 {
			lost = append(lost, i)
		}
	}
	if len(dups) == 0 && len(lost) == 0 && len(disorder) == 0 && len(got) == len(want) {
		return nil
	}
	return fmt.Errorf("%d records stored for %d sent: %d duplicated (first %v), %d missing (first %v), out of order at offsets %v",
		len(got), len(want), len(dups), dups[:min(len(dups), 10)], len(lost), lost[:min(len(lost), 10)], disorder)
}
