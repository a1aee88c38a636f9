package replication

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Sentinel errors of the Tracker's control flow. Errors that answer a
// follower's fetch are *errs.Error with a wire code instead (see
// FollowerFetched).
var (
	// ErrInvalidConfig: NewTracker was given an inconsistent config.
	ErrInvalidConfig = errors.New("replication: invalid tracker config")
	// ErrInvalidISR: a proposed, committed or applied ISR or replica set
	// is malformed (duplicates, members outside the replicas, the leader
	// missing).
	ErrInvalidISR = errors.New("replication: invalid ISR")
	// ErrNotCaughtUp: BeginISRChange would add a replica that does not
	// qualify for the ISR (see FetchUpdate.ExpandISR).
	ErrNotCaughtUp = errors.New("replication: replica not caught up")
	// ErrISRChangeInFlight: BeginISRChange while another AlterPartition
	// request is outstanding. Kafka allows one at a time per partition.
	ErrISRChangeInFlight = errors.New("replication: an ISR change is already in flight")
	// ErrNoISRChangeInFlight: ISRChangeCommitted without BeginISRChange.
	ErrNoISRChangeInFlight = errors.New("replication: no ISR change in flight")
	// ErrStaleMetadata: partition state older than the Tracker's (a lower
	// partition epoch or leader epoch); nothing was changed.
	ErrStaleMetadata = errors.New("replication: stale partition state")
	// ErrNewLeaderEpoch: ApplyMetadata with a higher leader epoch. A
	// Tracker lives for exactly one leader epoch; build a new one (see
	// NewTracker for why).
	ErrNewLeaderEpoch = errors.New("replication: new leader epoch, build a new Tracker")
)

// TrackerConfig is the partition state a leader starts a leader epoch
// with. Slices are copied; the caller keeps ownership.
type TrackerConfig struct {
	// LeaderID is this broker; it must be in Replicas and ISR.
	LeaderID int32
	// LeaderEpoch and PartitionEpoch come from the controller's
	// PartitionChange that made this broker leader.
	LeaderEpoch    int32
	PartitionEpoch int32
	// Replicas is the assignment, ISR the committed in-sync set (a subset
	// of Replicas). Order is kept: ISR() returns it as given.
	Replicas []int32
	ISR      []int32
	// LeaderLEO is the leader's log end offset now.
	LeaderLEO int64
	// HW is the leader's persisted or otherwise known high watermark. A
	// value above LeaderLEO is lowered to it, as Kafka's
	// UnifiedLog.updateHighWatermark does with a checkpoint that outlived
	// the log tail it covered.
	HW int64
	// LeaderEpochStartOffset is where this leader epoch begins: the
	// leader's LEO when it was elected (Kafka Partition.makeLeader,
	// leaderEpochStartOffsetOpt).
	LeaderEpochStartOffset int64
	// LagTimeMax is replica.lag.time.max.ms (> 0).
	LagTimeMax time.Duration
	// MinInsyncReplicas is the topic's min.insync.replicas (>= 1).
	MinInsyncReplicas int32
	// Now is the time of the election.
	Now time.Time
}

// AlterRequest is the AlterPartition request for one ISR change, to be
// sent to the controller by the caller. The controller rejects it when
// PartitionEpoch is no longer current (DESIGN §6).
type AlterRequest struct {
	LeaderID       int32
	LeaderEpoch    int32
	PartitionEpoch int32
	// NewISR is the proposed ISR; owned by the receiver.
	NewISR []int32
}

// FetchUpdate is the result of recording one follower fetch.
type FetchUpdate struct {
	// HW is the high watermark after the fetch (the value to send back
	// in the fetch response).
	HW int64
	// HWChanged reports that HW advanced: acks=all waiters and delayed
	// fetches may complete.
	HWChanged bool
	// ExpandISR reports that the follower qualifies for the ISR and the
	// caller should propose adding it with BeginISRChange. Kafka's
	// Partition.maybeExpandIsr / isFollowerInSync: no ISR change in
	// flight, the replica is assigned, not in the committed ISR, eligible
	// (see SetISREligible), and its LEO >= HW and >= the leader epoch
	// start offset. The epoch-start condition is KIP-101's: a replica
	// that has not fetched anything of the current leader epoch may miss
	// committed data between the HW and the leader's LEO at election, and
	// it must not become electable before it has them.
	ExpandISR bool
}

