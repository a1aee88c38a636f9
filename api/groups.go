package api

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// groupRequestWait bounds one group request at the coordinator (its
// append has its own 10 s bound; a TxnOffsetCommit also waits for the
// transaction coordinator).
const groupRequestWait = 30 * time.Second

// GroupCoordinator is what GroupsService asks of this broker's group
// coordinator (group.Coordinator). Errors are *errs.Error.
type GroupCoordinator interface {
	Heartbeat(ctx context.Context, g string, req group.HeartbeatRequest) (group.HeartbeatResponse, error)
	CommitOffsets(ctx context.Context, g, memberID, instanceID string, memberEpoch int32, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error)
	FetchOffsets(g, memberID string, memberEpoch int32, tps []group.TopicPartition, requireStable bool) ([]group.FetchedOffset, error)
	TxnCommitOffsets(ctx context.Context, r group.TxnOffsetCommitRequest) (map[group.TopicPartition]error, error)
	ListGroups(states []string) ([]group.Listing, error)
	DescribeGroup(g string) (group.Description, error)
	DeleteGroup(ctx context.Context, g string) error
}

// GroupsService serves sluice.v1.Groups: it authorizes (auth.Operations),
// validates and translates, and puts the coordinator's errors in the
// answers (error_code, error_message); a gRPC status is never used for a
// request's own failure, except a request over the request limits,
// refused before it is decoded (InvalidArgument INVALID_REQUEST,
// LimitRequests). Refusals are answered the same way
// (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and what is refused is never
// given to the coordinator.
type GroupsService struct {
	sluicev1.UnimplementedGroupsServer

	coord  GroupCoordinator
	nodeID int32
	authz  *Authz // nil: everything allowed
}

// WithAuthz makes s authorize its callers with z.
func (s *GroupsService) WithAuthz(z *Authz) *GroupsService {
	s.authz = z
	return s
}

// NewGroupsService returns the service of the broker nodeID.
func NewGroupsService(coord GroupCoordinator, nodeID int32) *GroupsService {
	return &GroupsService{coord: coord, nodeID: nodeID}
}

func toAssignment(tps []*sluicev1.GroupTopicPartitions) group.Assignment {
	a := group.Assignment{}
	for _, t := range tps {
		a[t.Topic] = append(a[t.Topic], t.Partitions...)
	}
	return a
}

func fromAssignment(a group.Assignment) []*sluicev1.GroupTopicPartitions {
	out := make([]*sluicev1.GroupTopicPartitions, 0, len(a))
	for _, t := range slices.Sorted(maps.Keys(a)) {
		out = append(out, &sluicev1.GroupTopicPartitions{Topic: t, Partitions: a[t]})
	}
	return out
}

func ms(v int32) time.Duration { return time.Duration(v) * time.Millisecond }

// ConsumerGroupHeartbeat implements the Groups service
// (group.Coordinator.Heartbeat). It needs READ on the group
// (GROUP_AUTHORIZATION_FAILED) and, when it names the subscribed topics,
// DESCRIBE on each of them (TOPIC_AUTHORIZATION_FAILED, Kafka 4's
// KAFKA-18813: a consumer may not learn the partitions of a topic it may
// not describe); refused, the member neither joins nor changes. A
// regular-expression subscription resolves to the matching topics the
// caller may DESCRIBE (the coordinator keeps the caller's check,
// topicFilter; decision 73).
func (s *GroupsService) ConsumerGroupHeartbeat(ctx context.Context, req *sluicev1.ConsumerGroupHeartbeatRequest) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
	if err := s.authorizeHeartbeat(ctx, req); err != nil {
		return &sluicev1.ConsumerGroupHeartbeatResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
			MemberId: req.MemberId, MemberEpoch: req.MemberEpoch}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	hr := group.HeartbeatRequest{
		MemberID: req.MemberId, MemberEpoch: req.MemberEpoch, InstanceID: req.InstanceId, RackID: req.RackId,
		RebalanceTimeout: ms(req.RebalanceTimeoutMs), SessionTimeout: ms(req.SessionTimeoutMs),
		SubscribedTopics: req.SubscribedTopicNames, SubscribedTopicRegex: heartbeatRegex(req),
		TopicFilter: s.topicFilter(ctx), Assignor: req.ServerAssignor, ClientID: req.ClientId,
	}
	if req.RebalanceTimeoutMs < 0 || req.SessionTimeoutMs < 0 {
		return &sluicev1.ConsumerGroupHeartbeatResponse{ErrorCode: sluicev1.ErrorCode_INVALID_REQUEST,
			ErrorMessage: "rebalance_timeout_ms and session_timeout_ms must not be negative"}, nil
	}
	if req.TopicPartitionsSet || len(req.TopicPartitions) > 0 {
		hr.OwnedSet, hr.Owned = true, toAssignment(req.TopicPartitions)
	}
	r, err := s.coord.Heartbeat(ctx, req.GroupId, hr)
	if err != nil {
		return &sluicev1.ConsumerGroupHeartbeatResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
			MemberId: req.MemberId, MemberEpoch: req.MemberEpoch}, nil
	}
	resp := &sluicev1.ConsumerGroupHeartbeatResponse{MemberId: r.MemberID, MemberEpoch: r.MemberEpoch,
		HeartbeatIntervalMs: int32(r.HeartbeatInterval / time.Millisecond)}
	if r.AssignmentChanged {
		resp.Assignment = &sluicev1.GroupAssignment{TopicPartitions: fromAssignment(r.Assignment)}
	}
	return resp, nil
}

