// Package runtime is the machinery both coordinators run on, written
// once (DESIGN §3, STYLE rule 8; Kafka's CoordinatorRuntime is the
// model): the led partitions of one internal topic per leader epoch and
// the leadership listener that starts and drops them, the load of a
// partition with its retry backoff, routing a key to its partition and
// the routing errors, per-key serialization and timers (keys.go), the
// append of a record batch with the resolver of an append whose commit is
// unknown, the one append-error map, metrics (metrics.go), and Close.
//
// What a coordinator keeps per partition (transactions, groups and
// offsets) is its shard: a type that embeds *Partition and that the
// runtime creates at BecameLeader (Config.NewShard) and fills by replaying
// the partition (Config.NewLoader). The shards' pure cores
// (coordinator/txn, coordinator/group) know nothing
// of the runtime.
//
// Locking (docs/locks.md): the coordinator's mutex (Config.Mu) guards the
// partition table, each Partition's load fields and the shards' state,
// and is only held for short reads and applies, never across a call to
// the log or to another node. The methods named *Locked need it held.
// Work on one key (a transactional id, a group) is serialized by the key
// (Partition.Acquire/TryAcquire/Release, keys.go), not by a lock: its
// holder appends with no lock held, waits for the commit, then applies
// under Config.Mu and answers (Kafka's deferred response). Each
// Partition's own small mutex guards its key table and timers and is
// taken after Config.Mu, never before.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Defaults of Config's zero fields.
const (
	// DefaultRetryBackoff and DefaultRetryBackoffMax are the first and the
	// largest pause between two attempts of a load read or of a commit
	// wait of the resolver (the pause doubles).
	DefaultRetryBackoff    = 100 * time.Millisecond
	DefaultRetryBackoffMax = 5 * time.Second
	// DefaultAppendTimeout bounds one append's wait for commit.
	DefaultAppendTimeout = 10 * time.Second
	// DefaultCloseWait bounds Close's wait for the goroutines.
	DefaultCloseWait = 10 * time.Second
	// DefaultLoadReadBytes is the size of one read of a load.
	DefaultLoadReadBytes = 1 << 20
)

// Log is a coordinator's access to the partitions of its internal topic
// that it leads. All methods are safe for concurrent use and are called
// with no coordinator lock held; they may block until ctx ends.
type Log interface {
	// AppendCommitted appends raw (one batch of the topic's records,
	// built by batch.Builder) to tp as its leader at leaderEpoch and
	// waits until it is committed, with exactly the contract and outcomes
	// of cluster.ReplicaManager.AppendCommitted: nil (committed), a
	// *errs.Error when nothing was appended, an error wrapping
	// cluster.ErrCommitUnknown when the batch was appended but may or may
	// not commit (AppendResult.LastOffset is then set), or
	// NOT_ENOUGH_REPLICAS_AFTER_APPEND (committed).
	AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (cluster.AppendResult, error)
	// WaitCommitted waits until the offsets up to lastOffset of tp are
	// committed (nil, or NOT_ENOUGH_REPLICAS_AFTER_APPEND), as long as
	// this node leads tp at leaderEpoch. Leadership lost or ctx ended:
	// an error wrapping cluster.ErrCommitUnknown.
	WaitCommitted(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, lastOffset int64) error
	// ReadForLoad reads whole batches of tp from offset (an offset below
	// the log start reads from the log start) for a coordinator that
	// leads tp at leaderEpoch and loads it. It first waits until the log
	// end offset is committed, so that a new leader loads nothing that
	// may still be truncated, and returns that end offset: loading is
	// done once NextOffset reaches EndOffset. Errors: not the leader at
	// leaderEpoch (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...), ctx
	// ended, storage errors. The batches must not be modified.
	ReadForLoad(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, offset int64, maxBytes int) (LogRead, error)
}

// LogRead is one read of Log.ReadForLoad.
type LogRead struct {
	// Batches are whole canonical batches in offset order.
	Batches [][]byte
	// NextOffset is the offset after the last batch (the offset read
	// when there is none).
	NextOffset int64
	// EndOffset is the committed log end offset the load must reach.
	EndOffset int64
}

// Shard is what a coordinator keeps per led partition: a type embedding
// *Partition (which gives it Base).
type Shard interface {
	Base() *Partition
}

