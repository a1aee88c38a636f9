package client

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the per-partition send state of the accumulator: which batch
// may go next, sequence numbers, and what a broker's answer does to the
// partition. Like the rest of the accumulator it is pure: time is passed
// in, no goroutines, no network; the Producer guards it with its mutex.
//
// Citations: "ref" is /work/shared/reference/kafka-idempotence-and-
// transactions.txt §1; "Kafka" names classes of Kafka's producer
// (clients/.../producer/internals: RecordAccumulator, Sender,
// TransactionManager) for rules the reference leaves out.
//
// # Without idempotence
//
// A partition has one batch outstanding at a time (see Producer): a retry
// cannot overtake anything, so records are stored in Send order.
//
// # Idempotent producer
//
// Identity. The producer gets a producer id and epoch 0 from
// InitProducerId before its first send (producerid.go).
//
// Sequences. A batch gets its base sequence when it leaves the queue for
// the first time (drain), not in Send, and keeps it on every retry, because
// an earlier attempt may have been written and only the same numbers let
// the broker recognise the duplicate (ref: "the sequence is attached at
// drain time", "a retried batch goes again with the producer id, epoch and
// sequence it received the first time"). The next batch starts at this
// one's base sequence plus its record count, wrapping after MaxInt32.
//
// Window. A partition has at most maxInFlight (<= 5) batches outstanding
// (sent, not yet completed), so a retried batch is always among the 5 the
// broker remembers and comes back as a duplicate if it was written (ref:
// "max.in.flight.requests.per.connection <= 5 is matched to the 5 batches
// the broker remembers"). Until a batch of the partition's current
// identity has been acknowledged, the window is 1: a broker that does not
// know the producer id takes any first sequence (DESIGN §9), and gRPC
// serves concurrent requests in any order, so a second batch could be
// written ahead of the first. (A Kafka connection serves its requests in
// order, so Kafka needs no such rule.) Requests to one broker are started
// in drain order (Producer.brokerWorker), which keeps a partition's
// batches mostly in order on the wire; the broker's sequence check is what
// guarantees it.
//
// Retries in order. A batch to be retried goes back to the head of its
// partition's queue, among the other retries in send order (Kafka:
// RecordAccumulator.insertInSequenceOrder). A retry is sent only when it
// is the partition's first unresolved batch (Kafka:
// shouldStopDrainBatchesForPartition: "we only move on when the next in
// line batch is complete"). So after a failure the partition sends one
// batch at a time until its retries are through, and new batches queue
// behind them. A batch that overtook its predecessor on the way to the
// broker is refused OUT_OF_ORDER_SEQUENCE_NUMBER and simply retried after
// it.
//
// Completion in order. Pipelined requests can be answered in any order. A
// batch's result is held until every earlier batch of its partition has
// completed, so that a partition's callbacks run in record order.
//
// Answers (Kafka: TransactionManager.canRetry and handleFailedBatch):
//
//   - NONE, including a duplicate of a remembered batch (the broker answers
//     it with the original offsets, ref "Duplicate check"), and
//     DUPLICATE_SEQUENCE_NUMBER (Kafka treats it as success; it carries no
//     offset): success.
//   - OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for an attempt
//     sent while an earlier batch of the partition was unresolved: the
//     broker may have judged the batch before its predecessor arrived
//     (even if the predecessor's success has come back since: answers
//     overtake each other), or the predecessor may yet be written; retry.
//     Kafka asks instead whether the batch follows the last acknowledged
//     sequence, which is only sound because a Kafka connection answers in
//     order.
//   - The same for an attempt sent when the batch was already the first
//     unresolved one, and still is: unresolvable. Everything before it had
//     completed when the broker judged it, so either a predecessor failed
//     or expired without being written (a gap), or the broker lost the
//     producer's state. The broker has written neither this batch nor any
//     after it (it accepts nothing after a gap), so the partition's
//     unresolved batches are renumbered under a bumped epoch and retried
//     (below).
//   - INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: the batch fails. Only this
//     producer uses its id, so this means a broker holds a higher epoch of
//     it than the batch carries; nothing the producer can fix.
//   - Other retriable errors: retry with backoff until the delivery
//     timeout; other errors fail the batch. A batch that expires after
//     being sent fails with unknown fate (it may have been written). A
//     partition that the metadata reports offline after a disk failure
//     (ErrPartitionOffline) is retried for OfflineRetry only: its batch
//     then fails as an expired one would.
//
// Epoch bump (KIP-360). For an idempotent producer without transactions,
// Kafka bumps the epoch locally (same producer id, epoch + 1: the broker
// takes a higher epoch starting at sequence 0) and calls InitProducerId
// for a new id only when the epoch would pass MaxInt16
// (TransactionManager.bumpIdempotentProducerEpoch). We do the same. A local
// bump is also the safer choice: a late copy of an old request (one the
// client gave up on and the broker still serves) carries the lower epoch
// and is refused INVALID_PRODUCER_EPOCH, whereas under a fresh producer id
// the old id's state would still take it if it came in sequence.
//
// The reset of a partition waits until none of its requests is in flight
// (Kafka waits for in-flight batches before changing a partition's epoch).
// Then its unresolved batches get new sequences from 0 under the new
// epoch, in order, and are retried; they are not failed (Kafka:
// TxnPartitionMap.startSequencesAtBeginning). Completed batches keep their
// results. Other partitions keep their epoch for the batches they have
// outstanding and adopt the new identity, sequences from 0, when they next
// start a batch with nothing outstanding (Kafka:
// maybeUpdateProducerIdAndEpoch). If a later batch of the partition was
// acknowledged while an earlier one is refused, the broker wrote the later
// one without the earlier (it had forgotten the producer): resending the
// earlier would reorder records, so it fails with the sequence error.

