package group

import (
	"context"
	"slices"

	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the classic protocol on the coordinator (decision 70):
// the blocking JoinGroup and SyncGroup the Kafka door calls, Heartbeat,
// LeaveGroup, and the write of a classic group's record before its
// answers go out. A waiting request holds no key: it registers a channel
// for its member's answer, releases the group's key and waits; the call
// (or timer) that completes the phase delivers the answer.

// JoinGroup runs one JoinGroup of group req.Group (ClassicGroup.Join's
// rules), creating the group, and waits — within ctx — for the join
// phase to complete when the member must. The response's MemberID is set
// with MEMBER_ID_REQUIRED too. Errors: INVALID_GROUP_ID, NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
// INCONSISTENT_GROUP_PROTOCOL (also: the group id is a KIP-848 group's
// with members), the core's codes, and REBALANCE_IN_PROGRESS when ctx
// ends first (the member still counts as joining: its next JoinGroup
// finds it).
func (c *Coordinator) JoinGroup(ctx context.Context, req JoinGroupRequest) (JoinGroupResponse, error) {
	g := req.Group
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return JoinGroupResponse{MemberID: req.MemberID}, err
	}
	c.mu.Lock()
	e := c.entryLocked(ps, g, true)
	c.mu.Unlock()
	now := c.now()
	e.mu.Lock()
	if len(e.g.members) > 0 {
		e.mu.Unlock()
		ps.Release(g)
		return JoinGroupResponse{MemberID: req.MemberID}, errs.New(sluicev1.ErrorCode_INCONSISTENT_GROUP_PROTOCOL,
			"group %s is a consumer group (KIP-848 ConsumerGroupHeartbeat) with members; a classic member cannot join it", g)
	}
	if e.cg == nil {
		e.cg = NewClassic(g, max(e.g.Epoch(), e.persistedEpoch), c.cfg.Classic)
	}
	resp, wait, err := e.cg.Join(now, req)
	var ch chan ClassicJoinAnswer
	if wait {
		ch = make(chan ClassicJoinAnswer, 1)
		e.joinWaiters[resp.MemberID] = append(e.joinWaiters[resp.MemberID], ch)
	}
	c.noteSizeLocked(e, now)
	e.mu.Unlock()
	c.settleClassic(ctx, ps, e)
	e.mu.Lock()
	c.rescheduleLocked(ps, g, e)
	e.mu.Unlock()
	ps.Release(g)
	if !wait {
		return resp, err
	}
	select {
	case a := <-ch:
		return a.Response, a.Err
	case <-ctx.Done():
	case <-ps.Ctx.Done():
	}
	if a, ok := c.dropWaiter(e, resp.MemberID, ch, nil); ok {
		return a.Response, a.Err
	}
	if ps.Ctx.Err() != nil {
		return JoinGroupResponse{MemberID: resp.MemberID}, errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating group %q", g)
	}
	return JoinGroupResponse{MemberID: resp.MemberID}, rebalanceInProgress(g)
}

// dropWaiter unregisters a join (jch) or sync (sch) waiter of memberID;
// if its answer arrived meanwhile it returns it.
func (c *Coordinator) dropWaiter(e *groupEntry, memberID string, jch chan ClassicJoinAnswer, sch chan ClassicSyncAnswer) (ClassicJoinAnswer, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if jch != nil {
		e.joinWaiters[memberID] = slices.DeleteFunc(e.joinWaiters[memberID], func(x chan ClassicJoinAnswer) bool { return x == jch })
		if len(e.joinWaiters[memberID]) == 0 {
			delete(e.joinWaiters, memberID)
		}
		select {
		case a := <-jch:
			return a, true
		default:
		}
	}
	if sch != nil {
		e.syncWaiters[memberID] = slices.DeleteFunc(e.syncWaiters[memberID], func(x chan ClassicSyncAnswer) bool { return x == sch })
		if len(e.syncWaiters[memberID]) == 0 {
			delete(e.syncWaiters, memberID)
		}
	}
	return ClassicJoinAnswer{}, false
}