// Loader replays one load of a partition into a fresh state.
type Loader interface {
	// Replay folds one batch into the state being loaded. A record it
	// cannot decode but may skip goes to skip with its offset (it is
	// logged and counted); any error returned stops the load for good:
	// the partition answers COORDINATOR_NOT_AVAILABLE.
	Replay(batch []byte, skip func(offset int64, err error)) error
	// Done is called once the partition is read to endOffset, with
	// Config.Mu held and only while the partition is still led: it
	// publishes the loaded state in its shard. The partition serves once
	// it returns.
	Done(endOffset int64)
}

// Partition is one led partition of the topic at one leader epoch. A new
// epoch gets a new Partition; work started for an old one finds it
// replaced (OwnsLocked) and drops its result.
type Partition struct {
	TP    cluster.TopicPartition
	Epoch int32 // the leader epoch = the coordinator epoch
	// Ctx ends when the partition is resigned, replaced by a new epoch
	// or the runtime closes: its load, commit waits and the shard's own
	// work stop.
	Ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex                 // guards keys and timers (taken after Config.Mu, never before)
	keys   map[string][]chan struct{} // held keys and their waiters (keys.go)
	timers map[string]*timerEntry     // scheduled timers by name (keys.go)

	// Guarded by Config.Mu:
	loading  bool
	loadErr  error         // the load failed for good
	loadedAt time.Time     // when BecameLeader started the load
	loadTime time.Duration // how long the load took (0 while loading)
}

// Base returns p; a shard embedding *Partition implements Shard with it.
func (p *Partition) Base() *Partition { return p }

// Loading reports whether p is still loading (Config.Mu held).
func (p *Partition) Loading() bool { return p.loading }

// LoadErr is the error that stopped p's load for good, or nil
// (Config.Mu held).
func (p *Partition) LoadErr() error { return p.loadErr }

// LoadTime is how long p's load took, 0 while loading (Config.Mu held).
func (p *Partition) LoadTime() time.Duration { return p.loadTime }

// Serving reports whether p is loaded and serves (Config.Mu held).
func (p *Partition) Serving() bool { return !p.loading && p.loadErr == nil }

// Config configures a Runtime.
type Config[S Shard] struct {
	// Name names the coordinator in errors and logs ("transaction
	// coordinator").
	Name string
	// Topic is the internal topic whose led partitions are the shards.
	Topic string
	// KeyKind names a key in answers ("transactional id", "group").
	KeyKind string
	// Partitions is the topic's partition count used while the metadata
	// does not know the topic (≥ 1).
	Partitions int32
	// PartitionCount, if not nil, returns the topic's partition count in
	// the metadata (≤ 0: not known yet); routing then follows the topic
	// that exists. It is called with Mu held and must not block.
	PartitionCount func() int32
	// ValidateKey, if not nil, checks a key before routing; its error is
	// answered as it is.
	ValidateKey func(key string) error
	// Log reads and appends the led partitions (required).
	Log Log
	// NewShard returns the shard of a partition this node starts to lead
	// (called with Mu held; p is loading). NewLoader returns the loader of
	// its load (called on the load's goroutine, without Mu). Required.
	NewShard  func(p *Partition) S
	NewLoader func(s S) Loader
	// Mu is the coordinator's mutex: it guards the partition table, the
	// Partitions' load fields and the shards' state (required).
	Mu *sync.Mutex
	// Goroutines is the coordinator's goroutine group: the runtime starts
	// loads and resolvers in it and Close waits for it (required).
	Goroutines *goroutine.Group
	// AppendTimeout bounds one append's wait for commit
	// (DefaultAppendTimeout); CloseWait bounds Close's wait
	// (DefaultCloseWait); RetryBackoff and RetryBackoffMax pace load reads
	// and the resolver's commit waits (DefaultRetryBackoff,
	// DefaultRetryBackoffMax).
	AppendTimeout   time.Duration
	CloseWait       time.Duration
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// Now is the clock (nil: time.Now); Logger may be nil (slog.Default()).
	Now    func() time.Time
	Logger *slog.Logger
}

// Runtime runs the led partitions of one internal topic for a
// coordinator. It is the topic's cluster.LeadershipListener. All methods
// are safe for concurrent use.
type Runtime[S Shard] struct {
	cfg    Config[S]
	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	skipped       atomic.Int64 // records the loads could not decode
	appendLatency Histogram    // appends through Append, to commit or failure

	// Guarded by cfg.Mu:
	partitions map[int32]S // led partitions (loading or loaded) by number
	closed     bool
}

