package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ProducerIDBlockAllocator asks the controller for the next block of producer
// ids.
//
// Contract: a successful call returns a block [start, end) whose start the
// controller committed in Raft before returning, so no id in it is ever
// returned again, to this broker or any other, and a controller's blocks
// ascend. Failures should be *errs.Error (NOT_CONTROLLER when the node asked
// is not the controller leader); the manager retries every failure. The call
// must return soon after ctx is done: Close cancels ctx and waits for it. One
// manager makes one call at a time; an allocator shared by several managers
// must be safe for concurrent use.
type ProducerIDBlockAllocator interface {
	AllocateProducerIDBlock(ctx context.Context) (start, end int64, err error)
}

// Defaults for ProducerIDManagerConfig's zero fields.
const (
	// DefaultProducerIDPrefetchAt is 10% of the controller's 1000-id block.
	DefaultProducerIDPrefetchAt      = 100
	DefaultProducerIDRetryBackoff    = 50 * time.Millisecond
	DefaultProducerIDRetryBackoffMax = 2 * time.Second
	DefaultProducerIDAllocateTimeout = 5 * time.Second
)

// ProducerIDManagerConfig configures a ProducerIDManager. Zero fields take the
// defaults above; Validate fills them in.
type ProducerIDManagerConfig struct {
	// PrefetchAt: when the ids left in the current block fall to this many or
	// fewer, the next block is fetched in the background. Zero means
	// DefaultProducerIDPrefetchAt; negative is invalid.
	PrefetchAt int64
	// RetryBackoff and RetryBackoffMax pace retries of failed allocations:
	// the wait starts at RetryBackoff, doubles per consecutive failure up to
	// RetryBackoffMax, and is jittered into [wait/2, wait]. Failures are
	// retried whatever their code for as long as the manager is open. A zero
	// RetryBackoffMax means the larger of DefaultProducerIDRetryBackoffMax and
	// RetryBackoff.
	RetryBackoff, RetryBackoffMax time.Duration
	// AllocateTimeout bounds one allocation call.
	AllocateTimeout time.Duration
	// Logger receives allocation failures (Info when the code is retriable,
	// Warn when not, Error for a rejected block); nil means slog.Default.
	Logger *slog.Logger
}

