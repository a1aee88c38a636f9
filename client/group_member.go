package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is a group consumer's membership: one goroutine (run) owns
// the heartbeat to the coordinator and the reconciliation of the
// assignment it answers, following the steps of groups.proto:
//
//  1. join: heartbeat with epoch 0 and the subscription; keep the member
//     id the coordinator gives for the consumer's life;
//  2. heartbeat every heartbeat_interval_ms with the current epoch; an
//     answer with an assignment sets the target;
//  3. reconcile towards the target, revoke before assign: partitions
//     no longer in it stop being fetched, their positions are committed
//     (auto-commit), OnRevoked runs, and only then does the next
//     heartbeat — sent at once, not after an interval — report them
//     released; new partitions are positioned at their committed offsets
//     (OffsetFetch with require_stable) or the reset policy, OnAssigned
//     runs, and the next heartbeat reports them owned;
//  4. FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: drop every partition
//     without committing (OnLost) and join again with epoch 0;
//  5. Close: stop fetching, commit (auto-commit), OnRevoked, leave with
//     epoch -1 (-2 for a static member), all within the close timeout.
//
// A second goroutine commits positions every auto-commit interval.

// groupMember is the membership of one Consumer in one group.
type groupMember struct {
	co    *Consumer
	cfg   groupConfig
	coord *groupCoordinator

	wake chan struct{} // capacity 1: heartbeat now
	stop chan struct{} // closed by close: leave and return
	// ctx bounds every request of the membership; cancelled when close
	// gives up waiting.
	ctx        context.Context
	cancel     context.CancelFunc
	goroutines goroutine.Group
	startOnce  sync.Once
	closeOnce  sync.Once

	// commitMu serializes commits. The membership loop holds it while it
	// commits revoked partitions and takes it once more after removing
	// them, before the heartbeat that reports them released, so that no
	// commit of theirs is in flight after that heartbeat. Lock order:
	// commitMu, then mu, then Consumer.mu (each is released before the
	// next is taken except where noted).
	commitMu sync.Mutex
	// inCallback is true while the loop runs the listener or its own
	// commits: a Commit then must not wait for a heartbeat (the loop
	// sends them).
	inCallback atomic.Bool

	mu            sync.Mutex // guards the following
	topics        []string
	topicsChanged bool
	memberID      string
	epoch         int32
	owned         map[TopicPartition]bool // positioned and reported to the coordinator (or about to be)
	target        map[TopicPartition]bool // the coordinator's last assignment
	err           error                   // a non-retriable heartbeat failure, returned once by Poll
	hbDone        chan struct{}           // closed (and replaced) when a heartbeat is answered
}

func newGroupMember(co *Consumer, cfg groupConfig) *groupMember {
	g := &groupMember{
		co: co, cfg: cfg,
		coord:  &groupCoordinator{c: co.c, group: cfg.id},
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		owned:  map[TopicPartition]bool{},
		hbDone: make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// subscribe sets the subscription and starts the membership.
func (g *groupMember) subscribe(topics []string) {
	g.mu.Lock()
	g.topics = append([]string(nil), topics...)
	g.topicsChanged = true
	g.mu.Unlock()
	g.startOnce.Do(func() {
		g.goroutines.Go(g.run)
		if g.cfg.autoCommit {
			g.goroutines.Go(g.autoCommitLoop)
		}
	})
	notify(g.wake)
}

// metadata returns the membership as the last heartbeat answered it.
func (g *groupMember) metadata() GroupMetadata {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupMetadata{GroupID: g.cfg.id, MemberID: g.memberID, MemberEpoch: g.epoch, InstanceID: g.cfg.instanceID}
}

// takeErr returns a pending non-retriable membership error once.
func (g *groupMember) takeErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.err
	g.err = nil
	return err
}

// ownedList returns the owned partitions, sorted.
func (g *groupMember) ownedList() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return setList(g.owned)
}

func setList(s map[TopicPartition]bool) []TopicPartition {
	out := make([]TopicPartition, 0, len(s))
	for tp := range s {
		out = append(out, tp)
	}
	sortPartitions(out)
	return out
}

