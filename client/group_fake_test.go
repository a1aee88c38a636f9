package client

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The fake cluster's group coordinator: ConsumerGroupHeartbeat with
// server-side assignment as the test sets it (setTarget), OffsetCommit,
// OffsetFetch, TxnOffsetCommit, ListGroups, DescribeGroups and
// DeleteGroups. A group is coordinated by the node coordinatorOf names
// (txn_fake_test.go: the same owner map and FindCoordinator serve
// transactional ids and groups); other nodes answer NOT_COORDINATOR.
// Every request is kept, and events is one log of what happened, in
// order, to which tests append their listener's calls too. Faults are
// injected through the fields, under fakeState.mu.

type fakeGroupState struct {
	members    map[string]*fakeMember // member id -> member (one group)
	nextMember int
	// defaultTarget is what a member joining without a setTarget gets.
	defaultTarget []TopicPartition
	// interval is the heartbeat_interval_ms answered (default 20).
	interval int32
	// hbErrs, commitErrs, fetchErrs, txnErrs are answered, in order,
	// before serving the request.
	hbErrs, commitErrs, fetchErrs, txnErrs []sluicev1.ErrorCode
	// fence: heartbeats left to answer FENCED_MEMBER_EPOCH (the member's
	// epoch is forgotten: it must join again).
	fence int
	// offsets are the committed offsets of the group.
	offsets map[TopicPartition]int64
	// nonEmpty: CommitOffsets from outside the membership and
	// DeleteGroups refuse with this code while members remain.
	listed    []*sluicev1.ListedGroup
	described map[string]*sluicev1.DescribedGroup

	hbReqs     []*sluicev1.ConsumerGroupHeartbeatRequest
	commitReqs []*sluicev1.OffsetCommitRequest
	fetchReqs  []*sluicev1.OffsetFetchRequest
	txnReqs    []*sluicev1.TxnOffsetCommitRequest
	deleted    []string
	events     []string
}

type fakeMember struct {
	epoch    int32
	target   []TopicPartition
	sent     bool // the current target was answered
	owned    []TopicPartition
	instance string
}

func tpsString(tps []TopicPartition) string {
	s := make([]string, len(tps))
	for i, tp := range tps {
		s[i] = tp.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

func fromGroupTPs(in []*sluicev1.GroupTopicPartitions) []TopicPartition {
	var out []TopicPartition
	for _, t := range in {
		for _, p := range t.Partitions {
			out = append(out, TopicPartition{Topic: t.Topic, Partition: p})
		}
	}
	sortPartitions(out)
	return out
}

// event appends to the event log; the caller holds mu.
func (st *fakeState) event(format string, args ...any) {
	st.grp.events = append(st.grp.events, fmt.Sprintf(format, args...))
}

// setTarget gives a member a new assignment and a new epoch.
func (st *fakeState) setTarget(member string, tps ...TopicPartition) {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := st.grp.members[member]
	m.epoch++
	m.target = tps
	m.sent = false
}

func (f *fakeBroker) ConsumerGroupHeartbeat(_ context.Context, req *sluicev1.ConsumerGroupHeartbeatRequest) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &f.grp
	g.hbReqs = append(g.hbReqs, proto.Clone(req).(*sluicev1.ConsumerGroupHeartbeatRequest))
	refuse := func(c sluicev1.ErrorCode) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
		f.event("hb refused %v", c)
		return &sluicev1.ConsumerGroupHeartbeatResponse{ErrorCode: c, ErrorMessage: "fake"}, nil
	}
	if f.coordinatorOf(req.GroupId) != f.node {
		return refuse(sluicev1.ErrorCode_NOT_COORDINATOR)
	}
	if c := popCode(&g.hbErrs); c != sluicev1.ErrorCode_NONE {
		return refuse(c)
	}
	if g.members == nil {
		g.members = map[string]*fakeMember{}
	}
	if req.MemberEpoch < 0 {
		f.event("leave %s epoch=%d", req.MemberId, req.MemberEpoch)
		delete(g.members, req.MemberId)
		return &sluicev1.ConsumerGroupHeartbeatResponse{MemberId: req.MemberId, MemberEpoch: req.MemberEpoch}, nil
	}
	m := g.members[req.MemberId]
	id := req.MemberId
	if req.MemberEpoch == 0 {
		if id == "" {
			g.nextMember++
			id = fmt.Sprintf("member-%d", g.nextMember)
		}
		if m == nil {
			m = &fakeMember{target: g.defaultTarget}
			g.members[id] = m
		}
		m.epoch++
		m.sent = false
		m.instance = req.InstanceId
		if len(req.SubscribedTopicNames) == 0 {
			return refuse(sluicev1.ErrorCode_INVALID_REQUEST)
		}
	} else {
		if m == nil {
			return refuse(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID)
		}
		if g.fence > 0 {
			g.fence--
			m.epoch = 0
			return refuse(sluicev1.ErrorCode_FENCED_MEMBER_EPOCH)
		}
		if req.MemberEpoch != m.epoch && !(req.MemberEpoch == m.epoch-1 && !m.sent) {
			return refuse(sluicev1.ErrorCode_FENCED_MEMBER_EPOCH)
		}
	}
	if req.TopicPartitionsSet {
		m.owned = fromGroupTPs(req.TopicPartitions)
		f.event("hb epoch=%d owned=%s", req.MemberEpoch, tpsString(m.owned))
	} else {
		f.event("hb epoch=%d", req.MemberEpoch)
	}
	interval := g.interval
	if interval == 0 {
		interval = 20
	}
	resp := &sluicev1.ConsumerGroupHeartbeatResponse{MemberId: id, MemberEpoch: m.epoch, HeartbeatIntervalMs: interval}
	if !m.sent {
		m.sent = true
		resp.Assignment = &sluicev1.GroupAssignment{TopicPartitions: groupTopicPartitions(m.target)}
	}
	return resp, nil
}