// FollowerState is a snapshot of what the leader knows about one
// follower.
type FollowerState struct {
	ID int32
	// LEO is the follower's log end offset, -1 until its first fetch
	// in this leader epoch.
	LEO int64
	// LastFetchTime is when its last fetch was recorded (zero if none).
	LastFetchTime time.Time
	// LastCaughtUpTime is Kafka's lastCaughtUpTimeMs (see
	// FollowerFetched); zero means never in this leader epoch.
	LastCaughtUpTime time.Time
	// Eligible reports whether it may join the ISR (SetISREligible).
	Eligible bool
}

type follower struct {
	leo                int64
	lastFetchLeaderLEO int64 // leader LEO at the previous fetch, -1 before one
	lastFetchTime      time.Time
	lastCaughtUp       time.Time
	ineligible         bool
}

// Tracker is the leader's replica state for one partition during one
// leader epoch: follower positions, the high watermark and the ISR,
// including at most one ISR change in flight to the controller. It is the
// pure core of Kafka's kafka.cluster.Partition (leader side) and
// kafka.cluster.Replica: it reads no clock and does no I/O. It is not
// safe for concurrent use.
//
// ISR state follows Kafka's PartitionState (KIP-497). The committed ISR
// is the controller's. While an AlterPartition request is in flight the
// proposed ISR is pending, and two views are used, each the conservative
// one for its purpose:
//
//   - For the high watermark: the maximal ISR, committed ∪ proposed
//     (Kafka maximalIsr). A replica being added is counted from the
//     moment it is proposed, because once the controller commits it, it
//     is electable and must hold everything below the HW; a replica
//     being removed is still counted until the removal is committed,
//     because until then it may be elected. Counting more replicas can
//     only hold the HW back, never advance it wrongly.
//   - For min.insync.replicas before an append (EnoughReplicas): the
//     minimal ISR, committed ∩ proposed. A replica being added does not
//     count until committed (as in Kafka); a replica being removed
//     already does not count. Here Sluice is stricter than Kafka, which
//     checks the committed ISR: the leader has decided that replica is
//     out of sync, so an acks=all write that would be accepted now would
//     most likely fail with NOT_ENOUGH_REPLICAS_AFTER_APPEND once the
//     shrink commits, after it was written. Rejecting it before the
//     append (retriable NOT_ENOUGH_REPLICAS) leaves nothing behind; if
//     the shrink fails, the next attempt succeeds.
//
// A Tracker lives for one leader epoch. A new leader epoch (even with the
// same leader) means a new Tracker: Kafka resets every follower's fetch
// state at a new leader epoch (Replica.resetReplicaState), and
// positions learned under the old epoch may belong to logs that the
// followers have since truncated. Sluice does not carry over follower
// LEOs as Kafka does for a re-elected leader, so the HW of a new Tracker
// waits for one fetch from each ISR follower.
type Tracker struct {
	leaderID       int32
	leaderEpoch    int32
	partitionEpoch int32
	lagTimeMax     time.Duration
	minISR         int32
	epochStart     int64

	replicas  []int32
	isr       []int32 // committed
	pending   []int32 // proposed ISR of the in-flight change; nil if none
	followers map[int32]*follower

	leaderLEO int64
	hw        int64
}