// topicFilter is the DESCRIBE check on a topic for ctx's caller, as the
// group coordinator keeps it for a member's regex (group.TopicFilter):
// it holds the principal and host, not ctx, and writes no audit line
// (a topic left out of a regex's matches is not an attempt to act).
// nil without an authorizer.
func (s *GroupsService) topicFilter(ctx context.Context) group.TopicFilter {
	if !s.authz.Enabled() {
		return nil
	}
	gate, p, host := s.authz.Gate, auth.CallerFrom(ctx).Principal, hostOf(ctx)
	return func(topic string) bool {
		return gate.AllowedQuiet(context.Background(), p, host, auth.OpDescribe, auth.Topic(topic))
	}
}

func (s *GroupsService) authorizeHeartbeat(ctx context.Context, req *sluicev1.ConsumerGroupHeartbeatRequest) error {
	if err := s.authz.Check(ctx, auth.OpRead, auth.Group(req.GroupId)); err != nil {
		return err
	}
	var first error
	denied := 0
	for _, t := range uniq(req.SubscribedTopicNames) {
		if err := s.authz.Check(ctx, auth.OpDescribe, auth.Topic(t)); err != nil {
			if first == nil {
				first = err
			}
			denied++
		}
	}
	if denied > 1 {
		return errs.New(errs.Code(first), "%s (and %d more subscribed topics)", errs.Message(first), denied-1)
	}
	return first
}

// uniq returns names without repeats, in their first order.
func uniq(names []string) []string {
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

// deniedTopics asks op on each topic of names once and returns the
// refusals by topic (nil if none): the per-topic answers of the requests
// that serve the others (Kafka's filterByAuthorized).
func (s *GroupsService) deniedTopics(ctx context.Context, op auth.Operation, names []string) map[string]error {
	var denied map[string]error
	for _, t := range uniq(names) {
		if err := s.authz.Check(ctx, op, auth.Topic(t)); err != nil {
			if denied == nil {
				denied = map[string]error{}
			}
			denied[t] = err
		}
	}
	return denied
}

func commitTopicNames(topics []*sluicev1.OffsetCommitTopic) []string {
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		names = append(names, t.Name)
	}
	return names
}

// allowedCommitTopics are the topics not in denied.
func allowedCommitTopics(topics []*sluicev1.OffsetCommitTopic, denied map[string]error) []*sluicev1.OffsetCommitTopic {
	if denied == nil {
		return topics
	}
	out := make([]*sluicev1.OffsetCommitTopic, 0, len(topics))
	for _, t := range topics {
		if denied[t.Name] == nil {
			out = append(out, t)
		}
	}
	return out
}

func commitEntries(topics []*sluicev1.OffsetCommitTopic) []group.OffsetCommitEntry {
	var out []group.OffsetCommitEntry
	for _, t := range topics {
		for _, p := range t.Partitions {
			out = append(out, group.OffsetCommitEntry{
				TP:     group.TopicPartition{Topic: t.Name, Partition: p.Partition},
				Offset: group.Offset{Offset: p.CommittedOffset, LeaderEpoch: p.CommittedLeaderEpoch, Metadata: p.CommittedMetadata},
			})
		}
	}
	return out
}

