package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Header is an application header of a record.
type Header = batch.RecordHeader

// Record is a record to produce, or a consumed record.
//
// For Send, Partition -1 means "use the Partitioner" and a zero Timestamp
// means "now". Key, Value and Headers must not be modified until Send
// returns (they are copied into the batch).
//
// Records returned by Consumer.Poll have every field set; Key, Value and
// header values alias the fetched batch (never overwritten, so they stay
// valid for as long as the caller keeps them).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// RecordMetadata is the result of producing one record.
type RecordMetadata struct {
	Topic     string
	Partition int32
	// Offset is -1 with AcksNone.
	Offset int64
	// Timestamp is the broker's append time when the topic uses
	// LogAppendTime, else the record's timestamp.
	Timestamp int64
}

// Acks says when the broker acknowledges a produce.
type Acks int

const (
	// AcksAll waits for every in-sync replica (acks=all / -1).
	AcksAll Acks = iota
	// AcksLeader waits for the leader's append (acks=1).
	AcksLeader
	// AcksNone does not wait; offsets are unknown (acks=0).
	AcksNone
)

func (a Acks) proto() sluicev1.Acks {
	switch a {
	case AcksLeader:
		return sluicev1.Acks_ACKS_LEADER
	case AcksNone:
		return sluicev1.Acks_ACKS_NONE
	}
	return sluicev1.Acks_ACKS_ALL
}

// ProducerOption configures a Producer.
type ProducerOption func(*producerConfig) error

type producerConfig struct {
	acks            Acks
	linger          time.Duration
	batchBytes      int
	bufferBytes     int
	maxInFlight     int
	deliveryTimeout time.Duration
	partitioner     Partitioner
}

// MaxInFlightLimit is the largest accepted WithMaxInFlight.
const MaxInFlightLimit = 5

// WithAcks sets the acknowledgement level (default AcksAll).
func WithAcks(a Acks) ProducerOption {
	return func(c *producerConfig) error {
		if a < AcksAll || a > AcksNone {
			return fmt.Errorf("sluice: unknown acks %d", a)
		}
		c.acks = a
		return nil
	}
}

// WithLinger sets how long a batch may wait for more records before it is
// sent (default 5ms; 0 sends as soon as the sender is free).
func WithLinger(d time.Duration) ProducerOption {
	return func(c *producerConfig) error {
		if d < 0 {
			return fmt.Errorf("sluice: linger must be >= 0, got %v", d)
		}
		c.linger = d
		return nil
	}
}

// WithBatchBytes sets the size at which a partition's batch is closed
// (default 1 MiB; between 1 KiB and 32 MiB).
func WithBatchBytes(n int) ProducerOption {
	return func(c *producerConfig) error {
		if n < 1<<10 || n > 32<<20 {
			return fmt.Errorf("sluice: batch bytes must be in [1KiB, 32MiB], got %d", n)
		}
		c.batchBytes = n
		return nil
	}
}

// WithBufferBytes bounds the bytes of records waiting for acks; Send
// blocks while it is exceeded (default 64 MiB, at least the batch size).
func WithBufferBytes(n int) ProducerOption {
	return func(c *producerConfig) error {
		if n < 1<<10 {
			return fmt.Errorf("sluice: buffer bytes must be >= 1KiB, got %d", n)
		}
		c.bufferBytes = n
		return nil
	}
}

// WithMaxInFlight sets how many produce requests may be outstanding to one
// broker at a time (default 5, at most 5). See Producer for why a single
// partition has one batch in flight until idempotence exists.
func WithMaxInFlight(n int) ProducerOption {
	return func(c *producerConfig) error {
		if n < 1 || n > MaxInFlightLimit {
			return fmt.Errorf("sluice: max in flight must be in [1, %d], got %d", MaxInFlightLimit, n)
		}
		c.maxInFlight = n
		return nil
	}
}

// WithDeliveryTimeout bounds the time from Send to the callback, retries
// included (default 2m).
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: delivery timeout must be positive, got %v", d)
		}
		c.deliveryTimeout = d
		return nil
	}
}