// New returns a runtime that leads nothing until it hears BecameLeader.
// It panics on a missing required field.
func New[S Shard](cfg Config[S]) *Runtime[S] {
	if cfg.Log == nil || cfg.NewShard == nil || cfg.NewLoader == nil || cfg.Mu == nil || cfg.Goroutines == nil || cfg.Partitions < 1 {
		panic("coordinator/runtime: Config needs Log, NewShard, NewLoader, Mu, Goroutines and Partitions")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.AppendTimeout, DefaultAppendTimeout)
	def(&cfg.CloseWait, DefaultCloseWait)
	def(&cfg.RetryBackoff, DefaultRetryBackoff)
	def(&cfg.RetryBackoffMax, DefaultRetryBackoffMax)
	cfg.RetryBackoffMax = max(cfg.RetryBackoffMax, cfg.RetryBackoff)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runtime[S]{cfg: cfg, ctx: ctx, cancel: cancel, partitions: make(map[int32]S)}
}

// Context ends when the runtime closes; a coordinator's own goroutines
// (timeout scans) run under it.
func (r *Runtime[S]) Context() context.Context { return r.ctx }

// GoLocked starts f in the coordinator's goroutine group unless the
// runtime is closed (Mu held: Close's wait then never races a new
// goroutine). It reports whether f was started.
func (r *Runtime[S]) GoLocked(f func()) bool {
	if r.closed {
		return false
	}
	r.cfg.Goroutines.Go(f)
	return true
}

// Close stops the runtime: every partition is dropped (routing answers
// NOT_COORDINATOR), the loads, resolvers and everything under Context or
// a Partition's Ctx stop, and Close waits up to CloseWait for the
// coordinator's goroutines. It returns an error if one did not end in
// time. Idempotent.
func (r *Runtime[S]) Close() error {
	r.cfg.Mu.Lock()
	if !r.closed {
		r.closed = true
		for n, s := range r.partitions {
			s.Base().stop()
			delete(r.partitions, n)
		}
	}
	r.cfg.Mu.Unlock()
	r.cancel()
	if !r.cfg.Goroutines.WaitFor(r.cfg.CloseWait) {
		return fmt.Errorf("%s: %d goroutines still running after %v", r.cfg.Name, r.cfg.Goroutines.Running(), r.cfg.CloseWait)
	}
	return nil
}

var _ cluster.LeadershipListener = (*Runtime[*Partition])(nil)

// BecameLeader implements cluster.LeadershipListener for the topic (other
// topics are ignored): a new shard is made for the partition at
// leaderEpoch and loaded on the coordinator's goroutine group; its keys
// answer COORDINATOR_LOAD_IN_PROGRESS meanwhile. It returns at once.
func (r *Runtime[S]) BecameLeader(tp cluster.TopicPartition, leaderEpoch int32) {
	if tp.Topic != r.cfg.Topic {
		return
	}
	r.cfg.Mu.Lock()
	defer r.cfg.Mu.Unlock()
	if r.closed {
		return
	}
	if old, ok := r.partitions[tp.Partition]; ok {
		// The listener contract sends Resigned first; be safe anyway.
		old.Base().stop()
	}
	ctx, cancel := context.WithCancel(r.ctx)
	p := &Partition{TP: tp, Epoch: leaderEpoch, Ctx: ctx, cancel: cancel, loading: true, loadedAt: r.cfg.Now(),
		keys: make(map[string][]chan struct{}), timers: make(map[string]*timerEntry)}
	s := r.cfg.NewShard(p)
	r.partitions[tp.Partition] = s
	r.cfg.Goroutines.Go(func() { r.load(s) })
}

// Resigned implements cluster.LeadershipListener: the partition's shard
// at leaderEpoch is dropped (a load in progress is abandoned, work under
// its Ctx stops) and its keys answer NOT_COORDINATOR. A Resigned for
// another epoch than the one led is ignored.
func (r *Runtime[S]) Resigned(tp cluster.TopicPartition, leaderEpoch int32) {
	if tp.Topic != r.cfg.Topic {
		return
	}
	r.cfg.Mu.Lock()
	defer r.cfg.Mu.Unlock()
	if s, ok := r.partitions[tp.Partition]; ok && s.Base().Epoch == leaderEpoch {
		s.Base().stop()
		delete(r.partitions, tp.Partition)
	}
}