// NewTracker starts tracking a partition this broker leads, as Kafka's
// Partition.makeLeader does at a new leader epoch: every follower's LEO
// is unknown (-1), so ISR followers hold the HW until they fetch; ISR
// followers get lastCaughtUpTime = cfg.Now, a full lag window before they
// can be shrunk; followers outside the ISR get none (zero), so they do
// not hold the HW as "caught up" before they have fetched. The HW is
// then advanced as far as the rules allow (with an ISR of only the leader
// and min.insync.replicas 1, to the leader's LEO).
func NewTracker(cfg TrackerConfig) (*Tracker, error) {
	if err := validateAssignment(cfg.LeaderID, cfg.Replicas, cfg.ISR); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	switch {
	case cfg.LagTimeMax <= 0:
		return nil, fmt.Errorf("%w: LagTimeMax %v must be positive", ErrInvalidConfig, cfg.LagTimeMax)
	case cfg.MinInsyncReplicas < 1:
		return nil, fmt.Errorf("%w: MinInsyncReplicas %d must be at least 1", ErrInvalidConfig, cfg.MinInsyncReplicas)
	case cfg.LeaderLEO < 0 || cfg.HW < 0:
		return nil, fmt.Errorf("%w: negative LeaderLEO %d or HW %d", ErrInvalidConfig, cfg.LeaderLEO, cfg.HW)
	case cfg.LeaderEpochStartOffset < 0 || cfg.LeaderEpochStartOffset > cfg.LeaderLEO:
		return nil, fmt.Errorf("%w: LeaderEpochStartOffset %d outside [0, LeaderLEO %d]", ErrInvalidConfig, cfg.LeaderEpochStartOffset, cfg.LeaderLEO)
	}
	t := &Tracker{
		leaderID:       cfg.LeaderID,
		leaderEpoch:    cfg.LeaderEpoch,
		partitionEpoch: cfg.PartitionEpoch,
		lagTimeMax:     cfg.LagTimeMax,
		minISR:         cfg.MinInsyncReplicas,
		epochStart:     cfg.LeaderEpochStartOffset,
		replicas:       slices.Clone(cfg.Replicas),
		isr:            slices.Clone(cfg.ISR),
		followers:      make(map[int32]*follower, len(cfg.Replicas)),
		leaderLEO:      cfg.LeaderLEO,
		hw:             min(cfg.HW, cfg.LeaderLEO),
	}
	for _, id := range t.replicas {
		if id == t.leaderID {
			continue
		}
		f := &follower{leo: -1, lastFetchLeaderLEO: -1}
		if slices.Contains(t.isr, id) {
			f.lastCaughtUp = cfg.Now
		}
		t.followers[id] = f
	}
	t.maybeAdvanceHW(cfg.Now)
	return t, nil
}

// LeaderAppended records that the leader's log end offset is now leo
// (after an append). A leader never truncates its own log, so a value
// below the current LEO is ignored: callers may report appends out of
// order. It reports whether the HW advanced; with an ISR of only the
// leader (and min.insync.replicas 1) the HW follows the leader's LEO.
func (t *Tracker) LeaderAppended(leo int64, now time.Time) (hwChanged bool) {
	t.leaderLEO = max(t.leaderLEO, leo)
	return t.maybeAdvanceHW(now)
}

