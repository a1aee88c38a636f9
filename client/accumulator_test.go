package client

import (
	"bytes"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

var t0 = time.Unix(1700000000, 0)

// succeed reports success for in-flight b and completes what can be.
func succeed(a *accumulator, b *recordBatch) []*recordBatch {
	a.onResult(b, nil, 0, -1, t0, false)
	return completeAll(a, b.tp)
}

// completeAll takes every completable batch of tp, as Producer.complete
// does, recycling them.
func completeAll(a *accumulator, tp topicPartition) []*recordBatch {
	var out []*recordBatch
	for bs := a.takeCompleted(tp, false); len(bs) > 0; bs = a.takeCompleted(tp, true) {
		out = append(out, bs...)
	}
	return out
}

func value(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }

// A batch closes when the next record would overflow the batch size, and
// the record starts the next batch of the same partition.
func TestAccumulatorClosesFullBatches(t *testing.T) {
	a := newAccumulator(4096, time.Hour, time.Minute, 1, false)
	tp := topicPartition{"t", 0}
	closedAt := -1
	for i := 0; i < 100; i++ {
		if _, closed, _ := a.append(tp, 1, 1000, nil, value(100), nil, nil, t0); closed && closedAt < 0 {
			closedAt = i
		}
	}
	if closedAt <= 0 {
		t.Fatalf("no batch closed after 100 records of 100 bytes with a 4 KiB batch size")
	}
	ready, _, _ := a.drain(t0, false, nil)
	if len(ready) != 1 {
		t.Fatalf("drain: %d batches ready, want 1 (one per partition)", len(ready))
	}
	b := ready[0]
	if len(b.data) > 4096 {
		t.Errorf("batch is %d bytes, over the 4096 limit", len(b.data))
	}
	h, err := batch.Verify(b.data)
	if err != nil {
		t.Fatalf("closed batch does not verify: %v", err)
	}
	if int(h.RecordCount) != closedAt || len(b.records) != closedAt {
		t.Errorf("batch holds %d records (%d callbacks), want %d", h.RecordCount, len(b.records), closedAt)
	}
	// The partition is busy until done: nothing more is ready.
	if more, _, _ := a.drain(t0, true, nil); len(more) != 0 {
		t.Errorf("second batch ready while the first is in flight")
	}
	succeed(a, b)
	if more, _, _ := a.drain(t0, false, nil); len(more) != 1 {
		t.Errorf("after done: %d ready, want the next full batch", len(more))
	}
}

// An open batch is sent once its linger elapses, not before (unless
// flushing), and the drain reports when to look again.
func TestAccumulatorLinger(t *testing.T) {
	a := newAccumulator(1<<20, 5*time.Millisecond, time.Minute, 1, false)
	tp := topicPartition{"t", 2}
	a.append(tp, 3, 1000, []byte("k"), value(10), nil, nil, t0)
	ready, _, next := a.drain(t0.Add(time.Millisecond), false, nil)
	if len(ready) != 0 {
		t.Fatalf("batch sent before linger")
	}
	if want := t0.Add(5 * time.Millisecond); !next.Equal(want) {
		t.Errorf("next = %v, want %v", next, want)
	}
	if ready, _, _ = a.drain(t0.Add(5*time.Millisecond), false, nil); len(ready) != 1 {
		t.Fatalf("batch not sent at linger")
	}
	succeed(a, ready[0])
	a.append(tp, 3, 1000, nil, value(10), nil, nil, t0)
	if ready, _, _ = a.drain(t0, true, nil); len(ready) != 1 {
		t.Fatalf("flush did not send the open batch")
	}
	succeed(a, ready[0])
	if !a.empty() {
		t.Error("accumulator not empty after every batch completed")
	}
}

// A retried batch goes back to the head of its partition's queue, ahead
// of batches closed later, and waits for its backoff.
func TestAccumulatorRequeueKeepsOrder(t *testing.T) {
	a := newAccumulator(1024, 0, time.Minute, 1, false)
	tp := topicPartition{"t", 0}
	for i := 0; i < 30; i++ {
		a.append(tp, 1, 1000, nil, value(100), nil, nil, t0)
	}
	first, _, _ := a.drain(t0, true, nil)
	if len(first) != 1 {
		t.Fatalf("want 1 ready, got %d", len(first))
	}
	b := first[0]
	a.onResult(b, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "moved"), -1, -1, t0, false)
	retryAt := t0.Add(backoffFor(0))
	if r, _, next := a.drain(t0, true, nil); len(r) != 0 || !next.Equal(retryAt) {
		t.Fatalf("retried batch sent during backoff (ready %d, next %v, want %v)", len(r), next, retryAt)
	}
	r, _, _ := a.drain(retryAt, true, nil)
	if len(r) != 1 || r[0] != b {
		t.Fatalf("after backoff the retried batch must go first")
	}
}

// Keyless records stick to one partition per batch and move on when it
// closes.
func TestAccumulatorStickyPartition(t *testing.T) {
	a := newAccumulator(2048, time.Hour, time.Minute, 1, false)
	seen := map[int32]int{}
	for i := 0; i < 200; i++ {
		p, _ := a.stickyPartition("t", 3, nil, value(100), nil)
		seen[p]++
		a.append(topicPartition{"t", p}, 3, 1000, nil, value(100), nil, nil, t0)
	}
	if len(seen) != 3 {
		t.Errorf("keyless records used partitions %v, want all 3", seen)
	}
	for p, n := range seen {
		if n < 30 {
			t.Errorf("partition %d got only %d records: batches not spread", p, n)
		}
	}
}
