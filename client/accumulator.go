package client

import (
	"time"

	"github.com/sluice-io/sluice/proto/batch"
)

// topicPartition names a partition.
type topicPartition struct {
	topic     string
	partition int32
}

// pendingRecord is what the producer remembers of a record until its
// batch is acknowledged.
type pendingRecord struct {
	cb        func(RecordMetadata, error)
	timestamp int64
}

// recordBatch is one batch of one partition, from first append to ack.
type recordBatch struct {
	tp      topicPartition
	builder batch.Builder
	records []pendingRecord
	data    []byte // the finished canonical batch; nil while open
	size    int    // bytes accounted against the buffer limit

	created  time.Time // first append
	deadline time.Time // created + delivery timeout
	attempts int
	retryAt  time.Time
	lastErr  error
}

// partitionQueue is the accumulator state of one partition: the open
// batch being appended to, finished batches waiting to be sent, and
// whether a batch is in flight. Without idempotence a partition has at
// most one batch in flight, so that a retry can never reorder records
// (see Producer).
type partitionQueue struct {
	tp       topicPartition
	open     *recordBatch
	queue    []*recordBatch
	inFlight int
	// numPartitions is the topic's partition count at the last append,
	// for moving the sticky partition on.
	numPartitions int32
}

// accumulator groups records into per-partition batches. It is a pure
// state machine: time is passed in, it starts no goroutines and it is not
// safe for concurrent use (the Producer guards it with its mutex).
type accumulator struct {
	batchBytes      int
	linger          time.Duration
	deliveryTimeout time.Duration
	maxInFlight     int

	parts  map[topicPartition]*partitionQueue
	order  []*partitionQueue // stable iteration order for draining
	sticky map[string]int32  // topic -> sticky partition for keyless records
	free   []*recordBatch    // recycled batch structs
	bufs   bufPool           // recycled batch buffers
}

func newAccumulator(batchBytes int, linger, deliveryTimeout time.Duration, maxInFlight int) *accumulator {
	return &accumulator{
		batchBytes:      batchBytes,
		linger:          linger,
		deliveryTimeout: deliveryTimeout,
		maxInFlight:     maxInFlight,
		parts:           map[topicPartition]*partitionQueue{},
		sticky:          map[string]int32{},
		bufs:            bufPool{size: batchBytes + 64<<10},
	}
}

func (a *accumulator) queue(tp topicPartition) *partitionQueue {
	q := a.parts[tp]
	if q == nil {
		q = &partitionQueue{tp: tp}
		a.parts[tp] = q
		a.order = append(a.order, q)
	}
	return q
}

// stickyPartition returns the sticky partition of topic for a keyless
// record. When the record would not fit the sticky partition's open
// batch, that batch is closed (closed = true) and the next partition
// becomes sticky.
func (a *accumulator) stickyPartition(topic string, numPartitions int32, key, value []byte, headers []batch.RecordHeader) (p int32, closed bool) {
	p, ok := a.sticky[topic]
	if !ok || p >= numPartitions {
		p = 0
		a.sticky[topic] = p
	}
	if q := a.parts[topicPartition{topic, p}]; q != nil && q.open != nil && q.open.builder.Count() > 0 &&
		q.open.builder.Size()+recordSize(key, value, headers) > a.batchBytes {
		q.numPartitions = numPartitions
		a.close(q, true)
		p, closed = a.sticky[topic], true
	}
	return p, closed
}

// recordSize bounds the bytes Add takes for a record: the deltas add at
// most 15 bytes over the size with zero deltas.
func recordSize(key, value []byte, headers []batch.RecordHeader) int {
	return batch.RecordSize(0, 0, key, value, headers) + 15
}