// Validate checks c and fills in defaults. NewProducerIDManager calls it;
// callers that build c from user input call it first to get the error
// instead of a panic.
func (c *ProducerIDManagerConfig) Validate() error {
	if c.PrefetchAt < 0 {
		return fmt.Errorf("coordinator: producer id prefetch-at %d is negative", c.PrefetchAt)
	}
	if c.RetryBackoff < 0 || c.RetryBackoffMax < 0 || c.AllocateTimeout < 0 {
		return fmt.Errorf("coordinator: negative producer id allocation duration (backoff %v, backoff max %v, timeout %v)",
			c.RetryBackoff, c.RetryBackoffMax, c.AllocateTimeout)
	}
	if c.PrefetchAt == 0 {
		c.PrefetchAt = DefaultProducerIDPrefetchAt
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultProducerIDRetryBackoff
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = max(DefaultProducerIDRetryBackoffMax, c.RetryBackoff)
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		return fmt.Errorf("coordinator: producer id retry backoff max %v is below the backoff %v", c.RetryBackoffMax, c.RetryBackoff)
	}
	if c.AllocateTimeout == 0 {
		c.AllocateTimeout = DefaultProducerIDAllocateTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// ProducerIDStats is a snapshot of a ProducerIDManager for tests and metrics.
type ProducerIDStats struct {
	// BlocksFetched counts the blocks accepted since NewProducerIDManager;
	// rejected blocks are not counted.
	BlocksFetched int
	// Remaining is the number of ids left in the current and the prefetched
	// block.
	Remaining int64
	// LastError is the latest failed or rejected allocation, kept after later
	// successes; empty if none has failed.
	LastError string
}

// ProducerIDManager hands out producer ids from blocks allocated by the
// controller. One background goroutine (the fetcher) owns allocation: it
// fetches the first block at once and the next one whenever the current block
// is down to PrefetchAt ids and no block is prefetched, so at most one
// allocation is in flight and at most two blocks are held. Blocks are used in
// the order received. All methods are safe for concurrent use.
type ProducerIDManager struct {
	alloc ProducerIDBlockAllocator
	cfg   ProducerIDManagerConfig

	// ctx bounds every allocation call; Close cancels it.
	ctx     context.Context
	cancel  context.CancelFunc
	closing chan struct{} // closed by Close: stops the fetcher, releases waiters
	// wake (capacity 1) asks the fetcher to look for a needed block. Next
	// sends without blocking; a token already there is enough, since the
	// fetcher rereads the state after every receive.
	wake       chan struct{}
	goroutines goroutine.Group // the block fetcher, stopped by Close
	closeOnce  sync.Once

	mu     sync.Mutex // guards the following
	closed bool
	blocks producerIDBlocks
	// avail is closed, and replaced, when a block is accepted: Next waits on
	// it when it finds no id.
	avail   chan struct{}
	fetched int
	lastErr error // latest failure, kept after later successes (Stats)
	failing error // latest failure since the last accepted block (Next's message)
}

// NewProducerIDManager returns a manager drawing blocks from alloc and starts
// fetching the first block in the background. It panics if alloc is nil or
// cfg does not validate. Close it when done.
func NewProducerIDManager(alloc ProducerIDBlockAllocator, cfg ProducerIDManagerConfig) *ProducerIDManager {
	if alloc == nil {
		panic("coordinator: nil ProducerIDBlockAllocator")
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &ProducerIDManager{
		alloc:   alloc,
		cfg:     cfg,
		ctx:     ctx,
		cancel:  cancel,
		closing: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		avail:   make(chan struct{}),
	}
	m.goroutines.Go(m.fetch)
	return m
}

// Next returns a producer id this manager never returned before (and, given
// an allocator that keeps its contract, that no other manager returns). When
// an id is at hand Next returns it without looking at ctx. Otherwise it waits
// for the block being fetched until ctx is done, then returns an *errs.Error
// COORDINATOR_LOAD_IN_PROGRESS (retriable) that names the allocation error
// since the last accepted block, if any. After Close it returns
// COORDINATOR_NOT_AVAILABLE.
func (m *ProducerIDManager) Next(ctx context.Context) (int64, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return 0, errClosed()
		}
		id, ok := m.blocks.take()
		if m.blocks.needsBlock(m.cfg.PrefetchAt) {
			m.signalFetcher()
		}
		avail := m.avail
		m.mu.Unlock()
		if ok {
			return id, nil
		}
		select {
		case <-avail:
		case <-m.closing:
			return 0, errClosed()
		case <-ctx.Done():
			m.mu.Lock()
			failing := m.failing
			m.mu.Unlock()
			if failing != nil {
				return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS,
					"no producer id available (%v); last block allocation failed: %v", ctx.Err(), failing)
			}
			return 0, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS,
				"no producer id available (%v); block allocation in progress", ctx.Err())
		}
	}
}

// Stats returns a snapshot of the manager's counters.
func (m *ProducerIDManager) Stats() ProducerIDStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := ProducerIDStats{BlocksFetched: m.fetched, Remaining: m.blocks.remaining()}
	if m.lastErr != nil {
		s.LastError = m.lastErr.Error()
	}
	return s
}

// Close stops the fetcher, cancelling an allocation in flight, releases
// waiting Next calls and returns once the fetcher has exited. It may be
// called more than once and concurrently; every call waits. Ids left in the
// blocks are dropped: they are never handed out.
func (m *ProducerIDManager) Close() {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		close(m.closing)
		m.cancel()
	})
	m.goroutines.Wait()
}

func errClosed() error {
	return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "producer id manager is closed")
}

// signalFetcher wakes the fetcher without blocking.
func (m *ProducerIDManager) signalFetcher() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// fetch is the fetcher goroutine: the only caller of the allocator, so at
// most one allocation is in flight.
func (m *ProducerIDManager) fetch() {
	backoff := m.cfg.RetryBackoff
	for {
		m.mu.Lock()
		need := !m.closed && m.blocks.needsBlock(m.cfg.PrefetchAt)
		m.mu.Unlock()
		if !need {
			select {
			case <-m.wake:
				continue
			case <-m.closing:
				return
			}
		}

		start, end, err := m.allocate()
		if m.ctx.Err() != nil {
			return // closed; the manager hands out nothing more
		}
		if err == nil {
			err = m.accept(start, end)
		}
		if err == nil {
			backoff = m.cfg.RetryBackoff
			continue
		}

		wait := retryDelay(backoff, rand.Int64N)
		m.fail(err, wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-m.closing:
			t.Stop()
			return
		}
		backoff = nextBackoff(backoff, m.cfg.RetryBackoffMax)
	}
}

// allocate makes one allocation call bounded by AllocateTimeout. A plain
// error caused by that timeout becomes REQUEST_TIMED_OUT, so logs and Stats
// carry a code.
func (m *ProducerIDManager) allocate() (start, end int64, err error) {
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.AllocateTimeout)
	defer cancel()
	start, end, err = m.alloc.AllocateProducerIDBlock(ctx)
	var e *errs.Error
	if err != nil && !errors.As(err, &e) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT,
			"producer id block allocation timed out after %v: %v", m.cfg.AllocateTimeout, err)
	}
	return start, end, err
}

