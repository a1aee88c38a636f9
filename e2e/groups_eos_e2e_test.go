package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// eosCopier is the consume-transform-produce loop of docs/groups.md with
// the Go client: a group consumer reads the input with read_committed and
// each poll's records are written to the output, same partition, in one
// transaction that also carries the consumer's positions
// (SendOffsetsToTransaction). Every fourth transaction aborts on purpose
// and rewinds. OnRevoked waits for the transaction in progress (mu), so a
// partition is released only with nothing of it in flight.
type eosCopier struct {
	t    *testing.T
	name string
	in   string
	out  string
	cl   *client.Client
	co   *client.Consumer
	p    *client.Producer

	mu        sync.Mutex                      // held across a poll and its transaction; guards the following
	committed map[client.TopicPartition]int64 // positions after the last committed transaction
	txns      int
	fenced    bool
}

func startEOSCopier(t *testing.T, c *testCluster, name, txnID, group, in, out string) *eosCopier {
	t.Helper()
	cp := &eosCopier{t: t, name: name, in: in, out: out, committed: map[client.TopicPartition]int64{}}
	var err error
	if cp.cl, err = client.New(c.addrs(c.ids()), client.WithRequestTimeout(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	cp.p, err = cp.cl.NewProducer(client.WithTransactionalID(txnID), client.WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cp.p.InitTransactions(ctx); err != nil {
		t.Fatalf("%s: InitTransactions: %v", name, err)
	}
	cp.co, err = cp.cl.NewConsumer(client.WithGroup(group), client.WithAutoCommit(false, 0), client.WithAutoOffsetReset(client.OffsetEarliest),
		client.WithSessionTimeout(3*time.Second), client.WithMaxWait(100*time.Millisecond),
		client.WithRebalanceListener(client.RebalanceCallbacks{Revoked: cp.revoked}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.co.Subscribe(in); err != nil {
		t.Fatal(err)
	}
	return cp
}

// revoked runs before partitions are released: it waits for the
// transaction in flight and forgets their positions.
func (cp *eosCopier) revoked(_ context.Context, parts []client.TopicPartition) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, tp := range parts {
		delete(cp.committed, tp)
	}
}

// run copies until ctx ends or the producer is fenced; a fenced copier
// leaves the group (as an application that restarts would), so that its
// partitions move to the others.
func (cp *eosCopier) run(ctx context.Context) {
	for ctx.Err() == nil {
		if !cp.step(ctx) {
			_ = cp.co.Close()
			return
		}
	}
}

// step is one poll and its transaction; false when the copier must stop.
func (cp *eosCopier) step(ctx context.Context) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	recs, err := cp.co.Poll(pctx)
	cancel()
	if err != nil || len(recs) == 0 {
		return true
	}
	if err := cp.p.BeginTransaction(); err != nil {
		cp.t.Errorf("%s: begin: %v", cp.name, err)
		return false
	}
	first := map[client.TopicPartition]int64{}
	next := map[client.TopicPartition]int64{}
	for _, r := range recs {
		tp := client.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		if _, ok := first[tp]; !ok {
			first[tp] = r.Offset
		}
		next[tp] = r.Offset + 1
		cp.p.Send(ctx, client.Record{Topic: cp.out, Partition: r.Partition, Value: []byte("copy:" + string(r.Value))}, nil)
	}
	rewind := func() {
		for tp, off := range first {
			if c, ok := cp.committed[tp]; ok {
				off = c
			}
			_ = cp.co.Seek(tp.Topic, tp.Partition, off)
		}
	}
	abort := func() bool {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := cp.p.AbortTransaction(actx); err != nil {
			cp.fatal(err)
			return false
		}
		rewind()
		return true
	}
	cp.txns++
	if cp.txns%4 == 0 {
		return abort()
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = cp.p.SendOffsetsToTransaction(tctx, next, cp.co.GroupMetadata())
	if err == nil {
		err = cp.p.CommitTransaction(tctx)
	}
	var abortable *client.TransactionAbortableError
	switch {
	case err == nil:
		for tp, off := range next {
			cp.committed[tp] = off
		}
		return true
	case errors.As(err, &abortable):
		return abort()
	default:
		cp.fatal(err)
		return false
	}
}

func (cp *eosCopier) fatal(err error) {
	if errors.Is(err, client.ErrProducerFenced) {
		cp.fenced = true
		return
	}
	cp.t.Errorf("%s: %v", cp.name, err)
}

func (cp *eosCopier) close() {
	_ = cp.co.Close()
	_ = cp.p.Close()
	_ = cp.cl.Close()
}

// readCommitted returns the values of every partition of topic, in offset
// order per partition, as read_committed sees them now.
func readCommitted(t *testing.T, c *testCluster, topic string, partitions int32) [][]string {
	t.Helper()
	cl, err := client.New(c.addrs(c.ids()), client.WithRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := make([][]string, partitions)
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	for p := int32(0); p < partitions; p++ {
		if err := co.Assign(topic, p, client.OffsetEarliest); err != nil {
			t.Fatal(err)
		}
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		recs, err := co.Poll(ctx)
		cancel()
		if err != nil || len(recs) == 0 {
			return out
		}
		for _, r := range recs {
			out[r.Partition] = append(out[r.Partition], string(r.Value))
		}
	}
}

// TestConsumeTransformProduceExactlyOnceInAGroup: KIP-447 with the Go
// client on three real nodes. Copiers in one group move an input topic to
// an output topic in transactions that carry their consumer offsets, with
// aborts on purpose, a member joining (the partitions are split), and a
// zombie: a copier fenced by a new instance with its transactional id
// while the group rebalances. The output is the input exactly once, in
// order per partition, and the group's committed offsets are the input's
// end.
func TestConsumeTransformProduceExactlyOnceInAGroup(t *testing.T) {
	c := startTestCluster(t, 3, groupClusterArgs...)
	all := c.ids()
	const in, out, group = "eos-in", "eos-out", "eos-copiers"
	const parts = 3
	for _, tpc := range []string{in, out} {
		c.createTopic(20*time.Second, all, tpc, "--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	}
	input := values("rec", 600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	start := func(name, txnID string) *eosCopier {
		cp := startEOSCopier(t, c, name, txnID, group, in, out)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cp.run(ctx)
		}()
		return cp
	}
	copied := func(n int) func() error {
		return func() error {
			got := 0
			for _, vs := range readCommitted(t, c, out, parts) {
				got += len(vs)
			}
			if got < n {
				return fmt.Errorf("%d of %d copied", got, n)
			}
			return nil
		}
	}

	a := start("a", "copier-a")
	c.produceSpread(t, in, parts, input[:200])
	c.eventually(60*time.Second, "a copies the first third", copied(200))
	b := start("b", "copier-b")
	c.produceSpread(t, in, parts, input[200:400])
	c.eventually(60*time.Second, "a and b copy the second third", copied(400))
	// A zombie: a new instance with a's transactional id fences a's
	// producer; a's consumer is still in the group until it leaves.
	a2 := start("a2", "copier-a")
	c.produceSpread(t, in, parts, input[400:])
	c.eventually(90*time.Second, "everything copied", copied(600))
	cancel()
	wg.Wait()
	if !a.fenced {
		t.Logf("a was not fenced by a2 during the run (it may have had nothing to commit)")
	}
	for _, cp := range []*eosCopier{a, b, a2} {
		cp.close()
	}

	got := readCommitted(t, c, out, parts)
	want := make([][]string, parts)
	for _, chunk := range [][]string{input[:200], input[200:400], input[400:]} {
		for i, v := range chunk { // produceSpread's round robin restarts per call
			want[i%parts] = append(want[i%parts], "copy:"+v)
		}
	}
	for p := range want {
		if !slices.Equal(got[p], want[p]) {
			t.Errorf("output partition %d (%d records) is not the input's exactly once in order (%d records):\n got %s\nwant %s",
				p, len(got[p]), len(want[p]), strings.Join(got[p], " "), strings.Join(want[p], " "))
		}
	}
	cl, err := client.New(c.addrs(all))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	offs, err := cl.FetchOffsets(fctx, group, in)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < parts; p++ {
		if o := offs[client.TopicPartition{Topic: in, Partition: p}]; o.Offset != int64(len(want[p])) {
			t.Errorf("committed offset of %s-%d: %+v, want %d (the input's end)", in, p, o, len(want[p]))
		}
	}
}