// append adds a record to tp's open batch, closing the batch first when
// the record would not fit. It returns the bytes accounted for the record
// and whether a batch was closed (so that the sender should be woken).
func (a *accumulator) append(tp topicPartition, numPartitions int32, ts int64, key, value []byte, headers []batch.RecordHeader, cb func(RecordMetadata, error), now time.Time) (size int, closed bool) {
	q := a.queue(tp)
	q.numPartitions = numPartitions
	b := q.open
	if b != nil && b.builder.Count() > 0 && b.builder.Size()+recordSize(key, value, headers) > a.batchBytes {
		// The record starts the partition's next batch, so the sticky
		// partition stays: moving it would leave this record alone.
		a.close(q, false)
		closed = true
		b = nil
	}
	if b == nil {
		b = a.newBatch(tp, ts, now)
		q.open = b
	}
	before := b.builder.Size()
	b.builder.Add(ts, key, value, headers)
	b.records = append(b.records, pendingRecord{cb: cb, timestamp: ts})
	size = b.builder.Size() - before
	b.size += size
	if b.builder.Size() >= a.batchBytes {
		a.close(q, true)
		closed = true
	}
	return size, closed
}

func (a *accumulator) newBatch(tp topicPartition, ts int64, now time.Time) *recordBatch {
	var b *recordBatch
	if n := len(a.free); n > 0 {
		b = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		b = &recordBatch{}
	}
	b.tp = tp
	b.builder.ResetBuffer(a.bufs.get(), ts)
	b.created = now
	b.deadline = now.Add(a.deliveryTimeout)
	b.size = batch.HeaderSize
	return b
}

// close finishes q's open batch and queues it for sending. With rotate,
// when the batch was on the topic's sticky partition, the sticky partition
// moves to the next one, so keyless records spread batch by batch.
func (a *accumulator) close(q *partitionQueue, rotate bool) {
	b := q.open
	if b == nil {
		return
	}
	q.open = nil
	if p, ok := a.sticky[q.tp.topic]; rotate && ok && p == q.tp.partition && q.numPartitions > 0 {
		a.sticky[q.tp.topic] = (p + 1) % q.numPartitions
	}
	b.data = b.builder.Finish(batch.PlainProducer, 0)
	q.queue = append(q.queue, b)
}

// recycle returns a completed batch struct for reuse. The caller must not
// touch b afterwards.
func (a *accumulator) recycle(b *recordBatch) {
	a.bufs.put(b.data)
	clear(b.records)
	*b = recordBatch{records: b.records[:0], builder: b.builder}
	a.free = append(a.free, b)
}

// drain closes open batches whose linger has elapsed (all of them when
// flush is set) on partitions with nothing queued or in flight, and returns, per partition, the first queued batch of
// every partition that may send now (nothing in flight, retry backoff
// over), marking it in flight. next is the earliest time something else
// becomes sendable (zero when nothing waits on time).
func (a *accumulator) drain(now time.Time, flush bool, out []*recordBatch) (ready []*recordBatch, next time.Time) {
	ready = out[:0]
	for _, q := range a.order {
		// An open batch is closed by linger (or flush) only when it could
		// be sent at once: while its partition is busy it keeps growing,
		// and the end of the in-flight request drains again.
		if q.open != nil && q.inFlight == 0 && len(q.queue) == 0 {
			due := q.open.created.Add(a.linger)
			if flush || !now.Before(due) {
				a.close(q, true)
			} else if next.IsZero() || due.Before(next) {
				next = due
			}
		}
		if len(q.queue) == 0 || q.inFlight > 0 {
			continue
		}
		b := q.queue[0]
		if b.retryAt.After(now) {
			if next.IsZero() || b.retryAt.Before(next) {
				next = b.retryAt
			}
			continue
		}
		q.queue = q.queue[1:]
		q.inFlight++
		ready = append(ready, b)
	}
	return ready, next
}

// done records that b's request finished: b leaves flight.
func (a *accumulator) done(b *recordBatch) {
	if q := a.parts[b.tp]; q != nil {
		q.inFlight--
	}
}

// requeue puts b back at the head of its partition's queue to be retried
// at retryAt.
func (a *accumulator) requeue(b *recordBatch, retryAt time.Time) {
	q := a.queue(b.tp)
	q.inFlight--
	b.retryAt = retryAt
	q.queue = append(q.queue, nil)
	copy(q.queue[1:], q.queue)
	q.queue[0] = b
}

// empty reports whether no batch is open, queued or in flight.
func (a *accumulator) empty() bool {
	for _, q := range a.order {
		if q.open != nil || len(q.queue) > 0 || q.inFlight > 0 {
			return false
		}
	}
	return true
}

// backoffFor is the retry backoff after attempt failures: 50ms doubling to
// at most 1s.
func backoffFor(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt, 5)
	return min(d, time.Second)
}