// commitResponse answers every partition of topics: its topic's refusal
// in denied, else reqErr when set, else its entry of results.
func commitResponse(topics []*sluicev1.OffsetCommitTopic, denied map[string]error, results map[group.TopicPartition]error, reqErr error) []*sluicev1.OffsetCommitTopicResponse {
	out := make([]*sluicev1.OffsetCommitTopicResponse, 0, len(topics))
	for _, t := range topics {
		tr := &sluicev1.OffsetCommitTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			err := denied[t.Name]
			if err == nil {
				err = reqErr
			}
			if err == nil {
				err = results[group.TopicPartition{Topic: t.Name, Partition: p.Partition}]
			}
			tr.Partitions = append(tr.Partitions, &sluicev1.OffsetCommitPartitionResponse{Partition: p.Partition,
				ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)})
		}
		out = append(out, tr)
	}
	return out
}

// OffsetCommit implements the Groups service
// (group.Coordinator.CommitOffsets). It needs READ on the group
// (GROUP_AUTHORIZATION_FAILED for the request and every partition) and
// READ on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions,
// which are not committed; the others are).
func (s *GroupsService) OffsetCommit(ctx context.Context, req *sluicev1.OffsetCommitRequest) (*sluicev1.OffsetCommitResponse, error) {
	if err := s.authz.Check(ctx, auth.OpRead, auth.Group(req.GroupId)); err != nil {
		return &sluicev1.OffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
			Topics: commitResponse(req.Topics, nil, nil, err)}, nil
	}
	denied := s.deniedTopics(ctx, auth.OpRead, commitTopicNames(req.Topics))
	allowed := allowedCommitTopics(req.Topics, denied)
	if len(allowed) == 0 && len(denied) > 0 { // nothing to commit (Kafka asks no coordinator)
		return &sluicev1.OffsetCommitResponse{Topics: commitResponse(req.Topics, denied, nil, nil)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	results, err := s.coord.CommitOffsets(ctx, req.GroupId, req.MemberId, "", req.MemberEpoch, commitEntries(allowed))
	return &sluicev1.OffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
		Topics: commitResponse(req.Topics, denied, results, err)}, nil
}

// OffsetFetch implements the Groups service
// (group.Coordinator.FetchOffsets). It needs DESCRIBE on the group
// (GROUP_AUTHORIZATION_FAILED) and on each topic: a topic named and
// refused answers TOPIC_AUTHORIZATION_FAILED for its partitions (after
// the others, as Kafka), and the all-partitions form leaves out the
// topics the caller may not describe.
func (s *GroupsService) OffsetFetch(ctx context.Context, req *sluicev1.OffsetFetchRequest) (*sluicev1.OffsetFetchResponse, error) {
	if err := s.authz.Check(ctx, auth.OpDescribe, auth.Group(req.GroupId)); err != nil {
		return &sluicev1.OffsetFetchResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}, nil
	}
	names := make([]string, 0, len(req.Topics))
	for _, t := range req.Topics {
		names = append(names, t.Name)
	}
	denied := s.deniedTopics(ctx, auth.OpDescribe, names)
	var tps []group.TopicPartition
	for _, t := range req.Topics {
		if denied[t.Name] != nil {
			continue
		}
		for _, p := range t.Partitions {
			tps = append(tps, group.TopicPartition{Topic: t.Name, Partition: p})
		}
	}
	all := tps == nil // the coordinator's "every partition the group has an offset for"
	if all && len(denied) > 0 {
		// Named topics, all refused: none of the others either.
		tps, all = []group.TopicPartition{}, false
	}
	epoch := req.MemberEpoch
	if req.MemberId == "" && epoch == 0 {
		epoch = -1 // a client that set neither field: no member check
	}
	fetched, err := s.coord.FetchOffsets(req.GroupId, req.MemberId, epoch, tps, req.RequireStable)
	resp := &sluicev1.OffsetFetchResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}
	if err != nil {
		return resp, nil
	}
	byTopic := map[string]*sluicev1.OffsetFetchTopicResponse{}
	described := map[string]bool{} // all: topic -> may DESCRIBE, asked once
	for _, f := range fetched {
		if all {
			ok, asked := described[f.TP.Topic]
			if !asked {
				ok = s.authz.AllowedQuiet(ctx, auth.OpDescribe, auth.Topic(f.TP.Topic))
				described[f.TP.Topic] = ok
			}
			if !ok {
				continue
			}
		}
		tr := byTopic[f.TP.Topic]
		if tr == nil {
			tr = &sluicev1.OffsetFetchTopicResponse{Name: f.TP.Topic}
			byTopic[f.TP.Topic] = tr
			resp.Topics = append(resp.Topics, tr)
		}
		tr.Partitions = append(tr.Partitions, &sluicev1.OffsetFetchPartitionResponse{Partition: f.TP.Partition,
			CommittedOffset: f.Offset.Offset, CommittedLeaderEpoch: f.Offset.LeaderEpoch, CommittedMetadata: f.Offset.Metadata,
			CommitTimeMs: f.Offset.CommitTimeMs, ErrorCode: errs.Code(f.Err), ErrorMessage: errs.Message(f.Err)})
	}
	for _, t := range req.Topics {
		err := denied[t.Name]
		if err == nil {
			continue
		}
		tr := &sluicev1.OffsetFetchTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			tr.Partitions = append(tr.Partitions, &sluicev1.OffsetFetchPartitionResponse{Partition: p, CommittedOffset: -1,
				CommittedLeaderEpoch: -1, CommitTimeMs: -1, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)})
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, nil
}