// FollowerFetched records that follower replica fetched at fetchOffset at
// time now; a follower fetches from its LEO, so its LEO is now
// fetchOffset (it may be lower than before if the follower truncated).
// Call it after the fetch's read is done, with the leader LEO that read
// saw already reported through LeaderAppended.
//
// lastCaughtUpTime follows Kafka's Replica.updateFetchStateOrThrow
// exactly. lastCaughtUpTime is the latest time T at which the follower
// was known to hold everything the leader had at T:
//
//   - fetchOffset >= the leader's LEO now: caught up now, T = now;
//   - else fetchOffset >= the leader's LEO at the follower's previous
//     fetch: it has everything the leader had then, T = the previous
//     fetch time;
//   - else unchanged.
//
// and it never moves backwards. The second case is what lets a follower
// stay in (and join) the ISR under a steady stream of small produces,
// where its fetch offset is almost never equal to the leader's LEO at
// the moment of the fetch.
//
// Errors (nothing is recorded): an *errs.Error with code
// UNKNOWN_LEADER_EPOCH for a replica not in the assignment (Kafka does
// the same in KRaft mode: the follower may know of a reassignment the
// leader has not applied yet, and retries), INVALID_REQUEST for the
// leader's own id, OFFSET_OUT_OF_RANGE for a negative fetchOffset or one
// beyond the leader's LEO.
func (t *Tracker) FollowerFetched(replica int32, fetchOffset int64, now time.Time) (FetchUpdate, error) {
	if replica == t.leaderID {
		return FetchUpdate{}, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "replica %d is the leader and does not fetch", replica)
	}
	f, ok := t.followers[replica]
	if !ok {
		return FetchUpdate{}, errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH,
			"replica %d is not among the replicas %v at leader epoch %d, partition epoch %d", replica, t.replicas, t.leaderEpoch, t.partitionEpoch)
	}
	if fetchOffset < 0 || fetchOffset > t.leaderLEO {
		return FetchUpdate{}, errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE,
			"fetch offset %d of replica %d is outside [0, leader LEO %d]", fetchOffset, replica, t.leaderLEO)
	}
	switch {
	case fetchOffset >= t.leaderLEO:
		f.lastCaughtUp = laterOf(f.lastCaughtUp, now)
	case f.lastFetchLeaderLEO >= 0 && fetchOffset >= f.lastFetchLeaderLEO:
		f.lastCaughtUp = laterOf(f.lastCaughtUp, f.lastFetchTime)
	}
	f.leo = fetchOffset
	f.lastFetchLeaderLEO = t.leaderLEO
	f.lastFetchTime = now

	// The HW first, then the expansion check against the new HW, so that
	// a replica reported as ExpandISR is accepted by BeginISRChange right
	// after. (Kafka checks against the old HW but moves to
	// PendingExpandIsr before recomputing the HW, which has the same
	// effect: the added replica is never left below the HW.)
	changed := t.maybeAdvanceHW(now)
	return FetchUpdate{HW: t.hw, HWChanged: changed, ExpandISR: t.canJoinISR(replica, f)}, nil
}

// ShrinkCandidates returns the committed ISR members, other than the
// leader, that are out of sync at now, in ISR order; the caller proposes
// removing them with BeginISRChange. Kafka Partition.getOutOfSyncReplicas
// / isFollowerOutOfSync: a follower is out of sync unless its LEO equals
// the leader's LEO (an idle partition does not shrink) or it was caught
// up within LagTimeMax (now - lastCaughtUpTime <= LagTimeMax). This
// covers both stuck followers (no fetches) and slow ones (fetching but
// never reaching the leader). While an ISR change is in flight it
// returns nil, as Kafka does.
func (t *Tracker) ShrinkCandidates(now time.Time) []int32 {
	if t.pending != nil {
		return nil
	}
	var out []int32
	for _, id := range t.isr {
		if id == t.leaderID {
			continue
		}
		f, ok := t.followers[id]
		if !ok || !t.caughtUp(f, now) {
			out = append(out, id)
		}
	}
	return out
}

// SetISREligible marks whether replica may join the ISR. Kafka (KIP-841)
// keeps fenced brokers and brokers in controlled shutdown out: such a
// replica is never reported as ExpandISR, BeginISRChange refuses to add
// it, and it does not hold the HW as a caught-up replica. Replicas start
// eligible. It has no effect on a replica already in the ISR (removing it
// is the controller's job). The caller derives eligibility from the
// metadata image; an unknown replica is an error.
func (t *Tracker) SetISREligible(replica int32, eligible bool) error {
	f, ok := t.followers[replica]
	if !ok {
		return fmt.Errorf("%w: replica %d is not a follower of this partition", ErrInvalidISR, replica)
	}
	f.ineligible = !eligible
	return nil
}

