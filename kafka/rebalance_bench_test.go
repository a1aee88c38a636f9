package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// owners tracks which member of a group owns which partition, from
// franz-go's assignment callbacks.
type owners struct {
	mu      sync.Mutex
	byPart  map[int32]int // partition -> member index
	changed chan struct{}
}

func (o *owners) set(member int, parts []int32, own bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range parts {
		if own {
			o.byPart[p] = member
		} else if o.byPart[p] == member {
			delete(o.byPart, p)
		}
	}
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// settled reports whether every one of n partitions is owned and the
// members in want own at least one each.
func (o *owners) settled(n int, want map[int]bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.byPart) != n {
		return false
	}
	seen := map[int]bool{}
	for _, m := range o.byPart {
		if !want[m] {
			return false
		}
		seen[m] = true
	}
	return len(seen) == len(want)
}

func (o *owners) wait(ctx context.Context, n int, want map[int]bool) error {
	for !o.settled(n, want) {
		select {
		case <-o.changed:
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("not settled: %d partitions owned", len(o.byPart))
		}
	}
	return nil
}

// BenchmarkClassicRebalance: six franz-go members of a classic group
// (cooperative-sticky, franz-go's default; session timeout 45 s) share a
// 60-partition topic through the Kafka door; each iteration replaces one
// member (LeaveGroup, then a new member joins) and times until all 60
// partitions are owned again by the six. The first formation of the group
// (six joins, group.initial.rebalance.delay.ms 3 s included) is reported
// as first-ms. Target (issue 35): a rebalance within 2 × the session
// timeout.
func BenchmarkClassicRebalance(b *testing.B) {
	const partitions, members = 60, 6
	s := nodetest.StartSingle(b, b.TempDir(), func(c *node.Config) { c.KafkaListen = "127.0.0.1:0" })
	addr := s.Node.KafkaAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer admCl.Close()
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, partitions, 1, nil, "rebalance"); err != nil {
		b.Fatal(err)
	}
	o := &owners{byPart: map[int32]int{}, changed: make(chan struct{}, 1)}
	start := func(i int) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("rebalance"), kgo.ConsumeTopics("rebalance"),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { o.set(i, a["rebalance"], true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { o.set(i, r["rebalance"], false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) { o.set(i, l["rebalance"], false) }))
		if err != nil {
			b.Fatal(err)
		}
		// A consumer joins its group when it is first polled.
		go func() {
			for {
				if fs := cl.PollFetches(ctx); fs.IsClientClosed() || ctx.Err() != nil {
					return
				}
			}
		}()
		return cl
	}
	live := map[int]*kgo.Client{}
	want := map[int]bool{}
	t0 := time.Now()
	for i := range members {
		live[i], want[i] = start(i), true
	}
	if err := o.wait(ctx, partitions, want); err != nil {
		b.Fatal(err)
	}
	first := time.Since(t0)
	next := members
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		gone := i % members
		for m := range live {
			if want[m] {
				gone = m
				break
			}
		}
		t := time.Now()
		live[gone].Close() // LeaveGroup
		delete(live, gone)
		delete(want, gone)
		live[next], want[next] = start(next), true
		next++
		if err := o.wait(ctx, partitions, want); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/rebalance")
	b.ReportMetric(float64(first.Milliseconds()), "first-ms") // after ResetTimer, which drops reported metrics
	for _, cl := range live {
		cl.Close()
	}
}
