package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/codec"
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

// String returns the constant's name.
func (a Acks) String() string {
	switch a {
	case AcksAll:
		return "AcksAll"
	case AcksLeader:
		return "AcksLeader"
	case AcksNone:
		return "AcksNone"
	}
	return fmt.Sprintf("Acks(%d)", int(a))
}

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
	acksSet         bool // WithAcks was given
	idempotence     bool
	idempotenceSet  bool // WithIdempotence was given
	linger          time.Duration
	batchBytes      int
	maxRequestBytes int
	bufferBytes     int
	maxInFlight     int
	deliveryTimeout time.Duration
	maxBlock        time.Duration
	partitioner     Partitioner
	transactionalID string
	txnTimeout      time.Duration
	compression     Compression
}

// MaxInFlightLimit is the largest WithMaxInFlight an idempotent producer
// accepts: the broker remembers the last 5 batches of each producer per
// partition, so a retry must be among the last 5 sent (DESIGN §9).
const MaxInFlightLimit = 5

// maxInFlightPlain bounds WithMaxInFlight without idempotence.
const maxInFlightPlain = 64

// WithAcks sets the acknowledgement level (default AcksAll). Idempotence
// needs AcksAll: AcksLeader or AcksNone without WithIdempotence turns
// idempotence off, and together with WithIdempotence(true) NewProducer
// fails (as Kafka's acks and enable.idempotence do).
func WithAcks(a Acks) ProducerOption {
	return func(c *producerConfig) error {
		if a < AcksAll || a > AcksNone {
			return fmt.Errorf("sluice: unknown acks %d", a)
		}
		c.acks, c.acksSet = a, true
		return nil
	}
}

