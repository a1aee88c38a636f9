package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup; decision 70): the broker keeps the membership and relays
// the members' protocol metadata to the leader, which assigns on the
// client (range, round-robin, sticky, cooperative-sticky: the broker
// never reads them). Each request needs READ on the group
// (GROUP_AUTHORIZATION_FAILED: nothing changes).

// ClassicGroups is what the door asks of the group coordinator for the
// classic protocol (group.Coordinator; part of GroupCoordinator).
type ClassicGroups interface {
	JoinGroup(ctx context.Context, req group.JoinGroupRequest) (group.JoinGroupResponse, error)
	SyncGroup(ctx context.Context, req group.SyncGroupRequest) (group.SyncGroupResponse, error)
	ClassicHeartbeat(ctx context.Context, g, memberID, instanceID string, generation int32) error
	LeaveGroup(ctx context.Context, g string, members []group.LeaveMember) ([]error, error)
	DeleteOffsets(ctx context.Context, g string, tps []group.TopicPartition) (map[group.TopicPartition]error, error)
}

// clientHost is how Kafka's DescribeGroups shows a member's host.
func (c *conn) clientHost() string { return "/" + c.host }

// joinGroup serves JoinGroup: the member joins (or rejoins) and the
// answer comes when the group's join phase completes — every known
// member rejoined or the rebalance timeout passed — with the generation,
// the protocol chosen and, to the leader, every member's metadata. v4+
// (KIP-394): a first join without a member id is answered
// MEMBER_ID_REQUIRED with one, to join again with. v5+ (KIP-345): a
// static member's instance id.
func joinGroup(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.JoinGroupRequest)
	resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
	resp.Generation, resp.MemberID = -1, req.MemberID
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = errCode(err)
		return resp
	}
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		return answered(fail(err))
	}
	jr := group.JoinGroupRequest{Group: req.Group, MemberID: req.MemberID, InstanceID: stringOr(req.InstanceID, ""),
		ClientID: r.clientID, ClientHost: c.clientHost(), ProtocolType: req.ProtocolType, Reason: stringOr(req.Reason, ""),
		SessionTimeout:       time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout:     time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		RequireKnownMemberID: r.version >= 4, SupportsSkipAssignment: r.version >= 9}
	if r.version == 0 {
		jr.RebalanceTimeout = jr.SessionTimeout
	}
	for _, p := range req.Protocols {
		jr.Protocols = append(jr.Protocols, group.ClassicProtocol{Name: p.Name, Metadata: p.Metadata})
	}
	return func() kmsg.Response {
		cg, err := c.s.classicGroups()
		if err != nil {
			return fail(err)
		}
		// The wait is the group's: up to the rebalance timeout, plus the
		// coordinator's own bound on its append.
		ctx, cancel := context.WithTimeout(c.ctx, jr.RebalanceTimeout+coordinatorWait)
		defer cancel()
		jresp, err := cg.JoinGroup(ctx, jr)
		if jresp.MemberID != "" {
			resp.MemberID = jresp.MemberID
		}
		if err != nil {
			return fail(err)
		}
		resp.Generation, resp.LeaderID, resp.SkipAssignment = jresp.Generation, jresp.Leader, jresp.SkipAssignment
		proto, typ := jresp.ProtocolName, jresp.ProtocolType
		resp.Protocol, resp.ProtocolType = &proto, &typ
		for _, m := range jresp.Members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.ProtocolMetadata = m.MemberID, m.Metadata
			if m.InstanceID != "" {
				id := m.InstanceID
				rm.InstanceID = &id
			}
			resp.Members = append(resp.Members, rm)
		}
		return resp
	}
}