// load reads s's partition from its start through a fresh Loader and, if
// s is still led when done, lets it publish the state. Read errors are
// retried with a backoff while s is led. Records the loader skips are
// logged and counted (SkippedRecords; issue 29); an error of Replay stops
// the load for good (LoadErr: the partition answers
// COORDINATOR_NOT_AVAILABLE).
func (r *Runtime[S]) load(s S) {
	p := s.Base()
	ld := r.cfg.NewLoader(s)
	skip := func(offset int64, err error) { r.reportSkipped(p, offset, err) }
	offset := int64(0)
	backoff := r.cfg.RetryBackoff
	var end int64
	for {
		rd, err := r.cfg.Log.ReadForLoad(p.Ctx, p.TP, p.Epoch, offset, DefaultLoadReadBytes)
		if p.Ctx.Err() != nil {
			return // resigned, new epoch or closed: abandoned
		}
		if err != nil {
			if !Sleep(p.Ctx, backoff) {
				return
			}
			backoff = min(2*backoff, r.cfg.RetryBackoffMax)
			continue
		}
		backoff = r.cfg.RetryBackoff
		for _, b := range rd.Batches {
			if err := ld.Replay(b, skip); err != nil {
				r.cfg.Mu.Lock()
				if r.OwnsLocked(s) {
					p.loadErr = fmt.Errorf("offset %d: %w", offset, err)
					p.loading = false
				}
				r.cfg.Mu.Unlock()
				r.cfg.Logger.Error("coordinator cannot load its partition", "topic", p.TP.Topic, "partition", p.TP.Partition,
					"leader_epoch", p.Epoch, "err", err)
				return
			}
		}
		end = rd.EndOffset
		if rd.NextOffset >= rd.EndOffset {
			break
		}
		if rd.NextOffset <= offset {
			// No progress below the end: try again later rather than
			// serve a partial state.
			if !Sleep(p.Ctx, backoff) {
				return
			}
			continue
		}
		offset = rd.NextOffset
	}
	r.cfg.Mu.Lock()
	defer r.cfg.Mu.Unlock()
	if !r.OwnsLocked(s) {
		return
	}
	p.loading = false
	p.loadTime = max(r.cfg.Now().Sub(p.loadedAt), 0)
	ld.Done(end)
	r.cfg.Logger.Info("coordinator partition loaded", "topic", p.TP.Topic, "partition", p.TP.Partition,
		"leader_epoch", p.Epoch, "end_offset", end, "load_time", p.loadTime)
}

// reportSkipped logs one record of p at offset that a load left out, with
// the reason, and counts it.
func (r *Runtime[S]) reportSkipped(p *Partition, offset int64, reason error) {
	r.skipped.Add(1)
	r.cfg.Logger.Warn("coordinator load skipped a record it cannot decode", "topic", p.TP.Topic, "partition", p.TP.Partition,
		"leader_epoch", p.Epoch, "offset", offset, "reason", reason)
}

// SkippedRecords is the number of records the loads have skipped because
// they could not decode them (a record skipped by several loads, the
// partition led again, counts each time), for metrics.
func (r *Runtime[S]) SkippedRecords() int64 { return r.skipped.Load() }

// PartitionFor is key's partition: by the topic's actual partition count
// when Config.PartitionCount knows it, else by Config.Partitions. Mu held
// when Config.PartitionCount needs it (it is called as it is).
func (r *Runtime[S]) PartitionFor(key string) int32 {
	n := r.cfg.Partitions
	if r.cfg.PartitionCount != nil {
		if actual := r.cfg.PartitionCount(); actual > 0 {
			n = actual
		}
	}
	return PartitionFor(key, n)
}

