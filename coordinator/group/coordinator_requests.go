package group

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// OffsetCommitEntry is one partition's offset to commit.
type OffsetCommitEntry struct {
	TP     TopicPartition
	Offset Offset // Offset, LeaderEpoch, Metadata; the rest is set by the coordinator
}

// FetchedOffset is one partition of FetchOffsets' answer.
type FetchedOffset struct {
	TP TopicPartition
	// Offset.Offset is -1 when the group has none for TP.
	Offset Offset
	// Err is UNSTABLE_OFFSET_COMMIT for a partition pending in a
	// transaction when the fetch requires stable offsets.
	Err error
}

// TxnOffsetCommitRequest is a TxnOffsetCommit.
type TxnOffsetCommitRequest struct {
	TransactionalID string
	Group           string
	ProducerID      int64
	ProducerEpoch   int16
	MemberID        string
	MemberEpoch     int32
	InstanceID      string
	Entries         []OffsetCommitEntry
	// VerifyOnly: the producer speaks transaction version 1 (Kafka
	// TxnOffsetCommit v0–v4) and added the group's __consumer_offsets
	// partition to its transaction itself (AddOffsetsToTxn); the
	// partition is only verified to be in the transaction
	// (INVALID_TXN_STATE if not). false (the gRPC door, TxnOffsetCommit
	// v5+): the partition is added for the producer (TV2).
	VerifyOnly bool
}

// Group types of Listing and Description.
const (
	// TypeConsumer is a KIP-848 group (ConsumerGroupHeartbeat), and a
	// group with only offsets.
	TypeConsumer = "consumer"
	// TypeClassic is a classic group (JoinGroup/SyncGroup; decision 70).
	TypeClassic = "classic"
)

// Listing is one group of ListGroups.
type Listing struct {
	Group string
	// State as the group's protocol names it (a classic group:
	// PreparingRebalance, CompletingRebalance, Stable, Empty, Dead).
	State   string
	Members int
	// Type is TypeConsumer or TypeClassic.
	Type string
	// ProtocolType is a classic group's protocol type ("consumer" for
	// Kafka's consumers; "" before its first member) and "consumer" for a
	// KIP-848 group.
	ProtocolType string
}

// checkEntries validates commit entries: per partition INVALID_REQUEST
// (bad topic, partition or offset) or OFFSET_METADATA_TOO_LARGE. It
// returns the valid entries and the errors of the others.
func checkEntries(entries []OffsetCommitEntry) ([]OffsetCommitEntry, map[TopicPartition]error) {
	bad := map[TopicPartition]error{}
	ok := make([]OffsetCommitEntry, 0, len(entries))
	for _, en := range entries {
		switch {
		case en.TP.Topic == "" || !utf8.ValidString(en.TP.Topic) || len(en.TP.Topic) > 249:
			bad[en.TP] = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "topic name %q is not valid", errs.Echo(en.TP.Topic))
		case en.TP.Partition < 0:
			bad[en.TP] = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "partition %d is negative", en.TP.Partition)
		case en.Offset.Offset < 0:
			bad[en.TP] = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "committed offset %d of %s-%d is negative", en.Offset.Offset, en.TP.Topic, en.TP.Partition)
		case len(en.Offset.Metadata) > MaxMetadataBytes:
			bad[en.TP] = errs.New(sluicev1.ErrorCode_OFFSET_METADATA_TOO_LARGE, "the metadata of %s-%d is %d bytes; at most %d", en.TP.Topic, en.TP.Partition, len(en.Offset.Metadata), MaxMetadataBytes)
		default:
			ok = append(ok, en)
		}
	}
	return ok, bad
}

// recordsBatch builds a plain batch of (key, value) records (a nil value
// is a tombstone).
func recordsBatch(now time.Time, kvs [][2][]byte) []byte {
	var b batch.Builder
	ts := now.UnixMilli()
	b.Reset(ts)
	for _, kv := range kvs {
		b.Add(ts, kv[0], kv[1], nil)
	}
	return b.Finish(batch.PlainProducer, 0)
}

