package client

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the idempotent send rules of sequence.go, on the accumulator
// alone: no network, time passed in.

var tp0 = topicPartition{"t", 0}

// idempotentAcc returns an idempotent accumulator with producer id 1000
// epoch 0, batches of 1 KiB and no linger.
func idempotentAcc() *accumulator {
	a := newAccumulator(1024, 0, time.Minute, MaxInFlightLimit, true)
	a.setIdentity(1000, 0)
	return a
}

// fill appends n batches of 3 records each to tp (closing each).
func fill(a *accumulator, tp topicPartition, n int) {
	for i := 0; i < n; i++ {
		for j := 0; j < 3; j++ {
			a.append(tp, 1, 1000, nil, value(10), nil, nil, t0)
		}
		a.close(a.queue(tp), false)
	}
}

// drainAll drains until nothing more is ready at now.
func drainAll(a *accumulator, now time.Time) []*recordBatch {
	var out []*recordBatch
	for {
		r, _, _ := a.drain(now, true, nil)
		if len(r) == 0 {
			return out
		}
		out = append(out, r...)
	}
}

func header(t *testing.T, b *recordBatch) batch.Header {
	t.Helper()
	h, err := batch.Verify(b.data)
	if err != nil {
		t.Fatalf("batch does not verify: %v", err)
	}
	return h
}

func codeErr(c sluicev1.ErrorCode) error { return errs.New(c, "injected") }

// Ref: "the sequence is attached at drain time, not in send()"; "a
// retried batch goes again with the producer id, epoch and sequence it
// received the first time"; the next batch skips ahead by the record
// count.
func TestSequenceAssignedAtFirstSendKeptOnRetry(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 3)
	for _, b := range a.queue(tp0).queue {
		if b.data != nil {
			t.Fatal("batch bytes finished before the batch was sent")
		}
	}
	first := drainAll(a, t0)
	if len(first) != 1 {
		t.Fatalf("%d batches sent before the first ack, want 1", len(first))
	}
	if h := header(t, first[0]); h.ProducerID != 1000 || h.ProducerEpoch != 0 || h.BaseSequence != 0 {
		t.Fatalf("first batch: producer %d epoch %d seq %d, want 1000/0/0", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
	succeed(a, first[0])
	rest := drainAll(a, t0)
	if len(rest) != 2 {
		t.Fatalf("%d batches sent after the ack, want the other 2", len(rest))
	}
	for i, b := range rest {
		if h := header(t, b); h.BaseSequence != int32(3*(i+1)) {
			t.Errorf("batch %d: base sequence %d, want %d", i+1, h.BaseSequence, 3*(i+1))
		}
	}
	a.onResult(rest[0], codeErr(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER), -1, -1, t0, false)
	retry := drainAll(a, t0.Add(time.Second))
	if len(retry) != 1 || retry[0] != rest[0] {
		t.Fatalf("retry: got %d batches, want the failed one", len(retry))
	}
	if h := header(t, retry[0]); h.ProducerID != 1000 || h.ProducerEpoch != 0 || h.BaseSequence != 3 {
		t.Errorf("retried batch: producer %d epoch %d seq %d, want 1000/0/3 as first sent", h.ProducerID, h.ProducerEpoch, h.BaseSequence)
	}
}

// Sequences wrap from MaxInt32 to 0 like the broker's inSequence.
func TestSequenceWrapsAfterMaxInt32(t *testing.T) {
	if got := nextSequence(math.MaxInt32-1, 3); got != 1 {
		t.Errorf("nextSequence(MaxInt32-1, 3) = %d, want 1", got)
	}
	if got := nextSequence(5, 3); got != 8 {
		t.Errorf("nextSequence(5, 3) = %d, want 8", got)
	}
}

// A partition has one batch outstanding until the broker has acknowledged
// one of the producer's (an unknown producer id takes any sequence), then
// up to max in flight (5, the batches the broker remembers), counted over
// every outstanding batch, not only the ones in a request.
func TestWindowIsOneUntilFirstAckThenMaxInFlight(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 12)
	b0 := drainAll(a, t0)
	if len(b0) != 1 {
		t.Fatalf("before the first ack: %d sent, want 1", len(b0))
	}
	succeed(a, b0[0])
	sent := drainAll(a, t0)
	if len(sent) != MaxInFlightLimit {
		t.Fatalf("after the first ack: %d in flight, want %d", len(sent), MaxInFlightLimit)
	}
	// The last one succeeds first: it is held (the earlier ones are
	// unresolved), so it still takes its slot.
	a.onResult(sent[4], nil, 100, -1, t0, false)
	if got := completeAll(a, tp0); len(got) != 0 {
		t.Fatalf("completed %d batches ahead of earlier unresolved ones", len(got))
	}
	if more := drainAll(a, t0); len(more) != 0 {
		t.Fatalf("sent %d more while 5 are outstanding", len(more))
	}
	succeed(a, sent[0])
	if more := drainAll(a, t0); len(more) != 1 {
		t.Fatalf("after one completion: %d more sent, want 1", len(more))
	}
}