// WithIdempotence turns the idempotent producer on or off (default on,
// unless WithAcks chose AcksLeader or AcksNone). An idempotent producer
// gets a producer id from the cluster (InitProducerId) and numbers each
// partition's records, so that the broker writes a retried batch once and
// in order: every acknowledged record is stored exactly once, in Send
// order, and up to WithMaxInFlight batches per partition are in flight at
// once. It requires AcksAll and a max in flight of at most 5.
func WithIdempotence(on bool) ProducerOption {
	return func(c *producerConfig) error {
		c.idempotence, c.idempotenceSet = on, true
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

// WithMaxRequestBytes bounds one produce request (max.request.size): the
// batches sent to one broker together, and so also one record (a record
// larger than this fails at once with a *RecordTooLargeError,
// MESSAGE_TOO_LARGE). Default 4 MiB;
// between 1 KiB and 64 MiB, and at least the batch size.
func WithMaxRequestBytes(n int) ProducerOption {
	return func(c *producerConfig) error {
		if n < 1<<10 || n > 64<<20 {
			return fmt.Errorf("sluice: max request bytes must be in [1KiB, 64MiB], got %d", n)
		}
		c.maxRequestBytes = n
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
// broker at a time (default 5), Kafka's
// max.in.flight.requests.per.connection. With idempotence it is also how
// many batches of one partition may be outstanding, and it must be at most
// MaxInFlightLimit (NewProducer fails otherwise). Without idempotence a
// partition has one batch outstanding whatever the value (see Producer);
// the value may then be up to 64.
func WithMaxInFlight(n int) ProducerOption {
	return func(c *producerConfig) error {
		if n < 1 || n > maxInFlightPlain {
			return fmt.Errorf("sluice: max in flight must be in [1, %d] (at most %d with idempotence), got %d", maxInFlightPlain, MaxInFlightLimit, n)
		}
		c.maxInFlight = n
		return nil
	}
}

// WithDeliveryTimeout bounds the time from Send to the callback, retries
// included (default 2m). It also bounds how long the producer waits for a
// producer id before the records fail. Records of a partition offline
// after a disk failure (ErrPartitionOffline) fail sooner, after
// OfflineRetry.
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: delivery timeout must be positive, got %v", d)
		}
		c.deliveryTimeout = d
		return nil
	}
}

// DefaultMaxBlock is WithMaxBlock's default (Kafka's max.block.ms).
const DefaultMaxBlock = 60 * time.Second

// WithMaxBlock bounds how long Send may block (max.block.ms, default 60 s):
// while the topic's metadata cannot be had (no broker reachable, or the
// brokers reached cannot say yet: a retriable error) and while the buffer
// is full. After it the record fails without having been sent. A topic
// the cluster reports as nonexistent fails at once (topics are not
// auto-created).
func WithMaxBlock(d time.Duration) ProducerOption {
	return func(c *producerConfig) error {
		if d <= 0 {
			return fmt.Errorf("sluice: max block must be positive, got %v", d)
		}
		c.maxBlock = d
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

// DefaultTransactionTimeout is WithTransactionTimeout's default (Kafka's
// transaction.timeout.ms).
const DefaultTransactionTimeout = 60 * time.Second

// WithTransactionalID makes the producer transactional (docs/transactions.md):
// its records are sent in transactions (InitTransactions once, then
// BeginTransaction, Send, CommitTransaction or AbortTransaction), and a
// new producer with the same id fences this one. A transactional producer
// is idempotent and uses AcksAll: WithIdempotence(false) or another
// WithAcks makes NewProducer fail. The id must not be empty.
func WithTransactionalID(id string) ProducerOption {
	return func(c *producerConfig) error {
		if id == "" {
			return errors.New("sluice: transactional id must not be empty")
		}
		c.transactionalID = id
		return nil
	}
}

// WithTransactionTimeout sets how long a transaction may stay open before
// the coordinator aborts it (transaction.timeout.ms, default 60 s; at most
// the broker's transaction.max.timeout.ms, else InitTransactions fails
// with INVALID_TRANSACTION_TIMEOUT). It must be at least 1ms, and is only
// used with WithTransactionalID.
func WithTransactionTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) error {
		if d < time.Millisecond || d.Milliseconds() > math.MaxInt32 {
			return fmt.Errorf("sluice: transaction timeout must be in [1ms, %dms], got %v", math.MaxInt32, d)
		}
		c.txnTimeout = d
		return nil
	}
}

// resolve applies the rules between options, Kafka's
// (ProducerConfig.postProcessAndValidateIdempotenceConfigs, ref §1: "When
// idempotence is on only by default and the user sets acks=1, it is turned
// off ...; but if the user explicitly wrote enable.idempotence=true and
// acks isn't all, a ConfigException is thrown. A
// max.in.flight.requests.per.connection greater than 5 is also rejected").
func (c *producerConfig) resolve() error {
	if c.transactionalID != "" {
		// Kafka: transactional.id requires enable.idempotence (and so
		// acks=all); set explicitly otherwise it is a ConfigException.
		if c.idempotenceSet && !c.idempotence {
			return errors.New("sluice: a transactional producer is idempotent, but WithIdempotence(false) was given")
		}
		if c.acksSet && c.acks != AcksAll {
			return fmt.Errorf("sluice: a transactional producer needs acks=all, but WithAcks(%s) was given", c.acks)
		}
		c.idempotence, c.idempotenceSet = true, true
	}
	if !c.idempotenceSet {
		c.idempotence = !c.acksSet || c.acks == AcksAll
	}
	if !c.idempotence {
		return nil
	}
	if c.acks != AcksAll {
		return fmt.Errorf("sluice: the idempotent producer needs acks=all, but WithAcks(%s) was given: use WithAcks(AcksAll) or WithIdempotence(false)", c.acks)
	}
	if c.maxInFlight > MaxInFlightLimit {
		return fmt.Errorf("sluice: the idempotent producer allows at most %d requests in flight (the broker remembers the last %d batches per producer), but WithMaxInFlight(%d) was given: lower it or use WithIdempotence(false)", MaxInFlightLimit, MaxInFlightLimit, c.maxInFlight)
	}
	return nil
}

// Producer sends records asynchronously in per-partition batches. It is
// safe for concurrent use.
//
// Records are appended to their partition's open batch; a batch is closed
// when it reaches the batch size or its linger elapses, and one sender
// goroutine drains closed batches into requests per broker (many
// partitions per request). Up to MaxInFlight requests per broker are
// outstanding at once, each run by a tracked worker goroutine.
//
// Ordering: callbacks of one partition run in record order, one at a
// time, and records of one partition are stored in Send order, retries
// included.
//
// The idempotent producer (the default, see WithIdempotence) numbers the
// batches of each partition, so that the broker drops a retry that was
// already written and refuses one that would be out of order; that lets a
// partition have up to MaxInFlight batches in flight. sequence.go explains
// how sequences are assigned, retried in order and restarted under a new
// epoch. A plain producer has no sequence numbers: the broker could not
// reject an out-of-order retry, and concurrent gRPC calls may be served in
// any order, so a plain partition has one batch in flight at a time.
//
// A transactional producer (WithTransactionalID) sends its records in
// transactions: InitTransactions once, then BeginTransaction, Send, and
// CommitTransaction or AbortTransaction (txnproducer.go, the state
// machine in transaction.go, docs/transactions.md). Its batches carry the
// transactional id and attribute; its epoch comes from the coordinator
// and changes at every transaction end, when every partition's sequences
// restart at 0.
//
// Callbacks run on producer goroutines and must not block for long.
type Producer struct {
	c   *Client
	cfg producerConfig
	// throttle holds requests to a broker that answered a throttle
	// (throttle.go).
	throttle brokerThrottle

	mu          sync.Mutex // guards the following
	acc         *accumulator
	buffered    int           // bytes of records not yet completed
	records     int           // records not yet completed
	idle        chan struct{} // closed when records drops to 0, then replaced
	space       chan struct{} // closed when buffered drops below the limit, then replaced
	flushing    int           // Flush/Close calls in progress: no lingering
	closed      bool
	initRunning bool  // an InitProducerId loop is running
	fatal       error // the producer cannot send at all: every record fails with it
	readyBuf    []*recordBatch
	brokerQueue map[string]*brokerQueue
	// txn is the transaction state (transaction.go); nil without
	// WithTransactionalID.
	txn *txnMachine
	// txnAborting: AbortTransaction is dropping the transaction's batches
	// (the sender loop fails every batch not in flight).
	txnAborting bool

	// txnOp serializes InitTransactions, CommitTransaction and
	// AbortTransaction, and guards coordinator. Lock order: txnOp, then mu.
	txnOp       sync.Mutex
	coordinator string // address of the transaction coordinator; "" unknown

	wake   chan struct{} // capacity 1: nudges the sender loop
	stop   chan struct{} // closed by Close to end every goroutine
	ctx    context.Context
	cancel context.CancelFunc // cancels ctx when stop is closed
	// goroutines are the sender, the per-broker workers and the linger
	// timer (goTracked), stopped by stop and ctx.
	goroutines goroutine.Group
}

// brokerQueue holds the requests for one broker and orders their start.
type brokerQueue struct {
	ch chan []*recordBatch
	// sendMu is held by a worker from taking a request off ch until the
	// request is on the wire, so requests start in drain order.
	sendMu sync.Mutex
	// pc is the broker's ProduceStream.
	pc *produceConn
}

// NewProducer returns a Producer; invalid options, or options that
// contradict each other (see WithIdempotence), are reported as an error.
func (c *Client) NewProducer(opts ...ProducerOption) (*Producer, error) {
	cfg := producerConfig{
		acks:            AcksAll,
		idempotence:     true,
		linger:          5 * time.Millisecond,
		batchBytes:      1 << 20,
		maxRequestBytes: 4 << 20,
		bufferBytes:     64 << 20,
		maxInFlight:     MaxInFlightLimit,
		deliveryTimeout: 2 * time.Minute,
		maxBlock:        DefaultMaxBlock,
		partitioner:     HashPartitioner{},
		txnTimeout:      DefaultTransactionTimeout,
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	if cfg.batchBytes > cfg.maxRequestBytes {
		return nil, fmt.Errorf("sluice: batch bytes %d exceed max request bytes %d: a full batch could never be sent", cfg.batchBytes, cfg.maxRequestBytes)
	}
	if cfg.bufferBytes < cfg.batchBytes {
		cfg.bufferBytes = cfg.batchBytes
	}
	perPartition := 1
	if cfg.idempotence {
		perPartition = cfg.maxInFlight
	}
	p := &Producer{
		c:           c,
		cfg:         cfg,
		acc:         newAccumulator(cfg.batchBytes, cfg.linger, cfg.deliveryTimeout, perPartition, cfg.idempotence),
		idle:        make(chan struct{}),
		space:       make(chan struct{}),
		brokerQueue: map[string]*brokerQueue{},
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	p.acc.compression = cfg.compression
	if cfg.transactionalID != "" {
		p.txn = &txnMachine{}
		p.acc.transactional = true
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.goTracked(p.senderLoop)
	return p, nil
}

// Idempotent reports whether the producer is idempotent (after the
// option rules of WithIdempotence).
func (p *Producer) Idempotent() bool { return p.cfg.idempotence }

// ProducerStats describes a Producer's sending since it was created.
type ProducerStats struct {
	// ProducerID and Epoch are the idempotent producer's current identity:
	// -1 before InitProducerId has answered, and without idempotence.
	ProducerID int64
	Epoch      int16
	// Retries counts batch attempts that failed and were sent again.
	Retries int64
	// SequenceErrors counts OUT_OF_ORDER_SEQUENCE_NUMBER and
	// UNKNOWN_PRODUCER_ID answers; most are batches that reached the
	// broker ahead of their predecessor and were retried after it.
	SequenceErrors int64
	// EpochBumps counts local epoch bumps after unresolvable sequence
	// errors (see WithIdempotence).
	EpochBumps int64
}

// Stats returns the producer's counters.
func (p *Producer) Stats() ProducerStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := p.acc.identity
	if !id.valid() {
		id = producerIdentity{id: -1, epoch: -1}
	}
	return ProducerStats{ProducerID: id.id, Epoch: id.epoch, Retries: p.acc.retries, SequenceErrors: p.acc.sequenceErrors, EpochBumps: p.acc.epochBumps}
}

// goTracked runs fn on a goroutine that Close waits for.
func (p *Producer) goTracked(fn func()) {
	p.goroutines.Go(fn)
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
// bad partition, a record larger than its topic's max.message.bytes or the
// max request bytes (*RecordTooLargeError), closed producer, ctx done) are
// passed to cb before Send returns. An unknown topic fails at once: topics
// are not auto-created. A topic's batches are kept within its
// max.message.bytes.
func (p *Producer) Send(ctx context.Context, r Record, cb func(RecordMetadata, error)) {
	p.send(ctx, r, cb)
}

// send is Send; it reports whether it woke the sender loop.
func (p *Producer) send(ctx context.Context, r Record, cb func(RecordMetadata, error)) (signaled bool) {
	md := RecordMetadata{Topic: r.Topic, Partition: r.Partition, Offset: -1, Timestamp: r.Timestamp}
	fail := func(err error) {
		p.txnRecordFailed(err)
		if cb != nil {
			cb(md, err)
		}
	}
	if p.txn != nil {
		p.mu.Lock()
		err := p.txn.checkSend()
		p.mu.Unlock()
		if err != nil {
			if cb != nil {
				cb(md, err) // misuse, or the transaction's own error: no new failure
			}
			return false
		}
	}
	now := time.Now()
	blockUntil := now.Add(p.cfg.maxBlock)
	// The cached metadata is the common case; only a miss builds the
	// lookup's context (per record, that was a fifth of a fast
	// producer's CPU).
	tm := p.c.cachedTopic(r.Topic)
	if tm == nil || tm.err != nil {
		var err error
		if tm, err = p.topicFor(ctx, r.Topic, blockUntil); err != nil {
			fail(fmt.Errorf("topic %q: %w", r.Topic, err))
			return false
		}
		now = time.Now()
	}
	n := int32(len(tm.partitions))
	if r.Partition >= n || r.Partition < -1 || n == 0 {
		fail(fmt.Errorf("topic %q: %w", r.Topic, errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "no partition %d (the topic has %d)", r.Partition, n)))
		return false
	}
	if err := checkRecordSize(r, tm, p.cfg.maxRequestBytes); err != nil {
		fail(err)
		return false
	}
	if r.Timestamp == 0 {
		r.Timestamp = now.UnixMilli()
		md.Timestamp = r.Timestamp
	}
	p.mu.Lock()
	for p.buffered >= p.cfg.bufferBytes && !p.closed {
		space := p.space
		p.mu.Unlock()
		wait := time.NewTimer(time.Until(blockUntil))
		select {
		case <-space:
			wait.Stop()
		case <-wait.C:
			fail(errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "no buffer space within max block %v (%d bytes buffered)", p.cfg.maxBlock, p.cfg.bufferBytes))
			return false
		case <-ctx.Done():
			wait.Stop()
			fail(ctx.Err())
			return false
		}
		p.mu.Lock()
		now = time.Now()
	}
	if p.closed {
		p.mu.Unlock()
		fail(ErrClosed)
		return false
	}
	if p.fatal != nil {
		err := p.fatal
		p.mu.Unlock()
		fail(err)
		return false
	}
	if p.txn != nil {
		// Checked again under the lock of the append, so that a record is
		// never appended once CommitTransaction or AbortTransaction began.
		if err := p.txn.checkSend(); err != nil {
			p.mu.Unlock()
			if cb != nil {
				cb(md, err)
			}
			return false
		}
		p.txn.appended()
	}
	// Batches of the topic stay within its max.message.bytes, so that
	// records that each fit are not refused together.
	p.acc.limitTopic(r.Topic, tm.maxMessageBytes)
	part := r.Partition
	var stickyClosed bool
	if part < 0 {
		part = p.cfg.partitioner.Partition(r.Topic, r.Key, n)
		if part < 0 || part >= n {
			part, stickyClosed = p.acc.stickyPartition(r.Topic, n, r.Key, r.Value, r.Headers)
		}
	}
	size, closed, opened := p.acc.append(topicPartition{r.Topic, part}, n, r.Timestamp, r.Key, r.Value, r.Headers, cb, now)
	p.buffered += size
	p.records++
	p.mu.Unlock()
	if closed || opened || stickyClosed {
		p.signal()
		return true
	}
	return false
}

// topicFor returns topic's metadata for Send, waiting (with backoff, until
// deadline or ctx ends) while the cluster cannot say: a retriable error or
// an unreachable broker. Found by the chaos harness: with two of three
// nodes restarting, a lookup that found only a starting broker failed the
// record at once. A cached per-topic error that is retriable is dropped
// so that the next attempt asks again.
func (p *Producer) topicFor(ctx context.Context, topic string, deadline time.Time) (*topicMeta, error) {
	backoff := 50 * time.Millisecond
	for {
		// The lookup itself retries (invokeAny) but must not outlast max
		// block either.
		lctx, cancel := context.WithDeadline(ctx, deadline)
		tm, err := p.c.topic(lctx, topic)
		cancel()
		if err == nil || !isRetriable(err) || errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
			return tm, err
		}
		p.c.forget(topic)
		wait := min(backoff, time.Until(deadline))
		if wait <= 0 {
			return nil, fmt.Errorf("no metadata within max block %v: %w", p.cfg.maxBlock, err)
		}
		if err := sleepCtx(ctx, wait); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// SendSync sends r without lingering and waits for its acknowledgement
// (not for other records sent concurrently), or for ctx to end.
func (p *Producer) SendSync(ctx context.Context, r Record) (RecordMetadata, error) {
	type result struct {
		md  RecordMetadata
		err error
	}
	ch := make(chan result, 1)
	// Flushing while it waits: its batch is sent at once, as Flush would,
	// with one wake-up of the sender loop instead of two.
	defer p.holdFlushing()()
	if !p.send(ctx, r, func(md RecordMetadata, err error) { ch <- result{md, err} }) {
		p.signal() // the record joined an open batch: close it now
	}
	select {
	case res := <-ch:
		return res.md, res.err
	case <-ctx.Done():
		return RecordMetadata{}, ctx.Err()
	}
}

// holdFlushing makes the sender loop send batches without lingering
// until the returned release is called.
func (p *Producer) holdFlushing() (release func()) {
	p.mu.Lock()
	p.flushing++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.flushing--
		p.mu.Unlock()
	}
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
	idle := p.idle
	p.mu.Unlock()
	defer p.holdFlushing()()
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
	p.goroutines.Wait()
	return err
}

// stopping reports whether Close has stopped the producer's goroutines.
func (p *Producer) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// senderLoop is the one goroutine that drains the accumulator.
func (p *Producer) senderLoop() {
	ctx := p.ctx
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	byBroker := map[string][]*recordBatch{}
	var results []batchResult
	for {
		now := time.Now()
		p.mu.Lock()
		var aborted []topicPartition
		if p.fatal != nil {
			aborted = p.acc.abort(p.fatal)
		} else if p.txnAborting {
			aborted = p.acc.abort(ErrTransactionAborted)
		}
		// A transactional producer gets its identity from InitTransactions
		// and EndTxn only.
		if p.acc.needsIdentity() && !p.initRunning && p.fatal == nil && p.txn == nil && !p.acc.empty() {
			p.initRunning = true
			p.goTracked(p.initProducerIDLoop)
		}
		ready, expired, next := p.acc.drain(now, p.flushing > 0 || p.closed, p.readyBuf)
		p.readyBuf = ready[:0]
		p.mu.Unlock()
		for _, tp := range aborted {
			p.complete(tp)
		}
		for _, tp := range expired {
			p.complete(tp)
		}
		results = results[:0]
		for _, b := range ready {
			addr, _, err := p.c.leader(ctx, b.tp.topic, b.tp.partition)
			if err != nil {
				results = append(results, batchResult{b: b, err: err})
				continue
			}
			byBroker[addr] = append(byBroker[addr], b)
		}
		if len(results) > 0 {
			p.applyResults(results)
			clear(results)
		}
		for addr, bs := range byBroker {
			q := p.queueFor(addr)
			for _, req := range splitRequests(bs, p.cfg.maxRequestBytes) {
				q.ch <- req
			}
			delete(byBroker, addr)
		}
		sent := len(ready) > 0
		clear(ready)
		if sent {
			// Drain gives one batch per partition: look again at once for
			// the next batches of pipelined partitions.
			if p.stopping() {
				return
			}
			continue
		}
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

// Throttled is the throttles the brokers answered this producer with
// (client quotas): it waited each out before its next request to that
// broker.
func (p *Producer) Throttled() ThrottleStats { return p.throttle.snapshot() }

// queueFor returns the request queue of a broker, starting its workers on
// first use. Only the sender loop calls it.
func (p *Producer) queueFor(addr string) *brokerQueue {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.brokerQueue[addr]
	if q == nil {
		// A partition has at most maxInFlight batches outstanding, so the
		// queue holds at most that many entries per partition: size it so
		// the sender loop rarely blocks.
		q = &brokerQueue{ch: make(chan []*recordBatch, 1024), pc: newProduceConn(p, addr)}
		p.brokerQueue[addr] = q
		for i := 0; i < p.cfg.maxInFlight; i++ {
			p.goTracked(func() { p.brokerWorker(addr, q) })
		}
	}
	return q
}

// brokerWorker sends produce requests to one broker, one at a time. The
// workers of a broker start their requests in queue order (sendMu), so
// that the batches of a pipelined partition usually reach the broker in
// sequence order; they wait for the answers concurrently.
func (p *Producer) brokerWorker(addr string, q *brokerQueue) {
	for {
		q.sendMu.Lock()
		var bs []*recordBatch
		select {
		case bs = <-q.ch:
		case <-p.stop:
			q.sendMu.Unlock()
			return
		}
		// A broker that answered a throttle gets nothing more until it
		// has passed (KIP-219); stopping, bs is sent at once, as it
		// would have been.
		p.throttle.wait(addr, p.stop)
		call := p.startProduce(addr, q.pc, bs)
		q.sendMu.Unlock()
		p.finishProduce(call)
	}
}

// produceCall is one produce request on its way: on the broker's
// ProduceStream (answer set), or as a unary Produce call (stream set).
type produceCall struct {
	bs   []*recordBatch // distinct partitions
	sent time.Time
	req  *internalv1.ProduceRequestView
	addr string
	err  error

	pc       *produceConn
	onStream grpc.ClientStream
	answer   <-chan produceAnswer

	stream grpc.ClientStream
	cancel context.CancelFunc
}

var produceUnaryDesc = &grpc.StreamDesc{StreamName: "Produce"}

// startProduce builds the request for bs and sends it, without waiting for
// the answer: on the broker's ProduceStream, or (when the broker does not
// serve it) as a unary call split in two, NewStream and SendMsg here,
// RecvMsg in finishProduce.
func (p *Producer) startProduce(addr string, pc *produceConn, bs []*recordBatch) *produceCall {
	call := &produceCall{bs: bs, addr: addr, pc: pc, sent: time.Now()}
	req := &internalv1.ProduceRequestView{
		TransactionalId: p.cfg.transactionalID,
		Acks:            p.cfg.acks.proto(),
		TimeoutMs:       int32(p.c.cfg.requestTimeout.Milliseconds()),
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
	call.req = req
	if pc.useStream() {
		// The encoded request references the batches' buffers instead
		// of copying them (codec.BatchBuffers).
		bufs := &codec.BatchBuffers{}
		for _, b := range bs {
			if b.wire == nil {
				b.wire = wireBuffer(b.data, &p.acc.bufs)
			}
			bufs.Add(b.wire)
		}
		call.onStream, call.answer, call.err = pc.send(req, bufs)
		bufs.Free()
		return call
	}
	p.startUnary(call)
	return call
}

// startUnary sends call's request as a unary Produce call.
func (p *Producer) startUnary(call *produceCall) {
	call.onStream, call.answer = nil, nil
	cc, err := p.c.conn(call.addr)
	if err != nil {
		call.err = err
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.requestTimeout)
	call.cancel = cancel
	call.stream, call.err = cc.NewStream(ctx, produceUnaryDesc, "/sluice.v1.Log/Produce")
	if call.err == nil {
		// For a non-streaming call SendMsg reports transport failures
		// through RecvMsg.
		call.err = call.stream.SendMsg(call.req)
	}
}

// batchResult is the answer for one batch of a request.
type batchResult struct {
	b                      *recordBatch
	err                    error
	baseOffset, appendTime int64
}

// finishProduce waits for the answer of call and completes its batches.
func (p *Producer) finishProduce(call *produceCall) {
	var resp *sluicev1.ProduceResponse
	err := call.err
	if err == nil && call.answer != nil {
		a := call.pc.wait(call.onStream, call.answer, p.c.cfg.requestTimeout)
		if a.err == errProduceStreamUnsupported {
			// Nothing was applied: send it again, unary.
			p.startUnary(call)
		} else if err = a.err; err == nil {
			if a.resp.ErrorCode != sluicev1.ErrorCode_NONE {
				err = &errs.Error{Code: a.resp.ErrorCode, Message: a.resp.ErrorMessage}
			} else if resp = a.resp.Response; resp == nil {
				resp = &sluicev1.ProduceResponse{}
			}
		}
	}
	if call.answer == nil {
		resp = &sluicev1.ProduceResponse{}
		if err = call.err; err == nil {
			err = call.stream.RecvMsg(resp)
		}
		if call.cancel != nil {
			call.cancel()
		}
	}
	err = rpcError(err)
	if err == nil {
		p.throttle.observe(call.addr, call.sent, resp.ThrottleTimeMs)
	}
	results := make([]batchResult, len(call.bs))
	if err != nil {
		for i, b := range call.bs {
			results[i] = batchResult{b: b, err: err}
		}
		p.applyResults(results)
		return
	}
	byTP := map[topicPartition]*sluicev1.PartitionProduceResponse{}
	for _, t := range resp.Topics {
		for _, pr := range t.Partitions {
			byTP[topicPartition{t.Name, pr.Partition}] = pr
		}
	}
	for i, b := range call.bs {
		pr := byTP[b.tp]
		switch {
		case pr == nil:
			results[i] = batchResult{b: b, err: errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no result for the partition in the produce response")}
		case pr.ErrorCode != sluicev1.ErrorCode_NONE:
			results[i] = batchResult{b: b, err: &errs.Error{Code: pr.ErrorCode, Message: pr.ErrorMessage}}
		default:
			results[i] = batchResult{b: b, baseOffset: pr.BaseOffset, appendTime: pr.LogAppendTimeMs}
		}
	}
	p.applyResults(results)
}

// applyResults hands the answers of in-flight batches to the accumulator
// (which retries or finishes each, see sequence.go), then completes what
// can be completed.
func (p *Producer) applyResults(rs []batchResult) {
	for _, r := range rs {
		if r.err != nil && (needsMetadata(errs.Code(r.err)) || isTransportError(r.err)) {
			p.c.forget(r.b.tp.topic)
		}
	}
	now := time.Now()
	stopping := p.stopping()
	// Once onResult has run, another goroutine may complete and recycle a
	// batch: note the partitions first.
	tps := make([]topicPartition, len(rs))
	p.mu.Lock()
	for i, r := range rs {
		tps[i] = r.b.tp
		p.acc.onResult(r.b, r.err, r.baseOffset, r.appendTime, now, stopping)
	}
	p.mu.Unlock()
	for _, tp := range tps {
		p.complete(tp) // signals the sender loop if anything is left
	}
}

// complete runs the callbacks of tp's batches that are done and whose
// predecessors have completed, in order, and releases them. If another
// goroutine is completing tp it picks these up instead.
func (p *Producer) complete(tp topicPartition) {
	p.mu.Lock()
	bs := p.acc.takeCompleted(tp, false)
	for len(bs) > 0 {
		p.mu.Unlock()
		for _, b := range bs {
			p.callbacks(b)
		}
		p.mu.Lock()
		for _, b := range bs {
			p.release(b)
		}
		bs = p.acc.takeCompleted(tp, true)
	}
	// A completion may let the sender loop send a partition's next batch
	// or a retry; with no record left there is nothing for it to do, and
	// waking it would cost every synchronous send a goroutine hand-off.
	pending := p.records > 0
	p.mu.Unlock()
	if pending {
		p.signal()
	}
}

// callbacks runs b's callbacks in record order with its result.
func (p *Producer) callbacks(b *recordBatch) {
	md := RecordMetadata{Topic: b.tp.topic, Partition: b.tp.partition, Offset: -1}
	if b.err != nil {
		err := fmt.Errorf("topic %q partition %d: %w", b.tp.topic, b.tp.partition, b.err)
		p.txnRecordFailed(err)
		for _, r := range b.records {
			md.Timestamp = r.timestamp
			if r.cb != nil {
				r.cb(md, err)
			}
		}
		return
	}
	for i, r := range b.records {
		if b.baseOffset >= 0 {
			md.Offset = b.baseOffset + int64(i)
		}
		md.Timestamp = r.timestamp
		if b.appendTime >= 0 {
			md.Timestamp = b.appendTime
		}
		if r.cb != nil {
			r.cb(md, nil)
		}
	}
}

// release returns b's buffer space and recycles it. p.mu must be held.
func (p *Producer) release(b *recordBatch) {
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
}

// splitRequests cuts the batches for one broker into requests of at most
// limit bytes each (a single batch is always sent, whatever its size), in
// order.
func splitRequests(bs []*recordBatch, limit int) [][]*recordBatch {
	var out [][]*recordBatch
	start, size := 0, 0
	for i, b := range bs {
		if i > start && size+b.size > limit {
			out = append(out, bs[start:i:i])
			start, size = i, 0
		}
		size += b.size
	}
	return append(out, bs[start:])
}

// txnRecordFailed tells the transaction that one of its records failed
// (transaction.go: the transaction becomes abortable, or the producer
// fatal when fenced). A no-op without a transactional id.
func (p *Producer) txnRecordFailed(err error) {
	if p.txn == nil || errors.Is(err, ErrTransactionAborted) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if fatal := p.txn.recordFailed(err); fatal != nil && p.fatal == nil {
		p.fatal = fatal
		p.signal()
	}
}