// syncGroup serves SyncGroup: the leader's assignments are stored (and
// the group written to __consumer_offsets) and every member is answered
// its own; a follower's answer waits for the leader's sync.
// ILLEGAL_GENERATION for a stale generation, REBALANCE_IN_PROGRESS when
// a new rebalance began, INCONSISTENT_GROUP_PROTOCOL when the v5+
// protocol type or name is not the group's.
func syncGroup(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.SyncGroupRequest)
	resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
	fail := func(err error) kmsg.Response {
		resp.ErrorCode = errCode(err)
		return resp
	}
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		return answered(fail(err))
	}
	sr := group.SyncGroupRequest{Group: req.Group, MemberID: req.MemberID, InstanceID: stringOr(req.InstanceID, ""),
		Generation: req.Generation, ProtocolType: req.ProtocolType, ProtocolName: req.Protocol}
	if len(req.GroupAssignment) > 0 {
		sr.Assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			sr.Assignments[a.MemberID] = a.MemberAssignment
		}
	}
	return func() kmsg.Response {
		cg, err := c.s.classicGroups()
		if err != nil {
			return fail(err)
		}
		// A follower waits for the leader, which has the rebalance
		// timeout to sync; the request's own bound is the coordinator's.
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Minute)
		defer cancel()
		sresp, err := cg.SyncGroup(ctx, sr)
		if err != nil {
			return fail(err)
		}
		resp.MemberAssignment = sresp.Assignment
		if r.version >= 5 {
			typ, proto := sresp.ProtocolType, sresp.ProtocolName
			resp.ProtocolType, resp.Protocol = &typ, &proto
		}
		return resp
	}
}

// heartbeat serves the classic protocol's Heartbeat: REBALANCE_IN_PROGRESS
// tells the member to join again; ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID
// and FENCED_INSTANCE_ID that it is out of the group.
func heartbeat(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.HeartbeatRequest)
	resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		resp.ErrorCode = errCode(err)
		return answered(resp)
	}
	return func() kmsg.Response {
		cg, err := c.s.classicGroups()
		if err == nil {
			ctx, cancel := context.WithTimeout(c.ctx, coordinatorWait)
			defer cancel()
			err = cg.ClassicHeartbeat(ctx, req.Group, req.MemberID, stringOr(req.InstanceID, ""), req.Generation)
		}
		resp.ErrorCode = errCode(err)
		return resp
	}
}

// leaveGroup serves LeaveGroup: v0-2 one member by id, v3+ several by
// member id or instance id (KIP-345), each answered on its own; the group
// rebalances without them.
func leaveGroup(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.LeaveGroupRequest)
	resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if err := c.groupAllowed(auth.OpRead, req.Group); err != nil {
		resp.ErrorCode = errCode(err)
		return answered(resp)
	}
	var members []group.LeaveMember
	if r.version < 3 {
		members = []group.LeaveMember{{MemberID: req.MemberID}}
	} else {
		for _, m := range req.Members {
			members = append(members, group.LeaveMember{MemberID: m.MemberID, InstanceID: stringOr(m.InstanceID, ""), Reason: stringOr(m.Reason, "")})
		}
	}
	return func() kmsg.Response {
		cg, err := c.s.classicGroups()
		var each []error
		if err == nil {
			ctx, cancel := context.WithTimeout(c.ctx, coordinatorWait)
			defer cancel()
			each, err = cg.LeaveGroup(ctx, req.Group, members)
		}
		if r.version < 3 {
			if err == nil && len(each) == 1 {
				err = each[0]
			}
			resp.ErrorCode = errCode(err)
			return resp
		}
		resp.ErrorCode = errCode(err)
		if err != nil {
			return resp
		}
		for i, m := range req.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
			if i < len(each) {
				rm.ErrorCode = errCode(each[i])
			}
			resp.Members = append(resp.Members, rm)
		}
		return resp
	}
}

