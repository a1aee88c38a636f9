package api

import (
	"context"
	"maps"
	"slices"
	"time"

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
	CommitOffsets(ctx context.Context, g, memberID string, memberEpoch int32, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error)
	FetchOffsets(g, memberID string, memberEpoch int32, tps []group.TopicPartition, requireStable bool) ([]group.FetchedOffset, error)
	TxnCommitOffsets(ctx context.Context, r group.TxnOffsetCommitRequest) (map[group.TopicPartition]error, error)
	ListGroups(states []string) ([]group.Listing, error)
	DescribeGroup(g string) (group.Description, error)
	DeleteGroup(ctx context.Context, g string) error
}

// GroupsService serves sluice.v1.Groups: it validates and translates, and
// puts the coordinator's errors in the answers (error_code,
// error_message); a gRPC status is never used for a request's own
// failure, except a request over the request limits, refused before it
// is decoded (InvalidArgument INVALID_REQUEST, LimitRequests).
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
// (group.Coordinator.Heartbeat).
func (s *GroupsService) ConsumerGroupHeartbeat(ctx context.Context, req *sluicev1.ConsumerGroupHeartbeatRequest) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	hr := group.HeartbeatRequest{
		MemberID: req.MemberId, MemberEpoch: req.MemberEpoch, InstanceID: req.InstanceId, RackID: req.RackId,
		RebalanceTimeout: ms(req.RebalanceTimeoutMs), SessionTimeout: ms(req.SessionTimeoutMs),
		SubscribedTopics: req.SubscribedTopicNames, Assignor: req.ServerAssignor, ClientID: req.ClientId,
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

// commitResponse answers every partition of topics: reqErr for all when
// set, else its entry of results.
func commitResponse(topics []*sluicev1.OffsetCommitTopic, results map[group.TopicPartition]error, reqErr error) []*sluicev1.OffsetCommitTopicResponse {
	out := make([]*sluicev1.OffsetCommitTopicResponse, 0, len(topics))
	for _, t := range topics {
		tr := &sluicev1.OffsetCommitTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			err := reqErr
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
// (group.Coordinator.CommitOffsets).
func (s *GroupsService) OffsetCommit(ctx context.Context, req *sluicev1.OffsetCommitRequest) (*sluicev1.OffsetCommitResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	results, err := s.coord.CommitOffsets(ctx, req.GroupId, req.MemberId, req.MemberEpoch, commitEntries(req.Topics))
	return &sluicev1.OffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
		Topics: commitResponse(req.Topics, results, err)}, nil
}

// OffsetFetch implements the Groups service
// (group.Coordinator.FetchOffsets).
func (s *GroupsService) OffsetFetch(ctx context.Context, req *sluicev1.OffsetFetchRequest) (*sluicev1.OffsetFetchResponse, error) {
	var tps []group.TopicPartition
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			tps = append(tps, group.TopicPartition{Topic: t.Name, Partition: p})
		}
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
	for _, f := range fetched {
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
	return resp, nil
}

// TxnOffsetCommit implements the Groups service
// (group.Coordinator.TxnCommitOffsets).
func (s *GroupsService) TxnOffsetCommit(ctx context.Context, req *sluicev1.TxnOffsetCommitRequest) (*sluicev1.TxnOffsetCommitResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	var results map[group.TopicPartition]error
	epoch, err := producerEpoch(req.ProducerEpoch)
	if err == nil {
		results, err = s.coord.TxnCommitOffsets(ctx, group.TxnOffsetCommitRequest{
			TransactionalID: req.TransactionalId, Group: req.GroupId, ProducerID: req.ProducerId, ProducerEpoch: epoch,
			MemberID: req.MemberId, MemberEpoch: req.MemberEpoch, InstanceID: req.GroupInstanceId, Entries: commitEntries(req.Topics)})
	}
	return &sluicev1.TxnOffsetCommitResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err),
		Topics: commitResponse(req.Topics, results, err)}, nil
}

// ListGroups implements the Groups service: the groups this broker
// coordinates.
func (s *GroupsService) ListGroups(ctx context.Context, req *sluicev1.ListGroupsRequest) (*sluicev1.ListGroupsResponse, error) {
	ls, err := s.coord.ListGroups(req.StatesFilter)
	resp := &sluicev1.ListGroupsResponse{ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}
	for _, l := range ls {
		resp.Groups = append(resp.Groups, &sluicev1.ListedGroup{GroupId: l.Group, State: l.State, Members: int32(l.Members), CoordinatorId: s.nodeID})
	}
	return resp, nil
}

// DescribeGroups implements the Groups service.
func (s *GroupsService) DescribeGroups(ctx context.Context, req *sluicev1.DescribeGroupsRequest) (*sluicev1.DescribeGroupsResponse, error) {
	resp := &sluicev1.DescribeGroupsResponse{}
	for _, g := range req.GroupIds {
		d, err := s.coord.DescribeGroup(g)
		dg := &sluicev1.DescribedGroup{GroupId: g, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err), CoordinatorId: s.nodeID}
		resp.Groups = append(resp.Groups, dg)
		if err != nil {
			dg.State = "Dead"
			continue
		}
		dg.State, dg.GroupEpoch, dg.AssignmentEpoch, dg.Assignor = d.State.String(), d.GroupEpoch, d.AssignmentEpoch, d.Assignor
		for _, m := range d.Members {
			dg.Members = append(dg.Members, &sluicev1.GroupMember{MemberId: m.MemberID, InstanceId: m.InstanceID, RackId: m.RackID,
				ClientId: m.ClientID, MemberEpoch: m.MemberEpoch, SubscribedTopicNames: m.SubscribedTopics,
				Assignment: fromAssignment(m.Assignment), TargetAssignment: fromAssignment(m.TargetAssignment), MemberState: m.MemberState.String()})
		}
	}
	return resp, nil
}

// DeleteGroups implements the Groups service.
func (s *GroupsService) DeleteGroups(ctx context.Context, req *sluicev1.DeleteGroupsRequest) (*sluicev1.DeleteGroupsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, groupRequestWait)
	defer cancel()
	resp := &sluicev1.DeleteGroupsResponse{}
	for _, g := range req.GroupIds {
		err := s.coord.DeleteGroup(ctx, g)
		resp.Results = append(resp.Results, &sluicev1.DeleteGroupResult{GroupId: g, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)})
	}
	return resp, nil
}