// BeginISRChange proposes newISR to the controller and returns the
// AlterPartition request to send. It refuses (ErrISRChangeInFlight)
// while another change is in flight. newISR must be a duplicate-free
// subset of the replicas containing the leader and differ from the
// committed ISR (ErrInvalidISR); every replica it adds must qualify as
// described for FetchUpdate.ExpandISR at this moment (ErrNotCaughtUp),
// which keeps a replica that fell behind the HW since it was reported
// from being proposed. Removals are not checked: the caller decides them
// (normally from ShrinkCandidates). On error nothing changes.
//
// Until ISRChangeCommitted, ISRChangeFailed or ApplyMetadata, the
// proposed ISR is pending (see Tracker for how it counts). The HW does
// not move here: the maximal ISR only grows.
func (t *Tracker) BeginISRChange(newISR []int32) (AlterRequest, error) {
	if t.pending != nil {
		return AlterRequest{}, fmt.Errorf("%w: proposed %v at partition epoch %d", ErrISRChangeInFlight, t.pending, t.partitionEpoch)
	}
	if err := validateAssignment(t.leaderID, t.replicas, newISR); err != nil {
		return AlterRequest{}, err
	}
	if sameSet(newISR, t.isr) {
		return AlterRequest{}, fmt.Errorf("%w: proposed ISR %v equals the committed ISR", ErrInvalidISR, newISR)
	}
	for _, id := range newISR {
		if slices.Contains(t.isr, id) {
			continue
		}
		if f := t.followers[id]; !t.canJoinISR(id, f) {
			return AlterRequest{}, fmt.Errorf("%w: replica %d (LEO %d, eligible %v) needs LEO >= HW %d and >= leader epoch start offset %d",
				ErrNotCaughtUp, id, f.leo, !f.ineligible, t.hw, t.epochStart)
		}
	}
	t.pending = slices.Clone(newISR)
	return AlterRequest{
		LeaderID:       t.leaderID,
		LeaderEpoch:    t.leaderEpoch,
		PartitionEpoch: t.partitionEpoch,
		NewISR:         slices.Clone(newISR),
	}, nil
}

// PendingISR returns a copy of the proposed ISR of the change in flight,
// and whether there is one (for resending the request).
func (t *Tracker) PendingISR() ([]int32, bool) {
	return slices.Clone(t.pending), t.pending != nil
}

// ISRChangeCommitted applies the controller's answer to the change in
// flight: isr and partitionEpoch become the committed state and the
// pending change ends. The controller's ISR is authoritative even if it
// differs from the proposal. As in Kafka's handleAlterPartitionUpdate, an
// answer with an older partition epoch is refused (ErrStaleMetadata) and
// an equal one accepted (the controller had nothing to change). It also
// fails with ErrNoISRChangeInFlight or ErrInvalidISR; on error nothing
// changes. It reports whether the HW advanced (a committed shrink
// releases the HW held by the removed replica).
func (t *Tracker) ISRChangeCommitted(isr []int32, partitionEpoch int32, now time.Time) (hwChanged bool, err error) {
	if t.pending == nil {
		return false, ErrNoISRChangeInFlight
	}
	if partitionEpoch < t.partitionEpoch {
		return false, fmt.Errorf("%w: partition epoch %d < %d", ErrStaleMetadata, partitionEpoch, t.partitionEpoch)
	}
	if err := validateAssignment(t.leaderID, t.replicas, isr); err != nil {
		return false, err
	}
	t.isr = slices.Clone(isr)
	t.partitionEpoch = partitionEpoch
	t.pending = nil
	return t.maybeAdvanceHW(now), nil
}

// ISRChangeFailed ends the change in flight without committing it (the
// controller rejected it, or the caller gave up); the committed ISR is
// unchanged and a new change may begin. No-op without a change in
// flight. It reports whether the HW advanced: a failed expansion stops
// counting the replica that was being added.
func (t *Tracker) ISRChangeFailed(now time.Time) (hwChanged bool) {
	if t.pending == nil {
		return false
	}
	t.pending = nil
	return t.maybeAdvanceHW(now)
}

