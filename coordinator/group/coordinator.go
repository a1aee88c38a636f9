package group

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Defaults of CoordinatorConfig's zero fields.
const (
	DefaultOffsetsRetention      = 7 * 24 * time.Hour
	DefaultOffsetsRetentionCheck = 10 * time.Minute
	DefaultTick                  = 100 * time.Millisecond
)

// CoordinatorConfig configures a Coordinator. Zero fields take the
// defaults (Kafka's names in parentheses).
type CoordinatorConfig struct {
	// Partitions is the partition count of __consumer_offsets used while
	// the topic is unknown (offsets.topic.num.partitions, 50).
	Partitions int32
	// Group configures membership (group.consumer.* settings).
	Group Config
	// Classic configures classic groups (group.* settings; decision 70).
	Classic ClassicConfig
	// OffsetsRetention: the offsets of a group empty this long are
	// deleted (offsets.retention.ms, 7 days).
	OffsetsRetention time.Duration
	// OffsetsRetentionCheck is the period of that check
	// (offsets.retention.check.interval.ms, 10 min).
	OffsetsRetentionCheck time.Duration
	// Tick is the period of the topic-metadata check (100 ms); session
	// and rebalance timeouts run on each group's own timer.
	Tick time.Duration
	// AppendTimeout bounds one append's wait for commit (10 s).
	AppendTimeout time.Duration
	// CloseWait bounds Close's wait for the goroutines (10 s).
	CloseWait time.Duration
}

func (c *CoordinatorConfig) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Partitions <= 0 {
		c.Partitions = DefaultOffsetsPartitions
	}
	c.Group = c.Group.WithDefaults()
	if c.Classic.NewMemberID == nil {
		c.Classic.NewMemberID = c.Group.NewMemberID
	}
	c.Classic = c.Classic.WithDefaults()
	def(&c.OffsetsRetention, DefaultOffsetsRetention)
	def(&c.OffsetsRetentionCheck, DefaultOffsetsRetentionCheck)
	def(&c.Tick, DefaultTick)
	def(&c.AppendTimeout, runtime.DefaultAppendTimeout)
	def(&c.CloseWait, runtime.DefaultCloseWait)
}

// TxnOffsetAppender writes a TxnOffsetCommit's batch for the producer
// (cluster.ReplicaManager.AppendCoordinatorTxn's contract).
type TxnOffsetAppender interface {
	AppendCoordinatorTxn(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, transactionalID string,
		producerID int64, producerEpoch int16, verifyOnly bool, build func(baseSequence int32) []byte, now time.Time) (cluster.AppendResult, error)
}

