package api

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// metadataKeepalive is how often an idle metadata stream sends an empty
// update (carrying the serving voter's view of the leader).
const metadataKeepalive = time.Second

// ControllerService serves sluice.internal.v1.Controller on a controller
// voter. It translates between the wire and cluster/controller; the rules
// live there.
type ControllerService struct {
	internalv1.UnimplementedControllerServer

	ctl *controller.Controller
	// grpcAddress resolves a voter's gRPC address for NOT_CONTROLLER
	// answers ("" when unknown).
	grpcAddress func(id int32) string

	closeOnce sync.Once
	closed    chan struct{} // ends every metadata stream
}

// NewControllerService returns the service over ctl.
func NewControllerService(ctl *controller.Controller, grpcAddress func(id int32) string) *ControllerService {
	return &ControllerService{ctl: ctl, grpcAddress: grpcAddress, closed: make(chan struct{})}
}

// Close ends every open metadata stream (so a graceful stop does not wait
// on them) and refuses new ones.
func (s *ControllerService) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// status encodes err for the wire, naming the leader on NOT_CONTROLLER.
func (s *ControllerService) status(err error) error {
	if errs.Code(err) != sluicev1.ErrorCode_NOT_CONTROLLER {
		return errs.Status(err, nil)
	}
	md := map[string]string{}
	if id, _ := s.ctl.Leader(); id >= 0 {
		md["leader_id"] = strconv.Itoa(int(id))
		if addr := s.grpcAddress(id); addr != "" {
			md["leader_address"] = addr
		}
	}
	return errs.Status(err, md)
}

// RegisterBroker implements the Controller service.
func (s *ControllerService) RegisterBroker(ctx context.Context, req *internalv1.RegisterBrokerRequest) (*internalv1.RegisterBrokerResponse, error) {
	epoch, err := s.ctl.RegisterBroker(ctx, controller.RegisterBroker{BrokerID: req.BrokerId, Address: req.Address,
		InternalAddress: req.InternalAddress, KafkaAddress: req.KafkaAddress, Rack: req.Rack, IncarnationID: req.IncarnationId,
		MaxReplicas: req.MaxReplicas, OpenFilesLimit: req.OpenFilesLimit})
	if err != nil {
		return nil, s.status(err)
	}
	// The epoch is the Raft index of the registration record.
	return &internalv1.RegisterBrokerResponse{BrokerEpoch: epoch, MetadataOffset: uint64(epoch)}, nil
}

// BrokerHeartbeat implements the Controller service.
func (s *ControllerService) BrokerHeartbeat(ctx context.Context, req *internalv1.BrokerHeartbeatRequest) (*internalv1.BrokerHeartbeatResponse, error) {
	resp, err := s.ctl.Heartbeat(ctx, controller.HeartbeatRequest{
		BrokerID: req.BrokerId, BrokerEpoch: req.BrokerEpoch, MetadataOffset: req.MetadataOffset,
		WantUnfence: req.WantUnfence, WantShutdown: req.WantShutdown, OfflineReplicas: offlineReplicas(req.OfflineReplicas),
	})
	if err != nil {
		return nil, s.status(err)
	}
	return &internalv1.BrokerHeartbeatResponse{Fenced: resp.Fenced, ShutdownReady: resp.ShutdownReady, MetadataOffset: resp.MetadataOffset}, nil
}

// AllocateProducerIds implements the Controller service. The caller must
// present its current broker epoch.
func (s *ControllerService) AllocateProducerIds(ctx context.Context, req *internalv1.AllocateProducerIdsRequest) (*internalv1.AllocateProducerIdsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	b := s.ctl.Image().Brokers[req.BrokerId]
	if b == nil || b.Epoch != req.BrokerEpoch {
		return nil, s.status(errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "broker %d epoch %d is not current", req.BrokerId, req.BrokerEpoch))
	}
	start, end, err := s.ctl.AllocateProducerIDs(ctx, req.BrokerId)
	if err != nil {
		return nil, s.status(err)
	}
	return &internalv1.AllocateProducerIdsResponse{ProducerIdStart: start, ProducerIdLen: int32(end - start)}, nil
}