// ApplyMetadata applies the controller's current state of the partition
// when the metadata image moves (a reassignment, an ISR change made by
// the controller, or the image catching up with our own AlterPartition).
//
//   - leaderEpoch above the Tracker's: ErrNewLeaderEpoch; build a new
//     Tracker. Below it, or partitionEpoch below the Tracker's:
//     ErrStaleMetadata. Nothing changes on error.
//   - The same partition epoch with the same replicas and ISR: a replay;
//     nothing changes, and a change in flight stays in flight (it was
//     proposed against this very epoch and may still commit).
//   - Otherwise the image is authoritative: replicas, ISR and partition
//     epoch are replaced and any change in flight is dropped, because
//     the controller has moved past the epoch it was proposed against and
//     will reject it, or the image already contains its result (Kafka
//     makeLeader replaces the partition state the same way). New
//     followers start unknown (LEO -1, never caught up, eligible);
//     removed ones are forgotten.
//
// replicas must contain the leader and isr be a subset of them that
// contains the leader (a controller that takes the ISR away from a
// leader also elects another, which is a new leader epoch), else
// ErrInvalidISR. It reports whether the HW advanced.
func (t *Tracker) ApplyMetadata(leaderEpoch, partitionEpoch int32, replicas, isr []int32, now time.Time) (hwChanged bool, err error) {
	switch {
	case leaderEpoch > t.leaderEpoch:
		return false, fmt.Errorf("%w: leader epoch %d > %d", ErrNewLeaderEpoch, leaderEpoch, t.leaderEpoch)
	case leaderEpoch < t.leaderEpoch:
		return false, fmt.Errorf("%w: leader epoch %d < %d", ErrStaleMetadata, leaderEpoch, t.leaderEpoch)
	case partitionEpoch < t.partitionEpoch:
		return false, fmt.Errorf("%w: partition epoch %d < %d", ErrStaleMetadata, partitionEpoch, t.partitionEpoch)
	}
	if err := validateAssignment(t.leaderID, replicas, isr); err != nil {
		return false, err
	}
	if partitionEpoch == t.partitionEpoch && slices.Equal(replicas, t.replicas) && slices.Equal(isr, t.isr) {
		return false, nil
	}
	for id := range t.followers {
		if !slices.Contains(replicas, id) {
			delete(t.followers, id)
		}
	}
	for _, id := range replicas {
		if _, ok := t.followers[id]; !ok && id != t.leaderID {
			t.followers[id] = &follower{leo: -1, lastFetchLeaderLEO: -1}
		}
	}
	t.replicas = slices.Clone(replicas)
	t.isr = slices.Clone(isr)
	t.partitionEpoch = partitionEpoch
	t.pending = nil
	return t.maybeAdvanceHW(now), nil
}

// HW returns the high watermark: every offset below it is on every member
// of the (maximal) ISR. It never decreases during the Tracker's life, and
// it does not advance while the committed ISR is smaller than
// min.insync.replicas (KIP-966; see maybeAdvanceHW for all the rules).
func (t *Tracker) HW() int64 { return t.hw }

// Committed reports whether offset is below the HW, i.e. replicated to
// the ISR; an acks=all produce whose last offset is committed can be
// answered (see AcksAllResult for the full check).
func (t *Tracker) Committed(offset int64) bool { return offset < t.hw }

// AcksAllResult is Kafka's Partition.checkEnoughReplicasReachOffset for a
// waiting acks=all produce whose batch ends at lastOffset: done is false
// while lastOffset is not committed; once it is, err is nil, or an
// *errs.Error NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is now
// smaller than min.insync.replicas (the batch is written but was not
// replicated as the producer required; the ISR shrank while it waited).
func (t *Tracker) AcksAllResult(lastOffset int64) (done bool, err error) {
	if !t.Committed(lastOffset) {
		return false, nil
	}
	if n := len(t.MaximalISR()); n < t.effectiveMinISR() {
		return true, errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
			"offset %d is committed but the ISR has %d replicas, fewer than min.insync.replicas %d", lastOffset, n, t.effectiveMinISR())
	}
	return true, nil
}

