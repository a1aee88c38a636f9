package kafka

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// groupAllowed is nil when the caller may do op on group g, else the
// refusal (GROUP_AUTHORIZATION_FAILED).
func (c *conn) groupAllowed(op auth.Operation, g string) error {
	if res := auth.Group(g); !c.allowed(c.ctx, op, res) {
		return c.deniedErr(op, res)
	}
	return nil
}

// offsetCommit serves OffsetCommit (v2+): the offsets are durable in
// __consumer_offsets when answered. The committer is checked by the
// group's protocol: a KIP-848 member by member id and epoch (v9+), a
// member of a classic group by member id and generation, and a commit
// from outside any membership (no member id, generation -1) only while
// the group has no members. READ on the group (GROUP_AUTHORIZATION_FAILED
// for every partition) and on each topic (TOPIC_AUTHORIZATION_FAILED for
// its partitions, which are not committed; the others are).
func offsetCommit(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.OffsetCommitRequest)
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	commit := commitTopics(req.Topics, func(t kmsg.OffsetCommitRequestTopic) (string, []group.OffsetCommitEntry) {
		var es []group.OffsetCommitEntry
		for _, p := range t.Partitions {
			es = append(es, entry(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata))
		}
		return t.Topic, es
	})
	reqErr := c.groupAllowed(auth.OpRead, req.Group)
	denied := c.deniedTopics(auth.OpRead, commit)
	return func() kmsg.Response {
		results, err := c.commitOffsets(commit, denied, reqErr,
			func(ctx context.Context, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error) {
				return c.s.cfg.Coordinators.Group.CommitOffsets(ctx, req.Group, req.MemberID, stringOr(req.InstanceID, ""), req.Generation, entries)
			})
		resp.Topics = answerCommit(commit, denied, err, results,
			func(name string) kmsg.OffsetCommitResponseTopic {
				t := kmsg.NewOffsetCommitResponseTopic()
				t.Topic = name
				return t
			}, func(t *kmsg.OffsetCommitResponseTopic, partition int32, code int16) {
				p := kmsg.NewOffsetCommitResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				t.Partitions = append(t.Partitions, p)
			})
		return resp
	}
}

// fetchGroup is one group of an OffsetFetch: its topics (nil: every
// partition it has an offset for) and, v9+, the member asking.
type fetchGroup struct {
	group       string
	memberID    string
	memberEpoch int32
	topics      map[string][]int32
	order       []string // topics in the request's order
}

