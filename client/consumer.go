package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Special offsets for Consumer.Assign and Seek, resolved with ListOffsets
// when the partition is first fetched.
const (
	OffsetEarliest int64 = -2
	OffsetLatest   int64 = -1
)

// Isolation selects what a consumer may read.
type Isolation int

const (
	// ReadCommitted (the default) reads up to the last stable offset.
	ReadCommitted Isolation = iota
	// ReadUncommitted reads up to the high watermark.
	ReadUncommitted
)

func (i Isolation) proto() sluicev1.IsolationLevel {
	if i == ReadUncommitted {
		return sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	}
	return sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
}

// ConsumerOption configures a Consumer.
type ConsumerOption func(*consumerConfig) error

type consumerConfig struct {
	isolation         Isolation
	maxWait           time.Duration
	minBytes          int32
	maxBytes          int32
	partitionMaxBytes int32
	fetchObserver     func(FetchStats)
	// autoOffsetReset is where a group consumer starts a partition that
	// has no committed offset: OffsetEarliest or OffsetLatest.
	autoOffsetReset int64
	group           groupConfig
}

// WithAutoOffsetReset sets where a group consumer starts reading a
// partition for which its group has no committed offset: OffsetEarliest
// or OffsetLatest (the default, as Kafka's auto.offset.reset=latest).
func WithAutoOffsetReset(offset int64) ConsumerOption {
	return func(c *consumerConfig) error {
		if offset != OffsetEarliest && offset != OffsetLatest {
			return fmt.Errorf("sluice: auto offset reset must be OffsetEarliest or OffsetLatest, got %d", offset)
		}
		c.autoOffsetReset = offset
		return nil
	}
}

// FetchStats describes one completed fetch request, for metrics.
type FetchStats struct {
	Broker  string
	Latency time.Duration // request sent to response decoded
	Bytes   int           // batch bytes in the response
	Err     error
	// Throttle is the response's throttle_time_ms (client quotas): the
	// consumer fetches nothing more from the broker until it has passed
	// since the request.
	Throttle time.Duration
}

// WithFetchObserver calls fn after every fetch request, on the fetch
// goroutine; fn must be fast and safe for concurrent use.
func WithFetchObserver(fn func(FetchStats)) ConsumerOption {
	return func(c *consumerConfig) error {
		c.fetchObserver = fn
		return nil
	}
}

// WithIsolation sets the isolation level (default ReadCommitted).
func WithIsolation(i Isolation) ConsumerOption {
	return func(c *consumerConfig) error {
		if i != ReadCommitted && i != ReadUncommitted {
			return fmt.Errorf("sluice: unknown isolation %d", i)
		}
		c.isolation = i
		return nil
	}
}