// Heartbeat runs one ConsumerGroupHeartbeat of group g (Group's
// rules), creating the group on a join, and answers once what it changed
// in the membership (group epoch, member records) is durable. It holds the group's key throughout (its
// other requests and its timer wait; no other group does). Errors:
// INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
// COORDINATOR_NOT_AVAILABLE, and the membership's codes
// (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, ...).
func (c *Coordinator) Heartbeat(ctx context.Context, g string, req HeartbeatRequest) (HeartbeatResponse, error) {
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	defer ps.Release(g)
	c.mu.Lock()
	e := c.entryLocked(ps, g, req.MemberEpoch == 0)
	topics, _ := c.topicsLocked()
	c.mu.Unlock()
	if e == nil {
		return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %q has no member %q", g, errs.Echo(req.MemberID))
	}
	now := c.now()
	e.mu.Lock()
	if e.cg != nil {
		// One group id, one protocol (decision 70; Kafka 4 with
		// group.consumer.migration.policy=disabled): a classic group with
		// members refuses; an empty one is taken over by a join.
		if !e.cg.Empty() {
			e.mu.Unlock()
			return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "Group %s is not a consumer group", g)
		}
		if req.MemberEpoch == JoinEpoch {
			e.g.RestoreEpoch(e.cg.Generation())
			e.cg = nil
		}
	}
	resp, err := e.g.Heartbeat(now, req, topics)
	c.noteSizeLocked(e, now)
	e.mu.Unlock()
	// Call, append, answer (decision 72): what the heartbeat changed in
	// the membership is durable before the member hears of it.
	if perr := c.persistGroup(ctx, ps, e); perr != nil {
		resp, err = HeartbeatResponse{}, perr
	}
	e.mu.Lock()
	c.rescheduleLocked(ps, g, e)
	e.mu.Unlock()
	return resp, err
}

// CommitOffsets writes a group's committed offsets (OffsetCommit) and
// answers per partition once they are durable. memberEpoch -1 with an
// empty memberID commits from outside the membership (allowed while the
// group has no members); otherwise the member is checked
// (Group.CheckOffsetCommitPartitions: at an epoch below the member's,
// the partitions it has not held since are STALE_MEMBER_EPOCH, the others
// committed — KIP-1251). For a classic group memberEpoch is the
// request's generation id and instanceID its group instance id
// (ClassicGroup.CheckOffsetCommit: UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS); a
// KIP-848 group ignores instanceID. A request-level error applies to
// every partition.
func (c *Coordinator) CommitOffsets(ctx context.Context, g, memberID, instanceID string, memberEpoch int32, entries []OffsetCommitEntry) (map[TopicPartition]error, error) {
	// The group's key is held until the commit is applied: the member
	// cannot be fenced (and its partitions given to another member, who
	// would fetch the offsets) between this check and the write.
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return nil, err
	}
	defer ps.Release(g)
	var stale map[TopicPartition]error // KIP-1251: partitions refused at an older epoch
	err = c.checkCommitter(ps, g, memberID, memberEpoch, func(gg *Group) error {
		tps := make([]TopicPartition, len(entries))
		for i, en := range entries {
			tps[i] = en.TP
		}
		var err error
		stale, err = gg.CheckOffsetCommitPartitions(memberID, memberEpoch, tps)
		return err
	}, func(cg *ClassicGroup) error { return cg.CheckOffsetCommit(c.now(), memberID, instanceID, memberEpoch) })
	if err != nil {
		return nil, err
	}
	good, results := checkEntries(entries)
	if len(stale) > 0 {
		good = slices.DeleteFunc(good, func(en OffsetCommitEntry) bool {
			if err, ok := stale[en.TP]; ok {
				results[en.TP] = err
				return true
			}
			return false
		})
	}
	if len(good) == 0 {
		return results, nil
	}
	now := c.now()
	kvs := make([][2][]byte, len(good))
	for i, en := range good {
		good[i].Offset.CommitTimeMs = now.UnixMilli()
		kvs[i] = [2][]byte{OffsetKey(g, en.TP.Topic, en.TP.Partition), OffsetValue(good[i].Offset)}
	}
	apply := func(base int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.rt.OwnsLocked(ps) {
			return
		}
		for i, en := range good {
			o := en.Offset
			o.RecordOffset = base + int64(i)
			ps.state.Commit(g, en.TP, o)
		}
	}
	if err := c.appendAndApply(ctx, ps, g, recordsBatch(now, kvs), apply); err != nil {
		return nil, err
	}
	for _, en := range good {
		results[en.TP] = nil
	}
	return results, nil
}

