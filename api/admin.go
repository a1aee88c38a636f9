package api

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// adminTimeout is the time a forwarded admin request may take: the
// request's timeout_ms, else 30 s.
func adminTimeout(ms int32) time.Duration {
	if ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 30 * time.Second
}

// CreateTopics forwards to the active controller, then waits until this
// broker's image shows the result, so a Metadata sent here next sees it.
// Names reserved for internal topics are refused here
// (INVALID_TOPIC_EXCEPTION) and never forwarded.
//
// Authorization (auth.Operations, as Kafka's CreateTopics): CREATE on the
// cluster allows every topic; without it, CREATE on each topic. A topic
// refused answers TOPIC_AUTHORIZATION_FAILED and is not forwarded; the
// others are.
func (s *Server) CreateTopics(ctx context.Context, req *sluicev1.CreateTopicsRequest) (*sluicev1.CreateTopicsResponse, error) {
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	// Quiet, as Kafka's: without it the topics' own ACLs decide, and
	// those denials are the ones logged.
	anyTopic := s.authz.AllowedQuiet(ctx, auth.OpCreate, auth.Cluster)
	results := make([]*sluicev1.CreatableTopicResult, len(req.Topics))
	fwd := &sluicev1.CreateTopicsRequest{TimeoutMs: req.TimeoutMs, ValidateOnly: req.ValidateOnly}
	var fwdAt []int // index in req.Topics of each forwarded topic
	for i, ct := range req.Topics {
		if !anyTopic && !s.authz.Allowed(ctx, auth.OpCreate, auth.Topic(ct.Name)) {
			code, msg := ItemError(ctx, auth.OpCreate, auth.Topic(ct.Name))
			results[i] = &sluicev1.CreatableTopicResult{Name: ct.Name, ErrorCode: code, ErrorMessage: msg}
			continue
		}
		if cluster.IsInternalTopic(ct.Name) {
			err := cluster.ValidateTopicName(ct.Name) // refuses it, saying why
			results[i] = &sluicev1.CreatableTopicResult{Name: ct.Name, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}
			continue
		}
		fwd.Topics = append(fwd.Topics, ct)
		fwdAt = append(fwdAt, i)
	}
	if len(fwd.Topics) == 0 {
		return &sluicev1.CreateTopicsResponse{Topics: results}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerCreateTopicsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.CreateTopics(ctx, fwd)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT, "topics were created but broker %d has not seen them yet: %v", s.self.NodeID, err)
	}
	if len(out.Response.Topics) != len(fwd.Topics) {
		return nil, requestError(codes.Internal, sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Response.Topics), len(fwd.Topics))
	}
	for j, r := range out.Response.Topics {
		results[fwdAt[j]] = r
		if r.ErrorCode == sluicev1.ErrorCode_NONE && !req.ValidateOnly {
			s.log.Info("topic created", "topic", r.Name, "partitions", r.NumPartitions, "replication_factor", r.ReplicationFactor,
				"min_insync_replicas", r.Configs[controller.ConfigMinInsyncReplicas])
		}
	}
	out.Response.Topics = results
	return out.Response, nil
}

// DeleteTopics forwards to the active controller; each topic's logs are
// deleted by the brokers hosting it as they apply the change. Internal
// topics (__transaction_state: deleting it would forget every
// transaction) are refused here (INVALID_TOPIC_EXCEPTION) and never
// forwarded.
//
// Authorization (auth.Operations, as Kafka's DeleteTopics): DELETE on
// each topic. A topic refused answers TOPIC_AUTHORIZATION_FAILED, whether
// or not it exists, and is not forwarded; the others are.
func (s *Server) DeleteTopics(ctx context.Context, req *sluicev1.DeleteTopicsRequest) (*sluicev1.DeleteTopicsResponse, error) {
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	results := make([]*sluicev1.DeletableTopicResult, len(req.Names))
	fwd := &sluicev1.DeleteTopicsRequest{TimeoutMs: req.TimeoutMs}
	var fwdAt []int // index in req.Names of each forwarded name
	for i, name := range req.Names {
		if !s.authz.Allowed(ctx, auth.OpDelete, auth.Topic(name)) {
			code, msg := ItemError(ctx, auth.OpDelete, auth.Topic(name))
			results[i] = &sluicev1.DeletableTopicResult{Name: name, ErrorCode: code, ErrorMessage: msg}
			continue
		}
		if cluster.IsInternalTopic(name) {
			results[i] = &sluicev1.DeletableTopicResult{Name: name, ErrorCode: sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION,
				ErrorMessage: fmt.Sprintf("topic %q is reserved for internal topics and cannot be deleted", errs.Echo(name))}
			continue
		}
		fwd.Names = append(fwd.Names, name)
		fwdAt = append(fwdAt, i)
	}
	if len(fwd.Names) == 0 {
		return &sluicev1.DeleteTopicsResponse{Topics: results}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerDeleteTopicsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.DeleteTopics(ctx, fwd)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT, "topics were deleted but broker %d has not seen it yet: %v", s.self.NodeID, err)
	}
	if len(out.Response.Topics) != len(fwd.Names) {
		return nil, requestError(codes.Internal, sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "the controller answered %d topics for %d", len(out.Response.Topics), len(fwd.Names))
	}
	for j, r := range out.Response.Topics {
		results[fwdAt[j]] = r
		if r.ErrorCode == sluicev1.ErrorCode_NONE {
			s.log.Info("topic deleted", "topic", r.Name)
		}
	}
	out.Response.Topics = results
	return out.Response, nil
}