func (f *fakeBroker) OffsetCommit(_ context.Context, req *sluicev1.OffsetCommitRequest) (*sluicev1.OffsetCommitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &f.grp
	g.commitReqs = append(g.commitReqs, proto.Clone(req).(*sluicev1.OffsetCommitRequest))
	refuse := func(c sluicev1.ErrorCode) (*sluicev1.OffsetCommitResponse, error) {
		f.event("commit refused %v", c)
		return &sluicev1.OffsetCommitResponse{ErrorCode: c, ErrorMessage: "fake"}, nil
	}
	if f.coordinatorOf(req.GroupId) != f.node {
		return refuse(sluicev1.ErrorCode_NOT_COORDINATOR)
	}
	if c := popCode(&g.commitErrs); c != sluicev1.ErrorCode_NONE {
		return refuse(c)
	}
	if req.MemberEpoch < 0 {
		if len(g.members) > 0 {
			return refuse(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID)
		}
	} else if m := g.members[req.MemberId]; m == nil {
		return refuse(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID)
	} else if req.MemberEpoch != m.epoch {
		return refuse(sluicev1.ErrorCode_STALE_MEMBER_EPOCH)
	}
	if g.offsets == nil {
		g.offsets = map[TopicPartition]int64{}
	}
	resp := &sluicev1.OffsetCommitResponse{}
	var done []string
	for _, t := range req.Topics {
		tr := &sluicev1.OffsetCommitTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			g.offsets[TopicPartition{Topic: t.Name, Partition: p.Partition}] = p.CommittedOffset
			done = append(done, fmt.Sprintf("%s-%d=%d", t.Name, p.Partition, p.CommittedOffset))
			tr.Partitions = append(tr.Partitions, &sluicev1.OffsetCommitPartitionResponse{Partition: p.Partition})
		}
		resp.Topics = append(resp.Topics, tr)
	}
	f.event("commit epoch=%d %s", req.MemberEpoch, strings.Join(done, " "))
	return resp, nil
}