// run is the membership loop (see the top of the file). It returns after
// leaving, once stop is closed.
func (g *groupMember) run() {
	var interval time.Duration // until the next heartbeat; 0: now
	report := true             // the next heartbeat carries the owned partitions
	failures := 0
	for {
		if interval > 0 {
			t := time.NewTimer(interval)
			select {
			case <-t.C:
			case <-g.wake:
			case <-g.stop:
				t.Stop()
				g.leave()
				return
			}
			t.Stop()
		} else {
			select {
			case <-g.stop:
				g.leave()
				return
			default:
			}
		}
		resp, err := g.heartbeat(report)
		if err != nil {
			switch code := errs.Code(err); {
			case code == sluicev1.ErrorCode_FENCED_MEMBER_EPOCH || code == sluicev1.ErrorCode_UNKNOWN_MEMBER_ID:
				g.lose()
				// Rejoin at once; with a backoff if the join is fenced too.
				report, interval = true, 0
				if failures > 0 {
					interval = initBackoff(failures)
				}
				failures++
				continue
			case g.ctx.Err() != nil:
				continue // closing: stop is closed too
			}
			if retry, _ := coordinatorRetriable(err); !retry {
				g.mu.Lock()
				g.err = fmt.Errorf("group %q: %w", g.cfg.id, err)
				g.mu.Unlock()
				// Not retriable as such (INVALID_SESSION_TIMEOUT,
				// GROUP_MAX_SIZE_REACHED, ...): Poll reports it, and the
				// member tries again slowly in case the cause goes away.
				interval = 5 * time.Second
			} else {
				interval = initBackoff(failures)
			}
			failures++
			continue
		}
		failures = 0
		interval = time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond
		if interval <= 0 {
			interval = 3 * time.Second
		}
		report = false
		if g.reconcile() {
			report, interval = true, 0
		}
	}
}

// heartbeat sends one heartbeat (finding the coordinator if needed) and
// applies its answer to the member id, epoch and target.
func (g *groupMember) heartbeat(report bool) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
	g.mu.Lock()
	req := &sluicev1.ConsumerGroupHeartbeatRequest{
		GroupId: g.cfg.id, MemberId: g.memberID, MemberEpoch: g.epoch,
		InstanceId: g.cfg.instanceID, RackId: g.cfg.rack,
	}
	if g.epoch == 0 || g.topicsChanged {
		req.SubscribedTopicNames = g.topics
		g.topicsChanged = false
	}
	if g.epoch == 0 {
		req.RebalanceTimeoutMs = int32(g.cfg.rebalanceTimeout.Milliseconds())
		req.SessionTimeoutMs = int32(g.cfg.sessionTimeout.Milliseconds())
		req.ServerAssignor = g.cfg.assignor
		req.ClientId = "sluice-go"
	}
	if report || g.epoch == 0 {
		req.TopicPartitionsSet = true
		req.TopicPartitions = groupTopicPartitions(setList(g.owned))
	}
	g.mu.Unlock()
	var resp *sluicev1.ConsumerGroupHeartbeatResponse
	err := g.coord.attempt(g.ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewGroupsClient(cc).ConsumerGroupHeartbeat(ctx, req)
		if err != nil {
			return err
		}
		resp = r
		return codeError(r.ErrorCode, r.ErrorMessage)
	})
	if err != nil {
		if len(req.SubscribedTopicNames) > 0 {
			g.mu.Lock()
			g.topicsChanged = true // send it again
			g.mu.Unlock()
		}
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	g.mu.Lock()
	if resp.MemberId != "" {
		g.memberID = resp.MemberId
	}
	g.epoch = resp.MemberEpoch
	if resp.Assignment != nil {
		g.target = map[TopicPartition]bool{}
		for _, t := range resp.Assignment.TopicPartitions {
			for _, p := range t.Partitions {
				g.target[TopicPartition{Topic: t.Topic, Partition: p}] = true
			}
		}
	}
	close(g.hbDone)
	g.hbDone = make(chan struct{})
	g.mu.Unlock()
	return resp, nil
}

func groupTopicPartitions(tps []TopicPartition) []*sluicev1.GroupTopicPartitions {
	out := []*sluicev1.GroupTopicPartitions{}
	for _, tp := range tps { // sorted: one entry per topic
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, &sluicev1.GroupTopicPartitions{Topic: tp.Topic})
		}
		out[len(out)-1].Partitions = append(out[len(out)-1].Partitions, tp.Partition)
	}
	return out
}

// reconcile moves the owned partitions towards the target, revoking
// before assigning, and reports whether they changed (the next heartbeat
// must then report them, at once).
func (g *groupMember) reconcile() bool {
	g.mu.Lock()
	revoked, added := planReconcile(g.owned, g.target)
	g.mu.Unlock()
	changed := false
	if len(revoked) > 0 {
		g.revoke(revoked)
		changed = true
	}
	if len(added) > 0 && g.assign(added) {
		changed = true
	}
	return changed
}

// planReconcile is the reconciliation decision (pure): the owned
// partitions the target no longer lists (to revoke first) and the target's
// partitions not owned yet (to assign after), each sorted. A nil target
// (no assignment answered yet) changes nothing.
func planReconcile(owned, target map[TopicPartition]bool) (revoked, added []TopicPartition) {
	if target == nil {
		return nil, nil
	}
	for tp := range owned {
		if !target[tp] {
			revoked = append(revoked, tp)
		}
	}
	for tp := range target {
		if !owned[tp] {
			added = append(added, tp)
		}
	}
	sortPartitions(revoked)
	sortPartitions(added)
	return revoked, added
}