// checkCommitter checks the member committing offsets of g (the caller
// holds g's key): check against the group's membership (classic for a
// classic group), or, for a group without one, only a commit from
// outside any membership (no member id, epoch < 0) is allowed.
func (c *Coordinator) checkCommitter(ps *offsetsPartition, g, memberID string, memberEpoch int32, check func(*Group) error, classic func(*ClassicGroup) error) error {
	c.mu.Lock()
	e := c.entryLocked(ps, g, false)
	c.mu.Unlock()
	if e == nil {
		if memberID != "" || memberEpoch >= 0 {
			return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %q has no member %q", g, errs.Echo(memberID))
		}
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cg != nil {
		return classic(e.cg)
	}
	return check(e.g)
}

// appendAndApply appends raw to ps's partition and calls apply with the
// batch's base offset once it is committed (runtime.AppendThenApply:
// when the outcome is unknown the runtime's resolver applies it if it
// commits; the caller gets a retriable error).
func (c *Coordinator) appendAndApply(ctx context.Context, ps *offsetsPartition, g string, raw []byte, apply func(base int64)) error {
	return c.rt.AppendThenApply(ctx, ps, g, raw, func(base int64) error { apply(base); return nil }, nil)
}

// FetchOffsets answers a group's committed offsets of tps (nil: every
// partition it has one for, sorted). memberEpoch >= 0 checks the member
// of a KIP-848 group as a commit would (a classic group's members are not
// checked, as Kafka's). With requireStable a partition pending in an open
// transaction answers UNSTABLE_OFFSET_COMMIT.
func (c *Coordinator) FetchOffsets(g, memberID string, memberEpoch int32, tps []TopicPartition, requireStable bool) ([]FetchedOffset, error) {
	c.mu.Lock()
	ps, err := c.rt.RouteLocked(g)
	var e *groupEntry
	if err == nil {
		e = c.entryLocked(ps, g, false)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if memberEpoch >= 0 {
		if e == nil {
			return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %q has no member %q", g, errs.Echo(memberID))
		}
		e.mu.Lock()
		if e.cg == nil {
			err = e.g.CheckOffsetCommit(memberID, memberEpoch)
		}
		e.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.rt.OwnsLocked(ps) {
		return nil, errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating group %q", g)
	}
	all := ps.state.Offsets(g)
	if tps == nil {
		for tp := range all {
			tps = append(tps, tp)
		}
		slices.SortFunc(tps, func(a, b TopicPartition) int {
			if d := strings.Compare(a.Topic, b.Topic); d != 0 {
				return d
			}
			return int(a.Partition - b.Partition)
		})
	}
	out := make([]FetchedOffset, 0, len(tps))
	for _, tp := range tps {
		f := FetchedOffset{TP: tp, Offset: Offset{Offset: -1, LeaderEpoch: -1, CommitTimeMs: -1, RecordOffset: -1}}
		if requireStable && ps.state.HasPending(g, tp) {
			f.Err = errs.New(sluicev1.ErrorCode_UNSTABLE_OFFSET_COMMIT, "offsets of %s-%d for group %q are pending in an open transaction; retry", tp.Topic, tp.Partition, g)
		} else if o, ok := all[tp]; ok {
			f.Offset = o
		}
		out = append(out, f)
	}
	return out, nil
}

// TxnCommitOffsets writes offsets inside the producer's transaction
// (TxnOffsetCommit, KIP-447): the member is checked
// (Group.CheckTxnOffsetCommit), the group's partition of
// __consumer_offsets is added to the transaction and the offsets are
// written as the producer's transactional batch; they stay pending until
// the transaction's marker. All entries succeed or fail together.
func (c *Coordinator) TxnCommitOffsets(ctx context.Context, r TxnOffsetCommitRequest) (map[TopicPartition]error, error) {
	g := r.Group
	switch {
	case r.TransactionalID == "":
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "a transactional offset commit needs a transactional id")
	case r.ProducerID <= 0 || r.ProducerEpoch < 0:
		return nil, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "a transactional offset commit needs a producer id and epoch, got %d/%d", r.ProducerID, r.ProducerEpoch)
	}
	// The group's key is held until the offsets are pending: otherwise
	// the member could be fenced (session timeout) between this check
	// and the write, its partitions given to another member whose
	// require_stable fetch sees nothing pending yet, and both would copy
	// the same records — found by the chaos group copier.
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return nil, err
	}
	defer ps.Release(g)
	err = c.checkCommitter(ps, g, r.MemberID, r.MemberEpoch, func(gg *Group) error {
		return gg.CheckTxnOffsetCommit(r.MemberID, r.MemberEpoch, r.InstanceID)
	}, func(cg *ClassicGroup) error { return cg.CheckTxnOffsetCommit(r.MemberID, r.InstanceID, r.MemberEpoch) })
	if err != nil {
		return nil, err
	}
	good, results := checkEntries(r.Entries)
	if len(good) == 0 {
		return results, nil
	}
	now := c.now()
	for i := range good {
		good[i].Offset.CommitTimeMs = now.UnixMilli()
	}
	build := func(seq int32) []byte {
		var b batch.Builder
		ts := now.UnixMilli()
		b.Reset(ts)
		for _, en := range good {
			b.Add(ts, OffsetKey(g, en.TP.Topic, en.TP.Partition), OffsetValue(en.Offset), nil)
		}
		return b.Finish(batch.Producer{ID: r.ProducerID, Epoch: int32(r.ProducerEpoch), BaseSequence: seq}, batch.AttrTransactional)
	}
	c.mu.Lock()
	ps.state.BeginTxnAppend(r.ProducerID)
	c.mu.Unlock()
	apply := func(base int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.rt.OwnsLocked(ps) {
			for i, en := range good {
				o := en.Offset
				o.RecordOffset = base + int64(i)
				ps.state.AddPending(r.ProducerID, g, en.TP, o)
			}
		}
		ps.state.EndTxnAppend(r.ProducerID)
	}
	// The producer's key: its sequence is chosen from the log's producer
	// state, so its appends to the partition go one at a time (another
	// group's commit by another producer does not wait).
	pk := producerKey(r.ProducerID)
	if err := ps.Acquire(ctx, pk); err != nil {
		c.mu.Lock()
		ps.state.EndTxnAppend(r.ProducerID)
		c.mu.Unlock()
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, c.cfg.AppendTimeout)
	res, err := c.deps.Txn.AppendCoordinatorTxn(actx, ps.TP, ps.Epoch, r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.VerifyOnly, build, now)
	cancel()
	ps.Release(pk)
	switch {
	case err == nil, errs.Code(err) == sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
		apply(res.BaseOffset)
	case errors.Is(err, cluster.ErrCommitUnknown):
		c.rt.Resolve(ps, res.BaseOffset, res.LastOffset, func(base int64) error { apply(base); return nil }, nil)
		return nil, c.rt.AppendError(g, err)
	default:
		c.mu.Lock()
		ps.state.EndTxnAppend(r.ProducerID)
		c.mu.Unlock()
		if runtime.MappedAppendError(err) {
			return nil, c.rt.AppendError(g, err)
		}
		return nil, err // the transaction coordinator's and the producer-state answers, as they are
	}
	for _, en := range good {
		results[en.TP] = nil
	}
	return results, nil
}

