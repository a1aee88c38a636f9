package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Voter is one member of the static controller quorum
// (controller.quorum.voters: "1@host:port,2@...").
type Voter struct {
	ID      int32
	Address string // Raft address, host:port
}

// Raft timing defaults. They suit loopback and a LAN (a failed leader is
// replaced in about one to two seconds). hashicorp/raft's own defaults,
// HeartbeatTimeout = ElectionTimeout = 1s, LeaderLeaseTimeout = 500ms,
// CommitTimeout = 50ms, are the production choice across hosts or zones
// with noisy networks; set them in Config explicitly there.
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 250 * time.Millisecond
	DefaultCommitTimeout      = 20 * time.Millisecond
	DefaultApplyTimeout       = 5 * time.Second
	DefaultShutdownTimeout    = 5 * time.Second
	// raftMaxAppendEntries bounds the entries of one log write and of one
	// AppendEntries (hashicorp/raft's default is 64; its maximum 1024).
	raftMaxAppendEntries = 512
	// DefaultSessionTimeout is broker.session.timeout.ms: a broker that
	// has not heartbeated for this long is fenced. Kafka's default is 9 s;
	// Sluice aims to move leadership within 3 s of a crash.
	DefaultSessionTimeout = 2 * time.Second
	// DefaultGoneGrace is how long a broker that gossip reported gone may
	// still prove itself alive with a heartbeat before it is fenced.
	DefaultGoneGrace = 400 * time.Millisecond
	// DefaultSessionCheckInterval is how often the active controller looks
	// for expired sessions.
	DefaultSessionCheckInterval = 100 * time.Millisecond
)

// Config configures a Controller. Zero durations take the defaults above.
type Config struct {
	// NodeID is this voter's id, unique and stable across restarts.
	NodeID int32
	// DataDir holds raft/raft.db (bolt log and stable store) and
	// raft/snapshots.
	DataDir string
	// RaftBind is the listen address of the Raft transport.
	RaftBind string
	// RaftAdvertise is the address other voters dial; empty means the bound
	// address, which must then not be an unspecified IP (0.0.0.0).
	RaftAdvertise string
	// Voters is the static quorum, identical on every voter. It is used
	// only to bootstrap a node that has no Raft state yet; empty means this
	// node alone.
	Voters []Voter
	// Logger receives Raft's log at Info and above; nil means slog.Default.
	Logger *slog.Logger
	// DialMap (fault injection, testing only) makes this voter dial the
	// map's target whenever it connects to a voter address in the map;
	// the Raft configuration keeps the real addresses. Nil in production.
	DialMap faultnet.DialMap
	// RaftTLS secures the Raft transport with mutual TLS (nil:
	// plaintext TCP).
	RaftTLS *TransportTLS

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// ApplyTimeout bounds one proposal when the context has no earlier
	// deadline.
	ApplyTimeout time.Duration
	// ShutdownTimeout bounds Shutdown.
	ShutdownTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots
	// (hashicorp default 8192 when zero).
	SnapshotThreshold uint64

	// SessionTimeout, GoneGrace and SessionCheckInterval drive broker
	// fencing (see Liveness).
	SessionTimeout       time.Duration
	GoneGrace            time.Duration
	SessionCheckInterval time.Duration

	// LeaderRebalanceInterval is how often the active controller moves
	// leaderships back to preferred replicas for brokers whose imbalance
	// is above LeaderImbalanceThreshold (leader.imbalance.check.interval;
	// 0: DefaultLeaderRebalanceInterval, negative: never, as Kafka's
	// auto.leader.rebalance.enable=false).
	LeaderRebalanceInterval time.Duration
	// LeaderImbalanceThreshold is the fraction of a broker's preferred
	// partitions led elsewhere above which they are moved back
	// (leader.imbalance.per.broker.percentage / 100; 0: 0.10).
	LeaderImbalanceThreshold float64

	// DefaultReplicationFactor and DefaultMinInsyncReplicas are the
	// cluster defaults for new topics (Kafka's default.replication.factor
	// and min.insync.replicas; see TopicDefaults). Zero means 1. They
	// matter on the active controller; give every voter the same values.
	DefaultReplicationFactor int32
	DefaultMinInsyncReplicas int32
}