// EnoughReplicas reports whether an acks=all produce may be appended:
// the minimal ISR (the committed ISR, minus a pending removal; see
// Tracker) has at least min.insync.replicas members. When false the
// produce must fail with NOT_ENOUGH_REPLICAS before anything is appended
// (Kafka Partition.appendRecordsToLeader). min.insync.replicas is capped
// at the replication factor, as Kafka's effectiveMinIsr does.
func (t *Tracker) EnoughReplicas() bool {
	n := 0
	for _, id := range t.isr {
		if t.pending == nil || slices.Contains(t.pending, id) {
			n++
		}
	}
	return n >= t.effectiveMinISR()
}

// ISR returns a copy of the committed ISR.
func (t *Tracker) ISR() []int32 { return slices.Clone(t.isr) }

// InSyncCount is the size of the committed ISR (Kafka's
// InSyncReplicasCount metric).
func (t *Tracker) InSyncCount() int { return len(t.isr) }

// MaximalISR returns the committed ISR followed by the members a change
// in flight would add: the set the HW is computed over.
func (t *Tracker) MaximalISR() []int32 {
	out := slices.Clone(t.isr)
	for _, id := range t.pending {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Replicas returns a copy of the assignment.
func (t *Tracker) Replicas() []int32 { return slices.Clone(t.replicas) }

// LeaderID is this broker, the partition's leader.
func (t *Tracker) LeaderID() int32 { return t.leaderID }

// LeaderEpoch is the leader epoch this Tracker serves.
func (t *Tracker) LeaderEpoch() int32 { return t.leaderEpoch }

// PartitionEpoch is the partition epoch of the committed state.
func (t *Tracker) PartitionEpoch() int32 { return t.partitionEpoch }

// LeaderLEO is the leader's log end offset as last reported.
func (t *Tracker) LeaderLEO() int64 { return t.leaderLEO }

// LeaderEpochStartOffset is the first offset of this leader epoch.
func (t *Tracker) LeaderEpochStartOffset() int64 { return t.epochStart }

// FollowerLEO returns the LEO of replica: the leader's LEO for the
// leader, -1 for a follower that has not fetched in this leader epoch or
// an id that is not a replica.
func (t *Tracker) FollowerLEO(replica int32) int64 {
	if replica == t.leaderID {
		return t.leaderLEO
	}
	if f, ok := t.followers[replica]; ok {
		return f.leo
	}
	return -1
}

// Follower returns what the leader knows about follower replica, and
// false if it is not a follower of this partition.
func (t *Tracker) Follower(replica int32) (FollowerState, bool) {
	f, ok := t.followers[replica]
	if !ok {
		return FollowerState{}, false
	}
	return FollowerState{
		ID:               replica,
		LEO:              f.leo,
		LastFetchTime:    f.lastFetchTime,
		LastCaughtUpTime: f.lastCaughtUp,
		Eligible:         !f.ineligible,
	}, true
}

// maybeAdvanceHW is Kafka 4's Partition.maybeIncrementLeaderHW:
//
//  1. Under min.insync.replicas (committed ISR smaller than the effective
//     minimum) the HW does not advance at all (KIP-966's strict min ISR):
//     an offset counts as committed only once it is on at least
//     min.insync.replicas replicas, so acks=0/1 data written while the
//     ISR is too small stays invisible until the ISR recovers.
//  2. Otherwise the candidate is the leader's LEO, lowered to the LEO of
//     every follower that is in the maximal ISR, or that is caught up
//     (see caughtUp) and eligible although not in the ISR yet. The latter
//     keeps a follower that is catching up from being outrun forever:
//     with an ISR of only the leader the HW would equal the leader's LEO
//     and the follower's LEO would never reach it under a steady load. A
//     follower with an unknown LEO (-1) that counts holds the HW where it
//     is.
//  3. The HW only moves forward: a lower candidate keeps the old HW.
func (t *Tracker) maybeAdvanceHW(now time.Time) bool {
	if len(t.isr) < t.effectiveMinISR() {
		return false
	}
	candidate := t.leaderLEO
	for id, f := range t.followers {
		if f.leo >= candidate {
			continue
		}
		if t.inMaximalISR(id) || (!f.ineligible && t.caughtUp(f, now)) {
			candidate = f.leo
		}
	}
	if candidate > t.hw {
		t.hw = candidate
		return true
	}
	return false
}

// caughtUp is Kafka's ReplicaState.isCaughtUp: the follower has the
// leader's whole log, or was caught up within the last LagTimeMax.
func (t *Tracker) caughtUp(f *follower, now time.Time) bool {
	if f.leo == t.leaderLEO {
		return true
	}
	return !f.lastCaughtUp.IsZero() && now.Sub(f.lastCaughtUp) <= t.lagTimeMax
}

// ExpandCandidates returns the followers outside the ISR that may join
// it now (FetchUpdate.ExpandISR's rule) from their last fetch, in
// replica order. A follower's fetch reports it at once; this is for the
// changes that make a follower eligible without a fetch of its own (it
// became eligible again, an ISR change ended): with fetch sessions a
// caught-up follower does not fetch its partitions again while they are
// idle.
func (t *Tracker) ExpandCandidates() []int32 {
	var out []int32
	for _, id := range t.replicas {
		if f := t.followers[id]; f != nil && t.canJoinISR(id, f) {
			out = append(out, id)
		}
	}
	return out
}

// canJoinISR is the expansion rule documented on FetchUpdate.ExpandISR.
func (t *Tracker) canJoinISR(id int32, f *follower) bool {
	return f != nil &&
		t.pending == nil &&
		!f.ineligible &&
		!slices.Contains(t.isr, id) &&
		slices.Contains(t.replicas, id) &&
		f.leo >= t.hw &&
		f.leo >= t.epochStart
}

func (t *Tracker) inMaximalISR(id int32) bool {
	return slices.Contains(t.isr, id) || slices.Contains(t.pending, id)
}

// effectiveMinISR is min.insync.replicas capped at the replication
// factor (Kafka Partition.effectiveMinIsr).
func (t *Tracker) effectiveMinISR() int {
	return min(int(t.minISR), len(t.replicas))
}

// validateAssignment checks that replicas has no duplicates and contains
// leader, and that isr is a duplicate-free subset of replicas containing
// leader.
func validateAssignment(leader int32, replicas, isr []int32) error {
	if dup, ok := duplicate(replicas); ok {
		return fmt.Errorf("%w: replica %d listed twice in replicas %v", ErrInvalidISR, dup, replicas)
	}
	if !slices.Contains(replicas, leader) {
		return fmt.Errorf("%w: leader %d not in replicas %v", ErrInvalidISR, leader, replicas)
	}
	if dup, ok := duplicate(isr); ok {
		return fmt.Errorf("%w: replica %d listed twice in ISR %v", ErrInvalidISR, dup, isr)
	}
	if !slices.Contains(isr, leader) {
		return fmt.Errorf("%w: leader %d not in ISR %v", ErrInvalidISR, leader, isr)
	}
	for _, id := range isr {
		if !slices.Contains(replicas, id) {
			return fmt.Errorf("%w: ISR member %d not in replicas %v", ErrInvalidISR, id, replicas)
		}
	}
	return nil
}

func duplicate(ids []int32) (int32, bool) {
	for i, id := range ids {
		if slices.Contains(ids[i+1:], id) {
			return id, true
		}
	}
	return 0, false
}

// sameSet reports whether a and b (each duplicate-free) hold the same ids.
func sameSet(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for _, id := range a {
		if !slices.Contains(b, id) {
			return false
		}
	}
	return true
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