// accept adds a received block, or rejects it, and wakes waiting Next calls.
func (m *ProducerIDManager) accept(start, end int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.blocks.offer(start, end); err != nil {
		return err
	}
	m.fetched++
	m.failing = nil
	close(m.avail)
	m.avail = make(chan struct{})
	return nil
}

// fail records and logs a failed or rejected allocation.
func (m *ProducerIDManager) fail(err error, retryIn time.Duration) {
	m.mu.Lock()
	m.lastErr, m.failing = err, err
	m.mu.Unlock()
	log := m.cfg.Logger
	switch {
	case errors.Is(err, errInvalidBlock):
		log.Error("rejected producer id block; retrying", "err", err, "retry_in", retryIn)
	case errs.Retriable(errs.Code(err)):
		log.Info("producer id block allocation failed; retrying", "err", err, "retry_in", retryIn)
	default:
		log.Warn("producer id block allocation failed with a non-retriable error; retrying anyway",
			"err", err, "retry_in", retryIn)
	}
}

// retryDelay jitters backoff into [backoff/2, backoff], so brokers that
// failed together (say, during a controller election) spread their retries
// while none retries sooner than half the backoff. int64n(n) returns a value
// in [0, n), like rand.Int64N.
func retryDelay(backoff time.Duration, int64n func(n int64) int64) time.Duration {
	half := backoff / 2
	return half + time.Duration(int64n(int64(backoff-half)+1))
}

// nextBackoff doubles cur, capped at limit.
func nextBackoff(cur, limit time.Duration) time.Duration {
	if cur > limit/2 {
		return limit
	}
	return cur * 2
}

// errInvalidBlock marks a block the manager refused to hand ids out of.
var errInvalidBlock = errors.New("invalid producer id block")

// idRange is what is left of one block: ids next through end-1.
type idRange struct{ next, end int64 }

func (r idRange) len() int64 { return r.end - r.next }

// producerIDBlocks is the manager's pure state: the block ids are taken from
// and the prefetched block after it. No locks, goroutines or clock; the
// manager guards it with its mutex.
//
// Invariants: cur is empty only if next is (take promotes next when cur runs
// out); every accepted block starts at or after received, the end of the
// block accepted before it, so ids ascend and no id is taken twice.
type producerIDBlocks struct {
	cur, next idRange
	received  int64
}

// take returns the next id, or false if none is left.
func (b *producerIDBlocks) take() (int64, bool) {
	if b.cur.len() <= 0 {
		return 0, false
	}
	id := b.cur.next
	b.cur.next++
	if b.cur.len() == 0 {
		b.cur, b.next = b.next, idRange{}
	}
	return id, true
}

// remaining is the number of ids left in both blocks. It cannot overflow:
// the blocks are disjoint, ascending and above zero.
func (b *producerIDBlocks) remaining() int64 { return b.cur.len() + b.next.len() }

// needsBlock reports whether a block should be fetched: nothing is
// prefetched and the current block is down to prefetchAt ids or fewer.
func (b *producerIDBlocks) needsBlock(prefetchAt int64) bool {
	return b.next.len() == 0 && b.cur.len() <= prefetchAt
}

// offer adds the block [start, end) behind those held, or rejects it with an
// error wrapping errInvalidBlock. Rules: the block is not empty; it starts
// above 0 (design decision 4: producer id 0 is never allocated, a broker reads
// producer_id <= 0 as "no producer"); it starts at or after the end of the
// block received before it, so a block that overlaps or precedes one already
// received is refused and none of its ids is handed out.
func (b *producerIDBlocks) offer(start, end int64) error {
	switch {
	case end <= start:
		return fmt.Errorf("%w [%d, %d): ends at or before its start", errInvalidBlock, start, end)
	case start <= 0:
		return fmt.Errorf("%w [%d, %d): producer ids start at 1", errInvalidBlock, start, end)
	case start < b.received:
		return fmt.Errorf("%w [%d, %d): overlaps or precedes the block received before it, which ended at %d",
			errInvalidBlock, start, end, b.received)
	}
	blk := idRange{next: start, end: end}
	switch {
	case b.cur.len() == 0:
		b.cur = blk
	case b.next.len() == 0:
		b.next = blk
	default:
		// The fetcher only allocates when needsBlock holds, and take only
		// shrinks what is held, so this would be a manager bug.
		return fmt.Errorf("%w [%d, %d): two blocks are already held", errInvalidBlock, start, end)
	}
	b.received = end
	return nil
}