// Validate checks c and fills in defaults. It must be called (Start does)
// before c is used.
func (c *Config) Validate() error {
	if c.NodeID < 0 {
		return fmt.Errorf("controller: node id %d is negative", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("controller: data dir is required")
	}
	if c.RaftBind == "" {
		return errors.New("controller: raft bind address is required")
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftBind
	}
	if err := c.DialMap.Validate(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if len(c.Voters) == 0 {
		c.Voters = []Voter{{ID: c.NodeID, Address: c.RaftAdvertise}}
	}
	self := false
	ids, addrs := map[int32]bool{}, map[string]bool{}
	for _, v := range c.Voters {
		if ids[v.ID] || addrs[v.Address] {
			return fmt.Errorf("controller: voter %d@%s is listed twice", v.ID, v.Address)
		}
		ids[v.ID], addrs[v.Address] = true, true
		if v.ID == c.NodeID {
			self = true
		}
	}
	if !self {
		return fmt.Errorf("controller: node %d is not in the voter list", c.NodeID)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.CommitTimeout, DefaultCommitTimeout)
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	def(&c.ShutdownTimeout, DefaultShutdownTimeout)
	def(&c.SessionTimeout, DefaultSessionTimeout)
	def(&c.GoneGrace, DefaultGoneGrace)
	def(&c.SessionCheckInterval, DefaultSessionCheckInterval)
	def(&c.LeaderRebalanceInterval, DefaultLeaderRebalanceInterval)
	if c.LeaderImbalanceThreshold < 0 || c.LeaderImbalanceThreshold >= 1 {
		return fmt.Errorf("controller: leader imbalance threshold %v is not in [0, 1)", c.LeaderImbalanceThreshold)
	}
	if c.LeaderImbalanceThreshold == 0 {
		c.LeaderImbalanceThreshold = DefaultLeaderImbalanceThreshold
	}
	if c.DefaultReplicationFactor < 0 || c.DefaultMinInsyncReplicas < 0 {
		return fmt.Errorf("controller: default replication factor %d and min.insync.replicas %d must be >= 1 (0 for 1)",
			c.DefaultReplicationFactor, c.DefaultMinInsyncReplicas)
	}
	if c.DefaultReplicationFactor == 0 {
		c.DefaultReplicationFactor = 1
	}
	if c.DefaultMinInsyncReplicas == 0 {
		c.DefaultMinInsyncReplicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Controller is one voter of the metadata quorum. Start it once, then
// Shutdown it (once or more); other methods may only be called after a
// successful Start. All methods are safe for concurrent use. Reads (Image, Subscribe,
// WaitForOffset) work on every voter; proposals only on the leader, others
// answer NOT_CONTROLLER.
type Controller struct {
	cfg Config
	fsm *FSM
	log *slog.Logger

	raft      *raft.Raft
	transport *raft.NetworkTransport
	store     *raftboltdb.BoltStore

	// proposeMu serializes the read-image-then-propose wrappers on this
	// node, so two of them never compute a record from the same image.
	proposeMu sync.Mutex
	// alterMu guards alterQueue: AlterPartition calls waiting for the
	// next batch (alterpartition.go). A leaf, taken with or without
	// proposeMu.
	alterMu    sync.Mutex
	alterQueue []*alterCall

	// livenessMu guards liveness (heartbeats arrive on gRPC goroutines;
	// the session loop reads it).
	livenessMu sync.Mutex
	liveness   *Liveness
	// leaderSince is when this node last became leader (zero if not).
	leaderSince time.Time
	// lastRebalance is when maybeRebalance last ran; only sessionLoop
	// touches it. It starts at the controller's start, so the first
	// automatic rebalance comes one interval later.
	lastRebalance time.Time
	// reelectCheckedAt and reassignCheckedAt are the image offsets at
	// which sessionLoop last found no re-election (maybeReelect) or
	// reassignment completion (maybeCompleteReassignments) due; only
	// sessionLoop uses them.
	reelectCheckedAt, reassignCheckedAt uint64

	// caughtUpTerm is the Raft term in which this node, as leader, has
	// applied every entry committed before its term (a barrier returned);
	// 0 before. See CaughtUpLeader.
	caughtUpTerm atomic.Uint64

	// ctx is cancelled by Shutdown; background work derives from it.
	ctx    context.Context
	cancel context.CancelFunc
	// goroutines are the leader and session loops.
	goroutines goroutine.Group

	shutdownOnce sync.Once
	shutdownErr  error
}

// New returns an unstarted Controller.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Controller{cfg: cfg, fsm: NewFSM(), log: cfg.Logger, ctx: ctx, cancel: cancel,
		liveness: NewLiveness(cfg.SessionTimeout, cfg.GoneGrace), lastRebalance: time.Now()}, nil
}

// Start opens the Raft stores in DataDir, listens on RaftBind and joins
// the quorum. A node with no Raft state bootstraps the configured voters
// (every voter does the same, with the same list, and Raft agrees on it);
// a node with state just resumes. Start returns before a leader is known.
func (c *Controller) Start() (err error) {
	dir := filepath.Join(c.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	hlog := newRaftLogger(c.log)
	logWriter := raftLogWriter(c.log)

	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return fmt.Errorf("controller: open raft.db: %w", err)
	}
	defer func() {
		if err != nil {
			_ = store.Close()
		}
	}()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, logWriter)
	if err != nil {
		return fmt.Errorf("controller: snapshot store: %w", err)
	}
	var adv net.Addr
	if _, port, _ := net.SplitHostPort(c.cfg.RaftAdvertise); port != "0" {
		a, err := net.ResolveTCPAddr("tcp", c.cfg.RaftAdvertise)
		if err != nil {
			return fmt.Errorf("controller: advertise address: %w", err)
		}
		adv = a
	}
	transport, err := newTransport(c.cfg.RaftBind, adv, c.cfg.DialMap, c.cfg.RaftTLS, hlog)
	if err != nil {
		return fmt.Errorf("controller: raft transport: %w", err)
	}
	defer func() {
		if err != nil {
			_ = transport.Close()
		}
	}()
	if adv == nil {
		// Bound to port 0 (tests): the actual address is known only now.
		bound := string(transport.LocalAddr())
		for i := range c.cfg.Voters {
			if c.cfg.Voters[i].ID == c.cfg.NodeID && c.cfg.Voters[i].Address == c.cfg.RaftAdvertise {
				c.cfg.Voters[i].Address = bound
			}
		}
		c.cfg.RaftAdvertise = bound
	}

	rc := raft.DefaultConfig()
	rc.LocalID = serverID(c.cfg.NodeID)
	rc.Logger = hlog
	rc.HeartbeatTimeout = c.cfg.HeartbeatTimeout
	rc.ElectionTimeout = c.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = c.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = c.cfg.CommitTimeout
	// Group commit for pipelined proposals (proposeEach: the thousands of
	// re-elections of a failover, a creation's topics): with an
	// unbuffered apply channel the leader took one entry per log fsync
	// while the proposer waited to hand it the next; a buffer lets the
	// entries queue up while it writes, and each write (and each
	// AppendEntries to a follower) takes up to raftMaxAppendEntries of
	// them (issue 31). The cost is hashicorp/raft's: an entry already
	// buffered is no longer bound by its Apply timeout to start, only its
	// future by the caller's wait.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = raftMaxAppendEntries
	if c.cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = c.cfg.SnapshotThreshold
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("controller: %w", err)
	}

	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if !existing {
		var conf raft.Configuration
		for _, v := range c.cfg.Voters {
			conf.Servers = append(conf.Servers, raft.Server{
				Suffrage: raft.Voter, ID: serverID(v.ID), Address: raft.ServerAddress(v.Address)})
		}
		if err := raft.BootstrapCluster(rc, store, store, snaps, transport, conf); err != nil {
			return fmt.Errorf("controller: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, c.fsm, store, store, snaps, transport)
	if err != nil {
		return fmt.Errorf("controller: start raft: %w", err)
	}
	c.raft, c.transport, c.store = r, transport, store
	c.goroutines.Go(c.leaderLoop)
	c.goroutines.Go(c.sessionLoop)
	return nil
}

// Shutdown stops the node within ShutdownTimeout: it hands leadership to
// another voter if it leads (so the quorum does not wait for an election
// timeout), stops Raft, then closes the stores. Later calls return the
// first call's result.
func (c *Controller) Shutdown() error {
	return c.shutdown(true)
}

// Abort stops the node like a crash as far as the other voters can tell:
// no leadership hand-off (they must time out and elect). For failure
// tests; the stores are still closed cleanly.
func (c *Controller) Abort() error { return c.shutdown(false) }

// shutdown is Shutdown with an optional leadership hand-off; tests use
// handoff=false to simulate a crash as far as the other voters can tell.
func (c *Controller) shutdown(handoff bool) error {
	c.shutdownOnce.Do(func() {
		c.cancel()
		if c.raft == nil {
			return
		}
		deadline := time.Now().Add(c.cfg.ShutdownTimeout)
		if handoff && c.raft.State() == raft.Leader && len(c.cfg.Voters) > 1 {
			// Bounded by raft's own ElectionTimeout-based transfer timeout.
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				c.log.Warn("controller: leadership transfer failed", "err", err)
			}
		}
		done := make(chan struct{})
		// Not in goroutines: when raft's shutdown overruns the deadline
		// this goroutine is abandoned (and the store left open), rather
		// than waited for.
		go func() {
			_ = c.raft.Shutdown().Error() // also closes the transport
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Until(deadline)):
			// Raft may still be using the store: leave it open (leaked until
			// exit) rather than close it under a running writer.
			c.shutdownErr = errors.New("controller: raft shutdown timed out")
			_ = c.transport.Close()
		}
		c.goroutines.Wait()
		if c.shutdownErr == nil {
			c.shutdownErr = c.store.Close()
		}
	})
	return c.shutdownErr
}

// leaderLoop runs leader-only upkeep on each leadership gain: it finalizes
// SupportedFeatures on a fresh cluster and completes the partition
// reassignments the previous controller left ready. It stops with
// Shutdown.
func (c *Controller) leaderLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case isLeader := <-c.raft.LeaderCh():
			c.onLeadership(isLeader)
			if !isLeader {
				continue
			}
			c.catchUpAsLeader()
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ApplyTimeout)
			if err := c.bootstrapFeatures(ctx); err != nil {
				c.log.Warn("controller: finalize features", "err", err)
			}
			c.proposeMu.Lock()
			if err := c.completeReassignmentsLocked(ctx); err != nil {
				c.log.Warn("controller: completing reassignments", "err", err)
			}
			c.proposeMu.Unlock()
			cancel()
		}
	}
}