// WithPartitioner replaces the default HashPartitioner.
func WithPartitioner(p Partitioner) ProducerOption {
	return func(c *producerConfig) error {
		if p == nil {
			return errors.New("sluice: nil partitioner")
		}
		c.partitioner = p
		return nil
	}
}

// Producer sends records asynchronously in per-partition batches. It is
// safe for concurrent use.
//
// Records are appended to their partition's open batch; a batch is closed
// when it reaches the batch size or its linger elapses, and one sender
// goroutine drains closed batches into one request per broker (many
// partitions per request). Up to MaxInFlight requests per broker are
// outstanding at once, each run by a tracked worker goroutine.
//
// Ordering: callbacks of one partition run in record order, and records of
// one partition are stored in Send order, retries included. Because a
// plain producer has no sequence numbers (the broker could not reject an
// out-of-order retry, and concurrent gRPC calls may be served in any
// order), a partition has at most one batch in flight; the seam for
// idempotence is accumulator.maxInFlight, which a sequenced producer can
// raise to MaxInFlight per partition.
//
// Callbacks run on producer goroutines and must not block for long.
type Producer struct {
	c   *Client
	cfg producerConfig

	mu          sync.Mutex // guards the following
	acc         *accumulator
	buffered    int           // bytes of records not yet completed
	records     int           // records not yet completed
	idle        chan struct{} // closed when records drops to 0, then replaced
	space       chan struct{} // closed when buffered drops below the limit, then replaced
	flushing    int           // Flush/Close calls in progress: no lingering
	closed      bool
	readyBuf    []*recordBatch
	brokerQueue map[string]chan []*recordBatch // addr -> requests for its workers

	wake   chan struct{} // capacity 1: nudges the sender loop
	stop   chan struct{} // closed by Close to end every goroutine
	ctx    context.Context
	cancel context.CancelFunc // cancels ctx when stop is closed
	wg     sync.WaitGroup
}

// NewProducer returns a Producer; invalid options are reported as an
// error.
func (c *Client) NewProducer(opts ...ProducerOption) (*Producer, error) {
	cfg := producerConfig{
		acks:            AcksAll,
		linger:          5 * time.Millisecond,
		batchBytes:      1 << 20,
		bufferBytes:     64 << 20,
		maxInFlight:     MaxInFlightLimit,
		deliveryTimeout: 2 * time.Minute,
		partitioner:     HashPartitioner{},
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.bufferBytes < cfg.batchBytes {
		cfg.bufferBytes = cfg.batchBytes
	}
	p := &Producer{
		c:           c,
		cfg:         cfg,
		acc:         newAccumulator(cfg.batchBytes, cfg.linger, cfg.deliveryTimeout, 1),
		idle:        make(chan struct{}),
		space:       make(chan struct{}),
		brokerQueue: map[string]chan []*recordBatch{},
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.goTracked(p.senderLoop)
	return p, nil
}

// goTracked runs fn on a goroutine that Close waits for.
func (p *Producer) goTracked(fn func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Send queues r and returns; cb (which may be nil) is called exactly once
// with the record's metadata or error. Send blocks only while the buffer
// limit is exceeded, until ctx ends. Errors known at once (unknown topic,
// bad partition, closed producer, ctx done) are passed to cb before Send
// returns. An unknown topic fails at once: topics are not auto-created.
func (p *Producer) Send(ctx context.Context, r Record, cb func(RecordMetadata, error)) {
	md := RecordMetadata{Topic: r.Topic, Partition: r.Partition, Offset: -1, Timestamp: r.Timestamp}
	fail := func(err error) {
		if cb != nil {
			cb(md, err)
		}
	}
	tm, err := p.c.topic(ctx, r.Topic)
	if err != nil {
		fail(fmt.Errorf("topic %q: %w", r.Topic, err))
		return
	}
	n := int32(len(tm.partitions))
	if r.Partition >= n || r.Partition < -1 || n == 0 {
		fail(fmt.Errorf("topic %q: %w", r.Topic, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "no partition %d (the topic has %d)", r.Partition, n)))
		return
	}
	now := time.Now()
	if r.Timestamp == 0 {
		r.Timestamp = now.UnixMilli()
		md.Timestamp = r.Timestamp
	}
	p.mu.Lock()
	for p.buffered >= p.cfg.bufferBytes && !p.closed {
		space := p.space
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			fail(ctx.Err())
			return
		}
		p.mu.Lock()
		now = time.Now()
	}
	if p.closed {
		p.mu.Unlock()
		fail(ErrClosed)
		return
	}
	part := r.Partition
	var stickyClosed bool
	if part < 0 {
		part = p.cfg.partitioner.Partition(r.Topic, r.Key, n)
		if part < 0 || part >= n {
			part, stickyClosed = p.acc.stickyPartition(r.Topic, n, r.Key, r.Value, r.Headers)
		}
	}
	size, closed := p.acc.append(topicPartition{r.Topic, part}, n, r.Timestamp, r.Key, r.Value, r.Headers, cb, now)
	closed = closed || stickyClosed
	p.buffered += size
	p.records++
	p.mu.Unlock()
	if closed {
		p.signal()
	}
}

// SendSync sends r and waits for its acknowledgement or for ctx to end.
func (p *Producer) SendSync(ctx context.Context, r Record) (RecordMetadata, error) {
	type result struct {
		md  RecordMetadata
		err error
	}
	ch := make(chan result, 1)
	p.Send(ctx, r, func(md RecordMetadata, err error) { ch <- result{md, err} })
	if err := p.Flush(ctx); err != nil {
		return RecordMetadata{}, err
	}
	res := <-ch
	return res.md, res.err
}

// Flush sends every buffered record without lingering and waits until no
// record is outstanding (every callback has run), or ctx ends. Records
// sent concurrently with Flush are waited for too.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	if p.records == 0 {
		p.mu.Unlock()
		return nil
	}
	p.flushing++
	idle := p.idle
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.flushing--
		p.mu.Unlock()
	}()
	p.signal()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes (each record completes within its delivery timeout), then