// CoordinatorDeps are a Coordinator's dependencies; Log, Txn and Topics
// are required.
type CoordinatorDeps struct {
	// Log reads and appends the __consumer_offsets partitions this node
	// leads (coordinator.ReplicaStateLog on a broker, as for the
	// transaction coordinator).
	Log runtime.Log
	// Txn appends offsets committed inside a transaction.
	Txn TxnOffsetAppender
	// Topics returns the metadata of every topic (partition counts and
	// replica racks) with a version that changes whenever it may have
	// changed; the coordinator keeps the map until the version moves. It
	// must not block; the returned map is not modified afterwards.
	Topics func() (map[string]TopicMetadata, int64)
	// PartitionCount returns the partition count of __consumer_offsets in
	// the metadata (≤ 0: unknown), as txn.CoordinatorDeps does.
	PartitionCount func() int32
	// Now is the clock (nil: time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Coordinator is the group coordinator's shard adapter on
// coordinator/runtime, the I/O side of consumer groups (DESIGN §11,
// decision 40): it loads the __consumer_offsets partitions this node leads
// (it is their cluster.LeadershipListener) into OffsetsState, runs each
// group's membership (a Group) for ConsumerGroupHeartbeat,
// writes committed offsets, group epochs and members to the log before applying
// them, writes offsets of transactions as the producer's transactional
// batches and applies or drops them when the markers arrive (it is the
// topic's cluster.TxnMarkerListener), fences expired members and deletes
// the offsets of groups empty past the retention.
//
// KIP-848 membership (members, their epochs and assignments, the target
// assignment) is written to the log before a heartbeat that changed it is
// answered, so a new coordinator rebuilds each group with its members,
// who go on heartbeating at their epochs (decision 72); classic groups
// likewise (decision 70).
//
// Concurrency (docs/locks.md): mu guards the partitions, their
// OffsetsState and group maps, and is never held across a call to a
// dependency. The work on one group (a heartbeat, a commit, its timer, its
// deletion) is serialized by the group's key in its shard
// (runtime.Partition.Acquire), which is held across the group's appends
// but is no lock: other groups, the metadata check and the scrapes never
// wait for it. groupEntry.mu guards a group's membership for short reads
// and changes only. Order: a group's key, then a producer's key, then
// groupEntry.mu, then mu.
type Coordinator struct {
	cfg    CoordinatorConfig
	deps   CoordinatorDeps
	now    func() time.Time
	logger *slog.Logger

	// rt runs the led __consumer_offsets partitions (the shards are
	// *offsetsPartition): leadership, loads, routing, appends and their
	// resolver, Close.
	rt         *runtime.Runtime[*offsetsPartition]
	goroutines goroutine.Group

	mu sync.Mutex // guards rt's partition table, the shards' state and the following
	// topics and topicsVersion cache deps.Topics.
	topics        map[string]TopicMetadata
	topicsVersion int64
	rebalances    int64 // group epoch bumps, for metrics
}

// offsetsPartition is the shard of one led partition of
// __consumer_offsets at one leader epoch; a new epoch gets a new one.
type offsetsPartition struct {
	*runtime.Partition
	// Guarded by Coordinator.mu:
	loadedEnd int64 // the log end offset the load reached
	// buffered are markers reported while loading; those at or past
	// loadedEnd are applied once loaded.
	buffered []markerEvent
	state    *OffsetsState
	groups   map[string]*groupEntry
}

type markerEvent struct {
	producerID int64
	commit     bool
	offset     int64
}

// groupEntry is a group's membership on its coordinator. Its fields
// change only while the group's key is held (and then under mu); readers
// that do not hold the key (describe, list, metrics) take mu.
type groupEntry struct {
	mu sync.Mutex // guards the following; held briefly, never across an append; taken before Coordinator.mu
	g  *Group
	// persistedEpoch is the highest group epoch whose record is committed.
	persistedEpoch int32
	// topicsVersion is the topic-metadata version the membership last
	// saw (MetadataChanged).
	topicsVersion int64
	// timer is the group's timer function (groupTimer), made once.
	timer func()
	// emptySince is when the group last became empty here; zero while it
	// has members or if it never had any on this coordinator (retention
	// then counts from its last commit).
	emptySince time.Time
	hadMembers bool
	// deleted: DeleteGroups removed the group; requests holding the entry
	// start over.
	deleted atomic.Bool
	// cg is the group's classic membership (decision 70); nil while the
	// group id is not a classic group's. While cg is set, g has no
	// members (one group id, one protocol).
	cg *ClassicGroup
	// joinWaiters and syncWaiters are the JoinGroup and SyncGroup
	// requests waiting for cg's answers, by member id (buffered, one
	// answer each).
	joinWaiters map[string][]chan ClassicJoinAnswer
	syncWaiters map[string][]chan ClassicSyncAnswer
}

// size is the number of members of either protocol. e.mu held.
func (e *groupEntry) size() int {
	if e.cg != nil {
		return e.cg.Size()
	}
	return e.g.Size()
}

// stateName is the group's state as the protocol names it. e.mu held.
func (e *groupEntry) stateName() string {
	if e.cg != nil {
		return e.cg.State().String()
	}
	return e.g.State().String()
}

// NewCoordinator returns a coordinator that serves nothing until it hears
// BecameLeader for a partition of __consumer_offsets, and starts its
// timeout scan. Close it when done.
func NewCoordinator(deps CoordinatorDeps, cfg CoordinatorConfig) *Coordinator {
	if deps.Log == nil || deps.Txn == nil || deps.Topics == nil {
		panic("group: Coordinator needs a runtime.Log, a TxnOffsetAppender and Topics")
	}
	cfg.defaults()
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	c := &Coordinator{cfg: cfg, deps: deps, now: deps.Now, logger: deps.Logger}
	c.rt = runtime.New(runtime.Config[*offsetsPartition]{
		Name:           "group coordinator",
		Topic:          OffsetsTopic,
		KeyKind:        "group",
		Partitions:     cfg.Partitions,
		PartitionCount: deps.PartitionCount,
		ValidateKey:    ValidateID,
		Log:            deps.Log,
		NewShard: func(p *runtime.Partition) *offsetsPartition {
			return &offsetsPartition{Partition: p, state: NewOffsetsState(), groups: map[string]*groupEntry{}}
		},
		NewLoader: func(ps *offsetsPartition) runtime.Loader {
			return &offsetsLoader{c: c, ps: ps, st: NewOffsetsState()}
		},
		Mu:            &c.mu,
		Goroutines:    &c.goroutines,
		AppendTimeout: cfg.AppendTimeout,
		CloseWait:     cfg.CloseWait,
		Now:           deps.Now,
		Logger:        deps.Logger,
	})
	c.goroutines.Go(c.tickLoop)
	return c
}

// Close stops the coordinator: requests answer NOT_COORDINATOR and the
// goroutines stop; it waits up to CloseWait for them (runtime.Close).
// Idempotent.
func (c *Coordinator) Close() error { return c.rt.Close() }

// entryLocked returns g's entry in ps, creating it when create is set or
// the log knows the group (its epoch then continues above the logged one).
func (c *Coordinator) entryLocked(ps *offsetsPartition, g string, create bool) *groupEntry {
	if e := ps.groups[g]; e != nil {
		return e
	}
	epoch := ps.state.GroupEpoch(g)
	if !create && epoch == 0 && len(ps.state.Offsets(g)) == 0 && ps.state.PendingCount(g) == 0 {
		return nil
	}
	gg := c.restoreGroupLocked(ps, g)
	e := &groupEntry{g: gg, persistedEpoch: epoch, topicsVersion: c.topicsVersion,
		joinWaiters: map[string][]chan ClassicJoinAnswer{}, syncWaiters: map[string][]chan ClassicSyncAnswer{}}
	if rec := ps.state.ClassicGroup(g); rec != nil {
		// Decision 70: the members keep their generation; their sessions
		// start now.
		e.cg = RestoreClassic(c.now(), g, *rec, c.cfg.Classic)
	}
	e.timer = func() { c.groupTimer(ps, g) }
	ps.groups[g] = e
	return e
}

// restoreGroupLocked rebuilds g's KIP-848 membership from ps's state,
// what the log holds (decision 72): its members keep their ids, epochs
// and assignments, their sessions starting now. c.mu held.
func (c *Coordinator) restoreGroupLocked(ps *offsetsPartition, g string) *Group {
	rec, members, ok := ps.state.KIP848Group(g)
	if !ok {
		gg := New(g, c.cfg.Group)
		gg.RestoreEpoch(ps.state.GroupEpoch(g))
		return gg
	}
	// The topics as deps has them, not through topicsLocked: refreshing
	// the cache here would hide a change from checkMetadata.
	topics, _ := c.deps.Topics()
	return Restore(c.now(), g, c.cfg.Group, rec, members, topics)
}

// producerKey is the key serializing a producer's transactional offset
// commits in a shard (the producer's sequence is chosen from the log's
// producer state): not valid UTF-8, so no group id is the same key.
func producerKey(producerID int64) string {
	return "\xffproducer " + strconv.FormatInt(producerID, 10)
}

// acquireGroup routes g to its loaded shard and takes the group's key
// (waiting for the group's earlier work, within ctx). The caller must
// Release(g) on the shard returned.
func (c *Coordinator) acquireGroup(ctx context.Context, g string) (*offsetsPartition, error) {
	c.mu.Lock()
	ps, err := c.rt.RouteLocked(g)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := ps.Acquire(ctx, g); err != nil {
		return nil, err
	}
	c.mu.Lock()
	owned := c.rt.OwnsLocked(ps)
	c.mu.Unlock()
	if !owned {
		ps.Release(g)
		return nil, errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating group %q", g)
	}
	return ps, nil
}

// topicsLocked returns the cached topic metadata, refreshed when its
// version moved.
func (c *Coordinator) topicsLocked() (map[string]TopicMetadata, bool) {
	m, v := c.deps.Topics()
	if c.topics == nil || v != c.topicsVersion {
		c.topics, c.topicsVersion = m, v
		return m, true
	}
	return c.topics, false
}

var (
	_ cluster.LeadershipListener = (*Coordinator)(nil)
	_ cluster.TxnMarkerListener  = (*Coordinator)(nil)
)

// BecameLeader implements cluster.LeadershipListener for
// __consumer_offsets (runtime.BecameLeader): the partition's groups
// answer COORDINATOR_LOAD_IN_PROGRESS while it is loaded (offsetsLoader);
// then they are served. It returns at once.
func (c *Coordinator) BecameLeader(tp cluster.TopicPartition, leaderEpoch int32) {
	c.rt.BecameLeader(tp, leaderEpoch)
}

// Resigned implements cluster.LeadershipListener (runtime.Resigned): the
// partition's state at leaderEpoch is dropped and its groups answer
// NOT_COORDINATOR.
func (c *Coordinator) Resigned(tp cluster.TopicPartition, leaderEpoch int32) {
	c.rt.Resigned(tp, leaderEpoch)
}

// TxnMarkerCommitted implements cluster.TxnMarkerListener for
// __consumer_offsets: the producer's pending offsets written before the
// marker are applied (COMMIT) or dropped (ABORT). While the partition
// loads the marker is kept and applied after the load unless the load
// already read it.
func (c *Coordinator) TxnMarkerCommitted(tp cluster.TopicPartition, producerID int64, commit bool, markerOffset int64) {
	if tp.Topic != OffsetsTopic {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.rt.PartitionsLocked()[tp.Partition]
	if ps == nil || ps.LoadErr() != nil {
		return // the next leader's load reads it
	}
	ev := markerEvent{producerID: producerID, commit: commit, offset: markerOffset}
	if ps.Loading() {
		ps.buffered = append(ps.buffered, ev)
		return
	}
	if markerOffset >= ps.loadedEnd {
		ps.state.CompleteTxn(producerID, commit, markerOffset)
	}
}

// offsetsLoader is one load of a __consumer_offsets partition into a
// fresh OffsetsState. A record that cannot be decoded is skipped and
// reported (log and SkippedRecords; issue 29): it costs at most the
// offset or group epoch it held, where stopping the load would leave
// every group of the partition without a coordinator. Only a batch that
// is not canonical (which the log never returns) stops the load for good:
// the partition then answers COORDINATOR_NOT_AVAILABLE.
type offsetsLoader struct {
	c  *Coordinator
	ps *offsetsPartition
	st *OffsetsState
}

// Replay implements runtime.Loader.
func (l *offsetsLoader) Replay(b []byte, skip func(offset int64, err error)) error {
	skipped, err := l.st.ApplyBatch(b)
	for _, u := range skipped {
		skip(u.Offset, u.Err)
	}
	return err
}

// Done implements runtime.Loader (c.mu held): it publishes the state and
// applies the markers reported during the load that it did not read.
func (l *offsetsLoader) Done(end int64) {
	ps, st := l.ps, l.st
	ps.state = st
	ps.loadedEnd = end
	slices.SortFunc(ps.buffered, func(a, b markerEvent) int { return cmpInt64(a.offset, b.offset) })
	for _, ev := range ps.buffered {
		if ev.offset >= end {
			st.CompleteTxn(ev.producerID, ev.commit, ev.offset)
		}
	}
	ps.buffered = nil
	// Groups with members (classic, or KIP-848: decision 72) get their
	// entries and session timers now: a member that never comes back
	// must still time out.
	for _, g := range st.Groups() {
		if rec := st.ClassicGroup(g); rec != nil && len(rec.Members) > 0 {
			e := l.c.entryLocked(ps, g, false)
			if d := e.cg.NextDeadline(); !d.IsZero() {
				l.c.rt.Schedule(ps, g, d, e.timer)
			}
		} else if st.HasMembers(g) {
			e := l.c.entryLocked(ps, g, false)
			if d := e.g.NextDeadline(); !d.IsZero() {
				l.c.rt.Schedule(ps, g, d, e.timer)
			}
		}
	}
	l.c.logger.Info("consumer offsets partition loaded", "partition", ps.TP.Partition, "leader_epoch", ps.Epoch,
		"groups", len(st.Groups()), "end_offset", end)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tickLoop checks the topic metadata every Tick (a version compare) and
// runs the offsets retention every OffsetsRetentionCheck. On a metadata
// change every group's timer is brought forward to now, so that each
// group recomputes its assignment on its own (groupTimer).
func (c *Coordinator) tickLoop() {
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	lastRetention := c.now()
	for {
		select {
		case <-c.rt.Context().Done():
			return
		case <-t.C:
		}
		now := c.now()
		c.checkMetadata(now)
		if now.Sub(lastRetention) >= c.cfg.OffsetsRetentionCheck {
			lastRetention = now
			c.expireOffsets(now)
		}
	}
}

// checkMetadata runs every group's timer now when the topic metadata
// changed.
func (c *Coordinator) checkMetadata(now time.Time) {
	type work struct {
		ps *offsetsPartition
		g  string
		e  *groupEntry
	}
	var todo []work
	c.mu.Lock()
	if _, changed := c.topicsLocked(); changed {
		for _, ps := range c.rt.PartitionsLocked() {
			if !ps.Serving() {
				continue
			}
			for g, e := range ps.groups {
				todo = append(todo, work{ps, g, e})
			}
		}
	}
	c.mu.Unlock()
	for _, w := range todo {
		c.rt.Schedule(w.ps, w.g, now, w.e.timer)
	}
}

// rescheduleLocked sets g's timer to its membership's next deadline, or
// drops it when there is none. The caller holds g's key and e.mu.
func (c *Coordinator) rescheduleLocked(ps *offsetsPartition, g string, e *groupEntry) {
	d := e.g.NextDeadline()
	if e.cg != nil {
		if cd := e.cg.NextDeadline(); !cd.IsZero() && (d.IsZero() || cd.Before(d)) {
			d = cd
		}
	}
	if !d.IsZero() {
		c.rt.Schedule(ps, g, d, e.timer) // the timer's name is the group id
	} else {
		c.rt.CancelTimer(ps, g)
	}
}

// groupTimer is a group's timer: with the group's key held (so it runs
// between the group's requests, never during one, and waits only for
// this group) it applies a topic-metadata change the group has not seen,
// fences the members whose session or rebalance timeout ran out, persists
// a new group epoch and sets the next timer.
func (c *Coordinator) groupTimer(ps *offsetsPartition, g string) {
	if err := ps.Acquire(ps.Ctx, g); err != nil {
		return // resigned
	}
	defer ps.Release(g)
	c.mu.Lock()
	e := ps.groups[g]
	topics, _ := c.topicsLocked()
	version := c.topicsVersion
	c.mu.Unlock()
	if e == nil {
		return // deleted
	}
	now := c.now()
	e.mu.Lock()
	// A classic group's KIP-848 half has no members and no say: a
	// metadata change must not move it (its record would replace the
	// classic group's, persistGroup).
	if e.topicsVersion != version && e.cg == nil {
		e.topicsVersion = version
		e.g.MetadataChanged(now, topics)
	}
	if d := e.g.NextDeadline(); !d.IsZero() && !d.After(now) {
		if fenced := e.g.Expire(now, topics); len(fenced) > 0 {
			c.logger.Info("consumer group members fenced (session or rebalance timeout)", "group", g, "members", fenced)
		}
	}
	if e.cg != nil {
		if d := e.cg.NextDeadline(); !d.IsZero() && !d.After(now) {
			if removed := e.cg.Expire(now); len(removed) > 0 {
				c.logger.Info("classic group members removed (session or sync timeout)", "group", g, "members", removed)
			}
		}
	}
	c.noteSizeLocked(e, now)
	e.mu.Unlock()
	_ = c.persistGroup(ps.Ctx, ps, e) // logged; the group is rebuilt on failure
	c.settleClassic(ps.Ctx, ps, e)
	e.mu.Lock()
	c.rescheduleLocked(ps, g, e)
	e.mu.Unlock()
}

// noteSizeLocked tracks when e became empty. The caller holds e.mu.
func (c *Coordinator) noteSizeLocked(e *groupEntry, now time.Time) {
	if e.size() > 0 {
		e.emptySince, e.hadMembers = time.Time{}, true
	} else if e.hadMembers && e.emptySince.IsZero() {
		e.emptySince = now
	}
}

// persistGroup writes what the log lacks of e's KIP-848 membership —
// its group record (epoch, assignment epoch) and the records of the
// members that changed (Group.PendingRecords; decision 72) — in one batch,
// and applies it once committed. Nothing is written when nothing
// persisted changed. The caller holds the group's key (not e.mu: the
// append runs with no lock held) and answers only after this returns nil.
// If the write fails the group's membership is thrown away (Group's
// contract: a change that is not durable must not be answered) and
// rebuilt from what the log holds, at the epoch it tried to write —
// never lower, as that batch may still commit; the members it tried to
// write are written again at the group's next change.
func (c *Coordinator) persistGroup(ctx context.Context, ps *offsetsPartition, e *groupEntry) error {
	e.mu.Lock()
	if e.cg != nil {
		// The group id is a classic group's (one group id, one
		// protocol): its record is the classic one, and a KIP-848 group
		// value under the same key would replace it when the partition
		// is loaded again.
		e.mu.Unlock()
		return nil
	}
	grec, ups := e.g.PendingRecords()
	epoch := e.g.Epoch()
	g := e.g.ID()
	e.mu.Unlock()
	if grec == nil && len(ups) == 0 {
		return nil
	}
	now := c.now()
	kvs := make([][2][]byte, 0, len(ups)+1)
	if grec != nil {
		grec.TimeMs = now.UnixMilli()
		kvs = append(kvs, [2][]byte{GroupKey(g), GroupValue(*grec)})
	}
	for _, u := range ups {
		var v []byte
		if u.Record != nil {
			v = MemberValue(*u.Record)
		}
		kvs = append(kvs, [2][]byte{MemberKey(g, u.MemberID), v})
	}
	_, err := c.rt.Append(ctx, ps, recordsBatch(now, kvs))
	e.mu.Lock()
	defer e.mu.Unlock()
	if !runtime.Committed(err) {
		c.mu.Lock()
		rebuilt := c.restoreGroupLocked(ps, g)
		c.mu.Unlock()
		rebuilt.RestoreEpoch(epoch)
		ids := make([]string, len(ups))
		for i, u := range ups {
			ids[i] = u.MemberID
		}
		rebuilt.Forget(ids)
		e.g = rebuilt
		c.logger.Warn("writing a group's membership failed; the group goes on from its log", "group", g, "epoch", epoch, "err", err)
		return c.rt.AppendError(g, err)
	}
	c.mu.Lock()
	if c.rt.OwnsLocked(ps) {
		if grec != nil {
			ps.state.SetGroupRecord(g, *grec)
		}
		for _, u := range ups {
			if u.Record != nil {
				ps.state.SetMember(g, u.MemberID, *u.Record)
			} else {
				ps.state.DeleteMember(g, u.MemberID)
			}
		}
	}
	if grec != nil && grec.Epoch > e.persistedEpoch {
		c.rebalances += int64(grec.Epoch - e.persistedEpoch)
	}
	c.mu.Unlock()
	e.g.RecordsWritten(grec, ups)
	if grec != nil {
		e.persistedEpoch = max(e.persistedEpoch, grec.Epoch)
	}
	return nil
}

// expireOffsets deletes the offsets of groups empty for longer than
// OffsetsRetention (KIP-211: counted from when the group became empty, or
// from its last commit when it had no members since this node loaded it).
func (c *Coordinator) expireOffsets(now time.Time) {
	type victim struct {
		ps *offsetsPartition
		g  string
	}
	var victims []victim
	c.mu.Lock()
	for _, ps := range c.rt.PartitionsLocked() {
		if ps.Loading() || ps.LoadErr() != nil {
			continue
		}
		for _, g := range ps.state.Groups() {
			victims = append(victims, victim{ps, g})
		}
	}
	c.mu.Unlock()
	for _, v := range victims {
		if !v.ps.TryAcquire(v.g) {
			continue // busy: it has members or is being written; the next check sees it
		}
		err := c.deleteGroup(c.rt.Context(), v.ps, v.g, func(e *groupEntry, lastCommit time.Time, pending int) error {
			since := lastCommit
			if e != nil {
				if e.size() > 0 || (e.cg != nil && e.cg.State() != ClassicEmpty) {
					return errNotExpired
				}
				if e.emptySince.After(since) {
					since = e.emptySince
				}
			}
			if pending > 0 || now.Sub(since) < c.cfg.OffsetsRetention {
				return errNotExpired
			}
			return nil
		})
		v.ps.Release(v.g)
		switch {
		case err == nil:
			c.logger.Info("consumer group offsets expired", "group", v.g, "retention", c.cfg.OffsetsRetention)
		case errors.Is(err, errNotExpired), errs.Code(err) == sluicev1.ErrorCode_GROUP_ID_NOT_FOUND:
		default:
			c.logger.Warn("expiring a group's offsets failed; retried at the next check", "group", v.g, "err", err)
		}
	}
}

// errNotExpired: the group is kept.
var errNotExpired = errors.New("not expired")

// PartitionStats describes one __consumer_offsets partition this
// node leads, for metrics.
type PartitionStats struct {
	Partition int32
	Loading   bool
	LoadTime  time.Duration
	// QueueDepth counts the requests and timers holding or waiting for
	// one of the partition's groups (runtime.Partition.QueueDepth).
	QueueDepth int
	// Groups counts the partition's groups by state name.
	Groups map[string]int
}

// SkippedRecords is the number of __consumer_offsets records the loads
// of this node have skipped because they could not be decoded (a record
// skipped by several loads counts each time), for metrics.
func (c *Coordinator) SkippedRecords() int64 { return c.rt.SkippedRecords() }

// AppendLatency is the distribution of the coordinator's appends to
// __consumer_offsets through the runtime (group epochs, offset commits,
// deletions), from the call to the commit or the failure.
func (c *Coordinator) AppendLatency() runtime.HistogramSnapshot { return c.rt.AppendLatency() }

// CommittedOffsets is one group's committed offsets, for lag metrics.
type CommittedOffsets struct {
	Group   string
	Offsets map[TopicPartition]int64
}

// Stats returns one PartitionStats per led partition (sorted), the
// total number of group epoch bumps (rebalances) this node has written,
// and the committed offsets of every loaded group (sorted by group).
func (c *Coordinator) Stats() ([]PartitionStats, int64, []CommittedOffsets) {
	type ent struct {
		i int
		e *groupEntry
	}
	var ents []ent
	var stats []PartitionStats
	var offs []CommittedOffsets
	c.mu.Lock()
	rebalances := c.rebalances
	for p, ps := range c.rt.PartitionsLocked() {
		s := PartitionStats{Partition: p, Loading: ps.Loading(), LoadTime: ps.LoadTime(), QueueDepth: ps.QueueDepth(), Groups: map[string]int{}}
		stats = append(stats, s)
		if ps.Loading() || ps.LoadErr() != nil {
			continue
		}
		seen := map[string]bool{}
		for g, e := range ps.groups {
			seen[g] = true
			ents = append(ents, ent{len(stats) - 1, e})
		}
		for _, g := range ps.state.Groups() {
			if !seen[g] {
				s.Groups[Empty.String()]++
			}
			o := CommittedOffsets{Group: g, Offsets: map[TopicPartition]int64{}}
			for tp, off := range ps.state.Offsets(g) {
				o.Offsets[tp] = off.Offset
			}
			if len(o.Offsets) > 0 {
				offs = append(offs, o)
			}
		}
	}
	c.mu.Unlock()
	for _, en := range ents {
		en.e.mu.Lock()
		if !en.e.deleted.Load() {
			stats[en.i].Groups[en.e.stateName()]++
		}
		en.e.mu.Unlock()
	}
	slices.SortFunc(stats, func(a, b PartitionStats) int { return int(a.Partition - b.Partition) })
	slices.SortFunc(offs, func(a, b CommittedOffsets) int { return strings.Compare(a.Group, b.Group) })
	return stats, rebalances, offs
}