// AlterPartitionReassignments forwards a partition reassignment to the
// active controller, then waits until this broker's image shows it, so a
// Metadata or ListPartitionReassignments sent here next sees it. The
// checks' failures (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION,
// REASSIGNMENT_IN_PROGRESS) are in the response; NOT_CONTROLLER and
// timeouts are request errors. It needs ALTER on the cluster (else
// PERMISSION_DENIED, nothing forwarded).
func (s *Server) AlterPartitionReassignments(ctx context.Context, req *sluicev1.AlterPartitionReassignmentsRequest) (*sluicev1.AlterPartitionReassignmentsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerAlterPartitionReassignmentsResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.AlterPartitionReassignments(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT, "the reassignment was recorded but broker %d has not seen it yet: %v", s.self.NodeID, err)
	}
	if r := out.Response; r.ErrorCode == sluicev1.ErrorCode_NONE {
		s.log.Info("partition reassignment requested", "topic", req.Topic, "partition", req.Partition, "target", req.Replicas,
			"replicas", r.Replicas, "adding", r.AddingReplicas, "removing", r.RemovingReplicas)
	}
	return out.Response, nil
}

// ElectLeaders forwards a preferred-leader election to the active
// controller, then waits until this broker's image shows its outcome.
// NOT_CONTROLLER, timeouts and a named topic or partition that does not
// exist (UNKNOWN_TOPIC_OR_PARTITION, nothing elected) are request errors.
// It needs ALTER on the cluster (else PERMISSION_DENIED, nothing
// forwarded).
func (s *Server) ElectLeaders(ctx context.Context, req *sluicev1.ElectLeadersRequest) (*sluicev1.ElectLeadersResponse, error) {
	if err := s.authz.Require(ctx, auth.OpAlter, auth.Cluster); err != nil {
		return nil, err
	}
	if req.TimeoutMs < 0 {
		return nil, invalidRequest("timeout_ms must be >= 0, got %d", req.TimeoutMs)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(req.TimeoutMs))
	defer cancel()
	var out *internalv1.ControllerElectLeadersResponse
	err := s.controllers.Call(ctx, adminTimeout(req.TimeoutMs), func(ctx context.Context, cl internalv1.ControllerClient) error {
		var err error
		out, err = cl.ElectLeaders(ctx, req)
		return err
	})
	if err != nil {
		return nil, errs.Status(err, nil)
	}
	if err := s.cache.WaitForOffset(ctx, out.MetadataOffset); err != nil {
		return nil, requestError(codesDeadline, sluicev1.ErrorCode_REQUEST_TIMED_OUT, "the elections were recorded but broker %d has not seen them yet: %v", s.self.NodeID, err)
	}
	if n := len(out.Response.Elected); n > 0 {
		s.log.Info("preferred leaders elected", "partitions", n)
	}
	return out.Response, nil
}

// ListPartitionReassignments lists the running reassignments of the named
// topics (all when none are named; unknown ones are skipped) from this
// broker's image. It needs DESCRIBE on the cluster (else
// PERMISSION_DENIED).
func (s *Server) ListPartitionReassignments(ctx context.Context, req *sluicev1.ListPartitionReassignmentsRequest) (*sluicev1.ListPartitionReassignmentsResponse, error) {
	if err := s.authz.Require(ctx, auth.OpDescribe, auth.Cluster); err != nil {
		return nil, err
	}
	im := s.cache.Image()
	names := req.Topics
	if len(names) == 0 {
		names = im.TopicNames()
	}
	resp := &sluicev1.ListPartitionReassignmentsResponse{}
	for _, name := range names {
		t := im.Topics[name]
		if t == nil {
			continue
		}
		for i, p := range t.Partitions {
			if p.Reassigning() {
				resp.Reassignments = append(resp.Reassignments, &sluicev1.OngoingPartitionReassignment{Topic: name, Partition: int32(i),
					Replicas: slices.Clone(p.Replicas), AddingReplicas: slices.Clone(p.AddingReplicas), RemovingReplicas: slices.Clone(p.RemovingReplicas)})
			}
		}
	}
	return resp, nil
}