// SyncGroup runs one SyncGroup (ClassicGroup.Sync's rules) and waits,
// within ctx, for the assignment: a follower until the leader's
// SyncGroup, the leader until the group's record with the assignment is
// written. Errors: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
// UNKNOWN_MEMBER_ID (also: no classic group), FENCED_INSTANCE_ID,
// ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS
// (also when ctx ends first), the append's errors (NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, ...) when the record
// could not be written.
func (c *Coordinator) SyncGroup(ctx context.Context, req SyncGroupRequest) (SyncGroupResponse, error) {
	g := req.Group
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return SyncGroupResponse{}, err
	}
	c.mu.Lock()
	e := c.entryLocked(ps, g, false)
	c.mu.Unlock()
	if e == nil || e.cg == nil {
		ps.Release(g)
		return SyncGroupResponse{}, unknownMember(g, req.MemberID)
	}
	e.mu.Lock()
	resp, wait, err := e.cg.Sync(c.now(), req)
	var ch chan ClassicSyncAnswer
	if wait {
		ch = make(chan ClassicSyncAnswer, 1)
		e.syncWaiters[req.MemberID] = append(e.syncWaiters[req.MemberID], ch)
	}
	e.mu.Unlock()
	c.settleClassic(ctx, ps, e)
	e.mu.Lock()
	c.rescheduleLocked(ps, g, e)
	e.mu.Unlock()
	ps.Release(g)
	if !wait {
		return resp, err
	}
	select {
	case a := <-ch:
		return a.Response, a.Err
	case <-ctx.Done():
	case <-ps.Ctx.Done():
	}
	c.dropWaiter(e, req.MemberID, nil, ch)
	select {
	case a := <-ch:
		return a.Response, a.Err
	default:
	}
	if ps.Ctx.Err() != nil {
		return SyncGroupResponse{}, errs.New(sluicev1.ErrorCode_NOT_COORDINATOR, "this node stopped coordinating group %q", g)
	}
	return SyncGroupResponse{}, rebalanceInProgress(g)
}

// ClassicHeartbeat runs one classic Heartbeat (ClassicGroup.Heartbeat):
// nil, or UNKNOWN_MEMBER_ID (also: no classic group),
// FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (join
// again), and the routing errors.
func (c *Coordinator) ClassicHeartbeat(ctx context.Context, g, memberID, instanceID string, generation int32) error {
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return err
	}
	defer ps.Release(g)
	c.mu.Lock()
	e := c.entryLocked(ps, g, false)
	c.mu.Unlock()
	if e == nil || e.cg == nil {
		return unknownMember(g, memberID)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	err = e.cg.Heartbeat(c.now(), memberID, instanceID, generation)
	c.rescheduleLocked(ps, g, e)
	return err
}

// LeaveGroup removes members of classic group g (LeaveGroup v3+, one
// error per member in order: nil, UNKNOWN_MEMBER_ID,
// FENCED_INSTANCE_ID) and starts a rebalance. The request-level error is
// UNKNOWN_MEMBER_ID when g is not a classic group, or a routing error.
func (c *Coordinator) LeaveGroup(ctx context.Context, g string, members []LeaveMember) ([]error, error) {
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return nil, err
	}
	defer ps.Release(g)
	c.mu.Lock()
	e := c.entryLocked(ps, g, false)
	c.mu.Unlock()
	if e == nil || e.cg == nil {
		return nil, errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "group %q is not a classic group", g)
	}
	now := c.now()
	e.mu.Lock()
	out, err := e.cg.Leave(now, members)
	c.noteSizeLocked(e, now)
	e.mu.Unlock()
	c.settleClassic(ctx, ps, e)
	e.mu.Lock()
	c.rescheduleLocked(ps, g, e)
	e.mu.Unlock()
	return out, err
}