// revoke gives partitions up: stop fetching, commit (auto-commit),
// OnRevoked, forget them. The caller reports them released afterwards.
func (g *groupMember) revoke(parts []TopicPartition) {
	g.co.pause(parts)
	g.inCallback.Store(true)
	defer g.inCallback.Store(false)
	if g.cfg.autoCommit {
		// A failed commit is not retried here: the partitions must be
		// released within the rebalance timeout all the same, and their
		// next owner starts from the last offsets committed.
		_ = g.commit(g.ctx, g.co.positions(parts))
	}
	if l := g.cfg.listener; l != nil {
		l.OnRevoked(g.ctx, parts)
	}
	g.mu.Lock()
	for _, tp := range parts {
		delete(g.owned, tp)
	}
	g.mu.Unlock()
	g.co.drop(parts)
	// Barrier: a commit that started before the partitions were forgotten
	// (an auto-commit, or the user's) ends before they are reported
	// released.
	g.commitMu.Lock()
	g.commitMu.Unlock() //nolint:staticcheck // an intentional barrier
}

// assign takes new partitions: fetch their committed offsets (stable:
// none pending in an open transaction), position them, OnAssigned. It
// reports false when the offsets could not be fetched (tried again after
// the next heartbeat).
func (g *groupMember) assign(parts []TopicPartition) bool {
	g.mu.Lock()
	memberID, epoch := g.memberID, g.epoch
	g.mu.Unlock()
	committed, err := g.coord.fetchOffsets(g.ctx, memberID, epoch, true, parts)
	if err != nil {
		switch errs.Code(err) {
		case sluicev1.ErrorCode_STALE_MEMBER_EPOCH, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID:
			return false // the next heartbeat answers the membership
		}
		if errs.Retriable(errs.Code(err)) || g.ctx.Err() != nil || isTransportError(err) {
			return false
		}
		g.mu.Lock()
		g.err = fmt.Errorf("group %q: %w", g.cfg.id, err)
		g.mu.Unlock()
		return false
	}
	// Positioned but not fetched until OnAssigned has returned, so that
	// Poll returns no record of them before it (and Seek in OnAssigned
	// takes effect first).
	for _, tp := range parts {
		off := g.co.cfg.autoOffsetReset
		if c, ok := committed[tp]; ok && c.Offset >= 0 {
			off = c.Offset
		}
		g.co.position(tp, off)
	}
	g.mu.Lock()
	for _, tp := range parts {
		g.owned[tp] = true
	}
	g.mu.Unlock()
	if l := g.cfg.listener; l != nil {
		g.inCallback.Store(true)
		l.OnAssigned(g.ctx, parts)
		g.inCallback.Store(false)
	}
	g.co.resume(parts)
	return true
}

// owns reports whether the member owns tp (positioned, not yet given up).
func (g *groupMember) owns(tp TopicPartition) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.owned[tp]
}

// lose drops every partition without committing (the member was fenced)
// and makes the next heartbeat a join.
func (g *groupMember) lose() {
	g.mu.Lock()
	parts := setList(g.owned)
	g.owned = map[TopicPartition]bool{}
	g.target = nil
	g.epoch = 0
	g.mu.Unlock()
	g.co.pause(parts)
	g.co.drop(parts)
	if l := g.cfg.listener; l != nil && len(parts) > 0 {
		g.inCallback.Store(true)
		l.OnLost(parts)
		g.inCallback.Store(false)
	}
}

// leave ends the membership (Close): revoke everything owned, then a
// heartbeat with epoch -1 (-2 for a static member).
func (g *groupMember) leave() {
	if g.cfg.noLeaveOnClose {
		return // as a crash: the session timeout fences the member
	}
	if parts := g.ownedList(); len(parts) > 0 {
		g.revoke(parts)
	}
	g.mu.Lock()
	memberID, epoch := g.memberID, g.epoch
	g.mu.Unlock()
	if memberID == "" || epoch <= 0 {
		return // never joined, or fenced: nothing to leave
	}
	leaveEpoch := int32(-1)
	if g.cfg.instanceID != "" {
		leaveEpoch = -2
	}
	req := &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: g.cfg.id, MemberId: memberID, MemberEpoch: leaveEpoch, InstanceId: g.cfg.instanceID}
	_ = g.coord.call(g.ctx, "leave group", func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewGroupsClient(cc).ConsumerGroupHeartbeat(ctx, req)
		if err != nil {
			return err
		}
		return codeError(r.ErrorCode, r.ErrorMessage)
	})
}