// DescribeCluster reports the quorum (each voter asked for its own state,
// in parallel, bounded), the brokers and partition health from this
// broker's image. The answer is a summary whatever the cluster's size:
// counts per broker and for the cluster, and at most the request's
// offline_replicas_limit offline replicas per broker (issue 31).
// It needs DESCRIBE on the cluster (else PERMISSION_DENIED, no voter
// asked): it tells what Kafka's DescribeQuorum and DescribeLogDirs tell,
// which need it, not only the brokers Kafka's DescribeCluster lists to
// anyone.
func (s *Server) DescribeCluster(ctx context.Context, req *sluicev1.DescribeClusterRequest) (*sluicev1.DescribeClusterResponse, error) {
	if err := s.authz.Require(ctx, auth.OpDescribe, auth.Cluster); err != nil {
		return nil, err
	}
	limit := int(req.OfflineReplicasLimit)
	switch {
	case limit == 0:
		limit = defaultOfflineReplicasLimit
	case limit < 0:
		limit = math.MaxInt
	}
	im := s.cache.Image()
	resp := &sluicev1.DescribeClusterResponse{ClusterId: im.ClusterID, MetadataOffset: im.Offset, NodeId: s.self.NodeID,
		Topics: int32(len(im.Topics))}
	type counts struct{ leaders, replicas, outOfSync int32 }
	per := map[int32]*counts{}
	of := func(id int32) *counts {
		c := per[id]
		if c == nil {
			c = &counts{}
			per[id] = c
		}
		return c
	}
	for _, name := range im.TopicNames() {
		t := im.Topics[name]
		minISR := t.MinInsyncReplicas()
		for i, p := range t.Partitions {
			resp.Partitions++
			if p.Leader == controller.NoLeader {
				resp.OfflinePartitions++
			} else {
				of(p.Leader).leaders++
			}
			h := im.PartitionHealth(t, int32(i), minISR)
			if h.UnderReplicated {
				resp.UnderReplicatedPartitions++
			}
			if h.UnderMinISR {
				resp.UnderMinIsrPartitions++
			}
			if h.AtMinISR {
				resp.AtMinIsrPartitions++
			}
			for _, r := range p.Replicas {
				c := of(r)
				c.replicas++
				if !slices.Contains(p.ISR, r) && !slices.Contains(p.AddingReplicas, r) {
					c.outOfSync++
				}
			}
		}
	}
	ids := make([]int32, 0, len(im.Brokers))
	for id := range im.Brokers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		b := im.Brokers[id]
		c := of(id)
		bs := &sluicev1.BrokerStatus{NodeId: b.ID, Address: b.Address, Rack: b.Rack, Epoch: b.Epoch, Fenced: b.Fenced,
			LeaderPartitions: c.leaders, Replicas: c.replicas, OutOfSyncReplicas: c.outOfSync, OfflineReplicaCount: int32(len(b.OfflineReplicas))}
		for _, r := range b.OfflineReplicas[:min(limit, len(b.OfflineReplicas))] {
			bs.OfflineReplicas = append(bs.OfflineReplicas, &sluicev1.OfflineReplica{Topic: r.Topic, TopicId: r.TopicID, Partition: r.Partition, Path: r.Path, Error: r.Error})
		}
		resp.Brokers = append(resp.Brokers, bs)
	}
	resp.Voters = s.quorumStatus(ctx)
	var term uint64
	for _, v := range resp.Voters {
		if v.State == "leader" && v.Term >= term {
			resp.ControllerLeader, term = v.NodeId, v.Term
		}
	}
	return resp, nil
}

// defaultOfflineReplicasLimit is the most offline replicas DescribeCluster
// lists per broker when the request leaves offline_replicas_limit 0 (as a
// client from before the field does): a failed disk under ten thousand
// partitions would otherwise make a 1.5 MB answer.
const defaultOfflineReplicasLimit = 100