// WithMaxWait sets how long a fetch at the log end waits for data
// (default 500ms; at most 30s).
func WithMaxWait(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) error {
		if d < 0 || d > 30*time.Second {
			return fmt.Errorf("sluice: max wait must be in [0, 30s], got %v", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithMinBytes sets the bytes a fetch waits for (default 1).
func WithMinBytes(n int32) ConsumerOption {
	return func(c *consumerConfig) error {
		if n < 0 {
			return fmt.Errorf("sluice: min bytes must be >= 0, got %d", n)
		}
		c.minBytes = n
		return nil
	}
}

// WithMaxBytes bounds one fetch response (default 0: the broker's 50 MiB).
func WithMaxBytes(n int32) ConsumerOption {
	return func(c *consumerConfig) error {
		if n < 0 || n > MaxMessageSize {
			return fmt.Errorf("sluice: max bytes must be in [0, %d], got %d", MaxMessageSize, n)
		}
		c.maxBytes = n
		return nil
	}
}

// WithPartitionMaxBytes bounds each partition of a fetch response
// (default 4 MiB).
func WithPartitionMaxBytes(n int32) ConsumerOption {
	return func(c *consumerConfig) error {
		if n <= 0 || n > MaxMessageSize {
			return fmt.Errorf("sluice: partition max bytes must be in [1, %d], got %d", MaxMessageSize, n)
		}
		c.partitionMaxBytes = n
		return nil
	}
}

// Consumer reads assigned partitions. One fetch goroutine per broker
// fetches ahead of Poll (one response buffered while Poll decodes the
// previous one). Assign, Seek, Position and HighWatermark are safe for
// concurrent use; Poll is meant to be called from one goroutine at a time.
type Consumer struct {
	c   *Client
	cfg consumerConfig
	// throttle holds fetches from a broker that answered a throttle
	// (throttle.go).
	throttle brokerThrottle

	mu       sync.Mutex // guards the following
	assigned map[topicPartition]*assignment
	loops    map[string]chan struct{} // broker addr -> wake channel of its fetch loop
	closed   bool

	results chan *fetchResult // fetch loops -> Poll
	recBuf  []Record          // owned by Poll: the slice it returns
	ctx     context.Context   // cancelled by Close
	cancel  context.CancelFunc
	// goroutines are the fetch loops (one per leader), stopped by ctx.
	goroutines goroutine.Group
	// group is the group membership (WithGroup); nil without a group.
	group *groupMember
}

// assignment is the state of one assigned partition; guarded by
// Consumer.mu.
type assignment struct {
	tp       topicPartition
	position int64  // next offset Poll returns; <0 while OffsetEarliest/Latest is unresolved
	fetchPos int64  // next offset to fetch (ahead of position when prefetched)
	gen      uint64 // bumped by Seek: results of older generations are dropped
	leader   string // "" until resolved
	epoch    int32
	hw       int64 // high watermark from the last fetch, -1 unknown
	err      error // non-retriable error, returned once by Poll
	// stalled is the last retriable failure (a dead or moving leader)
	// since the partition's last good fetch; Stalled reports it.
	stalled error
	retryAt time.Time
	// offline: how long its leader lookups have found it offline after a
	// disk failure (ErrPartitionOffline); Poll reports that once it has
	// lasted OfflineRetry.
	offline offlineFor
	// paused: a group partition being revoked: not fetched, and records
	// fetched before are dropped (gen was bumped); its position stays
	// readable for the commit.
	paused bool
}

type fetchResult struct {
	parts []fetchedPartition
}

type fetchedPartition struct {
	a   *assignment
	gen uint64
	pd  *internalv1.PartitionDataView
}

// NewConsumer returns a Consumer with no assignments.
func (c *Client) NewConsumer(opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{maxWait: 500 * time.Millisecond, minBytes: 1, partitionMaxBytes: 4 << 20, autoOffsetReset: OffsetLatest,
		group: groupConfig{autoCommit: true, autoCommitInterval: 5 * time.Second}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.group.id == "" && cfg.group.groupOnly != "" {
		return nil, fmt.Errorf("sluice: %s needs WithGroup", cfg.group.groupOnly)
	}
	co := &Consumer{
		c:        c,
		cfg:      cfg,
		assigned: map[topicPartition]*assignment{},
		loops:    map[string]chan struct{}{},
		results:  make(chan *fetchResult, 1),
	}
	co.ctx, co.cancel = context.WithCancel(context.Background())
	if cfg.group.id != "" {
		co.group = newGroupMember(co, cfg.group)
	}
	return co, nil
}

// Assign adds (or re-positions) a partition at offset, which may be
// OffsetEarliest or OffsetLatest. A group consumer (WithGroup) gets its
// partitions from Subscribe instead.
func (co *Consumer) Assign(topic string, partition int32, offset int64) error {
	if co.group != nil {
		return fmt.Errorf("sluice: Assign on a group consumer: the group assigns partitions (use Subscribe)")
	}
	return co.Seek(topic, partition, offset)
}

// Unassign stops consuming a partition.
func (co *Consumer) Unassign(topic string, partition int32) {
	co.mu.Lock()
	delete(co.assigned, topicPartition{topic, partition})
	co.mu.Unlock()
}

// Seek sets the next offset Poll returns for a partition, assigning it if
// needed. Records already prefetched from the old position are dropped.
// A group consumer may seek only partitions it owns.
func (co *Consumer) Seek(topic string, partition int32, offset int64) error {
	if co.group != nil {
		if !co.group.owns(TopicPartition{Topic: topic, Partition: partition}) {
			return fmt.Errorf("sluice: Seek %s-%d: the consumer does not own the partition in its group", topic, partition)
		}
	}
	return co.seek(topic, partition, offset)
}

func (co *Consumer) seek(topic string, partition int32, offset int64) error {
	if offset < OffsetEarliest {
		return fmt.Errorf("sluice: invalid offset %d", offset)
	}
	if partition < 0 {
		return fmt.Errorf("sluice: invalid partition %d", partition)
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.closed {
		return ErrClosed
	}
	tp := topicPartition{topic, partition}
	a := co.assigned[tp]
	if a == nil {
		a = &assignment{tp: tp, hw: -1}
		co.assigned[tp] = a
	}
	a.gen++
	a.position, a.fetchPos, a.err, a.retryAt = offset, offset, nil, time.Time{}
	if wake := co.loops[a.leader]; wake != nil {
		notify(wake)
	}
	return nil
}

// Position returns the next offset Poll returns for a partition, and
// whether it is assigned and resolved.
func (co *Consumer) Position(topic string, partition int32) (int64, bool) {
	co.mu.Lock()
	defer co.mu.Unlock()
	a := co.assigned[topicPartition{topic, partition}]
	if a == nil || a.position < 0 {
		return -1, false
	}
	return a.position, true
}

// HighWatermark returns the partition's high watermark from the latest
// fetch, or -1 when unknown.
func (co *Consumer) HighWatermark(topic string, partition int32) int64 {
	co.mu.Lock()
	defer co.mu.Unlock()
	if a := co.assigned[topicPartition{topic, partition}]; a != nil {
		return a.hw
	}
	return -1
}

// Close stops the fetch goroutines. It does not close the Client. A group
// consumer first leaves its group: it stops fetching, commits its
// positions (auto-commit), calls OnRevoked, and sends the leave heartbeat,
// all bounded by the close timeout (WithGroupCloseTimeout).
func (co *Consumer) Close() error {
	if co.group != nil {
		co.group.close()
	}
	co.mu.Lock()
	co.closed = true
	co.mu.Unlock()
	co.cancel()
	co.goroutines.Wait()
	return nil
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Poll returns the next records of the assigned partitions, waiting until
// some arrive or ctx ends (returning ctx.Err()).
//
// The returned slice is reused by the next Poll: copy the Record values
// (not their bytes) to keep them longer. Key, Value and header bytes alias
// the fetched response and are never overwritten, so they stay valid. A partition error is
// returned as an error naming the partition (an *errs.Error inside);
// transient errors are retried in the background, so Poll may be called
// again after any error. A partition offline after a disk failure
// (ErrPartitionOffline) is one such error that Poll still returns, once,
// after it has lasted OfflineRetry: no broker can serve it until an
// operator acts.
func (co *Consumer) Poll(ctx context.Context) ([]Record, error) {
	for {
		if err := co.prepare(ctx); err != nil {
			return nil, err
		}
		wait := time.NewTimer(100 * time.Millisecond) // re-prepare for retries
		select {
		case r := <-co.results:
			wait.Stop()
			recs, err := co.decode(r)
			if err != nil || len(recs) > 0 {
				return recs, err
			}
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		case <-co.ctx.Done():
			wait.Stop()
			return nil, ErrClosed
		}
	}
}

// Stalled returns why an assigned partition is not being fetched while
// the consumer retries — the last failure to reach its leader or find its
// offsets since its last good fetch (a partition error with a code wraps
// an *errs.Error) — or nil when none is. Poll hides these retriable
// failures, as Kafka's consumer does; Stalled is for saying why nothing
// arrives (a CLI's last words, a health check).
func (co *Consumer) Stalled() error {
	co.mu.Lock()
	defer co.mu.Unlock()
	var first error
	var firstTP topicPartition
	for tp, a := range co.assigned {
		if a.stalled != nil && (first == nil || tp.topic < firstTP.topic || tp.topic == firstTP.topic && tp.partition < firstTP.partition) {
			first, firstTP = a.stalled, tp
		}
	}
	return first
}

// prepare resolves leaders and special offsets, starts fetch loops, and
// returns a pending partition error.
func (co *Consumer) prepare(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err // no lookup can finish
	}
	if co.group != nil {
		if err := co.group.takeErr(); err != nil {
			return err
		}
	}
	co.mu.Lock()
	if co.closed {
		co.mu.Unlock()
		return ErrClosed
	}
	var todo []*assignment
	var gens []uint64
	now := time.Now()
	for _, a := range co.assigned {
		if a.paused {
			continue
		}
		if a.err != nil {
			err := a.err
			a.err = nil
			co.mu.Unlock()
			return err
		}
		if (a.leader == "" || a.position < 0) && !now.Before(a.retryAt) {
			todo = append(todo, a)
			gens = append(gens, a.gen)
		}
	}
	co.mu.Unlock()
	// Loops are woken after every partition is resolved, so that the first
	// fetch (which may long-poll) carries all of them.
	var wakes []chan struct{}
	defer func() {
		for _, w := range wakes {
			notify(w)
		}
	}()
	for i, a := range todo {
		addr, epoch, err := co.c.leader(ctx, a.tp.topic, a.tp.partition)
		pos := int64(-1)
		if err == nil {
			co.mu.Lock()
			pos = a.position
			co.mu.Unlock()
			if pos < 0 {
				spec := sluicev1.OffsetSpec_OFFSET_SPEC_LATEST
				if pos == OffsetEarliest {
					spec = sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST
				}
				pos, err = co.c.listOffsets(ctx, a.tp.topic, a.tp.partition, spec, 0, co.cfg.isolation.proto())
			}
		}
		co.mu.Lock()
		if co.assigned[a.tp] != a || a.gen != gens[i] {
			co.mu.Unlock()
			continue
		}
		if err != nil && ctx.Err() != nil {
			// Poll's own deadline, not the broker's failure: no backoff
			// (one here pushed the next Poll's lookup past its start, and
			// a consumer polling every 100 ms never looked up again).
			co.mu.Unlock()
			return ctx.Err()
		}
		if err != nil {
			a.retryAt = time.Now().Add(backoffFor(0))
			report := a.offline.observe(err, time.Now()) && !a.offline.reported
			a.offline.reported = a.offline.reported || report
			co.mu.Unlock()
			code := errs.Code(err)
			transport := isTransportError(err)
			if needsMetadata(code) || transport {
				co.c.forget(a.tp.topic) // the leader may be gone: ask again
			}
			if transport || needsMetadata(code) && code != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
				// A dead or moving leader: retried after the backoff with
				// fresh metadata, as Kafka's consumer does; not returned,
				// but kept for Stalled.
				co.mu.Lock()
				a.stalled = fmt.Errorf("topic %q partition %d: %w", a.tp.topic, a.tp.partition, err)
				co.mu.Unlock()
				if !report {
					continue
				}
				// Offline after a disk failure for OfflineRetry: nothing
				// changes until an operator acts, so Poll says it (once;
				// the lookups go on).
			}
			return fmt.Errorf("topic %q partition %d: %w", a.tp.topic, a.tp.partition, err)
		}
		a.offline = offlineFor{}
		a.leader, a.epoch = addr, epoch
		if a.position < 0 {
			a.position, a.fetchPos = pos, pos
		}
		wake := co.loops[addr]
		if wake == nil && !co.closed {
			wake = make(chan struct{}, 1)
			co.loops[addr] = wake
			co.goroutines.Go(func() { co.fetchLoop(addr, wake) })
		}
		co.mu.Unlock()
		if wake != nil {
			wakes = append(wakes, wake)
		}
	}
	return nil
}

// fetchLoop fetches, for as long as the consumer is open, every partition
// led by addr, handing each response to Poll through co.results.
func (co *Consumer) fetchLoop(addr string, wake chan struct{}) {
	req := &sluicev1.FetchRequest{
		MaxWaitMs:      int32(co.cfg.maxWait.Milliseconds()),
		MinBytes:       co.cfg.minBytes,
		MaxBytes:       co.cfg.maxBytes,
		IsolationLevel: co.cfg.isolation.proto(),
	}
	var parts []*assignment
	var gens []uint64
	// Start on prepare's wake, once it has resolved every partition.
	select {
	case <-wake:
	case <-co.ctx.Done():
		return
	}
	for {
		// Collect the partitions to fetch.
		parts, gens = parts[:0], gens[:0]
		req.Topics = req.Topics[:0]
		byTopic := map[string]*sluicev1.FetchTopic{}
		now := time.Now()
		co.mu.Lock()
		for _, a := range co.assigned {
			if a.leader != addr || a.position < 0 || a.err != nil || a.paused || now.Before(a.retryAt) {
				continue
			}
			t := byTopic[a.tp.topic]
			if t == nil {
				t = &sluicev1.FetchTopic{Name: a.tp.topic}
				byTopic[a.tp.topic] = t
				req.Topics = append(req.Topics, t)
			}
			t.Partitions = append(t.Partitions, &sluicev1.FetchPartition{
				Partition: a.tp.partition, FetchOffset: a.fetchPos,
				PartitionMaxBytes: co.cfg.partitionMaxBytes, CurrentLeaderEpoch: -1,
			})
			parts = append(parts, a)
			gens = append(gens, a.gen)
		}
		co.mu.Unlock()
		if len(parts) == 0 {
			select {
			case <-wake:
			case <-time.After(100 * time.Millisecond): // retry backoffs
			case <-co.ctx.Done():
				return
			}
			continue
		}
		resp, err := co.fetch(addr, req)
		if co.ctx.Err() != nil {
			return
		}
		res := &fetchResult{}
		tell := err != nil // Poll must learn of errors even without records
		co.mu.Lock()
		if err != nil {
			retryAt := time.Now().Add(backoffFor(1))
			transport := isTransportError(err)
			for i, a := range parts {
				if a.gen == gens[i] {
					a.retryAt = retryAt
					a.leader = ""
					if transport {
						// The broker may be gone: the next leader lookup
						// asks the cluster instead of the cache.
						co.c.forget(a.tp.topic)
					}
					a.stalled = fmt.Errorf("topic %q partition %d: %w", a.tp.topic, a.tp.partition, err)
					if !isRetriable(err) {
						a.err = fmt.Errorf("topic %q partition %d: %w", a.tp.topic, a.tp.partition, err)
					}
				}
			}
		} else {
			idx := make(map[topicPartition]int, len(parts))
			for i, a := range parts {
				idx[a.tp] = i
			}
			for _, t := range resp.Topics {
				for _, pd := range t.Partitions {
					i, ok := idx[topicPartition{t.Name, pd.Partition}]
					if !ok {
						continue
					}
					a := parts[i]
					if a.gen != gens[i] || co.assigned[a.tp] != a {
						continue // re-positioned while fetching
					}
					if pd.ErrorCode != sluicev1.ErrorCode_NONE {
						tell = true
						perr := &errs.Error{Code: pd.ErrorCode, Message: pd.ErrorMessage}
						a.retryAt = time.Now().Add(backoffFor(1))
						if needsMetadata(pd.ErrorCode) {
							a.leader = ""
							co.c.forget(a.tp.topic)
						}
						if !perr.Retriable() {
							a.err = fmt.Errorf("topic %q partition %d: %w", a.tp.topic, a.tp.partition, perr)
						}
						continue
					}
					a.stalled = nil
					a.hw = pd.HighWatermark
					if co.cfg.isolation == ReadCommitted && pd.LastStableOffset >= 0 {
						a.hw = pd.LastStableOffset
					}
					moved := pd.NextFetchOffset > a.fetchPos
					if moved {
						a.fetchPos = pd.NextFetchOffset
					}
					// A response without batches that still moves the
					// fetch offset (the broker left out markers or aborted
					// transactions) is handed over too: Poll moves the
					// position past what was left out. One that does not
					// move it carries nothing an earlier response did not
					// (comparing with the position instead, which lags
					// while Poll has not decoded the earlier one, queued
					// empty responses that held the one slot of prefetch
					// while nobody polled).
					if len(pd.Batches) > 0 || moved {
						res.parts = append(res.parts, fetchedPartition{a: a, gen: a.gen, pd: pd})
					}
				}
			}
		}
		co.mu.Unlock()
		if len(res.parts) == 0 && !tell {
			continue
		}
		// Hand the response over; this blocks while Poll has not taken
		// the previous one, which bounds prefetching to one response.
		select {
		case co.results <- res:
		case <-co.ctx.Done():
			return
		}
	}
}

// Throttled is the throttles the brokers answered this consumer's
// fetches with (client quotas).
func (co *Consumer) Throttled() ThrottleStats { return co.throttle.snapshot() }

func (co *Consumer) fetch(addr string, req *sluicev1.FetchRequest) (*internalv1.FetchResponseView, error) {
	cc, err := co.c.conn(addr)
	if err != nil {
		return nil, err
	}
	// A broker that answered a throttle gets no fetch until it has
	// passed (KIP-219).
	if !co.throttle.wait(addr, co.ctx.Done()) {
		return nil, co.ctx.Err()
	}
	ctx, cancel := context.WithTimeout(co.ctx, co.c.cfg.requestTimeout+co.cfg.maxWait)
	defer cancel()
	resp := &internalv1.FetchResponseView{}
	start := time.Now()
	err = rpcError(cc.Invoke(ctx, "/sluice.v1.Log/Fetch", req, resp))
	if err == nil {
		co.throttle.observe(addr, start, resp.ThrottleTimeMs)
	}
	if fn := co.cfg.fetchObserver; fn != nil {
		st := FetchStats{Broker: addr, Latency: time.Since(start), Err: err,
			Throttle: time.Duration(resp.ThrottleTimeMs) * time.Millisecond}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				for _, b := range p.Batches {
					st.Bytes += len(b)
				}
			}
		}
		fn(st)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// decode turns a fetch result into records past each partition's
// position, advancing the positions. Records alias the response bytes.
func (co *Consumer) decode(r *fetchResult) ([]Record, error) {
	n := 0
	for _, fp := range r.parts {
		for _, b := range fp.pd.Batches {
			if h, err := batch.ParseHeader(b); err == nil && h.RecordCount > 0 {
				n += int(h.RecordCount)
			}
		}
	}
	// The slice is reused across Polls (see Poll): a new Record array per
	// response would cost an allocation and a zeroing per record.
	out := co.recBuf[:0]
	if cap(out) < n {
		out = make([]Record, 0, n)
	}
	defer func() { co.recBuf = out[:0] }()
	for _, fp := range r.parts {
		co.mu.Lock()
		a := fp.a
		if a.gen != fp.gen || co.assigned[a.tp] != a {
			co.mu.Unlock()
			continue
		}
		pos := a.position
		co.mu.Unlock()
		start := len(out)
		topic, partition := a.tp.topic, a.tp.partition
		next := pos
		for _, b := range fp.pd.Batches {
			h, err := batch.ParseHeader(b)
			if err != nil {
				// Not the canonical layout (a broker re-encoding batches):
				// rebuild it, which also validates it.
				if b, h, err = batch.Canonicalize(b); err != nil {
					return nil, fmt.Errorf("topic %q partition %d: %w", topic, partition, err)
				}
			}
			if h.NextOffset() <= pos {
				continue
			}
			if h.IsControl() {
				next = max(next, h.NextOffset())
				continue
			}
			err = batch.ForEachRecord(b, func(br batch.Record) error {
				if br.Offset < pos {
					return nil
				}
				out = append(out, Record{
					Topic: topic, Partition: partition, Offset: br.Offset, Timestamp: br.Timestamp,
					Key: br.Key, Value: br.Value, Headers: br.Headers,
				})
				return nil
			})
			if err != nil {
				return out[:start], fmt.Errorf("topic %q partition %d: %w", topic, partition, err)
			}
			next = max(next, h.NextOffset())
		}
		if fp.pd.NextFetchOffset > next {
			next = fp.pd.NextFetchOffset
		}
		co.mu.Lock()
		if a.gen == fp.gen && co.assigned[a.tp] == a {
			a.position = next
		} else {
			out = out[:start]
		}
		co.mu.Unlock()
	}
	return out, nil
}

// pause stops fetching group partitions that are being revoked or lost:
// records fetched before are dropped (their generation ends), positions
// stay readable.
func (co *Consumer) pause(parts []TopicPartition) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, tp := range parts {
		if a := co.assigned[topicPartition{tp.Topic, tp.Partition}]; a != nil {
			a.gen++
			a.paused = true
		}
	}
}

// drop forgets group partitions (after revocation or loss).
func (co *Consumer) drop(parts []TopicPartition) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, tp := range parts {
		delete(co.assigned, topicPartition{tp.Topic, tp.Partition})
	}
}

// positions returns the resolved positions of parts (the offsets to
// commit); unresolved ones are left out.
func (co *Consumer) positions(parts []TopicPartition) map[TopicPartition]int64 {
	co.mu.Lock()
	defer co.mu.Unlock()
	out := make(map[TopicPartition]int64, len(parts))
	for _, tp := range parts {
		if a := co.assigned[topicPartition{tp.Topic, tp.Partition}]; a != nil && a.position >= 0 {
			out[tp] = a.position
		}
	}
	return out
}

// position positions a newly assigned group partition at offset (which
// may be OffsetEarliest or OffsetLatest), paused until resume.
func (co *Consumer) position(tp TopicPartition, offset int64) {
	_ = co.seek(tp.Topic, tp.Partition, offset) // fails only when closed
	co.mu.Lock()
	if a := co.assigned[topicPartition{tp.Topic, tp.Partition}]; a != nil {
		a.paused = true
	}
	co.mu.Unlock()
}

// resume starts fetching positioned group partitions.
func (co *Consumer) resume(parts []TopicPartition) {
	co.mu.Lock()
	defer co.mu.Unlock()
	for _, tp := range parts {
		if a := co.assigned[topicPartition{tp.Topic, tp.Partition}]; a != nil {
			a.paused = false
			if wake := co.loops[a.leader]; wake != nil {
				notify(wake)
			}
		}
	}
}
