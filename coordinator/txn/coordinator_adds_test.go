package txn

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The partition leaders of a TV2 producer's next transaction add their
// partitions while the previous transaction's markers are being written:
// the requests are joined, and once the markers are written one batch
// holds the CompleteCommit and the next transaction's Ongoing with every
// partition (before: a batch for the CompleteCommit, then one Ongoing per
// request, one after another); a new leader loading the log finds the
// Ongoing. A request of another producer epoch (a zombie) is not
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
	before, beforeBatches := len(e.log.records(t, 0)), e.log.batchCount(0)

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
	if n := e.log.batchCount(0) - beforeBatches; n != 1 {
		t.Fatalf("%d batches written after the commit, want the CompleteCommit and the Ongoing in one", n)
	}
	c.adds.mu.Lock()
	left := len(c.adds.open)
	c.adds.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d batches left open", left)
	}

	// The next leader of the partition loads the Ongoing.
	c.Resigned(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	d := e.coordinator(nil)
	e.lead(d, 0, 2)
	if m := waitState(t, d, "w", Ongoing); len(m.Partitions) != n || m.ProducerEpoch != next.ProducerEpoch {
		t.Fatalf("loaded %+v, want %d partitions at epoch %d", m, n, next.ProducerEpoch)
	}
}

// An add that arrives while the completing batch is being written (after
// the completion took the waiting partitions) is written after it, in its
// own Ongoing: the transaction ends up with every partition.
func TestAddJoinedAfterTheCompletionLookIsWrittenNext(t *testing.T) {
	e := newTxnEnv(t)
	c, open := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	next, errc := addWaitingForCompletion(t, c, "j", 2)
	// Hold the completing append until a second add has joined the batch.
	appending := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	e.log.setAppendHook(func(cluster.TopicPartition) error {
		once.Do(func() {
			close(appending)
			<-release
		})
		return nil
	})
	open()
	<-appending
	go func() { errc <- addPartition(c, "j", next, TopicPartition{Topic: "a", Partition: 2}) }()
	waitFor(t, "the second add joins", func() error {
		c.adds.mu.Lock()
		defer c.adds.mu.Unlock()
		if c.adds.joins != 1 {
			return fmt.Errorf("%d joined", c.adds.joins)
		}
		return nil
	})
	close(release)
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatalf("add: %v", err)
		}
	}
	if m := waitState(t, c, "j", Ongoing); len(m.Partitions) != 2 {
		t.Fatalf("state %+v, want partitions 1 and 2", m)
	}
	var states []State
	for _, r := range e.log.records(t, 0) {
		states = append(states, r.State)
	}
	want := []State{Empty, Ongoing, PrepareCommit, CompleteCommit, Ongoing, Ongoing}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", states, want)
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

// The completion's batch with the next transaction's Ongoing whose commit
// is unknown: the id stays in PrepareCommit (the adds wait) until the
// batch is known committed, then the Ongoing is applied and the waiting
// add answered without another write.
func TestCompletionWithAddsCommitUnknown(t *testing.T) {
	e := newTxnEnv(t)
	c, open := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	next, errc := addWaitingForCompletion(t, c, "u", 1)
	e.log.setAppendHook(func(cluster.TopicPartition) error { return errUnknown })
	open()
	waitFor(t, "the completion's batch is appended", func() error {
		if n := len(e.log.records(t, 0)); n != 5 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})
	e.log.setAppendHook(nil)
	if d := must[Description](t, "describe")(c.Describe("u")); d.State != PrepareCommit {
		t.Fatalf("applied before known committed: %v", d.State)
	}
	e.log.commitAll()
	if err := <-errc; err != nil {
		t.Fatalf("add: %v", err)
	}
	if m := waitState(t, c, "u", Ongoing); len(m.Partitions) != 1 || m.ProducerEpoch != next.ProducerEpoch {
		t.Fatalf("state %+v", m)
	}
	if n := len(e.log.records(t, 0)); n != 5 {
		t.Fatalf("%d records, want 5 (Empty, Ongoing, PrepareCommit, then CompleteCommit and Ongoing in one batch)", n)
	}
}

// addWaitingForCompletion commits a transaction of id (one partition, a-0)
// on c, whose markers are gated, and starts the next transaction's add of
// a-1, which waits for the completion: it returns the producer id and
// epoch of the next transaction and the channel (of capacity n) the add
// answers on, once the add's batch is open.
func addWaitingForCompletion(t *testing.T, c *Coordinator, id string, n int) (ProducerIDAndEpoch, chan error) {
	t.Helper()
	pe := must[ProducerIDAndEpoch](t, "init")(initPID(c, id, 1000))
	if err := addPartition(c, id, pe, TopicPartition{Topic: "a"}); err != nil {
		t.Fatal(err)
	}
	next := must[ProducerIDAndEpoch](t, "commit")(endTxn(c, id, pe, true))
	errc := make(chan error, n)
	go func() { errc <- addPartition(c, id, next, TopicPartition{Topic: "a", Partition: 1}) }()
	waitFor(t, "the add waits for the completion", func() error {
		c.adds.mu.Lock()
		defer c.adds.mu.Unlock()
		if len(c.adds.open) != 1 {
			return fmt.Errorf("%d batches open", len(c.adds.open))
		}
		return nil
	})
	return next, errc
}

// A completion whose batch with the next transaction's adds is refused
// (here: too many records) is retried alone: the transaction completes,
// and the adds are then written apart.
func TestCompletionRefusedWithAddsIsRetriedAlone(t *testing.T) {
	e := newTxnEnv(t)
	c, open := gatedCoordinator(t, e)
	e.lead(c, 0, 1)
	next, errc := addWaitingForCompletion(t, c, "r", 1)
	e.log.setMaxRecords(1)
	open()
	if err := <-errc; err != nil {
		t.Fatalf("add: %v", err)
	}
	if m := waitState(t, c, "r", Ongoing); len(m.Partitions) != 1 || m.ProducerEpoch != next.ProducerEpoch {
		t.Fatalf("state %+v", m)
	}
	var states []State
	for _, r := range e.log.records(t, 0) {
		states = append(states, r.State)
	}
	if want := []State{Empty, Ongoing, PrepareCommit, CompleteCommit, Ongoing}; fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("records %v, want %v", states, want)
	}
}