// catchUpAsLeader waits (retrying while this node stays leader) until its
// FSM has applied every entry committed before its term, then records the
// term in caughtUpTerm. A new leader's FSM can lag far behind: a voter that
// just restarted replays its log only as it learns the commit index.
func (c *Controller) catchUpAsLeader() {
	term := c.raft.CurrentTerm()
	for c.ctx.Err() == nil && c.IsLeader() && c.raft.CurrentTerm() == term {
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ApplyTimeout)
		err := c.barrier(ctx)
		cancel()
		if err == nil {
			c.caughtUpTerm.Store(term)
			c.log.Info("controller: active, metadata caught up", "term", term, "applied_index", c.raft.AppliedIndex())
			return
		}
		c.log.Warn("controller: catching up as the new leader", "term", term, "err", err)
		select {
		case <-c.ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CaughtUpLeader reports whether this node is the leader and its image
// holds every committed record (it has passed a barrier in the current
// term). Only such a node may hand a broker a metadata snapshot: any other
// voter's image may be an old prefix (a restarting voter replays its log
// from the start), and a broker acting on it would, for instance, follow
// a partition leader of an old epoch and truncate committed records.
// Found by the chaos harness.
func (c *Controller) CaughtUpLeader() bool {
	t := c.caughtUpTerm.Load()
	return t != 0 && c.IsLeader() && c.raft.CurrentTerm() == t
}

// NotCaughtUpError is the NOT_CONTROLLER error for a node that is not
// CaughtUpLeader: it names the leader when known, or says that this node
// is a leader still catching up.
func (c *Controller) NotCaughtUpError() error {
	if c.IsLeader() {
		return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is the new controller and is still applying the metadata log", c.cfg.NodeID)
	}
	return c.notController()
}

// bootstrapFeatures names a fresh cluster (BootstrapCluster with a random
// id) and finalizes every supported feature that was never set at its
// maximum level: transaction.version=2.
func (c *Controller) bootstrapFeatures(ctx context.Context) error {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	if err := c.barrier(ctx); err != nil {
		return err
	}
	var missing []Record
	c.fsm.view(func(im *Image) {
		if im.ClusterID == "" {
			missing = append(missing, BootstrapCluster{ClusterID: newTopicID()})
		}
		for name, level := range SupportedFeatures {
			if _, ok := im.Features[name]; !ok {
				missing = append(missing, FeatureLevel{Name: name, Level: level})
			}
		}
	})
	for _, f := range missing {
		if _, err := c.Propose(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// IsLeader reports whether this node is the active controller right now
// (a hint: leadership can be lost at any moment after).
func (c *Controller) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader returns the current leader's node id and Raft address as known to
// this node, or (-1, "") when no leader is known.
func (c *Controller) Leader() (int32, string) {
	addr, id := c.raft.LeaderWithID()
	if id == "" {
		return -1, ""
	}
	n, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return -1, string(addr)
	}
	return int32(n), string(addr)
}

// Image returns a deep copy of this node's current image. On a follower it
// may lag the leader; use WaitForOffset to read your own writes.
func (c *Controller) Image() *Image { return c.fsm.Image() }

// WaitForOffset blocks until this node has applied the log through offset
// (e.g. the Result.Offset of a proposal made elsewhere), or ctx is done.
func (c *Controller) WaitForOffset(ctx context.Context, offset uint64) error {
	return c.fsm.WaitForOffset(ctx, offset)
}

// Subscribe follows this node's image from offset; see Subscription.
func (c *Controller) Subscribe(offset uint64) *Subscription { return c.fsm.Subscribe(offset) }

// notController is the NOT_CONTROLLER error naming the leader, if known.
func (c *Controller) notController() error {
	id, addr := c.Leader()
	if id < 0 {
		return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER,
			"node %d is not the controller; no leader is known", c.cfg.NodeID)
	}
	return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER,
		"node %d is not the controller; leader is node %d at %s", c.cfg.NodeID, id, addr)
}

// timeout is the time left for one Raft operation.
func (c *Controller) timeout(ctx context.Context) time.Duration {
	t := c.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < t {
			t = left
		}
	}
	if t <= 0 {
		// Zero would mean "no timeout" to raft; an expired ctx gets the
		// shortest bounded wait instead.
		t = time.Millisecond
	}
	return t
}

// raftError maps a Raft future error to the domain error.
func (c *Controller) raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return c.notController()
	case errors.Is(err, raft.ErrLeadershipLost):
		// The entry may or may not commit: the caller must re-read the image
		// before retrying (all Sluice records are checked, so a retry of an
		// applied record is rejected rather than applied twice).
		return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "leadership lost during proposal; outcome unknown")
	case errors.Is(err, raft.ErrRaftShutdown):
		return errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "controller %d is shut down", c.cfg.NodeID)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "proposal timed out: %w", err)
	}
	return fmt.Errorf("controller: raft: %w", err)
}