// offsetFetch serves OffsetFetch (v1+; v8+ several groups): each group's
// committed offsets, -1 for a partition without one. With RequireStable
// (v7+) a partition pending in an open transaction answers
// UNSTABLE_OFFSET_COMMIT (retriable). DESCRIBE on the group
// (GROUP_AUTHORIZATION_FAILED) and on each topic: a named topic refused
// answers TOPIC_AUTHORIZATION_FAILED in its partitions, and the
// every-partition form leaves out the topics the caller may not
// describe. v9+ with a member id and epoch checks a KIP-848 member
// (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).
func offsetFetch(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.OffsetFetchRequest)
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	var groups []fetchGroup
	if r.version < 8 {
		fg := fetchGroup{group: req.Group, memberEpoch: -1}
		if req.Topics != nil || r.version < 2 {
			fg.topics = map[string][]int32{}
			for _, t := range req.Topics {
				fg.add(t.Topic, t.Partitions)
			}
		}
		groups = append(groups, fg)
	} else {
		for _, g := range req.Groups {
			fg := fetchGroup{group: g.Group, memberID: stringOr(g.MemberID, ""), memberEpoch: g.MemberEpoch}
			if fg.memberID == "" && r.version < 9 {
				fg.memberEpoch = -1
			}
			if g.Topics != nil {
				fg.topics = map[string][]int32{}
				for _, t := range g.Topics {
					fg.add(t.Topic, t.Partitions)
				}
			}
			groups = append(groups, fg)
		}
	}
	for _, fg := range groups {
		code, topics := c.fetchOffsets(fg, req.RequireStable)
		if r.version < 8 {
			resp.ErrorCode = code
			for _, t := range topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			if r.version < 2 && code != 0 {
				// v0-1 have no request-level code: every partition says it.
				for i := range resp.Topics {
					for j := range resp.Topics[i].Partitions {
						resp.Topics[i].Partitions[j].ErrorCode = code
					}
				}
			}
			continue
		}
		rg := kmsg.NewOffsetFetchResponseGroup()
		rg.Group, rg.ErrorCode, rg.Topics = fg.group, code, topics
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (fg *fetchGroup) add(topic string, parts []int32) {
	if _, ok := fg.topics[topic]; !ok {
		fg.order = append(fg.order, topic)
	}
	fg.topics[topic] = append(fg.topics[topic], parts...)
}

// fetchOffsets is one group's answer: its error code and topics.
func (c *conn) fetchOffsets(fg fetchGroup, requireStable bool) (int16, []kmsg.OffsetFetchResponseGroupTopic) {
	err := c.groupAllowed(auth.OpDescribe, fg.group)
	if err == nil {
		err = c.s.servesGroups()
	}
	if err != nil {
		return errCode(err), nil
	}
	denied := map[string]bool{}
	var tps []group.TopicPartition
	for _, t := range fg.order {
		if !c.allowed(c.ctx, auth.OpDescribe, auth.Topic(t)) {
			denied[t] = true
			continue
		}
		for _, p := range fg.topics[t] {
			tps = append(tps, group.TopicPartition{Topic: t, Partition: p})
		}
	}
	all := fg.topics == nil
	if !all && tps == nil {
		tps = []group.TopicPartition{}
	}
	var fetched []group.FetchedOffset
	if all || len(tps) > 0 {
		fetched, err = c.s.cfg.Coordinators.Group.FetchOffsets(fg.group, fg.memberID, fg.memberEpoch, tps, requireStable)
		if err != nil {
			return errCode(err), nil
		}
	}
	var out []kmsg.OffsetFetchResponseGroupTopic
	byTopic := map[string]int{}
	described := map[string]bool{}
	for _, f := range fetched {
		if all {
			ok, asked := described[f.TP.Topic]
			if !asked {
				ok = c.allowedQuiet(c.ctx, auth.OpDescribe, auth.Topic(f.TP.Topic))
				described[f.TP.Topic] = ok
			}
			if !ok {
				continue
			}
		}
		i, ok := byTopic[f.TP.Topic]
		if !ok {
			t := kmsg.NewOffsetFetchResponseGroupTopic()
			t.Topic = f.TP.Topic
			i = len(out)
			byTopic[f.TP.Topic] = i
			out = append(out, t)
		}
		p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode = f.TP.Partition, f.Offset.Offset, f.Offset.LeaderEpoch, errCode(f.Err)
		if f.Offset.Offset >= 0 {
			m := f.Offset.Metadata
			p.Metadata = &m
		} else {
			p.LeaderEpoch = -1
		}
		out[i].Partitions = append(out[i].Partitions, p)
	}
	for _, t := range fg.order {
		if !denied[t] {
			continue
		}
		rt := kmsg.NewOffsetFetchResponseGroupTopic()
		rt.Topic = t
		for _, part := range fg.topics[t] {
			p := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			p.Partition, p.Offset, p.LeaderEpoch = part, -1, -1
			p.ErrorCode = kafkaCode(sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED)
			rt.Partitions = append(rt.Partitions, p)
		}
		out = append(out, rt)
	}
	return 0, out
}

// consumerGroupHeartbeat serves ConsumerGroupHeartbeat (KIP-848: the
// consumer protocol, assignment computed by the broker): join with epoch
// 0, leave with -1 (-2: a static member's temporary leave), heartbeat
// with the member's epoch; partitions travel by topic id. READ on the
// group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on each subscribed
// topic name (TOPIC_AUTHORIZATION_FAILED, KAFKA-18813); refused, the
// member neither joins nor changes. A regular-expression subscription
// (v1's SubscribedTopicRegex; decision 73) is resolved by the
// coordinator, which keeps only the matching topics this caller may
// DESCRIBE: the heartbeat hands it the caller's check (topicFilter),
// which it runs again as topics are created.
func consumerGroupHeartbeat(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.ConsumerGroupHeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	resp.MemberEpoch = req.MemberEpoch
	if req.MemberID != "" {
		id := req.MemberID
		resp.MemberID = &id
	}
	fail := func(err error) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = errCode(err), errMessage(err)
		return resp
	}
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		return answered(fail(err))
	}
	for _, t := range uniqueNames(req.SubscribedTopicNames) {
		if res := auth.Topic(t); !c.allowed(c.ctx, auth.OpDescribe, res) {
			return answered(fail(c.deniedErr(auth.OpDescribe, res)))
		}
	}
	filter := c.topicFilter()
	return func() kmsg.Response { return c.s.consumerGroupHeartbeat(c.ctx, r, req, resp, filter, fail) }
}