// TxnOffsetCommit implements the Groups service
// (group.Coordinator.TxnCommitOffsets). It needs WRITE on the
// transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on
// the group (GROUP_AUTHORIZATION_FAILED), each for the request and every
// partition, and READ on each topic (TOPIC_AUTHORIZATION_FAILED for its
// partitions, left out of the transaction; the others are written).
func (s *GroupsService) TxnOffsetCommit(ctx context.Context, req *sluicev1.TxnOffsetCommitRequest) (*sluicev1.TxnOffsetCommitResponse, error) {
	err := s.authz.Check(ctx, auth.OpWrite, auth.TransactionalID(req.TransactionalId))
	if err == nil {
		err = s.authz.Check(ctx, auth.OpRead, auth.Group(req.GroupId))
	}
	if err != nil {
		return &sluicev1.TxnOffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
			Topics: commitResponse(req.Topics, nil, nil, err)}, nil
	}
	denied := s.deniedTopics(ctx, auth.OpRead, commitTopicNames(req.Topics))
	allowed := allowedCommitTopics(req.Topics, denied)
	if len(allowed) == 0 && len(denied) > 0 { // nothing to commit (Kafka asks no coordinator)
		return &sluicev1.TxnOffsetCommitResponse{Topics: commitResponse(req.Topics, denied, nil, nil)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	var results map[group.TopicPartition]error
	epoch, err := producerEpoch(req.ProducerEpoch)
	if err == nil {
		results, err = s.coord.TxnCommitOffsets(ctx, group.TxnOffsetCommitRequest{
			TransactionalID: req.TransactionalId, Group: req.GroupId, ProducerID: req.ProducerId, ProducerEpoch: epoch,
			MemberID: req.MemberId, MemberEpoch: req.MemberEpoch, InstanceID: req.GroupInstanceId, Entries: commitEntries(allowed)})
	}
	return &sluicev1.TxnOffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
		Topics: commitResponse(req.Topics, denied, results, err)}, nil
}

// ListGroups implements the Groups service: the groups this broker
// coordinates that the caller may DESCRIBE, or all of them for a caller
// that may DESCRIBE the cluster (Kafka keeps that alternative).
func (s *GroupsService) ListGroups(ctx context.Context, req *sluicev1.ListGroupsRequest) (*sluicev1.ListGroupsResponse, error) {
	ls, err := s.coord.ListGroups(req.StatesFilter)
	resp := &sluicev1.ListGroupsResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}
	everything := s.authz.AllowedQuiet(ctx, auth.OpDescribe, auth.Cluster)
	for _, l := range ls {
		if !everything && !s.authz.AllowedQuiet(ctx, auth.OpDescribe, auth.Group(l.Group)) {
			continue
		}
		resp.Groups = append(resp.Groups, &sluicev1.ListedGroup{GroupId: l.Group, State: l.State, Members: int32(l.Members), CoordinatorId: s.nodeID,
			Type: l.Type, ProtocolType: l.ProtocolType})
	}
	return resp, nil
}