// close leaves the group and stops the membership goroutines, giving up
// (cancelling what is in flight) after the close timeout.
func (g *groupMember) close() {
	g.closeOnce.Do(func() {
		close(g.stop)
		timeout := g.cfg.closeTimeout
		if timeout <= 0 {
			timeout = min(10*time.Second, g.co.c.cfg.requestTimeout)
		}
		g.goroutines.WaitFor(timeout)
		g.cancel() // what is still in flight after the timeout gives up
		g.goroutines.Wait()
	})
}

// autoCommitLoop commits the owned partitions' positions every interval.
func (g *groupMember) autoCommitLoop() {
	t := time.NewTicker(g.cfg.autoCommitInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-g.stop:
			return
		}
		// Failures are left to the next round (and to the commit before
		// revocation and on Close).
		_ = g.commit(g.ctx, g.co.positions(g.ownedList()))
	}
}

// commit commits offsets under the current membership. STALE_MEMBER_EPOCH
// (a heartbeat has moved the epoch on meanwhile): wait for the next
// heartbeat answer and try once more with its epoch.
func (g *groupMember) commit(ctx context.Context, offsets map[TopicPartition]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	for try := 0; ; try++ {
		g.mu.Lock()
		memberID, epoch, hbDone := g.memberID, g.epoch, g.hbDone
		g.mu.Unlock()
		if memberID == "" || epoch <= 0 {
			return ErrNotGroupMember
		}
		err := g.coord.commitOffsets(ctx, memberID, epoch, offsets)
		if try > 0 || errs.Code(err) != sluicev1.ErrorCode_STALE_MEMBER_EPOCH {
			return err
		}
		if !g.inCallback.Load() {
			notify(g.wake)
			wctx, cancel := context.WithTimeout(ctx, g.co.c.cfg.requestTimeout)
			select {
			case <-hbDone:
			case <-wctx.Done():
			}
			cancel()
		}
	}
}

// Subscribe makes a group consumer (WithGroup) join its group for topics,
// or changes its subscription. Partitions are assigned by the group's
// coordinator; Poll returns records of the assigned ones. A topic named
// twice is subscribed once.
func (co *Consumer) Subscribe(topics ...string) error {
	if co.group == nil {
		return errors.New("sluice: Subscribe needs a consumer group (WithGroup)")
	}
	if len(topics) == 0 {
		return errors.New("sluice: Subscribe needs at least one topic")
	}
	seen := make(map[string]bool, len(topics))
	unique := make([]string, 0, len(topics))
	for _, t := range topics {
		if t == "" {
			return errors.New("sluice: Subscribe: empty topic name")
		}
		if !seen[t] {
			// The coordinator refuses a subscription naming a topic twice
			// (api/limits.go); a caller's repeat means the topic once.
			seen[t] = true
			unique = append(unique, t)
		}
	}
	topics = unique
	co.mu.Lock()
	closed := co.closed
	co.mu.Unlock()
	if closed {
		return ErrClosed
	}
	co.group.subscribe(topics)
	return nil
}

// Assignment returns the partitions the consumer owns in its group,
// sorted (nil without a group).
func (co *Consumer) Assignment() []TopicPartition {
	if co.group == nil {
		return nil
	}
	return co.group.ownedList()
}

// GroupMetadata returns the consumer's group membership as its last
// heartbeat answered it, for SendOffsetsToTransaction. Without a group it
// returns the zero value.
func (co *Consumer) GroupMetadata() GroupMetadata {
	if co.group == nil {
		return GroupMetadata{}
	}
	return co.group.metadata()
}

// Commit commits the positions (the next offsets Poll returns) of every
// partition the consumer owns in its group. It fails with
// ErrNotGroupMember while the consumer is not a member, and with the
// coordinator's error (STALE_MEMBER_EPOCH after one retry with a fresh
// epoch, UNKNOWN_MEMBER_ID, ...) as an *errs.Error. Retriable coordinator
// errors are retried for up to the request timeout.
func (co *Consumer) Commit(ctx context.Context) error {
	if co.group == nil {
		return errors.New("sluice: Commit needs a consumer group (WithGroup)")
	}
	return co.group.commit(ctx, co.positions(co.group.ownedList()))
}

// CommitOffsets commits the given offsets (each the next offset to
// consume, >= 0) for the consumer's group, under its membership, as
// Commit does.
func (co *Consumer) CommitOffsets(ctx context.Context, offsets map[TopicPartition]int64) error {
	if co.group == nil {
		return errors.New("sluice: CommitOffsets needs a consumer group (WithGroup)")
	}
	return co.group.commit(ctx, offsets)
}