// RouteLocked returns key's shard if it is loaded here, or the error to
// answer: ValidateKey's, NOT_COORDINATOR (not led here, or closed),
// COORDINATOR_NOT_AVAILABLE (its load failed for good) or
// COORDINATOR_LOAD_IN_PROGRESS.
func (r *Runtime[S]) RouteLocked(key string) (S, error) {
	var zero S
	if r.cfg.ValidateKey != nil {
		if err := r.cfg.ValidateKey(key); err != nil {
			return zero, err
		}
	}
	n := r.PartitionFor(key)
	s, ok := r.partitions[n]
	switch {
	case r.closed || !ok:
		return zero, errs.New(sluicev1.ErrorCode_NOT_COORDINATOR,
			"this node is not the coordinator of %s %q (%s partition %d)", r.cfg.KeyKind, errs.Echo(key), r.cfg.Topic, n)
	case s.Base().loadErr != nil:
		return zero, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE,
			"%s partition %d could not be loaded: %w", r.cfg.Topic, n, s.Base().loadErr)
	case s.Base().loading:
		return zero, errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS,
			"%s partition %d is loading; retry", r.cfg.Topic, n)
	}
	return s, nil
}

// ServingLocked is nil when every led partition serves, else the error a
// request that needs all of them answers (COORDINATOR_NOT_AVAILABLE for a
// failed load, COORDINATOR_LOAD_IN_PROGRESS).
func (r *Runtime[S]) ServingLocked() error {
	for n, s := range r.partitions {
		if err := s.Base().loadErr; err != nil {
			return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "%s partition %d could not be loaded: %v", r.cfg.Topic, n, err)
		}
	}
	for n, s := range r.partitions {
		if s.Base().loading {
			return errs.New(sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, "%s partition %d is loading; retry", r.cfg.Topic, n)
		}
	}
	return nil
}

// OwnsLocked reports whether s is still the shard this node leads for its
// partition (not resigned, not replaced by a new epoch, not closed).
func (r *Runtime[S]) OwnsLocked(s S) bool {
	cur, ok := r.partitions[s.Base().TP.Partition]
	return !r.closed && ok && cur.Base() == s.Base()
}

// PartitionsLocked is the table of led shards by partition number (Mu
// held; the caller must not modify it).
func (r *Runtime[S]) PartitionsLocked() map[int32]S { return r.partitions }

// Append appends raw to s's partition at its epoch and waits for the
// commit, bounded by ctx and AppendTimeout; the outcome is the log's
// (Log.AppendCommitted).
func (r *Runtime[S]) Append(ctx context.Context, s S, raw []byte) (cluster.AppendResult, error) {
	p := s.Base()
	actx, cancel := context.WithTimeout(ctx, r.cfg.AppendTimeout)
	defer cancel()
	start := time.Now()
	res, err := r.cfg.Log.AppendCommitted(actx, p.TP, raw, p.Epoch, r.cfg.Now())
	r.appendLatency.Observe(time.Since(start))
	return res, err
}

// Committed reports whether an append's error means its batch is
// committed: nil, or NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank
// after the append; the record is in the log, so it is applied, unlike in
// Kafka, where memory would then disagree with the log).
func Committed(err error) bool {
	return err == nil || errs.Code(err) == sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND
}

// AppendThenApply is the write-then-apply path: it appends raw to s's
// partition (Append) and
//
//   - committed: calls apply with the batch's base offset and returns its
//     error;
//   - commit unknown (cluster.ErrCommitUnknown): hands the batch to the
//     resolver (Resolve) and returns the mapped append error: the record
//     may still commit, and is applied if it does;
//   - failed: calls abandon (if not nil) and returns the mapped append
//     error (AppendError).
//
// apply and abandon are called without Mu.
func (r *Runtime[S]) AppendThenApply(ctx context.Context, s S, key string, raw []byte, apply func(base int64) error, abandon func()) error {
	res, err := r.Append(ctx, s, raw)
	switch {
	case Committed(err):
		return apply(res.BaseOffset)
	case errors.Is(err, cluster.ErrCommitUnknown):
		r.Resolve(s, res.BaseOffset, res.LastOffset, apply, abandon)
	default:
		if abandon != nil {
			abandon()
		}
	}
	return r.AppendError(key, err)
}