// CreateTopics implements the Controller service: each topic gets the
// cluster defaults for what it leaves unset (controller.TopicDefaults), is
// validated (name, partition count, replication factor against the live
// brokers, configs), and the valid ones are created together, each with
// its own outcome.
func (s *ControllerService) CreateTopics(ctx context.Context, req *sluicev1.CreateTopicsRequest) (*internalv1.ControllerCreateTopicsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &sluicev1.CreateTopicsResponse{}
	seen := map[string]int{}
	for _, ct := range req.Topics {
		seen[ct.Name]++
	}
	// Each topic is checked first; the valid ones are created together
	// (controller.CreateTopics: one pipeline of records, not two Raft
	// round trips per topic), and each answer then filled in.
	type pending struct {
		r   *sluicev1.CreatableTopicResult
		nt  *sluicev1.CreatableTopic
		tc  cluster.TopicConfig
		d   controller.NewTopic
		err error
	}
	todo := make([]*pending, 0, len(req.Topics))
	var create []controller.TopicToCreate
	var created []*pending
	for _, ct := range req.Topics {
		pt := &pending{r: &sluicev1.CreatableTopicResult{Name: ct.Name}}
		resp.Topics = append(resp.Topics, pt.r)
		todo = append(todo, pt)
		if seen[ct.Name] > 1 {
			pt.r.ErrorCode, pt.r.ErrorMessage = sluicev1.ErrorCode_INVALID_REQUEST, "topic listed more than once in the request"
			continue
		}
		// The cluster defaults (controller.TopicDefaults) fill in an unset
		// replication factor and min.insync.replicas before the checks.
		pt.d = s.ctl.TopicDefaults().Apply(ct.ReplicationFactor, ct.Configs)
		pt.nt = &sluicev1.CreatableTopic{Name: ct.Name, NumPartitions: ct.NumPartitions, ReplicationFactor: pt.d.ReplicationFactor, Configs: pt.d.Configs}
		pt.tc, pt.err = validateNewTopic(pt.nt)
		switch {
		case pt.err == nil && req.ValidateOnly:
			_, pt.err = s.ctl.PlanTopic(pt.nt.Name, pt.nt.NumPartitions, pt.nt.ReplicationFactor)
		case pt.err == nil:
			create = append(create, controller.TopicToCreate{Name: pt.nt.Name, Partitions: pt.nt.NumPartitions, ReplicationFactor: pt.nt.ReplicationFactor, Configs: pt.nt.Configs})
			created = append(created, pt)
		}
	}
	if len(create) > 0 {
		_, perTopic, err := s.ctl.CreateTopics(ctx, create)
		if err != nil {
			return nil, s.status(err)
		}
		for i, pt := range created {
			pt.err = perTopic[i]
		}
	}
	for _, pt := range todo {
		if pt.nt == nil {
			continue // refused above
		}
		r, nt, d := pt.r, pt.nt, pt.d
		if err := pt.err; err != nil {
			if errs.Code(err) == sluicev1.ErrorCode_NOT_CONTROLLER {
				return nil, s.status(err)
			}
			r.ErrorCode, r.ErrorMessage = partitionError(err)
			if d.RFDefaulted && r.ErrorCode == sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR {
				r.ErrorMessage += fmt.Sprintf(" (replication factor %d is the cluster default, sluiced --default-replication-factor; name one to override it)", nt.ReplicationFactor)
			}
			continue
		}
		r.NumPartitions, r.ReplicationFactor, r.Configs = nt.NumPartitions, nt.ReplicationFactor, pt.tc.Map()
		if d.MinISRCapped {
			r.Note = fmt.Sprintf("the cluster default min.insync.replicas %d is above the replication factor %d: the topic has min.insync.replicas %d",
				s.ctl.TopicDefaults().MinInsyncReplicas, nt.ReplicationFactor, nt.ReplicationFactor)
		}
	}
	return &internalv1.ControllerCreateTopicsResponse{Response: resp, MetadataOffset: s.ctl.Offset()}, nil
}