// ListGroups lists the groups of every loaded partition in one of states
// (case-insensitive names; empty: all), sorted by id. While a partition
// of this node loads the answer is COORDINATOR_LOAD_IN_PROGRESS, as it
// would be incomplete.
func (c *Coordinator) ListGroups(states []string) ([]Listing, error) {
	type ent struct {
		g string
		e *groupEntry
	}
	var ents []ent
	c.mu.Lock()
	if err := c.rt.ServingLocked(); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	for _, ps := range c.rt.PartitionsLocked() {
		seen := map[string]bool{}
		for g, e := range ps.groups {
			seen[g] = true
			ents = append(ents, ent{g, e})
		}
		for _, g := range ps.state.Groups() {
			if !seen[g] {
				ents = append(ents, ent{g, nil})
			}
		}
	}
	c.mu.Unlock()
	out := make([]Listing, 0, len(ents))
	for _, en := range ents {
		l := Listing{Group: en.g, State: Empty.String(), Type: TypeConsumer, ProtocolType: ConsumerProtocolType}
		if en.e != nil {
			en.e.mu.Lock()
			deleted := en.e.deleted.Load()
			l.State, l.Members = en.e.stateName(), en.e.size()
			if en.e.cg != nil {
				l.Type, l.ProtocolType = TypeClassic, en.e.cg.ProtocolType()
			}
			en.e.mu.Unlock()
			if deleted {
				continue
			}
		}
		if len(states) > 0 && !slices.ContainsFunc(states, func(s string) bool { return strings.EqualFold(s, l.State) }) {
			continue
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Listing) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

// DescribeGroup describes group g: its membership, or an Empty group with
// only offsets. GROUP_ID_NOT_FOUND when the coordinator knows nothing of it.
func (c *Coordinator) DescribeGroup(g string) (Description, error) {
	c.mu.Lock()
	ps, err := c.rt.RouteLocked(g)
	var e *groupEntry
	if err == nil {
		if e = c.entryLocked(ps, g, false); e == nil {
			err = errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %q does not exist", g)
		}
	}
	c.mu.Unlock()
	if err != nil {
		return Description{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.deleted.Load() {
		return Description{}, errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %q was deleted", g)
	}
	if e.cg != nil {
		cd := e.cg.Describe()
		return Description{GroupID: g, Type: TypeClassic, Classic: &cd}, nil
	}
	d := e.g.Describe()
	d.Type = TypeConsumer
	return d, nil
}

// DeleteGroup deletes group g and its committed offsets (DeleteGroups):
// NON_EMPTY_GROUP while it has members or offsets pending in a
// transaction, GROUP_ID_NOT_FOUND when unknown.
func (c *Coordinator) DeleteGroup(ctx context.Context, g string) error {
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return err
	}
	defer ps.Release(g)
	return c.deleteGroup(ctx, ps, g, func(e *groupEntry, _ time.Time, pending int) error {
		if pending > 0 {
			return errs.New(sluicev1.ErrorCode_NON_EMPTY_GROUP, "group %q has offsets pending in an open transaction; retry once it ends", g)
		}
		if e != nil && e.cg != nil {
			// A classic group outside Empty (a rebalance may be
			// running with members about to join) is not deleted.
			if err := e.cg.Delete(); err != nil {
				return err
			}
		}
		if e != nil && e.g.Size() > 0 {
			n, noun := e.g.Size(), "members"
			if n == 1 {
				noun = "member"
			}
			return errs.New(sluicev1.ErrorCode_NON_EMPTY_GROUP, "group %q has %d %s; stop its consumers first", g, n, noun)
		}
		if e != nil {
			// Departed static members (kept for their session) count too.
			if err := e.g.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteGroup writes tombstones for g's offsets and group record if allow
// (called with g's entry, if any, its last commit time and pending offset
// count; e.mu held) agrees, then forgets the group. The caller holds g's
// key.
func (c *Coordinator) deleteGroup(ctx context.Context, ps *offsetsPartition, g string, allow func(e *groupEntry, lastCommit time.Time, pending int) error) error {
	c.mu.Lock()
	if !c.rt.OwnsLocked(ps) {
		c.mu.Unlock()
		return errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating group %q", g)
	}
	e := ps.groups[g]
	offs := ps.state.Offsets(g)
	epoch := ps.state.GroupEpoch(g)
	pending := ps.state.PendingCount(g)
	c.mu.Unlock()
	if e == nil && len(offs) == 0 && epoch == 0 && pending == 0 {
		return errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %q does not exist", g)
	}
	last := time.Time{}
	tps := make([]TopicPartition, 0, len(offs))
	for tp, o := range offs {
		tps = append(tps, tp)
		if t := time.UnixMilli(o.CommitTimeMs); t.After(last) {
			last = t
		}
	}
	if e != nil {
		e.mu.Lock()
	}
	err := allow(e, last, pending)
	if e != nil {
		e.mu.Unlock()
	}
	if err != nil {
		return err
	}
	kvs := make([][2][]byte, 0, len(tps)+1)
	for _, tp := range tps {
		kvs = append(kvs, [2][]byte{OffsetKey(g, tp.Topic, tp.Partition), nil})
	}
	kvs = append(kvs, [2][]byte{GroupKey(g), nil})
	err = c.appendAndApply(ctx, ps, g, recordsBatch(c.now(), kvs), func(base int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.rt.OwnsLocked(ps) {
			return
		}
		for i, tp := range tps {
			ps.state.DeleteOffset(g, tp, base+int64(i))
		}
		ps.state.DeleteGroup(g)
		if ps.groups[g] == e {
			delete(ps.groups, g)
		}
		if e != nil {
			e.deleted.Store(true)
		}
	})
	if err == nil {
		c.rt.CancelTimer(ps, g)
	}
	if err != nil && e != nil {
		e.mu.Lock()
		if e.g.State() == Dead {
			// The deletion did not happen (or is not known to have): the
			// group lives on, empty (Group.Delete cannot be undone).
			rebuilt := New(g, c.cfg.Group)
			rebuilt.RestoreEpoch(e.g.Epoch())
			e.g = rebuilt
		}
		if e.cg != nil && e.cg.State() == ClassicDead {
			e.cg = NewClassic(g, e.cg.Generation(), c.cfg.Classic)
		}
		e.mu.Unlock()
	}
	return err
}