// settleClassic writes e's classic record if one is pending, reports the
// outcome to the group, and delivers the answers it owes to the waiting
// requests (Ready's order: record, then answers). The caller holds the
// group's key, not e.mu.
func (c *Coordinator) settleClassic(ctx context.Context, ps *offsetsPartition, e *groupEntry) {
	for range 4 { // a failed write may start a rebalance that writes again
		e.mu.Lock()
		if e.cg == nil {
			e.mu.Unlock()
			return
		}
		rec, ok := e.cg.PendingRecord()
		g := e.cg.ID()
		e.mu.Unlock()
		if !ok {
			break
		}
		now := c.now()
		raw := recordsBatch(now, [][2][]byte{{GroupKey(g), GroupValue(GroupRecord{TimeMs: now.UnixMilli(), Classic: &rec})}})
		_, err := c.rt.Append(ctx, ps, raw)
		if runtime.Committed(err) {
			err = nil
			c.mu.Lock()
			if c.rt.OwnsLocked(ps) {
				ps.state.SetClassicGroup(g, rec)
			}
			c.mu.Unlock()
		} else {
			c.logger.Warn("writing a classic group's record failed", "group", g, "generation", rec.Generation, "err", err)
			err = c.rt.AppendError(g, err)
		}
		e.mu.Lock()
		if err == nil {
			if rec.Generation > e.persistedEpoch {
				// A new generation is a rebalance, counted as a KIP-848
				// group's epoch bumps are (sluice_group_rebalances_total).
				c.mu.Lock()
				c.rebalances += int64(rec.Generation - e.persistedEpoch)
				c.mu.Unlock()
			}
			e.persistedEpoch = max(e.persistedEpoch, rec.Generation)
			e.g.RestoreEpoch(rec.Generation)
		}
		e.cg.RecordWritten(c.now(), err)
		e.mu.Unlock()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cg == nil {
		return
	}
	js, ss := e.cg.TakeAnswers()
	for _, a := range js {
		for _, ch := range e.joinWaiters[a.MemberID] {
			ch <- a
		}
		delete(e.joinWaiters, a.MemberID)
	}
	for _, a := range ss {
		for _, ch := range e.syncWaiters[a.MemberID] {
			ch <- a
		}
		delete(e.syncWaiters, a.MemberID)
	}
}

// DeleteOffsets deletes group g's committed offsets of tps (OffsetDelete):
// per partition nil (deleted, or there was none) or
// GROUP_SUBSCRIBED_TO_TOPIC when the group uses the topic (a classic
// group: its members' consumer-protocol subscriptions; a KIP-848 group:
// its subscribed topics). Request-level: GROUP_ID_NOT_FOUND,
// NON_EMPTY_GROUP (a classic group with members of another protocol
// type than "consumer", as Kafka), the routing and append errors.
func (c *Coordinator) DeleteOffsets(ctx context.Context, g string, tps []TopicPartition) (map[TopicPartition]error, error) {
	ps, err := c.acquireGroup(ctx, g)
	if err != nil {
		return nil, err
	}
	defer ps.Release(g)
	c.mu.Lock()
	e := c.entryLocked(ps, g, false)
	offs := ps.state.Offsets(g)
	c.mu.Unlock()
	if e == nil || e.deleted.Load() {
		return nil, errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %q does not exist", g)
	}
	e.mu.Lock()
	var subscribed func(topic string) bool
	switch {
	case e.cg != nil && e.cg.State() == ClassicDead:
		err = errs.New(sluicev1.ErrorCode_GROUP_ID_NOT_FOUND, "group %q was deleted", g)
	case e.cg != nil && e.cg.State() != ClassicEmpty && e.cg.ProtocolType() != ConsumerProtocolType:
		err = errs.New(sluicev1.ErrorCode_NON_EMPTY_GROUP, "group %q has members of protocol type %q", g, errs.Echo(e.cg.ProtocolType()))
	case e.cg != nil:
		topics, known := e.cg.SubscribedTopics()
		uses := e.cg.ProtocolType() == ConsumerProtocolType
		subscribed = func(t string) bool { return (!known && uses) || topics[t] }
	default:
		subs := map[string]bool{}
		for t := range e.g.subscribers {
			subs[t] = true
		}
		subscribed = func(t string) bool { return subs[t] }
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	results := make(map[TopicPartition]error, len(tps))
	var del []TopicPartition
	for _, tp := range tps {
		if subscribed(tp.Topic) {
			results[tp] = errs.New(sluicev1.ErrorCode_GROUP_SUBSCRIBED_TO_TOPIC, "group %q is subscribed to topic %s", g, errs.Echo(tp.Topic))
			continue
		}
		results[tp] = nil
		if _, ok := offs[tp]; ok {
			del = append(del, tp)
		}
	}
	if len(del) == 0 {
		return results, nil
	}
	kvs := make([][2][]byte, len(del))
	for i, tp := range del {
		kvs[i] = [2][]byte{OffsetKey(g, tp.Topic, tp.Partition), nil}
	}
	err = c.appendAndApply(ctx, ps, g, recordsBatch(c.now(), kvs), func(base int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.rt.OwnsLocked(ps) {
			return
		}
		for i, tp := range del {
			ps.state.DeleteOffset(g, tp, base+int64(i))
		}
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}
