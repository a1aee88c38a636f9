package txn

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The partition leaders of a TV2 producer's next transaction add their
// partitions while the previous transaction's markers are being written:
// the requests are joined, and once the transaction completes one Ongoing
// record holds every partition (before: one record per request, one
// after another). A request of another producer epoch (a zombie) is not
// joined and gets its own answer; a request with an invalid partition
// goes alone and is INVALID_REQUEST, the others unharmed.
func TestConcurrentAddsOfATransactionAreWrittenTogether(t *testing.T) {
	e := newTxnEnv(t)
	c, open := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	first := TopicPartition{Topic: "a", Partition: 0}
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "w", 1000))
	if err := addPartition(c, "w", pe, first); err != nil {
		t.Fatal(err)
	}
	next := must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "w", pe, true))
	before := len(e.log.records(t, 0))

	const n = 6
	errc := make(chan error, n+1)
	for i := range n {
		go func() { errc <- addPartition(c, "w", next, TopicPartition{Topic: "a", Partition: int32(i)}) }()
	}
	// A leader retrying a first batch joins a partition already joined:
	// the batch holds it once.
	go func() { errc <- addPartition(c, "w", next, TopicPartition{Topic: "a", Partition: 0}) }()
	// A zombie at the old epoch and an invalid partition are answered alone.
	wantErrCode(t, "the old epoch's add", addPartition(c, "w", pe, TopicPartition{Topic: "a", Partition: 9}), sluicev1.ErrorCode_PRODUCER_FENCED)
	wantErrCode(t, "an invalid partition", addPartition(c, "w", next, TopicPartition{Topic: "", Partition: 1}), sluicev1.ErrorCode_INVALID_REQUEST)
	waitFor(t, "every add joined the first", func() error {
		c.adds.mu.Lock()
		defer c.adds.mu.Unlock()
		if c.adds.joins != n {
			return fmt.Errorf("%d joined", c.adds.joins)
		}
		for _, b := range c.adds.open {
			if len(b.parts) != n {
				return fmt.Errorf("the batch holds %v, want %d distinct partitions", b.parts, n)
			}
		}
		return nil
	})
	open()
	for range n + 1 {
		if err := <-errc; err != nil {
			t.Fatalf("add: %v", err)
		}
	}
	m := waitState(t, c, "w", Ongoing)
	if len(m.Partitions) != n || m.ProducerEpoch != next.ProducerEpoch {
		t.Fatalf("state %+v, want %d partitions at epoch %d", m, n, next.ProducerEpoch)
	}
	var states []State
	for _, r := range e.log.records(t, 0)[before:] {
		states = append(states, r.State)
	}
	if fmt.Sprint(states) != fmt.Sprint([]State{CompleteCommit, Ongoing}) {
		t.Fatalf("records after the commit: %v, want CompleteCommit then one Ongoing", states)
	}
	c.adds.mu.Lock()
	defer c.adds.mu.Unlock()
	if len(c.adds.open) != 0 {
		t.Fatalf("%d batches left open", len(c.adds.open))
	}
}

// A batch whose leader gives up (the previous transaction's markers stuck
// past MaxConcurrentWait) answers every joined request as the leader is
// answered, CONCURRENT_TRANSACTIONS, at once; none waits on.
func TestJoinedAddsEndWithTheirLeader(t *testing.T) {
	e := newTxnEnv(t)
	e.cfg.MaxConcurrentWait = 200 * time.Millisecond
	c, _ := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, "s", 1000))
	if err := addPartition(c, "s", pe, TopicPartition{Topic: "a"}); err != nil {
		t.Fatal(err)
	}
	next := must[ProducerIDAndEpoch](t, "commit")(endTxn(c, "s", pe, true))
	const n = 3
	errc := make(chan error, n)
	for i := range n {
		go func() { errc <- addPartition(c, "s", next, TopicPartition{Topic: "a", Partition: int32(i)}) }()
	}
	for range n {
		wantErrCode(t, "an add while the markers are stuck", <-errc, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS)
	}
	c.adds.mu.Lock()
	defer c.adds.mu.Unlock()
	if len(c.adds.open) != 0 {
		t.Fatalf("%d batches left open", len(c.adds.open))
	}
}

// gatedCoordinator returns a coordinator of e whose marker rounds wait
// until open is called (at the latest when the test ends), then write
// through e.markers.
func gatedCoordinator(t *testing.T, e *txnEnv) (c *Coordinator, open func()) {
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	c = e.coordinator(markerFunc(func(ctx context.Context, m Markers) map[TopicPartition]error {
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return e.markers.WriteMarkers(ctx, m)
	}))
	return c, open
}