// Resolve is the commit-unknown resolver: for a batch [base, last] of s's
// partition whose append ended with cluster.ErrCommitUnknown, a goroutine
// waits, at s's leader epoch and while s is led, for last to commit
// (Log.WaitCommitted, retried with the backoff): committed → apply(base),
// as if the append had returned nil; s resigned, replaced or closed →
// abandon (if not nil): s's state is dropped, and the next leader's load
// decides from the log. When s is no longer led at the call, abandon is
// called at once. apply and abandon are called without Mu.
func (r *Runtime[S]) Resolve(s S, base, last int64, apply func(base int64) error, abandon func()) {
	p := s.Base()
	r.cfg.Mu.Lock()
	started := r.OwnsLocked(s) && r.GoLocked(func() {
		backoff := r.cfg.RetryBackoff
		for {
			wctx, cancel := context.WithTimeout(p.Ctx, r.cfg.AppendTimeout)
			err := r.cfg.Log.WaitCommitted(wctx, p.TP, p.Epoch, last)
			cancel()
			if Committed(err) {
				_ = apply(base) // its requester has had its answer
				return
			}
			if p.Ctx.Err() != nil || !Sleep(p.Ctx, backoff) {
				break
			}
			backoff = min(2*backoff, r.cfg.RetryBackoffMax)
		}
		if abandon != nil {
			abandon()
		}
	})
	r.cfg.Mu.Unlock()
	if !started && abandon != nil {
		abandon()
	}
}

// AppendError maps a failed append to the runtime's partition to the
// answer for key's request. It is the one map of both coordinators, and
// Kafka's: its group coordinator service (GroupCoordinatorService on
// CoordinatorRuntime, Kafka 3.6+) and its TransactionStateManager
// (appendTransactionToLog) agree on
//
//   - UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS,
//     NOT_ENOUGH_REPLICAS_AFTER_APPEND (only as an outcome the resolver
//     gave up on), REQUEST_TIMED_OUT → COORDINATOR_NOT_AVAILABLE: the
//     partition is still this node's, or may be again; retry here after a
//     moment;
//   - NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR → NOT_COORDINATOR: look
//     the coordinator up again; Sluice adds FENCED_LEADER_EPOCH and
//     UNKNOWN_LEADER_EPOCH (its appends carry the leader epoch: either
//     means this node no longer leads the partition at that epoch);
//   - MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_FETCH_SIZE →
//     UNKNOWN_SERVER_ERROR: the coordinator built a batch the log refuses,
//     a server-side fault the client cannot fix by retrying (the requests
//     are bounded before they get here, api/limits.go);
//   - anything else → COORDINATOR_NOT_AVAILABLE (retriable; Kafka passes
//     it through, but a coordinator's client only knows the coordinator
//     codes, and the cause stays in the message).
//
// Before this map the group coordinator answered INVALID_REQUEST for a
// batch too large and NOT_COORDINATOR for UNKNOWN_TOPIC_OR_PARTITION.
func (r *Runtime[S]) AppendError(key string, err error) error {
	return AppendError(r.cfg.KeyKind, key, r.cfg.Topic, err)
}

// AppendError is Runtime.AppendError for a key of kind keyKind (for
// appends that do not go through a Runtime's Log, such as a transactional
// offset commit's).
func AppendError(keyKind, key, topic string, err error) error {
	code := sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE
	switch errs.Code(err) {
	case sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, sluicev1.ErrorCode_FENCED_LEADER_EPOCH,
		sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, sluicev1.ErrorCode_KAFKA_STORAGE_ERROR:
		code = sluicev1.ErrorCode_NOT_COORDINATOR
	case sluicev1.ErrorCode_MESSAGE_TOO_LARGE, sluicev1.ErrorCode_RECORD_LIST_TOO_LARGE,
		sluicev1.ErrorCode_INVALID_FETCH_SIZE:
		code = sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR
	}
	return errs.New(code, "%s %q: writing to %s failed: %w", keyKind, errs.Echo(key), topic, err)
}

// MappedAppendError reports whether AppendError gives err's code a
// coordinator answer of its own (rather than the default).
func MappedAppendError(err error) bool {
	switch errs.Code(err) {
	case sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, sluicev1.ErrorCode_FENCED_LEADER_EPOCH,
		sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, sluicev1.ErrorCode_KAFKA_STORAGE_ERROR,
		sluicev1.ErrorCode_MESSAGE_TOO_LARGE, sluicev1.ErrorCode_RECORD_LIST_TOO_LARGE,
		sluicev1.ErrorCode_INVALID_FETCH_SIZE, sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION,
		sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
		sluicev1.ErrorCode_REQUEST_TIMED_OUT:
		return true
	}
	return false
}

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