// describeGroups serves DescribeGroups (the classic groups' describe;
// KIP-848 groups have ConsumerGroupDescribe): state, protocol type and,
// when Stable, the protocol and each member's metadata and assignment.
// As Kafka 4's v0-5, a group that is not classic or does not exist is
// answered Dead without an error, and one that has only offsets Empty.
// DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED).
func describeGroups(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.DescribeGroupsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, g := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.State = g, "Dead"
		rg.AuthorizedOperations = -2147483648
		err := c.groupAllowed(auth.OpDescribe, g)
		if err == nil {
			err = c.s.servesGroups()
		}
		var d group.Description
		if err == nil {
			d, err = c.s.cfg.Coordinators.Group.DescribeGroup(g)
			if errs.Code(err) == sluicev1.ErrorCode_GROUP_ID_NOT_FOUND {
				err = nil // Dead
			}
		}
		switch {
		case err != nil:
			rg.ErrorCode = errCode(err)
		case d.Classic != nil:
			cd := d.Classic
			rg.State, rg.ProtocolType = cd.State.String(), cd.ProtocolType
			if cd.State == group.ClassicStable {
				rg.Protocol = cd.Protocol
			}
			for _, m := range cd.Members {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.ClientID, rm.ClientHost = m.MemberID, m.ClientID, m.ClientHost
				rm.ProtocolMetadata, rm.MemberAssignment = m.Metadata, m.Assignment
				if m.InstanceID != "" {
					id := m.InstanceID
					rm.InstanceID = &id
				}
				rg.Members = append(rg.Members, rm)
			}
		case d.GroupID != "" && len(d.Members) == 0:
			rg.State = "Empty" // offsets only
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// offsetDelete serves OffsetDelete: the group's committed offsets of the
// partitions named are deleted, except those of topics its members are
// subscribed to (GROUP_SUBSCRIBED_TO_TOPIC). DELETE on the group
// (GROUP_AUTHORIZATION_FAILED) and READ on each topic
// (TOPIC_AUTHORIZATION_FAILED for its partitions, which stay).
func offsetDelete(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.OffsetDeleteRequest)
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if err := c.groupAllowed(auth.OpDelete, req.Group); err != nil {
		resp.ErrorCode = errCode(err)
		return answered(resp)
	}
	topics := make([]offsetCommitTopic, len(req.Topics))
	for i, t := range req.Topics {
		topics[i].topic = t.Topic
		for _, p := range t.Partitions {
			topics[i].parts = append(topics[i].parts, group.OffsetCommitEntry{TP: group.TopicPartition{Topic: t.Topic, Partition: p.Partition}})
		}
	}
	denied := c.deniedTopics(auth.OpRead, topics)
	return func() kmsg.Response {
		cg, err := c.s.classicGroups()
		var results map[group.TopicPartition]error
		if entries := allowedEntries(topics, denied); err == nil && len(entries) > 0 {
			tps := make([]group.TopicPartition, len(entries))
			for i, en := range entries {
				tps[i] = en.TP
			}
			ctx, cancel := context.WithTimeout(c.ctx, coordinatorWait)
			defer cancel()
			results, err = cg.DeleteOffsets(ctx, req.Group, tps)
		}
		if err != nil {
			resp.ErrorCode = errCode(err)
			return resp
		}
		resp.Topics = answerCommit(topics, denied, nil, results,
			func(name string) kmsg.OffsetDeleteResponseTopic {
				t := kmsg.NewOffsetDeleteResponseTopic()
				t.Topic = name
				return t
			}, func(t *kmsg.OffsetDeleteResponseTopic, partition int32, code int16) {
				p := kmsg.NewOffsetDeleteResponseTopicPartition()
				p.Partition, p.ErrorCode = partition, code
				t.Partitions = append(t.Partitions, p)
			})
		return resp
	}
}

// classicGroups is the group coordinator's classic protocol, or
// INVALID_REQUEST when this broker serves no groups.
func (s *Server) classicGroups() (ClassicGroups, error) {
	if err := s.servesGroups(); err != nil {
		return nil, err
	}
	return s.cfg.Coordinators.Group, nil
}