// topicFilter is the DESCRIBE check on a topic for the connection's
// caller of this moment (SASL re-authentication may replace it), as the
// group coordinator keeps it for a member's regex (group.TopicFilter):
// it holds the principal and host, not the connection, and writes no
// audit line (a topic left out of a regex's matches is not an attempt
// to act, as Kafka's filterTopicDescribeAuthorizedTopics). nil without
// an authorizer.
func (c *conn) topicFilter() group.TopicFilter {
	gate := c.s.cfg.Gate
	if !gate.Enabled() {
		return nil
	}
	p, host := c.caller.Principal, c.host
	return func(topic string) bool {
		return gate.AllowedQuiet(context.Background(), p, host, auth.OpDescribe, auth.Topic(topic))
	}
}

// consumerGroupHeartbeat is an authorized heartbeat's work.
func (s *Server) consumerGroupHeartbeat(ctx context.Context, r *request, req *kmsg.ConsumerGroupHeartbeatRequest,
	resp *kmsg.ConsumerGroupHeartbeatResponse, filter group.TopicFilter, fail func(error) kmsg.Response) kmsg.Response {
	if err := s.servesGroups(); err != nil {
		return fail(err)
	}
	if req.RebalanceTimeoutMillis < -1 {
		return fail(errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "rebalance timeout %d ms is negative", req.RebalanceTimeoutMillis))
	}
	hr := group.HeartbeatRequest{MemberID: req.MemberID, MemberEpoch: req.MemberEpoch, InstanceID: stringOr(req.InstanceID, ""),
		RackID: stringOr(req.RackID, ""), SubscribedTopics: req.SubscribedTopicNames, SubscribedTopicRegex: req.SubscribedTopicRegex,
		TopicFilter: filter, Assignor: stringOr(req.ServerAssignor, ""), ClientID: r.clientID}
	if req.RebalanceTimeoutMillis > 0 {
		hr.RebalanceTimeout = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	im := s.cfg.Metadata.Image()
	if req.Topics != nil {
		var names topicNames
		hr.OwnedSet, hr.Owned = true, group.Assignment{}
		for _, t := range req.Topics {
			name := names.name(im, t.TopicID)
			if name == "" {
				continue // a deleted topic: the member no longer owns it
			}
			hr.Owned[name] = append(hr.Owned[name], t.Partitions...)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	hb, err := s.cfg.Coordinators.Group.Heartbeat(ctx, req.Group, hr)
	if err != nil {
		return fail(err)
	}
	id := hb.MemberID
	resp.MemberID, resp.MemberEpoch = &id, hb.MemberEpoch
	resp.HeartbeatIntervalMillis = int32(hb.HeartbeatInterval / time.Millisecond)
	if hb.AssignmentChanged {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, t := range slices.Sorted(maps.Keys(hb.Assignment)) {
			rt := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			rt.TopicID, rt.Partitions = topicIDOf(im, t), hb.Assignment[t]
			a.Topics = append(a.Topics, rt)
		}
		resp.Assignment = &a
	}
	return resp
}

// topicIDOf is topic's id in im (zero when it is unknown).
func topicIDOf(im *controller.Image, topic string) [16]byte {
	if t := im.Topics[topic]; t != nil {
		return topicID(t)
	}
	return [16]byte{}
}

// consumerGroupDescribe serves ConsumerGroupDescribe (KIP-848 groups):
// state, epochs, assignor and members with their assignments and
// targets. DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) and on
// every topic its members are assigned or targeted
// (TOPIC_AUTHORIZATION_FAILED without the description, KAFKA-18813).
// A classic group answers GROUP_ID_NOT_FOUND, as Kafka's.
func consumerGroupDescribe(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.ConsumerGroupDescribeRequest)
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	im := c.s.cfg.Metadata.Image()
	for _, g := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = g
		err := c.groupAllowed(auth.OpDescribe, g)
		if err == nil {
			err = c.s.servesGroups()
		}
		var d group.Description
		if err == nil {
			d, err = c.s.cfg.Coordinators.Group.DescribeGroup(g)
		}
		if err == nil {
			err = c.describableAssignments(g, d)
		}
		if err != nil {
			rg.ErrorCode, rg.ErrorMessage = errCode(err), errMessage(err)
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = d.State.String(), d.GroupEpoch, d.AssignmentEpoch, d.Assignor
		rg.AuthorizedOperations = -2147483648 // not asked (include_authorized_operations is not served)
		for _, m := range d.Members {
			rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			rm.MemberID, rm.MemberEpoch, rm.ClientID, rm.SubscribedTopics = m.MemberID, m.MemberEpoch, m.ClientID, m.SubscribedTopics
			if m.InstanceID != "" {
				id := m.InstanceID
				rm.InstanceID = &id
			}
			if m.RackID != "" {
				rack := m.RackID
				rm.RackID = &rack
			}
			if m.SubscribedTopicRegex != "" {
				re := m.SubscribedTopicRegex
				rm.SubscribedTopicRegex = &re
			}
			rm.Assignment, rm.TargetAssignment = describedAssignment(im, m.Assignment), describedAssignment(im, m.TargetAssignment)
			rm.MemberType = 1 // consumer protocol
			rg.Members = append(rg.Members, rm)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// describedAssignment is a as ConsumerGroupDescribe carries it.
func describedAssignment(im *controller.Image, a group.Assignment) kmsg.Assignment {
	out := kmsg.NewAssignment()
	for _, t := range slices.Sorted(maps.Keys(a)) {
		tp := kmsg.NewAssignmentTopicPartition()
		tp.TopicID, tp.Topic, tp.Partitions = topicIDOf(im, t), t, a[t]
		out.TopicPartitions = append(out.TopicPartitions, tp)
	}
	return out
}

// describableAssignments is nil when the caller may DESCRIBE every topic
// the members of g are assigned or targeted, else
// TOPIC_AUTHORIZATION_FAILED, the topics unnamed.
func (c *conn) describableAssignments(g string, d group.Description) error {
	asked := map[string]bool{}
	for _, m := range d.Members {
		for _, a := range []group.Assignment{m.Assignment, m.TargetAssignment} {
			for t := range a {
				if asked[t] {
					continue
				}
				asked[t] = true
				if !c.allowed(c.ctx, auth.OpDescribe, auth.Topic(t)) {
					return errs.New(sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED,
						"%s may not describe every topic group %q is assigned", c.caller.Principal, errs.Echo(g))
				}
			}
		}
	}
	return nil
}

// listGroups serves ListGroups: the groups this broker coordinates (an
// admin asks every broker) that the caller may DESCRIBE, or all of them
// for a caller that may DESCRIBE the cluster; v4+ filtered by state, v5+
// by type ("consumer" for KIP-848 groups, "classic"), each
// case-insensitively.
func listGroups(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if err := c.s.servesGroups(); err != nil {
		resp.ErrorCode = errCode(err)
		return resp
	}
	ls, err := c.s.cfg.Coordinators.Group.ListGroups(req.StatesFilter)
	if err != nil {
		resp.ErrorCode = errCode(err)
		return resp
	}
	everything := c.allowedQuiet(c.ctx, auth.OpDescribe, auth.Cluster)
	for _, l := range ls {
		if !everything && !c.allowedQuiet(c.ctx, auth.OpDescribe, auth.Group(l.Group)) {
			continue
		}
		if len(req.TypesFilter) > 0 && !containsFold(req.TypesFilter, l.Type) {
			continue
		}
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState, g.GroupType = l.Group, l.ProtocolType, l.State, l.Type
		resp.Groups = append(resp.Groups, g)
	}
	return resp
}

// deleteGroups serves DeleteGroups: each group, with its offsets, when it
// has no members (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND). DELETE
// on the group (GROUP_AUTHORIZATION_FAILED: that group stays).
func deleteGroups(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.DeleteGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	refused := make([]error, len(req.Groups))
	for i, g := range req.Groups {
		refused[i] = c.groupAllowed(auth.OpDelete, g)
	}
	return func() kmsg.Response {
		ctx, cancel := context.WithTimeout(c.ctx, coordinatorWait)
		defer cancel()
		for i, g := range req.Groups {
			err := refused[i]
			if err == nil {
				err = c.s.servesGroups()
			}
			if err == nil {
				err = c.s.cfg.Coordinators.Group.DeleteGroup(ctx, g)
			}
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, errCode(err)
			resp.Groups = append(resp.Groups, rg)
		}
		return resp
	}
}

// uniqueNames is names without repeats, in their first order.
func uniqueNames(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// containsFold reports whether list has s, ignoring case (Kafka's group
// type and state filters are case-insensitive).
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