func (f *fakeBroker) OffsetFetch(_ context.Context, req *sluicev1.OffsetFetchRequest) (*sluicev1.OffsetFetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &f.grp
	g.fetchReqs = append(g.fetchReqs, proto.Clone(req).(*sluicev1.OffsetFetchRequest))
	if f.coordinatorOf(req.GroupId) != f.node {
		return &sluicev1.OffsetFetchResponse{ErrorCode: sluicev1.ErrorCode_NOT_COORDINATOR}, nil
	}
	resp := &sluicev1.OffsetFetchResponse{}
	code := popCode(&g.fetchErrs)
	add := func(topic string, p int32) {
		var tr *sluicev1.OffsetFetchTopicResponse
		for _, t := range resp.Topics {
			if t.Name == topic {
				tr = t
			}
		}
		if tr == nil {
			tr = &sluicev1.OffsetFetchTopicResponse{Name: topic}
			resp.Topics = append(resp.Topics, tr)
		}
		off, ok := g.offsets[TopicPartition{Topic: topic, Partition: p}]
		pr := &sluicev1.OffsetFetchPartitionResponse{Partition: p, CommittedOffset: -1, CommittedLeaderEpoch: -1, CommitTimeMs: -1, ErrorCode: code}
		if ok {
			pr.CommittedOffset, pr.CommitTimeMs = off, 1700000000000
		}
		tr.Partitions = append(tr.Partitions, pr)
	}
	if len(req.Topics) == 0 {
		var tps []TopicPartition
		for tp := range g.offsets {
			tps = append(tps, tp)
		}
		sortPartitions(tps)
		for _, tp := range tps {
			add(tp.Topic, tp.Partition)
		}
	}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			add(t.Name, p)
		}
	}
	f.event("offset fetch stable=%v", req.RequireStable)
	return resp, nil
}

func (f *fakeBroker) TxnOffsetCommit(_ context.Context, req *sluicev1.TxnOffsetCommitRequest) (*sluicev1.TxnOffsetCommitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &f.grp
	g.txnReqs = append(g.txnReqs, proto.Clone(req).(*sluicev1.TxnOffsetCommitRequest))
	if f.coordinatorOf(req.GroupId) != f.node {
		return &sluicev1.TxnOffsetCommitResponse{ErrorCode: sluicev1.ErrorCode_NOT_COORDINATOR}, nil
	}
	if c := popCode(&g.txnErrs); c != sluicev1.ErrorCode_NONE {
		return &sluicev1.TxnOffsetCommitResponse{ErrorCode: c, ErrorMessage: "fake"}, nil
	}
	return &sluicev1.TxnOffsetCommitResponse{}, nil
}

func (f *fakeBroker) ListGroups(_ context.Context, req *sluicev1.ListGroupsRequest) (*sluicev1.ListGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.ListGroupsResponse{}
	for _, l := range f.grp.listed {
		if f.coordinatorOf(l.GroupId) == f.node {
			resp.Groups = append(resp.Groups, proto.Clone(l).(*sluicev1.ListedGroup))
		}
	}
	sort.Slice(resp.Groups, func(i, j int) bool { return resp.Groups[i].GroupId > resp.Groups[j].GroupId }) // the client must sort
	return resp, nil
}

func (f *fakeBroker) DescribeGroups(_ context.Context, req *sluicev1.DescribeGroupsRequest) (*sluicev1.DescribeGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DescribeGroupsResponse{}
	for _, id := range req.GroupIds {
		d := &sluicev1.DescribedGroup{GroupId: id, State: "Dead"}
		switch {
		case f.coordinatorOf(id) != f.node:
			d.ErrorCode = sluicev1.ErrorCode_NOT_COORDINATOR
		case f.grp.described[id] != nil:
			d = proto.Clone(f.grp.described[id]).(*sluicev1.DescribedGroup)
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp, nil
}

func (f *fakeBroker) DeleteGroups(_ context.Context, req *sluicev1.DeleteGroupsRequest) (*sluicev1.DeleteGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DeleteGroupsResponse{}
	for _, id := range req.GroupIds {
		r := &sluicev1.DeleteGroupResult{GroupId: id}
		switch {
		case f.coordinatorOf(id) != f.node:
			r.ErrorCode = sluicev1.ErrorCode_NOT_COORDINATOR
		case len(f.grp.members) > 0:
			r.ErrorCode = sluicev1.ErrorCode_NON_EMPTY_GROUP
		default:
			f.grp.deleted = append(f.grp.deleted, id)
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}