// validateNewTopic checks what the controller's placement does not: the
// name rules (for user topics; an internal topic's name, which brokers
// ask for themselves — coordinator.Locator — needs only the syntax,
// and the public Admin service refuses such names from users), the
// partition count and the configs.
func validateNewTopic(ct *sluicev1.CreatableTopic) (cluster.TopicConfig, error) {
	validName := cluster.ValidateTopicName
	if cluster.IsInternalTopic(ct.Name) {
		validName = controller.ValidateTopicName
	}
	if err := validName(ct.Name); err != nil {
		return cluster.TopicConfig{}, err
	}
	if ct.NumPartitions < 1 || ct.NumPartitions > cluster.MaxPartitions {
		return cluster.TopicConfig{}, errs.New(sluicev1.ErrorCode_INVALID_PARTITIONS, "number of partitions must be between 1 and %d, got %d", cluster.MaxPartitions, ct.NumPartitions)
	}
	if ct.ReplicationFactor < 1 {
		return cluster.TopicConfig{}, errs.New(sluicev1.ErrorCode_INVALID_REPLICATION_FACTOR, "replication factor must be >= 1 (0 or -1 for the cluster default), got %d", ct.ReplicationFactor)
	}
	return cluster.ParseTopicConfig(ct.Configs, ct.ReplicationFactor)
}

// DeleteTopics implements the Controller service.
func (s *ControllerService) DeleteTopics(ctx context.Context, req *sluicev1.DeleteTopicsRequest) (*internalv1.ControllerDeleteTopicsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &sluicev1.DeleteTopicsResponse{}
	for _, name := range req.Names {
		r := &sluicev1.DeletableTopicResult{Name: name}
		resp.Topics = append(resp.Topics, r)
		if name == "" {
			r.ErrorCode, r.ErrorMessage = sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic name is empty"
			continue
		}
		if err := s.ctl.DeleteTopic(ctx, name); err != nil {
			if errs.Code(err) == sluicev1.ErrorCode_NOT_CONTROLLER {
				return nil, s.status(err)
			}
			r.ErrorCode, r.ErrorMessage = partitionError(err)
		}
	}
	return &internalv1.ControllerDeleteTopicsResponse{Response: resp, MetadataOffset: s.ctl.Offset()}, nil
}

// AlterPartitionReassignments implements the Controller service: it
// starts a partition reassignment. Rule violations are in the response;
// NOT_CONTROLLER and an expired request are gRPC errors.
func (s *ControllerService) AlterPartitionReassignments(ctx context.Context, req *sluicev1.AlterPartitionReassignmentsRequest) (*internalv1.ControllerAlterPartitionReassignmentsResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	resp := &sluicev1.AlterPartitionReassignmentsResponse{}
	p, err := s.ctl.ReassignPartition(ctx, req.Topic, req.Partition, req.Replicas)
	switch {
	case err == nil:
		resp.Replicas, resp.AddingReplicas, resp.RemovingReplicas = p.Replicas, p.AddingReplicas, p.RemovingReplicas
	case errs.Code(err) == sluicev1.ErrorCode_NOT_CONTROLLER || ctx.Err() != nil:
		return nil, s.status(err)
	default:
		resp.ErrorCode, resp.ErrorMessage = partitionError(err)
	}
	return &internalv1.ControllerAlterPartitionReassignmentsResponse{Response: resp, MetadataOffset: s.ctl.Offset()}, nil
}

// ElectLeaders implements the Controller service: preferred leaders
// elected (controller.ElectPreferredLeaders) for the named partitions, or
// all. NOT_CONTROLLER, an expired request and a named topic or partition
// that does not exist (UNKNOWN_TOPIC_OR_PARTITION) are gRPC errors.
func (s *ControllerService) ElectLeaders(ctx context.Context, req *sluicev1.ElectLeadersRequest) (*internalv1.ControllerElectLeadersResponse, error) {
	if !s.ctl.IsLeader() {
		return nil, s.status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "node %d is not the active controller", s.ctl.NodeID()))
	}
	var sel controller.PartitionSelection
	if len(req.Topics) > 0 {
		sel = controller.PartitionSelection{}
		for _, t := range req.Topics {
			sel[t.Name] = append(sel[t.Name], t.Partitions...)
		}
	}
	// An unknown topic or partition refuses the request
	// (UNKNOWN_TOPIC_OR_PARTITION, nothing elected). A partial answer (the
	// controller lost leadership or the deadline passed part way) lists
	// what moved; the controller logs why the rest did not, and calling
	// again elects the rest.
	done, err := s.ctl.ElectPreferredLeaders(ctx, sel)
	if err != nil && len(done) == 0 {
		return nil, s.status(err)
	}
	resp := &sluicev1.ElectLeadersResponse{}
	for _, pc := range done {
		resp.Elected = append(resp.Elected, &sluicev1.ElectedLeader{Topic: pc.Topic, Partition: pc.Partition, LeaderId: pc.Leader})
	}
	return &internalv1.ControllerElectLeadersResponse{Response: resp, MetadataOffset: s.ctl.Offset()}, nil
}

