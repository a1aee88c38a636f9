package txn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Defaults for CoordinatorConfig's zero fields.
const (
	DefaultAbortTimedOutInterval = 10 * time.Second
	DefaultAppendTimeout         = runtime.DefaultAppendTimeout
	DefaultMarkerRetryBackoff    = 100 * time.Millisecond
	DefaultMarkerRetryBackoffMax = 5 * time.Second
	DefaultMarkerRoundTimeout    = 30 * time.Second
	DefaultCloseWait             = runtime.DefaultCloseWait
	DefaultMaxConcurrentWait     = 5 * time.Second
)

// CoordinatorConfig configures a Coordinator. Zero fields take the
// defaults (Kafka's names in parentheses).
type CoordinatorConfig struct {
	// StatePartitions is the partition count of __transaction_state
	// (transaction.state.log.num.partitions, DefaultStatePartitions).
	StatePartitions int32
	// MaxTimeout bounds a producer's transaction timeout
	// (transaction.max.timeout.ms, DefaultMaxTimeout).
	MaxTimeout time.Duration
	// IDExpiration removes ids idle this long
	// (transactional.id.expiration.ms, DefaultIDExpiration).
	IDExpiration time.Duration
	// AbortTimedOutInterval is the period of the timeout and expiry scan
	// (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s).
	AbortTimedOutInterval time.Duration
	// AppendTimeout bounds one state-log append's wait for commit (10 s).
	AppendTimeout time.Duration
	// MarkerRetryBackoff and MarkerRetryBackoffMax: the first and the
	// largest pause between two marker rounds of one transaction (the
	// pause doubles; 100 ms, 5 s).
	MarkerRetryBackoff    time.Duration
	MarkerRetryBackoffMax time.Duration
	// MarkerRoundTimeout bounds one MarkerWriter.WriteMarkers call (30 s).
	MarkerRoundTimeout time.Duration
	// CloseWait bounds how long Close waits for the goroutines (10 s).
	CloseWait time.Duration
	// MaxConcurrentWait bounds how long AddPartitions waits for a busy id
	// (its markers being written) before answering
	// CONCURRENT_TRANSACTIONS (5 s).
	MaxConcurrentWait time.Duration
}

