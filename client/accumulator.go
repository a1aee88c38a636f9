package client

import (
	"time"

	"google.golang.org/grpc/mem"

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

// recordBatch is one batch of one partition, from first append to
// completion.
type recordBatch struct {
	tp      topicPartition
	builder batch.Builder
	records []pendingRecord
	data    []byte // the finished canonical batch; nil until first sent
	size    int    // bytes accounted against the buffer limit
	// wire is data as a reference-counted buffer, made at the first send
	// on a ProduceStream: the encoded request references data instead of
	// copying it, and data goes back to the buffer pool only when both
	// the batch is recycled and gRPC has written every request holding it.
	wire mem.Buffer

	created  time.Time // first append
	deadline time.Time // created + delivery timeout
	attempts int       // answers received (or local failures to send)
	retryAt  time.Time
	lastErr  error
	// offline: how long its attempts have found the partition offline
	// after a disk failure (ErrPartitionOffline); it fails after
	// OfflineRetry, not at its deadline.
	offline offlineFor

	// ord is the batch's place in its partition's send order (1, 2, ...),
	// given when it first leaves the queue; 0 before.
	ord uint64
	// producer is what the batch header carries: batch.PlainProducer
	// without idempotence, else the producer id, epoch and base sequence
	// given at the first send (changed only by a sequence reset, see
	// sequence.go).
	producer batch.Producer
	inFlight bool
	// sentFirst: when the attempt in flight (or the last one) was sent,
	// every earlier batch of the partition had completed.
	sentFirst bool

	// The result, once known (done): err, or the base offset and append
	// time (-1 when unknown). A batch completes, its callbacks run, only
	// after every earlier batch of its partition has.
	done       bool
	err        error
	baseOffset int64
	appendTime int64
}

// partitionQueue is the accumulator state of one partition: the open
// batch being appended to, closed batches waiting to be sent, and the
// batches sent and not yet completed (sequence.go says which may go next).
type partitionQueue struct {
	tp   topicPartition
	open *recordBatch
	// queue holds closed batches waiting to be sent: first the retries, in
	// send order, then the batches never sent, in close order.
	queue []*recordBatch
	// outstanding holds the batches that left the queue and have not
	// completed, in send order: in flight, waiting for a retry (then also
	// in queue), or done and waiting for an earlier batch to complete.
	outstanding []*recordBatch
	inFlight    int    // batches of outstanding in a request now
	nextOrd     uint64 // ord of the last batch that left the queue
	completing  bool   // a goroutine is running this partition's callbacks
	// numPartitions is the topic's partition count at the last append,
	// for moving the sticky partition on.
	numPartitions int32

	// Idempotence (sequence.go).
	identity   producerIdentity // producer id and epoch of the sequences
	nextSeq    int32            // base sequence of the next batch sent
	acked      bool             // a batch of identity was acknowledged
	needsReset bool             // renumber under a new epoch when idle
}

// accumulator groups records into per-partition batches and decides which
// may be sent. It is a pure state machine: time is passed in, it starts no
// goroutines and it is not safe for concurrent use (the Producer guards it
// with its mutex).
type accumulator struct {
	batchBytes      int
	linger          time.Duration
	deliveryTimeout time.Duration
	// maxInFlight bounds a partition's outstanding batches: 1 without
	// idempotence, the producer's max in flight (<= 5) with it.
	maxInFlight int
	idempotent  bool
	// transactional: batches carry the transactional attribute, and the
	// epoch belongs to the coordinator (no local bumps, see sequence.go).
	transactional bool
	// compression is the codec batches are compressed with when they
	// are finished (WithCompression).
	compression Compression
	// identity is what new sequences are assigned under; invalid until
	// InitProducerId answers, and again if the epoch runs out.
	identity producerIdentity
	// waitErr is why the producer cannot send yet (the last
	// InitProducerId error), for the errors of batches that expire.
	waitErr error
	// Counters for Producer.Stats.
	epochBumps     int64
	retries        int64
	sequenceErrors int64

	// topicBatchBytes holds the topics whose batches close below
	// batchBytes: their max.message.bytes is lower (limitTopic).
	topicBatchBytes map[string]int

	parts  map[topicPartition]*partitionQueue
	order  []*partitionQueue // stable iteration order for draining
	sticky map[string]int32  // topic -> sticky partition for keyless records
	free   []*recordBatch    // recycled batch structs
	bufs   bufPool           // recycled batch buffers
}

// newAccumulator returns an accumulator; maxInFlight is per partition
// and must be 1 unless idempotent (see Producer).
func newAccumulator(batchBytes int, linger, deliveryTimeout time.Duration, maxInFlight int, idempotent bool) *accumulator {
	return &accumulator{
		batchBytes:      batchBytes,
		linger:          linger,
		deliveryTimeout: deliveryTimeout,
		maxInFlight:     maxInFlight,
		idempotent:      idempotent,
		identity:        noIdentity,
		parts:           map[topicPartition]*partitionQueue{},
		sticky:          map[string]int32{},
		bufs:            bufPool{size: batchBytes + 64<<10},
	}
}

// limitTopic records topic's max.message.bytes (0: unknown): a batch of
// the topic is closed before it would exceed it, when that is below
// batchBytes. A record larger than it alone is the producer's to refuse.
func (a *accumulator) limitTopic(topic string, maxMessageBytes int) {
	if maxMessageBytes > 0 && maxMessageBytes < a.batchBytes {
		if a.topicBatchBytes == nil {
			a.topicBatchBytes = map[string]int{}
		}
		a.topicBatchBytes[topic] = maxMessageBytes
	} else if len(a.topicBatchBytes) > 0 {
		delete(a.topicBatchBytes, topic)
	}
}

// batchBytesOf returns the size at which topic's batches close.
func (a *accumulator) batchBytesOf(topic string) int {
	if len(a.topicBatchBytes) > 0 {
		if n, ok := a.topicBatchBytes[topic]; ok {
			return n
		}
	}
	return a.batchBytes
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
		q.open.builder.Size()+recordSize(key, value, headers) > a.batchBytesOf(topic) {
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
// the record would not fit. It returns the bytes accounted for the record,
// whether a batch was closed and whether the record opened a new batch
// (in both cases the sender should be woken: to send, or to time the new
// batch's linger).
func (a *accumulator) append(tp topicPartition, numPartitions int32, ts int64, key, value []byte, headers []batch.RecordHeader, cb func(RecordMetadata, error), now time.Time) (size int, closed, opened bool) {
	q := a.queue(tp)
	q.numPartitions = numPartitions
	b := q.open
	limit := a.batchBytesOf(tp.topic)
	if b != nil && b.builder.Count() > 0 && b.builder.Size()+recordSize(key, value, headers) > limit {
		// The record starts the partition's next batch, so the sticky
		// partition stays: moving it would leave this record alone.
		a.close(q, false)
		closed = true
		b = nil
	}
	if b == nil {
		b = a.newBatch(tp, ts, now)
		q.open = b
		opened = true
	}
	before := b.builder.Size()
	b.builder.Add(ts, key, value, headers)
	b.records = append(b.records, pendingRecord{cb: cb, timestamp: ts})
	size = b.builder.Size() - before
	b.size += size
	if b.builder.Size() >= limit {
		a.close(q, true)
		closed = true
	}
	return size, closed, opened
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

// close ends q's open batch and queues it for sending (its bytes are
// finished when it is first sent, with its sequence). With rotate,
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
	q.queue = append(q.queue, b)
}

// recycle returns a completed batch struct for reuse. The caller must not
// touch b afterwards.
func (a *accumulator) recycle(b *recordBatch) {
	if b.data == nil {
		b.data = b.builder.Finish(batch.PlainProducer, 0) // never sent: take its buffer back
	}
	if b.wire != nil {
		b.wire.Free() // the pool gets data back once gRPC lets go too
	} else {
		a.bufs.put(b.data)
	}
	clear(b.records)
	*b = recordBatch{records: b.records[:0], builder: b.builder}
	a.free = append(a.free, b)
}

// drain returns at most one batch per partition that may be sent now,
// marking it in flight; the caller sends each in a request and reports the
// answer with onResult. On the way it closes open batches whose linger
// has elapsed (all when flush is set) on partitions that could send them
// at once, resets partitions waiting for a new epoch, and fails batches
// whose delivery timeout passed (expired lists their partitions, which
// have batches to complete). next is the earliest time something else
// becomes due (zero when nothing waits on time).
func (a *accumulator) drain(now time.Time, flush bool, out []*recordBatch) (ready []*recordBatch, expired []topicPartition, next time.Time) {
	ready = out[:0]
	due := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, q := range a.order {
		if a.idempotent && q.needsReset && q.inFlight == 0 && a.identity.valid() {
			if a.resetSequences(q) {
				expired = appendOnce(expired, q.tp)
			}
		}
		// An open batch is closed by linger (or flush) only when it could
		// be sent at once: while its partition is busy it keeps growing,
		// and the end of an in-flight request drains again.
		if q.open != nil && len(q.queue) == 0 && len(q.outstanding) < a.window(q) {
			at := q.open.created.Add(a.linger)
			if flush || !now.Before(at) {
				a.close(q, true)
			} else {
				due(at)
			}
		}
		if a.expire(q, now) {
			expired = appendOnce(expired, q.tp)
		}
		if len(q.queue) == 0 {
			continue
		}
		b := q.queue[0]
		if b.retryAt.After(now) {
			due(b.retryAt)
			continue
		}
		if !a.maySend(q, b) {
			// Look again at its deadline (to expire it). One already past
			// waits for its turn, which an answer signals.
			if b.deadline.After(now) {
				due(b.deadline)
			}
			continue
		}
		if b.ord == 0 {
			a.startSending(q, b)
		}
		q.queue = q.queue[1:]
		q.inFlight++
		b.inFlight = true
		b.sentFirst = firstUnresolved(q) == b
		ready = append(ready, b)
	}
	return ready, expired, next
}

// maySend reports whether b, the head of q's queue, may be sent now (see
// sequence.go). For a first send of an idempotent batch it moves q to the
// producer's current identity when q has nothing outstanding.
func (a *accumulator) maySend(q *partitionQueue, b *recordBatch) bool {
	if !a.idempotent {
		return b.ord != 0 || len(q.outstanding) < a.maxInFlight
	}
	if !a.identity.valid() || q.needsReset {
		return false
	}
	if b.ord != 0 {
		return firstUnresolved(q) == b // a retry goes when its turn has come
	}
	if q.identity != a.identity {
		if len(q.outstanding) > 0 {
			return false // old-epoch batches first
		}
		q.identity, q.nextSeq, q.acked = a.identity, 0, false
	}
	return len(q.outstanding) < a.window(q)
}

func appendOnce(tps []topicPartition, tp topicPartition) []topicPartition {
	for _, x := range tps {
		if x == tp {
			return tps
		}
	}
	return append(tps, tp)
}

// empty reports whether no batch is open, queued or outstanding.
func (a *accumulator) empty() bool {
	for _, q := range a.order {
		if q.open != nil || len(q.queue) > 0 || len(q.outstanding) > 0 {
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