// Propose replicates r and returns its result once it is committed and
// applied on this node. Errors: NOT_CONTROLLER (retriable; the message names
// the leader) on a follower or when leadership is lost, REQUEST_TIMED_OUT,
// or the *errs.Error with which the FSM rejected r. The wait is bounded by
// ctx's deadline and ApplyTimeout.
func (c *Controller) Propose(ctx context.Context, r Record) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if c.raft.State() != raft.Leader {
		return Result{}, c.notController()
	}
	data, err := EncodeRecord(r)
	if err != nil {
		return Result{}, err
	}
	f := c.raft.Apply(data, c.timeout(ctx))
	if err := f.Error(); err != nil {
		return Result{}, c.raftError(err)
	}
	return responseError(f.Response())
}

// proposeAll proposes records as one pipeline: every record goes to Raft
// before the first commit is awaited, so that Raft batches them into a
// few log appends and replication rounds instead of one round trip each
// (fencing a broker that leads 3,000 partitions re-elects 3,000 of them:
// one by one that took more than ApplyTimeout). It returns the records
// accepted, in order, and stops at NOT_CONTROLLER or the end of ctx
// (returned); other rejections (a partition that changed meanwhile) are
// left out of the result and counted in rejected.
func (c *Controller) proposeAll(ctx context.Context, records []Record) (accepted []Record, rejected int, err error) {
	_, perRecord, err := c.proposeEach(ctx, records)
	for i, rerr := range perRecord {
		if rerr != nil {
			rejected++
			continue
		}
		accepted = append(accepted, records[i])
	}
	return accepted, rejected, err
}