// DescribeGroups implements the Groups service. A group needs DESCRIBE
// (GROUP_AUTHORIZATION_FAILED for that group), and so does each topic its
// members are assigned or targeted: a group naming one the caller may
// not describe is answered TOPIC_AUTHORIZATION_FAILED without its
// description (Kafka 4's ConsumerGroupDescribe, KAFKA-18813; the message
// does not name the topic).
func (s *GroupsService) DescribeGroups(ctx context.Context, req *sluicev1.DescribeGroupsRequest) (*sluicev1.DescribeGroupsResponse, error) {
	resp := &sluicev1.DescribeGroupsResponse{}
	for _, g := range req.GroupIds {
		err := s.authz.Check(ctx, auth.OpDescribe, auth.Group(g))
		var d group.Description
		if err == nil {
			d, err = s.coord.DescribeGroup(g)
		}
		if err == nil {
			err = s.authorizeAssignedTopics(ctx, g, d)
		}
		dg := &sluicev1.DescribedGroup{GroupId: g, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err), CoordinatorId: s.nodeID}
		resp.Groups = append(resp.Groups, dg)
		if err != nil {
			dg.State = "Dead"
			continue
		}
		dg.Type = d.Type
		if cd := d.Classic; cd != nil {
			dg.State, dg.Generation, dg.ProtocolType, dg.Protocol, dg.Leader = cd.State.String(), cd.Generation, cd.ProtocolType, cd.Protocol, cd.Leader
			for _, m := range cd.Members {
				gm := &sluicev1.GroupMember{MemberId: m.MemberID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
					MemberEpoch: cd.Generation, MemberMetadata: m.Metadata, MemberAssignment: m.Assignment}
				if cd.ProtocolType == group.ConsumerProtocolType {
					// The consumer protocol's bytes, decoded for display; other
					// protocol types are only relayed.
					if topics, err := group.DecodeSubscription(m.Metadata); err == nil && len(m.Metadata) > 0 {
						gm.SubscribedTopicNames = topics
					}
					if a, err := group.DecodeAssignment(m.Assignment); err == nil {
						gm.Assignment = fromAssignment(a)
					}
				}
				dg.Members = append(dg.Members, gm)
			}
			continue
		}
		dg.State, dg.GroupEpoch, dg.AssignmentEpoch, dg.Assignor = d.State.String(), d.GroupEpoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			dg.Members = append(dg.Members, &sluicev1.GroupMember{MemberId: m.MemberID, InstanceId: m.InstanceID, RackId: m.RackID,
				ClientId: m.ClientID, MemberEpoch: m.MemberEpoch, SubscribedTopicNames: m.SubscribedTopics, SubscribedTopicRegex: m.SubscribedTopicRegex,
				Assignment: fromAssignment(m.Assignment), TargetAssignment: fromAssignment(m.TargetAssignment), MemberState: m.MemberState.String()})
		}
	}
	return resp, nil
}

// authorizeAssignedTopics is nil when the caller may DESCRIBE every topic
// the members of g (described by d) are assigned or targeted, else
// TOPIC_AUTHORIZATION_FAILED, the topics unnamed (the caller may not
// learn them).
func (s *GroupsService) authorizeAssignedTopics(ctx context.Context, g string, d group.Description) error {
	asked := map[string]bool{}
	for _, m := range d.Members {
		for _, a := range []group.Assignment{m.Assignment, m.TargetAssignment} {
			for t := range a {
				if asked[t] {
					continue
				}
				asked[t] = true
				if !s.authz.Allowed(ctx, auth.OpDescribe, auth.Topic(t)) {
					return errs.New(sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED,
						"%s may not describe every topic group %q is assigned", auth.CallerFrom(ctx).Principal, errs.Echo(g))
				}
			}
		}
	}
	return nil
}

// DeleteGroups implements the Groups service. A group needs DELETE
// (GROUP_AUTHORIZATION_FAILED for that group, which is not deleted).
func (s *GroupsService) DeleteGroups(ctx context.Context, req *sluicev1.DeleteGroupsRequest) (*sluicev1.DeleteGroupsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	resp := &sluicev1.DeleteGroupsResponse{}
	for _, g := range req.GroupIds {
		err := s.authz.Check(ctx, auth.OpDelete, auth.Group(g))
		if err == nil {
			err = s.coord.DeleteGroup(ctx, g)
		}
		resp.Results = append(resp.Results, &sluicev1.DeleteGroupResult{GroupId: g, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)})
	}
	return resp, nil
}

// heartbeatRegex is a heartbeat's regex subscription: nil when absent
// (unchanged), else its value ("" clears it).
func heartbeatRegex(req *sluicev1.ConsumerGroupHeartbeatRequest) *string {
	if r, ok := req.GetRegex().(*sluicev1.ConsumerGroupHeartbeatRequest_SubscribedTopicRegex); ok {
		v := r.SubscribedTopicRegex
		return &v
	}
	return nil
}