// stops every producer goroutine. Sends after Close fail with ErrClosed.
func (p *Producer) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.space) // wake blocked Sends so they fail
	p.space = make(chan struct{})
	p.mu.Unlock()
	err := p.Flush(context.Background())
	close(p.stop)
	p.cancel()
	p.wg.Wait()
	return err
}

// senderLoop is the one goroutine that drains the accumulator.
func (p *Producer) senderLoop() {
	ctx := p.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	byBroker := map[string][]*recordBatch{}
	for {
		now := time.Now()
		p.mu.Lock()
		ready, next := p.acc.drain(now, p.flushing > 0 || p.closed, p.readyBuf)
		p.readyBuf = ready[:0]
		p.mu.Unlock()
		for _, b := range ready {
			addr, _, err := p.c.leader(ctx, b.tp.topic, b.tp.partition)
			if err != nil {
				p.failed(b, err)
				continue
			}
			byBroker[addr] = append(byBroker[addr], b)
		}
		for addr, bs := range byBroker {
			p.queueFor(addr) <- bs
			delete(byBroker, addr)
		}
		clear(ready)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-p.wake:
		case <-timer.C:
		case <-p.stop:
			return
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// queueFor returns the request queue of a broker, starting its workers on
// first use. Only the sender loop calls it.
func (p *Producer) queueFor(addr string) chan []*recordBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.brokerQueue[addr]
	if q == nil {
		// Each partition has at most one batch in flight, so the queue
		// never holds more than one entry per partition: size it so the
		// sender loop rarely blocks.
		q = make(chan []*recordBatch, 1024)
		p.brokerQueue[addr] = q
		for i := 0; i < p.cfg.maxInFlight; i++ {
			p.goTracked(func() { p.brokerWorker(addr, q) })
		}
	}
	return q
}

// brokerWorker sends produce requests to one broker, one at a time.
func (p *Producer) brokerWorker(addr string, q chan []*recordBatch) {
	for {
		select {
		case bs := <-q:
			p.produce(addr, bs)
		case <-p.stop:
			return
		}
	}
}

// produce sends one request carrying bs (distinct partitions) and
// completes each batch.
func (p *Producer) produce(addr string, bs []*recordBatch) {
	req := &internalv1.ProduceRequestView{
		Acks:      p.cfg.acks.proto(),
		TimeoutMs: int32(p.c.cfg.requestTimeout.Milliseconds()),
	}
	byTopic := map[string]*internalv1.TopicProduceDataView{}
	for _, b := range bs {
		t := byTopic[b.tp.topic]
		if t == nil {
			t = &internalv1.TopicProduceDataView{Name: b.tp.topic}
			byTopic[b.tp.topic] = t
			req.Topics = append(req.Topics, t)
		}
		t.Partitions = append(t.Partitions, &internalv1.PartitionProduceDataView{Partition: b.tp.partition, Batch: b.data})
	}
	resp := &sluicev1.ProduceResponse{}
	err := func() error {
		cc, err := p.c.conn(addr)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.requestTimeout)
		defer cancel()
		return rpcError(cc.Invoke(ctx, "/sluice.v1.Log/Produce", req, resp))
	}()
	if err != nil {
		for _, b := range bs {
			p.failed(b, err)
		}
		return
	}
	results := map[topicPartition]*sluicev1.PartitionProduceResponse{}
	for _, t := range resp.Topics {
		for _, pr := range t.Partitions {
			results[topicPartition{t.Name, pr.Partition}] = pr
		}
	}
	for _, b := range bs {
		pr := results[b.tp]
		switch {
		case pr == nil:
			p.failed(b, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for the partition in the produce response"))
		case pr.ErrorCode != sluicev1.ErrorCode_NONE:
			p.failed(b, &errs.Error{Code: pr.ErrorCode, Message: pr.ErrorMessage})
		default:
			p.succeeded(b, pr.BaseOffset, pr.LogAppendTimeMs)
		}
	}
}

// succeeded runs b's callbacks in order, then releases its partition.
func (p *Producer) succeeded(b *recordBatch, baseOffset, appendTime int64) {
	md := RecordMetadata{Topic: b.tp.topic, Partition: b.tp.partition, Offset: -1}
	for i, r := range b.records {
		if baseOffset >= 0 {
			md.Offset = baseOffset + int64(i)
		}
		md.Timestamp = r.timestamp
		if appendTime >= 0 {
			md.Timestamp = appendTime
		}
		if r.cb != nil {
			r.cb(md, nil)
		}
	}
	p.finish(b)
}

// failed retries b when err is retriable and its delivery timeout allows,
// else fails every record of b.
func (p *Producer) failed(b *recordBatch, err error) {
	code := errs.Code(err)
	if needsMetadata(code) {
		p.c.forget(b.tp.topic)
	}
	now := time.Now()
	b.attempts++
	b.lastErr = err
	retryAt := now.Add(backoffFor(b.attempts - 1))
	p.mu.Lock()
	stopping := false
	select {
	case <-p.stop:
		stopping = true
	default:
	}
	if isRetriable(err) && retryAt.Before(b.deadline) && !stopping {
		p.acc.requeue(b, retryAt)
		p.mu.Unlock()
		p.signal()
		return
	}
	p.mu.Unlock()
	werr := fmt.Errorf("topic %q partition %d: %w", b.tp.topic, b.tp.partition, err)
	md := RecordMetadata{Topic: b.tp.topic, Partition: b.tp.partition, Offset: -1}
	for _, r := range b.records {
		md.Timestamp = r.timestamp
		if r.cb != nil {
			r.cb(md, werr)
		}
	}
	p.finish(b)
}

// finish releases b's partition and buffer space, and recycles b.
func (p *Producer) finish(b *recordBatch) {
	p.mu.Lock()
	p.acc.done(b)
	before := p.buffered
	p.buffered -= b.size
	p.records -= len(b.records)
	if p.records == 0 {
		close(p.idle)
		p.idle = make(chan struct{})
	}
	if before >= p.cfg.bufferBytes && p.buffered < p.cfg.bufferBytes {
		close(p.space)
		p.space = make(chan struct{})
	}
	p.acc.recycle(b)
	p.mu.Unlock()
	p.signal()
}