//
// Transactional producer (transaction.go). The identity comes from
// InitTransactions and then from each EndTxn answer (TV2 bumps the epoch
// at every end); every partition is idle at that point, so each adopts
// the new identity at its next batch, from sequence 0 (maySend). There is
// no local epoch bump: the coordinator owns the epoch, so an unresolvable
// sequence error fails the batch, which makes the transaction abortable,
// and the abort's EndTxn brings the new epoch. (Kafka's KIP-360
// InitProducerId bump for an abortable error is a TV1 device: under TV2
// the EndTxn of the abort bumps the epoch.)

// producerIdentity is the producer id and epoch an idempotent producer
// writes under.
type producerIdentity struct {
	id    int64 // batch.NoProducerID: none
	epoch int16
}

var noIdentity = producerIdentity{id: batch.NoProducerID, epoch: -1}

func (id producerIdentity) valid() bool { return id.id >= 0 }

// nextSequence is seq advanced by n records, wrapping after MaxInt32 like
// the broker's inSequence.
func nextSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

// setIdentity installs the producer id and epoch InitProducerId returned.
func (a *accumulator) setIdentity(id int64, epoch int16) {
	a.identity = producerIdentity{id: id, epoch: epoch}
}

// needsIdentity reports whether the producer must call InitProducerId
// before it can send: idempotent with no (or an exhausted) identity.
func (a *accumulator) needsIdentity() bool {
	return a.idempotent && !a.identity.valid()
}

// window is how many batches q may have outstanding.
func (a *accumulator) window(q *partitionQueue) int {
	if a.idempotent && !q.acked {
		return 1
	}
	return a.maxInFlight
}

// firstUnresolved returns q's earliest outstanding batch without a result,
// or nil.
func firstUnresolved(q *partitionQueue) *recordBatch {
	for _, b := range q.outstanding {
		if !b.done {
			return b
		}
	}
	return nil
}

// startSending gives b, leaving the queue for the first time, its place in
// the send order and, when idempotent, its producer identity and base
// sequence, and finishes its bytes (compressed with WithCompression's
// codec: a retry or a renumbered batch keeps them, its header rewritten).
func (a *accumulator) startSending(q *partitionQueue, b *recordBatch) {
	q.nextOrd++
	b.ord = q.nextOrd
	b.producer = batch.PlainProducer
	if a.idempotent {
		b.producer = batch.Producer{ID: q.identity.id, Epoch: int32(q.identity.epoch), BaseSequence: q.nextSeq}
		q.nextSeq = nextSequence(q.nextSeq, len(b.records))
	}
	var attrs uint32
	if a.transactional {
		attrs = batch.AttrTransactional
	}
	b.data = compress(b.builder.Finish(b.producer, attrs), a.compression, &a.bufs)
	q.outstanding = append(q.outstanding, b)
}