// MetadataStream implements the Controller service. A stream starts only
// on the active controller once it has caught up with the metadata log
// (CaughtUpLeader); any other voter answers NOT_CONTROLLER naming the
// leader, because its image may be an old prefix. Once started, a stream
// keeps serving this node's committed image (monotonic, so safe after a
// leadership loss); updates carry this node's view of the leader so
// subscribers move to the active controller.
func (s *ControllerService) MetadataStream(req *internalv1.MetadataStreamRequest, stream internalv1.Controller_MetadataStreamServer) error {
	if !s.ctl.CaughtUpLeader() {
		return s.status(s.ctl.NotCaughtUpError())
	}
	sub := s.ctl.Subscribe(req.FromOffset)
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// Bounded by the RPC, so not in a goroutine.Group: it ends when Close
	// closes s.closed or when the handler returns (the deferred cancel).
	go func() {
		select {
		case <-s.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		nctx, cancel := context.WithTimeout(ctx, metadataKeepalive)
		u, err := sub.Next(nctx)
		cancel()
		if ctx.Err() != nil {
			return errs.Status(errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "metadata stream closed"), nil)
		}
		leader, _ := s.ctl.Leader()
		if leader < 0 {
			leader = 0
		}
		out := &internalv1.MetadataUpdate{Offset: sub.Offset(), ControllerLeader: leader}
		if err == nil {
			if u.Snapshot != nil {
				if out.Snapshot, err = controller.EncodeSnapshot(u.Snapshot); err != nil {
					return errs.Status(err, nil)
				}
			}
			for _, d := range u.Deltas {
				data, err := controller.EncodeRecord(d.Record)
				if err != nil {
					return errs.Status(err, nil)
				}
				out.Deltas = append(out.Deltas, &internalv1.MetadataDelta{Offset: d.Offset, Record: data})
			}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// AlterPartition implements the Controller service.
func (s *ControllerService) AlterPartition(ctx context.Context, req *internalv1.AlterPartitionRequest) (*internalv1.AlterPartitionResponse, error) {
	p, err := s.ctl.AlterPartition(ctx, controller.AlterPartitionRequest{
		BrokerID: req.BrokerId, BrokerEpoch: req.BrokerEpoch, Topic: req.Topic, Partition: req.Partition,
		LeaderEpoch: req.LeaderEpoch, PartitionEpoch: req.PartitionEpoch, NewISR: req.NewIsr,
	})
	if err != nil {
		return nil, s.status(err)
	}
	return &internalv1.AlterPartitionResponse{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch,
		Isr: p.ISR, Replicas: p.Replicas, MetadataOffset: s.ctl.Offset()}, nil
}

// QuorumState implements the Controller service.
func (s *ControllerService) QuorumState(ctx context.Context, req *internalv1.QuorumStateRequest) (*internalv1.QuorumStateResponse, error) {
	q := s.ctl.QuorumState()
	resp := &internalv1.QuorumStateResponse{
		NodeId: q.NodeID, RaftAddress: q.RaftAddress, State: q.State, Term: q.Term,
		LastLogIndex: q.LastLogIndex, CommitIndex: q.CommitIndex, AppliedIndex: q.AppliedIndex,
	}
	if q.LeaderID > 0 {
		resp.LeaderId = q.LeaderID
	}
	for _, v := range q.Voters {
		resp.Voters = append(resp.Voters, &internalv1.VoterRef{NodeId: v.ID, RaftAddress: v.Address})
	}
	return resp, nil
}

// offlineReplicas translates a heartbeat's offline replicas.
func offlineReplicas(rs []*sluicev1.OfflineReplica) []controller.OfflineReplica {
	var out []controller.OfflineReplica
	for _, r := range rs {
		if r != nil {
			out = append(out, controller.OfflineReplica{Topic: r.Topic, TopicID: r.TopicId, Partition: r.Partition, Path: r.Path, Error: r.Error})
		}
	}
	return out
}