// Pipelined answers may come back in any order; callbacks still run in
// record order: a batch completes only after every earlier one.
func TestCompletionInSendOrder(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 4)
	succeed(a, drainAll(a, t0)[0])
	sent := drainAll(a, t0)
	a.onResult(sent[2], nil, 9, -1, t0, false)
	a.onResult(sent[1], nil, 6, -1, t0, false)
	if got := completeAll(a, tp0); len(got) != 0 {
		t.Fatalf("completed %d before the first batch was answered", len(got))
	}
	a.onResult(sent[0], nil, 3, -1, t0, false)
	got := completeAll(a, tp0)
	if len(got) != 3 || got[0] != sent[0] || got[1] != sent[1] || got[2] != sent[2] {
		t.Fatalf("completed %d batches, want the 3 in send order", len(got))
	}
	if got[1].baseOffset != 6 {
		t.Errorf("held batch kept offset %d, want 6", got[1].baseOffset)
	}
}

// Kafka: retried batches are re-inserted in sequence order and a retry is
// sent only when it is the first unresolved batch ("we only move on when
// the next in line batch is complete"); OUT_OF_ORDER for a batch with an
// earlier unresolved one is retriable. New batches wait behind retries.
func TestRetriesInSequenceOrderOneAtATime(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 8)
	succeed(a, drainAll(a, t0)[0])
	s := drainAll(a, t0) // 5 in flight: sequences 3, 6, 9, 12, 15
	// The broker missed s[0]; the others overtook it or followed it.
	a.onResult(s[2], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	a.onResult(s[0], codeErr(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER), -1, -1, t0, false)
	a.onResult(s[1], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	if q := a.queue(tp0); q.needsReset {
		t.Fatal("OUT_OF_ORDER behind an unresolved batch asked for an epoch bump")
	}
	later := t0.Add(10 * time.Second)
	var order []int32
	for round := 0; round < 3; round++ {
		r := drainAll(a, later)
		if len(r) != 1 {
			t.Fatalf("round %d: %d batches sent, want 1 (retries go one at a time)", round, len(r))
		}
		order = append(order, r[0].producer.BaseSequence)
		succeed(a, r[0])
		if round == 0 {
			// s[3], s[4] come back refused too, while s[0]'s retry is out.
			a.onResult(s[4], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
			a.onResult(s[3], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
		}
	}
	if want := []int32{3, 6, 9}; !equalInt32(order, want) {
		t.Fatalf("retried sequences %v, want %v", order, want)
	}
	r := drainAll(a, later)
	if len(r) != 1 || r[0] != s[3] {
		t.Fatalf("next: %d batches, want the retry of sequence 12 alone", len(r))
	}
	succeed(a, r[0])
	r = drainAll(a, later)
	if len(r) != 3 || r[0] != s[4] || r[1].producer.BaseSequence != 18 || r[2].producer.BaseSequence != 21 {
		t.Fatalf("after the retries: want the last retry then the new batches 18 and 21, got %d batches", len(r))
	}
	for _, b := range r {
		if b.producer.Epoch != 0 {
			t.Errorf("epoch changed to %d without an unresolvable error", b.producer.Epoch)
		}
	}
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// KIP-360: OUT_OF_ORDER for a batch sent when nothing before it was
// unresolved (its predecessor failed without being written) cannot
// resolve; once nothing is in flight the epoch is bumped locally and the
// unresolved batches are renumbered from 0 under it (new header and CRC)
// and retried, not failed. The same answer for an attempt sent while its
// predecessor was unresolved is retried first: the broker may have judged
// it before the predecessor arrived.
func TestUnresolvableSequenceBumpsEpochAndRenumbers(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 5)
	succeed(a, drainAll(a, t0)[0])
	s := drainAll(a, t0) // sequences 3, 6, 9, 12
	a.onResult(s[0], codeErr(sluicev1.ErrorCode_MESSAGE_TOO_LARGE), -1, -1, t0, false)
	if got := completeAll(a, tp0); len(got) != 1 || got[0].err == nil {
		t.Fatal("a non-retriable error did not fail its batch")
	}
	a.onResult(s[1], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	if a.queue(tp0).needsReset {
		t.Fatal("OUT_OF_ORDER for a batch sent behind an unresolved one asked for a new epoch")
	}
	later := t0.Add(10 * time.Second)
	r := drainAll(a, later)
	if len(r) != 1 || r[0] != s[1] || !s[1].sentFirst {
		t.Fatalf("retry: %d sent, want s[1] sent as the first unresolved batch", len(r))
	}
	a.onResult(s[1], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, later, false)
	if !a.queue(tp0).needsReset {
		t.Fatal("OUT_OF_ORDER for the first unresolved batch did not ask for a new epoch")
	}
	later = later.Add(10 * time.Second)
	if r := drainAll(a, later); len(r) != 0 {
		t.Fatalf("sent %d batches while older ones are still in flight", len(r))
	}
	a.onResult(s[2], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	a.onResult(s[3], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	r = drainAll(a, later)
	if a.identity != (producerIdentity{1000, 1}) || a.epochBumps != 1 {
		t.Fatalf("identity %+v after %d bumps, want 1000 epoch 1 after 1", a.identity, a.epochBumps)
	}
	if len(r) != 1 || r[0] != s[1] {
		t.Fatalf("after the bump: %d sent, want the first unresolved batch alone", len(r))
	}
	for i, b := range []*recordBatch{s[1], s[2], s[3]} {
		h := header(t, b) // verifies the new CRC
		if h.ProducerID != 1000 || h.ProducerEpoch != 1 || h.BaseSequence != int32(3*i) {
			t.Errorf("renumbered batch %d: producer %d epoch %d seq %d, want 1000/1/%d", i, h.ProducerID, h.ProducerEpoch, h.BaseSequence, 3*i)
		}
	}
}

// Other partitions keep their epoch for what they have outstanding and
// move to the new one, sequences from 0, when they next start a batch
// with nothing outstanding (Kafka: maybeUpdateProducerIdAndEpoch).
func TestOtherPartitionsAdoptNewEpochWhenIdle(t *testing.T) {
	a := idempotentAcc()
	tp1 := topicPartition{"t", 1}
	fill(a, tp0, 2)
	fill(a, tp1, 2)
	r := drainAll(a, t0)
	p0, p1 := r[0], r[1]
	succeed(a, p1)
	p1b := drainAll(a, t0)[0] // tp1 seq 3, epoch 0, in flight
	fill(a, tp1, 1)
	a.onResult(p0, codeErr(sluicev1.ErrorCode_UNKNOWN_PRODUCER_ID), -1, -1, t0, false)
	later := t0.Add(10 * time.Second)
	r = drainAll(a, later)
	if len(r) != 1 || r[0] != p0 || r[0].producer.Epoch != 1 || r[0].producer.BaseSequence != 0 {
		t.Fatalf("after UNKNOWN_PRODUCER_ID: want only tp0's batch, at epoch 1 seq 0; got %d batches", len(r))
	}
	succeed(a, p1b)
	r = drainAll(a, later)
	if len(r) != 1 || r[0].tp != tp1 || r[0].producer.Epoch != 1 || r[0].producer.BaseSequence != 0 {
		t.Fatalf("tp1's next batch once idle: %d batches, want one at epoch 1 seq 0", len(r))
	}
}

// When the epoch would pass MaxInt16 the producer needs a new producer id
// (Kafka: bumpIdempotentProducerEpoch resets the id); the partition is
// renumbered under the new id without another bump.
func TestEpochExhaustedAsksForNewProducerID(t *testing.T) {
	a := idempotentAcc()
	a.setIdentity(1000, math.MaxInt16)
	fill(a, tp0, 2)
	b := drainAll(a, t0)[0]
	a.onResult(b, codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	later := t0.Add(10 * time.Second)
	if r := drainAll(a, later); len(r) != 0 || !a.needsIdentity() {
		t.Fatalf("exhausted epoch: sent %d, needsIdentity %v; want 0 and true", len(r), a.needsIdentity())
	}
	a.setIdentity(2000, 0)
	r := drainAll(a, later)
	if len(r) != 1 || r[0] != b || b.producer.ID != 2000 || b.producer.Epoch != 0 || b.producer.BaseSequence != 0 {
		t.Fatalf("after the new id: %d sent, batch %+v; want it under 2000/0 seq 0", len(r), b.producer)
	}
	if a.epochBumps != 0 {
		t.Errorf("%d epoch bumps, want 0", a.epochBumps)
	}
}

// A broker that wrote a later batch but refuses the earlier one has lost
// the producer's state; resending the earlier one would reorder records,
// so it fails instead.
func TestRefusedBatchBeforeAnAckedOneFails(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 3)
	succeed(a, drainAll(a, t0)[0])
	s := drainAll(a, t0)
	a.onResult(s[1], nil, 50, -1, t0, false)
	a.onResult(s[0], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	got := completeAll(a, tp0)
	if len(got) != 2 || got[0] != s[0] || errs.Code(got[0].err) != sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER || got[1].err != nil {
		t.Fatalf("want the refused batch failed with OUT_OF_ORDER, then the acked one; got %d", len(got))
	}
}

// INVALID_PRODUCER_EPOCH and PRODUCER_FENCED fail the batch; the
// answers with no error, or DUPLICATE_SEQUENCE_NUMBER, succeed.
func TestAnswerClassification(t *testing.T) {
	for _, tc := range []struct {
		code    sluicev1.ErrorCode
		retried bool
		failed  bool
	}{
		{sluicev1.ErrorCode_NONE, false, false},
		{sluicev1.ErrorCode_DUPLICATE_SEQUENCE_NUMBER, false, false},
		{sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, false, true},
		{sluicev1.ErrorCode_PRODUCER_FENCED, false, true},
		{sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, true, false},
		{sluicev1.ErrorCode_REQUEST_TIMED_OUT, true, false},
		{sluicev1.ErrorCode_INVALID_RECORD, false, true},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			a := idempotentAcc()
			fill(a, tp0, 1)
			b := drainAll(a, t0)[0]
			var err error
			if tc.code != sluicev1.ErrorCode_NONE {
				err = codeErr(tc.code)
			}
			a.onResult(b, err, 7, -1, t0, false)
			retried := len(a.queue(tp0).queue) == 1
			if retried != tc.retried || (b.done && b.err != nil) != tc.failed {
				t.Errorf("retried %v failed %v (err %v), want %v %v", retried, b.done && b.err != nil, b.err, tc.retried, tc.failed)
			}
		})
	}
}

// A batch past its delivery timeout fails: one never sent at once, one
// waiting for a retry only when its turn comes, so the partition's
// callbacks stay in order.
func TestExpiryKeepsCompletionOrder(t *testing.T) {
	a := idempotentAcc()
	fill(a, tp0, 3)
	succeed(a, drainAll(a, t0)[0])
	s := drainAll(a, t0)
	a.onResult(s[1], codeErr(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER), -1, -1, t0, false)
	late := t0.Add(2 * time.Minute)
	_, expired, _ := a.drain(late, true, nil)
	if len(expired) != 0 {
		t.Fatalf("retry expired while an earlier batch is still in flight")
	}
	a.onResult(s[0], codeErr(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER), -1, -1, late, false)
	_, expired, _ = a.drain(late, true, nil)
	got := completeAll(a, tp0)
	if len(expired) != 1 || len(got) != 2 || got[0] != s[0] || got[1] != s[1] {
		t.Fatalf("expired %v, completed %d; want both batches failed in order", expired, len(got))
	}
	if errs.Code(got[1].err) != sluicev1.ErrorCode_REQUEST_TIMED_OUT {
		t.Errorf("expired batch error %v, want REQUEST_TIMED_OUT", got[1].err)
	}
}

// Without idempotence a partition has one batch outstanding and batches
// carry no producer id.
func TestPlainProducerOneBatchPerPartition(t *testing.T) {
	a := newAccumulator(1024, 0, time.Minute, 1, false)
	fill(a, tp0, 3)
	r := drainAll(a, t0)
	if len(r) != 1 {
		t.Fatalf("%d batches in flight, want 1", len(r))
	}
	if h := header(t, r[0]); h.ProducerID != batch.NoProducerID || h.BaseSequence != -1 {
		t.Errorf("plain batch has producer %d seq %d", h.ProducerID, h.BaseSequence)
	}
}