// renumber rewrites the producer fields of b's finished bytes (and the
// CRC, which covers them) to q's identity and next sequence. Only a
// partition reset calls it, on a batch not in flight.
func (a *accumulator) renumber(q *partitionQueue, b *recordBatch) {
	b.producer = batch.Producer{ID: q.identity.id, Epoch: int32(q.identity.epoch), BaseSequence: q.nextSeq}
	q.nextSeq = nextSequence(q.nextSeq, len(b.records))
	if b.wire != nil {
		// An earlier request may still hold data in gRPC's queue (one
		// that timed out, say): rewrite a copy, never bytes on their
		// way out.
		data := append(a.bufs.get(), b.data...)
		b.wire.Free()
		b.wire, b.data = nil, data
	}
	h, err := batch.ParseHeader(b.data)
	if err != nil {
		panic(fmt.Sprintf("sluice: producer batch lost its header: %v", err)) // built by this package
	}
	h.ProducerID, h.ProducerEpoch, h.BaseSequence = b.producer.ID, b.producer.Epoch, b.producer.BaseSequence
	batch.PutHeader(b.data, h)
	h.CRC = batch.ComputeCRC(b.data)
	batch.PutHeader(b.data, h)
}

// resetSequences restarts q's sequences under a new epoch (see the top of
// this file). It needs q.inFlight == 0 and a valid identity. It reports
// whether batches failed (and so q may have batches to complete). When the
// epoch is exhausted it clears the identity instead and leaves q to be
// reset once InitProducerId has given a new producer id.
func (a *accumulator) resetSequences(q *partitionQueue) (failed bool) {
	if q.identity == a.identity {
		if a.identity.epoch == math.MaxInt16 {
			a.identity = noIdentity
			return false
		}
		a.identity.epoch++
		a.epochBumps++
	}
	q.identity, q.nextSeq, q.acked, q.needsReset = a.identity, 0, false, false
	lastAcked := -1
	for i, b := range q.outstanding {
		if b.done && b.err == nil {
			lastAcked = i
		}
	}
	for i, b := range q.outstanding {
		if b.done {
			continue
		}
		if i < lastAcked {
			// Written later batches without this one: resending it would
			// reorder. Every unresolved batch is queued (none in flight).
			a.unqueue(q, b)
			a.setDone(b, b.lastErr)
			failed = true
			continue
		}
		a.renumber(q, b)
	}
	return failed
}

// unqueue removes b from q's queue.
func (a *accumulator) unqueue(q *partitionQueue, b *recordBatch) {
	for i, x := range q.queue {
		if x == b {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			return
		}
	}
}

func (a *accumulator) setDone(b *recordBatch, err error) {
	b.done, b.err = true, err
	b.baseOffset, b.appendTime = -1, -1
}

// onResult applies the outcome of one attempt of in-flight batch b: err
// nil (or the error the broker reported for b's partition, or the
// request's error) and, on success, the broker's base offset and append
// time. The batch is then either requeued for a retry or done; done
// batches complete through takeCompleted. stopping forbids retries (the
// producer is closing).
func (a *accumulator) onResult(b *recordBatch, err error, baseOffset, appendTime int64, now time.Time, stopping bool) {
	q := a.queue(b.tp)
	q.inFlight--
	b.inFlight = false
	b.attempts++
	code := errs.Code(err)
	if err == nil || (a.idempotent && code == sluicev1.ErrorCode_DUPLICATE_SEQUENCE_NUMBER) {
		if err != nil {
			baseOffset, appendTime = -1, -1
		}
		b.done, b.err, b.baseOffset, b.appendTime = true, nil, baseOffset, appendTime
		if a.idempotent && b.producer.ID == q.identity.id && b.producer.Epoch == int32(q.identity.epoch) {
			q.acked = true
		}
		return
	}
	b.lastErr = err
	retry := isRetriable(err)
	retryAt := now.Add(backoffFor(b.attempts - 1))
	if a.idempotent {
		switch code {
		case sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER, sluicev1.ErrorCode_UNKNOWN_PRODUCER_ID:
			a.sequenceErrors++
			retry = true
			switch {
			case !b.sentFirst || firstUnresolved(q) != b:
				// Waiting for the predecessor is the backoff: the retry
				// goes when it is the first unresolved batch.
				retryAt = now
			case a.laterAcked(q, b):
				retry = false
			case a.transactional:
				// Only the coordinator bumps a transactional producer's
				// epoch: the batch fails, which makes the transaction
				// abortable, and the abort's EndTxn gives a new epoch
				// under which every partition restarts at 0 (Kafka: an
				// abortable error for transactional producers).
				retry = false
			default:
				q.needsReset = true
			}
		case sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, sluicev1.ErrorCode_PRODUCER_FENCED:
			retry = false
		}
	}
	if b.offline.observe(err, now) {
		// No broker can serve the partition until an operator fixes a
		// disk: say so now rather than at the delivery timeout.
		retry = false
	}
	if retry && !stopping && retryAt.Before(b.deadline) {
		a.retries++
		b.retryAt = retryAt
		a.requeue(q, b)
		return
	}
	a.setDone(b, err)
}