// Validate checks c and fills in defaults.
func (c *CoordinatorConfig) Validate() error {
	if c.StatePartitions < 0 {
		return fmt.Errorf("transaction coordinator: StatePartitions %d < 0", c.StatePartitions)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.StatePartitions == 0 {
		c.StatePartitions = DefaultStatePartitions
	}
	def(&c.MaxTimeout, DefaultMaxTimeout)
	def(&c.IDExpiration, DefaultIDExpiration)
	def(&c.AbortTimedOutInterval, DefaultAbortTimedOutInterval)
	def(&c.AppendTimeout, DefaultAppendTimeout)
	def(&c.MarkerRetryBackoff, DefaultMarkerRetryBackoff)
	def(&c.MarkerRetryBackoffMax, DefaultMarkerRetryBackoffMax)
	def(&c.MarkerRoundTimeout, DefaultMarkerRoundTimeout)
	def(&c.CloseWait, DefaultCloseWait)
	def(&c.MaxConcurrentWait, DefaultMaxConcurrentWait)
	if c.MarkerRetryBackoffMax < c.MarkerRetryBackoff {
		c.MarkerRetryBackoffMax = c.MarkerRetryBackoff
	}
	return nil
}

// CoordinatorDeps are the coordinator's dependencies; all but Now are
// required.
type CoordinatorDeps struct {
	// Log reads and appends the __transaction_state partitions this node
	// leads (coordinator.ReplicaStateLog on a broker).
	Log         runtime.Log
	ProducerIDs ProducerIDSource
	Markers     MarkerWriter
	// Now is the clock (nil: time.Now). Every transition takes its time
	// from it, so tests move time by hand.
	Now func() time.Time
	// StatePartitionCount, if not nil, returns the partition count of
	// __transaction_state as the metadata shows it (≤ 0: not known yet).
	// Routing then follows the topic that exists, even when it was created
	// with another count than cfg.StatePartitions (which only applies
	// while the topic is unknown): FindCoordinator, which reads the same
	// metadata, and the coordinator always agree on an id's partition.
	// It is called with the coordinator's lock held and must not block.
	StatePartitionCount func() int32
	// Logger may be nil (slog.Default()).
	Logger *slog.Logger
}

// Coordinator is the transaction coordinator's shard adapter on
// coordinator/runtime, its I/O side (DESIGN §10, decision 32): it loads
// the __transaction_state partitions this node leads (it is their
// cluster.LeadershipListener), answers InitProducerId, AddPartitionsToTxn
// and EndTxn for the ids they hold by running this package's pure core
// (InitProducerID, AddPartitions, EndTxn, ...) and writing each decision
// to the log before applying it, sends the markers of ended transactions,
// aborts timed-out transactions and expires idle ids.
//
// Concurrency (docs/locks.md): one mutex guards the loaded partitions; it
// is never held across a call to a dependency. Each id has at most one
// transition in flight (its slot: the id's key in its runtime.Partition,
// taken with TryAcquire); other requests
// for it get ErrConcurrent. All methods are safe for concurrent use.
type Coordinator struct {
	cfg     CoordinatorConfig
	pids    ProducerIDSource
	markers MarkerWriter
	now     func() time.Time
	logger  *slog.Logger

	// rt runs the led __transaction_state partitions (the shards are
	// *statePartition): leadership, loads, routing, appends and their
	// resolver, Close.
	rt         *runtime.Runtime[*statePartition]
	goroutines goroutine.Group

	// mu guards rt's partition table and every statePartition's state
	// (runtime.Config.Mu).
	mu sync.Mutex

	// adds joins concurrent TV2 AddPartitions of one transaction
	// (coordinator_adds.go).
	adds addJoins
}

// statePartition is the shard of one led partition of
// __transaction_state at one leader epoch (its Epoch is the coordinator
// epoch of its ids). A new epoch gets a new statePartition; goroutines
// started for an old one find it replaced (runtime.OwnsLocked) and drop
// their work.
type statePartition struct {
	*runtime.Partition

	// Guarded by Coordinator.mu:
	txns map[string]*Metadata // loaded state; values are never modified, only replaced
	// timeoutWorkers counts the scan's transitions running
	// (coordinator_timeouts.go).
	timeoutWorkers atomic.Int32
	// changed is closed (and replaced) whenever a slot is released or a
	// state applied: AddPartitions waits on it instead of answering
	// CONCURRENT_TRANSACTIONS at once.
	changed chan struct{}
}

// changedLocked wakes AddPartitions calls waiting for ps to change. The caller
// holds Coordinator.mu.
func (ps *statePartition) changedLocked() {
	close(ps.changed)
	ps.changed = make(chan struct{})
}

// NewCoordinator returns a coordinator that serves nothing until it hears
// BecameLeader for a partition of __transaction_state (register it with
// cluster.ReplicaManager.RegisterLeadershipListener); each loaded
// partition then scans its timeouts on its own timer. It panics on a
// missing dependency or an invalid cfg. Close it when done.
func NewCoordinator(deps CoordinatorDeps, cfg CoordinatorConfig) *Coordinator {
	if deps.Log == nil || deps.ProducerIDs == nil || deps.Markers == nil {
		panic("txn: Coordinator needs a runtime.Log, a ProducerIDSource and a MarkerWriter")
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	c := &Coordinator{
		cfg:     cfg,
		pids:    deps.ProducerIDs,
		markers: deps.Markers,
		now:     deps.Now,
		logger:  deps.Logger,
	}
	c.rt = runtime.New(runtime.Config[*statePartition]{
		Name:           "transaction coordinator",
		Topic:          StateTopic,
		KeyKind:        "transactional id",
		Partitions:     cfg.StatePartitions,
		PartitionCount: deps.StatePartitionCount,
		Log:            deps.Log,
		NewShard: func(p *runtime.Partition) *statePartition {
			return &statePartition{Partition: p, txns: make(map[string]*Metadata), changed: make(chan struct{})}
		},
		NewLoader: func(ps *statePartition) runtime.Loader {
			return &stateLoader{c: c, ps: ps, txns: make(map[string]*Metadata)}
		},
		Mu:            &c.mu,
		Goroutines:    &c.goroutines,
		AppendTimeout: cfg.AppendTimeout,
		CloseWait:     cfg.CloseWait,
		Now:           deps.Now,
		Logger:        deps.Logger,
	})
	return c
}

// Close stops the coordinator: requests answer NOT_COORDINATOR, loads,
// marker rounds and the timeout scan stop (their contexts end), and Close
// waits up to CloseWait for them (runtime.Close). Transactions in
// Prepare* keep their record; the partition's next leader resends their
// markers. It returns an error if a goroutine did not end in time. Close
// is idempotent.
func (c *Coordinator) Close() error { return c.rt.Close() }

// acquire routes id to its loaded partition and takes its slot. It
// returns the partition and a copy of id's Metadata (nil: unknown), or
// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
// (the load failed) or CONCURRENT_TRANSACTIONS. The caller must release.
func (c *Coordinator) acquire(id string) (*statePartition, *Metadata, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, err := c.rt.RouteLocked(id)
	if err != nil {
		return nil, nil, err
	}
	if !ps.TryAcquire(id) {
		return nil, nil, ErrConcurrent(id)
	}
	var m *Metadata
	if cur := ps.txns[id]; cur != nil {
		cp := cur.Clone()
		m = &cp
	}
	return ps, m, nil
}

// release frees id's slot without applying anything.
//
// A release that changed nothing (the core refused, or wrote nothing)
// does not wake AddPartitions' waiters: one of them releasing after its
// own refused attempt would wake itself at once and spin.
func (c *Coordinator) release(ps *statePartition, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps.Release(id)
}

// releaseChanged is release after a transition that may have changed
// something (a write that failed or whose outcome is unknown): it wakes
// AddPartitions' waiters.
func (c *Coordinator) releaseChanged(ps *statePartition, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps.Release(id)
	ps.changedLocked()
}

// decide runs a transition of the core, allocating a producer id and
// running it again when the Result asks for one. The id's slot is held,
// so m cannot change in between.
func (c *Coordinator) decide(ctx context.Context, decide func(newPID int64) Result) (Result, error) {
	r := decide(0)
	if !r.NeedProducerID {
		return r, nil
	}
	pid, err := c.pids.Next(ctx)
	if err != nil {
		return Result{}, err
	}
	r = decide(pid)
	if r.NeedProducerID {
		return Result{}, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "bug: a transition asked twice for a producer id")
	}
	return r, nil
}

// transition is the write-then-apply path every transition takes (the
// package comment's "Write first, apply after"): with id's slot held, persist
// r.Write at the coordinator epoch, apply it once committed, release the
// slot and, for a Prepare*, start its marker round. It returns nil once
// r.Write is applied (or when there is nothing to write), else the
// retriable error to answer.
//
// ErrCommitUnknown policy: the record may still commit, so the slot stays
// taken (the id answers CONCURRENT_TRANSACTIONS) while the runtime's
// resolver (runtime.Resolve) waits, at the same leader epoch, for the
// record's offset to commit: committed → applied as if the append had
// returned nil; leadership lost → the slot is released, the partition is
// resigned and its state dropped, and the next leader's load decides from
// the log. The requester
// gets COORDINATOR_NOT_AVAILABLE (or NOT_COORDINATOR when leadership was
// lost) and retries; its retry is answered from the resolved state.
func (c *Coordinator) transition(ctx context.Context, ps *statePartition, id string, r Result) error {
	if r.Write == nil {
		c.release(ps, id)
		return nil
	}
	return c.persist(ctx, ps, id, *r.Write)
}

// persist is transition's write: ws, id's states one after another (the
// last is id's new state), in one batch, so one replicated append writes
// them all and they commit together; then the last is applied.
func (c *Coordinator) persist(ctx context.Context, ps *statePartition, id string, ws ...Metadata) error {
	raw, err := encodeStateBatch(c.now(), ws...)
	if err != nil {
		c.release(ps, id)
		return errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "transactional id %q: %w", errs.Echo(id), err)
	}
	w := ws[len(ws)-1]
	return c.rt.AppendThenApply(ctx, ps, id, raw, func(int64) error {
		if !c.apply(ps, id, w) {
			return errs.New(sluicev1.ErrorCode_NOT_COORDINATOR,
				"this node stopped coordinating transactional id %q while its record was written", errs.Echo(id))
		}
		return nil
	}, func() { c.releaseChanged(ps, id) })
}

// apply replaces id's Metadata with w (forgets it when Dead), releases
// the slot and, for a Prepare*, starts the marker round. It reports
// false, applying nothing, when ps is no longer led.
func (c *Coordinator) apply(ps *statePartition, id string, w Metadata) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps.Release(id)
	ps.changedLocked()
	if !c.rt.OwnsLocked(ps) {
		return false
	}
	if w.State == Dead {
		delete(ps.txns, id)
	} else {
		ps.txns[id] = &w
	}
	if w.PendingMarkers() {
		c.startMarkersLocked(ps, w)
	}
	return true
}

// encodeStateBatch returns the batch holding the records of ms, in order.
func encodeStateBatch(now time.Time, ms ...Metadata) ([]byte, error) {
	var b batch.Builder
	ts := now.UnixMilli()
	b.Reset(ts)
	for _, m := range ms {
		key, value, err := EncodeRecord(m)
		if err != nil {
			return nil, err
		}
		b.Add(ts, key, value, nil)
	}
	return b.Finish(batch.PlainProducer, 0), nil
}