// quorumStatus asks every known voter for its Raft state (1 s each, in
// parallel). Voters that do not answer are "unreachable".
func (s *Server) quorumStatus(ctx context.Context) []*sluicev1.VoterStatus {
	eps := s.controllers.Endpoints()
	slices.SortFunc(eps, func(a, b cluster.ControllerEndpoint) int { return int(a.ID - b.ID) })
	out := make([]*sluicev1.VoterStatus, len(eps))
	configs := make([][]*internalv1.VoterRef, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		out[i] = &sluicev1.VoterStatus{NodeId: ep.ID, Address: ep.Address, State: "unreachable"}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := s.pool.Get(ep.Address)
			if err != nil {
				return
			}
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			q, err := internalv1.NewControllerClient(cc).QuorumState(qctx, &internalv1.QuorumStateRequest{})
			if err != nil || q.NodeId != ep.ID {
				return
			}
			configs[i] = q.Voters
			v := out[i]
			v.RaftAddress, v.State, v.Term = q.RaftAddress, q.State, q.Term
			v.LastLogIndex, v.CommitIndex, v.AppliedIndex = q.LastLogIndex, q.CommitIndex, q.AppliedIndex
		}()
	}
	wg.Wait()
	// The Raft configuration, as any voter that answered knows it, names
	// every voter: fill in the Raft address of those that did not answer
	// and add voters this node has no gRPC address for.
	known := map[int32]*sluicev1.VoterStatus{}
	for _, v := range out {
		known[v.NodeId] = v
	}
	for _, conf := range configs {
		for _, ref := range conf {
			v := known[ref.NodeId]
			if v == nil {
				v = &sluicev1.VoterStatus{NodeId: ref.NodeId, State: "unreachable"}
				known[ref.NodeId] = v
				out = append(out, v)
			}
			if v.RaftAddress == "" {
				v.RaftAddress = ref.RaftAddress
			}
		}
	}
	slices.SortFunc(out, func(a, b *sluicev1.VoterStatus) int { return int(a.NodeId - b.NodeId) })
	return out
}

// ListOffsets resolves an offset spec per partition. LATEST is the last
// stable offset under read_committed (the default, as for Fetch) and the
// high watermark under read_uncommitted (Kafka's ListOffsets isolation
// level).
//
// Authorization (auth.Operations, as Kafka's ListOffsets): DESCRIBE on
// each topic, once per topic; a topic refused answers
// TOPIC_AUTHORIZATION_FAILED in each of its partitions, the others are
// served.
func (s *Server) ListOffsets(ctx context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	committed := true
	switch req.IsolationLevel {
	case sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
	case sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED:
		committed = false
	default:
		return nil, invalidRequest("unknown isolation_level %d", req.IsolationLevel)
	}
	resp := &sluicev1.ListOffsetsResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.ListOffsetsTopicResponse{Name: t.Name}
		resp.Topics = append(resp.Topics, tr)
		if !s.authz.Allowed(ctx, auth.OpDescribe, auth.Topic(t.Name)) {
			code, msg := ItemError(ctx, auth.OpDescribe, auth.Topic(t.Name))
			for _, lp := range t.Partitions {
				tr.Partitions = append(tr.Partitions, &sluicev1.ListOffsetsPartitionResponse{Partition: lp.Partition, Offset: -1, Timestamp: -1,
					ErrorCode: code, ErrorMessage: msg})
			}
			continue
		}
		for _, lp := range t.Partitions {
			pr := &sluicev1.ListOffsetsPartitionResponse{Partition: lp.Partition, Offset: -1, Timestamp: -1}
			tr.Partitions = append(tr.Partitions, pr)
			part, err := s.leaderPartition(t.Name, lp.Partition)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				continue
			}
			pr.LeaderEpoch = part.LeaderEpoch()
			switch lp.Spec {
			case sluicev1.OffsetSpec_OFFSET_SPEC_LATEST:
				pr.Offset = part.HighWatermark()
				if committed {
					pr.Offset = part.LastStableOffset()
				}
			case sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
				pr.Offset = part.LogStartOffset()
			case sluicev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP:
				pr.Offset, pr.Timestamp = part.MaxTimestampOffset()
			case sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
				if lp.Timestamp < 0 {
					pr.ErrorCode, pr.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "timestamp must be >= 0"
					continue
				}
				off, ts, found, err := part.OffsetForTimestamp(lp.Timestamp)
				if err != nil {
					pr.ErrorCode, pr.ErrorMessage = partitionError(err)
				} else if found {
					pr.Offset, pr.Timestamp = off, ts
				}
			default:
				pr.ErrorCode, pr.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "spec must be LATEST, EARLIEST, TIMESTAMP or MAX_TIMESTAMP"
			}
		}
	}
	return resp, nil
}