// laterAcked reports whether a batch after b in q's send order succeeded.
func (a *accumulator) laterAcked(q *partitionQueue, b *recordBatch) bool {
	for _, x := range q.outstanding {
		if x.ord > b.ord && x.done && x.err == nil {
			return true
		}
	}
	return false
}

// requeue puts b, which has been sent, back into q's queue among the other
// retries in send order, ahead of batches never sent.
func (a *accumulator) requeue(q *partitionQueue, b *recordBatch) {
	i := 0
	for i < len(q.queue) && q.queue[i].ord != 0 && q.queue[i].ord < b.ord {
		i++
	}
	q.queue = append(q.queue, nil)
	copy(q.queue[i+1:], q.queue[i:])
	q.queue[i] = b
}

// expiredError is the error of a batch whose delivery timeout passed
// before it was acknowledged. If it was ever sent it may have been
// written.
func (a *accumulator) expiredError(b *recordBatch) error {
	cause := b.lastErr
	if cause == nil {
		cause = a.waitErr
	}
	sent := "before it was sent"
	if b.attempts > 0 {
		sent = fmt.Sprintf("after %d attempts (it may have been written)", b.attempts)
	}
	if cause != nil {
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%d records expired: delivery timeout %v passed %s; last error: %w", len(b.records), a.deliveryTimeout, sent, cause)
	}
	return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%d records expired: delivery timeout %v passed %s", len(b.records), a.deliveryTimeout, sent)
}

// expire fails the batches at the head of q's queue whose delivery
// timeout has passed: a retry only when its turn has come (it is q's first
// unresolved batch), so that a partition's batches still complete in
// order. It reports whether any expired.
func (a *accumulator) expire(q *partitionQueue, now time.Time) (expired bool) {
	for len(q.queue) > 0 {
		b := q.queue[0]
		if now.Before(b.deadline) {
			return expired
		}
		if b.ord != 0 {
			if firstUnresolved(q) != b {
				return expired
			}
		} else {
			q.nextOrd++
			b.ord = q.nextOrd
			q.outstanding = append(q.outstanding, b)
		}
		q.queue = q.queue[1:]
		a.setDone(b, a.expiredError(b))
		expired = true
	}
	return expired
}

// abort fails every batch not in flight with err (the producer can no
// longer send: see Producer.fatal) and returns the partitions with
// batches to complete. In-flight batches are failed by abort's next call
// if their answer asks for a retry.
func (a *accumulator) abort(err error) []topicPartition {
	var tps []topicPartition
	for _, q := range a.order {
		a.close(q, false)
		if len(q.queue) == 0 {
			continue
		}
		for _, b := range q.queue {
			if b.ord == 0 {
				q.nextOrd++
				b.ord = q.nextOrd
				q.outstanding = append(q.outstanding, b)
			}
			a.setDone(b, err)
		}
		q.queue = q.queue[:0]
		tps = append(tps, q.tp)
	}
	return tps
}

// takeCompleted returns the done batches at the head of tp's send order,
// removing them, for their callbacks to run. Only one caller at a time
// completes a partition, so that callbacks run in order: a caller that
// got batches (owner) must call again with owner set until it gets none;
// others get nil meanwhile.
func (a *accumulator) takeCompleted(tp topicPartition, owner bool) []*recordBatch {
	q := a.parts[tp]
	if q == nil || (q.completing && !owner) {
		return nil
	}
	n := 0
	for n < len(q.outstanding) && q.outstanding[n].done {
		n++
	}
	if n == 0 {
		q.completing = false
		return nil
	}
	out := make([]*recordBatch, n)
	copy(out, q.outstanding)
	rest := copy(q.outstanding, q.outstanding[n:])
	clear(q.outstanding[rest:])
	q.outstanding = q.outstanding[:rest]
	q.completing = true
	return out
}