// proposeEach is proposeAll with each record's own outcome: results[i]
// and errs[i] are what Propose would have returned for records[i]. err is
// the first NOT_CONTROLLER or Raft failure, or ctx's end (the records
// without an outcome then have that error).
func (c *Controller) proposeEach(ctx context.Context, records []Record) (results []Result, perRecord []error, err error) {
	results = make([]Result, len(records))
	perRecord = make([]error, len(records))
	if err := ctx.Err(); err != nil {
		for i := range perRecord {
			perRecord[i] = err
		}
		return results, perRecord, err
	}
	if c.raft.State() != raft.Leader {
		err := c.notController()
		for i := range perRecord {
			perRecord[i] = err
		}
		return results, perRecord, err
	}
	futures := make([]raft.ApplyFuture, len(records))
	timeout := c.timeout(ctx)
	for i, r := range records {
		data, eerr := EncodeRecord(r)
		if eerr != nil {
			perRecord[i] = eerr
			continue
		}
		futures[i] = c.raft.Apply(data, timeout)
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		if ferr := f.Error(); ferr != nil {
			perRecord[i] = c.raftError(ferr)
			if err == nil {
				err = perRecord[i]
			}
			continue
		}
		results[i], perRecord[i] = responseError(f.Response())
		if errs.Code(perRecord[i]) == sluicev1.ErrorCode_NOT_CONTROLLER && err == nil {
			err = perRecord[i]
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return results, perRecord, err
}

// partitionChanges is changes as records, for proposeAll.
func partitionChanges(changes []PartitionChange) []Record {
	out := make([]Record, len(changes))
	for i, pc := range changes {
		out[i] = pc
	}
	return out
}

// barrier waits until every entry committed before this call is applied
// here, so the image read next is current (a new leader's FSM can lag).
func (c *Controller) barrier(ctx context.Context) error {
	if c.raft.State() != raft.Leader {
		return c.notController()
	}
	return c.raftError(c.raft.Barrier(c.timeout(ctx)).Error())
}

// readForProposal runs fn on the current leader image; it must be called
// with proposeMu held.
func (c *Controller) readForProposal(ctx context.Context, fn func(im *Image)) error {
	if err := c.barrier(ctx); err != nil {
		return err
	}
	c.fsm.view(fn)
	return nil
}

// CreateTopic places and creates a topic: on the leader it computes the
// assignment over the live brokers (Place, seeded by the name), then
// proposes a CreateTopic with a new random topic id. It returns the record
// that was applied. Errors: TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS (also
// when a broker would host more replicas than it registered it accepts:
// CheckReplicaLimits), INVALID_REPLICATION_FACTOR, INVALID_TOPIC_EXCEPTION,
// NOT_CONTROLLER.
func (c *Controller) CreateTopic(ctx context.Context, name string, partitions, rf int32, configs map[string]string) (CreateTopic, error) {
	recs, perTopic, err := c.CreateTopics(ctx, []TopicToCreate{{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: configs}})
	if err == nil {
		err = perTopic[0]
	}
	if err != nil {
		return CreateTopic{}, err
	}
	return recs[0], nil
}

// TopicToCreate is one topic of CreateTopics.
type TopicToCreate struct {
	Name                          string
	Partitions, ReplicationFactor int32
	Configs                       map[string]string
}

// CreateTopics creates several topics, each as CreateTopic does, with one
// barrier and their records proposed as one pipeline: a request of
// hundreds of topics commits in a few Raft writes instead of two round
// trips per topic (issue 31). The replica limits count the topics placed
// before each one in the call. perTopic[i] is topic i's error (nil:
// created, its record in records[i]); err is set when the call failed as
// a whole (NOT_CONTROLLER, ctx), and then topics may or may not have been
// created, as with CreateTopic.
func (c *Controller) CreateTopics(ctx context.Context, topics []TopicToCreate) (records []CreateTopic, perTopic []error, err error) {
	records = make([]CreateTopic, len(topics))
	perTopic = make([]error, len(topics))
	for i, t := range topics {
		perTopic[i] = ValidateTopicName(t.Name)
	}
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var recs []Record
	var index []int // topics[index[j]] is recs[j]
	err = c.readForProposal(ctx, func(im *Image) {
		live := LivePlacementBrokers(im)
		counts := ReplicaCounts(im)
		placed := map[string]bool{}
		for i, t := range topics {
			if perTopic[i] != nil {
				continue
			}
			if im.Topics[t.Name] != nil || placed[t.Name] {
				perTopic[i] = errs.New(sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, "topic %q already exists", t.Name)
				continue
			}
			assign, err := Place(live, PlacementSeed(t.Name), t.Partitions, t.ReplicationFactor)
			if err == nil {
				// Issue 29: no broker above the replicas it registered it accepts.
				added := addedReplicas(assign)
				err = checkReplicaLimits(im, counts, fmt.Sprintf("creating topic %q with %s partitions (replication factor %d)",
					t.Name, thousands(int64(t.Partitions)), t.ReplicationFactor), added)
				if err == nil {
					for id, k := range added {
						counts[id] += k
					}
				}
			}
			if err != nil {
				perTopic[i] = err
				continue
			}
			placed[t.Name] = true
			records[i] = CreateTopic{Name: t.Name, TopicID: newTopicID(), Partitions: assign, Configs: cloneMap(t.Configs)}
			recs = append(recs, records[i])
			index = append(index, i)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	_, perRecord, err := c.proposeEach(ctx, recs)
	for j, rerr := range perRecord {
		perTopic[index[j]] = rerr
	}
	return records, perTopic, err
}

// DeleteTopic deletes a topic. Errors: UNKNOWN_TOPIC_OR_PARTITION,
// NOT_CONTROLLER.
func (c *Controller) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.Propose(ctx, DeleteTopic{Name: name})
	return err
}

// RegisterBroker registers a broker (r: its id, addresses, rack and
// incarnation) and returns its broker epoch. The broker starts fenced; it
// unfences itself with UnfenceBroker and that epoch once it has caught up
// with the metadata log.
func (c *Controller) RegisterBroker(ctx context.Context, r RegisterBroker) (int64, error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	id := r.BrokerID
	res, err := c.Propose(ctx, r)
	if err != nil {
		return 0, err
	}
	// A new incarnation is registered fenced: move its leaderships and
	// ISR memberships away now, as a fence would. A restarted broker must
	// never resume leading in the leader epoch of its previous life: its
	// log may have lost (or, after a truncation, rewritten) records that
	// followers kept in that epoch, and epoch-based truncation cannot see
	// a divergence within one epoch. It leads again only when elected,
	// in a new epoch. (Kafka gets the same from fencing the old session.)
	if err := c.reelectLocked(ctx); err != nil {
		c.log.Warn("controller: moving leaderships of a re-registered broker", "broker", id, "err", err)
	}
	return res.BrokerEpoch, nil
}

// FenceBroker fences broker id at epoch (STALE_BROKER_EPOCH if that is not
// its current epoch), then moves its leaderships and ISR memberships away
// (ReelectChanges). The fence is committed even if the re-elections fail;
// the returned error then says so, and calling again re-runs them.
func (c *Controller) FenceBroker(ctx context.Context, id int32, epoch int64) error {
	return c.setFenced(ctx, FenceBroker{BrokerID: id, BrokerEpoch: epoch})
}

// UnfenceBroker unfences broker id at epoch, then elects leaders for the
// partitions that were offline and can now have one.
func (c *Controller) UnfenceBroker(ctx context.Context, id int32, epoch int64) error {
	return c.setFenced(ctx, UnfenceBroker{BrokerID: id, BrokerEpoch: epoch})
}

func (c *Controller) setFenced(ctx context.Context, r Record) error {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	if _, err := c.Propose(ctx, r); err != nil {
		return err
	}
	if err := c.reelectLocked(ctx); err != nil {
		return err
	}
	// A fenced removing replica leaving the ISR, or a target replica
	// returning, can let a reassignment complete.
	return c.completeReassignmentsLocked(ctx)
}

// reelectLocked proposes ReelectChanges, all at once (proposeAll), until
// none are left (bounded). Caller holds proposeMu. An error (not the
// controller, ctx ended, or changes still left after the last round)
// leaves the rest to the session loop's safety net (maybeReelect), which
// retries while any is left.
func (c *Controller) reelectLocked(ctx context.Context) error {
	for range 3 {
		var changes []PartitionChange
		if err := c.readForProposal(ctx, func(im *Image) { changes = ReelectChanges(im) }); err != nil {
			return err
		}
		if len(changes) == 0 {
			return nil
		}
		// Rejections mean the partition changed meanwhile; the next round
		// recomputes from the new image.
		if _, _, err := c.proposeAll(ctx, partitionChanges(changes)); err != nil {
			return err
		}
	}
	var left int
	if err := c.readForProposal(ctx, func(im *Image) { left = len(ReelectChanges(im)) }); err != nil {
		return err
	}
	if left > 0 {
		return errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "%d partitions still to re-elect after 3 rounds", left)
	}
	return nil
}

// PartitionChange proposes a partition change (an AlterPartition from a
// partition leader, or a reassignment) and returns the partition after it.
// Stale epochs are rejected by the FSM (INVALID_REQUEST for the partition
// epoch, FENCED_LEADER_EPOCH for the leader epoch).
func (c *Controller) PartitionChange(ctx context.Context, r PartitionChange) (*PartitionState, error) {
	res, err := c.Propose(ctx, r)
	return res.Partition, err
}

// AllocateProducerIDs allocates the next block of ProducerIDBlockSize
// producer ids to brokerID and returns it as [start, end). Blocks never
// overlap, across leaders too: the FSM accepts a block only at the current
// next start, and the leader reads that start after a barrier.
func (c *Controller) AllocateProducerIDs(ctx context.Context, brokerID int32) (start, end int64, err error) {
	c.proposeMu.Lock()
	defer c.proposeMu.Unlock()
	var next int64
	if err := c.readForProposal(ctx, func(im *Image) { next = im.nextBlockStart() }); err != nil {
		return 0, 0, err
	}
	res, err := c.Propose(ctx, ProducerIDsBlock{BrokerID: brokerID, NextBlockStart: next})
	if err != nil {
		return 0, 0, err
	}
	return res.ProducerIDStart, res.ProducerIDEnd, nil
}

// SetConfig sets (value != "") or deletes a topic or cluster (topic == "")
// config key.
func (c *Controller) SetConfig(ctx context.Context, topic, key, value string) error {
	_, err := c.Propose(ctx, ConfigChange{Topic: topic, Key: key, Value: value})
	return err
}

func serverID(id int32) raft.ServerID { return raft.ServerID(strconv.Itoa(int(id))) }

// newTopicID returns a random 128-bit topic id in hex. Randomness is fine
// here: the id is chosen once, on the leader, and travels in the record.
func newTopicID() string {
	var b [16]byte
	_, _ = io.ReadFull(rand.Reader, b[:])
	return hex.EncodeToString(b[:])
}
