package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// coordinatorWait bounds one request at a coordinator (an append to its
// state log has its own 10 s bound; a TxnOffsetCommit also waits for the
// transaction coordinator), as the gRPC door's.
const coordinatorWait = 30 * time.Second

// Locator finds the broker coordinating a key: the leader of its
// partition of the coordinator's internal topic, creating the topic on
// first need (coordinator.Locator).
type Locator interface {
	Locate(ctx context.Context, key string) (coordinator.CoordinatorNode, error)
}

// TxnCoordinator is what the door asks of the broker's transaction
// coordinator (txn.Coordinator). Errors are *errs.Error.
type TxnCoordinator interface {
	AddPartitions(ctx context.Context, req txn.AddPartitionsRequest) error
	InitProducerID(ctx context.Context, req txn.InitProducerIDRequest) (txn.ProducerIDAndEpoch, error)
	EndTxn(ctx context.Context, req txn.EndTxnRequest) (txn.ProducerIDAndEpoch, error)
	Describe(transactionalID string) (txn.Description, error)
	List(f txn.ListFilter) ([]txn.Listing, error)
}

// GroupCoordinator is what the door asks of the broker's group
// coordinator (group.Coordinator). Errors are *errs.Error.
type GroupCoordinator interface {
	ClassicGroups
	Heartbeat(ctx context.Context, g string, req group.HeartbeatRequest) (group.HeartbeatResponse, error)
	CommitOffsets(ctx context.Context, g, memberID, instanceID string, memberEpoch int32, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error)
	FetchOffsets(g, memberID string, memberEpoch int32, tps []group.TopicPartition, requireStable bool) ([]group.FetchedOffset, error)
	TxnCommitOffsets(ctx context.Context, r group.TxnOffsetCommitRequest) (map[group.TopicPartition]error, error)
	ListGroups(states []string) ([]group.Listing, error)
	DescribeGroup(g string) (group.Description, error)
	DeleteGroup(ctx context.Context, g string) error
}

// Coordinators is how the door reaches the broker's coordinators. A nil
// coordinator or locator: the requests it serves are refused
// (INVALID_REQUEST, as the gRPC door).
type Coordinators struct {
	Txn          TxnCoordinator
	TxnLocator   Locator
	Group        GroupCoordinator
	GroupLocator Locator
}

func (s *Server) servesTransactions() error {
	if s.cfg.Coordinators.Txn == nil || s.cfg.Coordinators.TxnLocator == nil {
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "this broker serves no transactions")
	}
	return nil
}

func (s *Server) servesGroups() error {
	if s.cfg.Coordinators.Group == nil || s.cfg.Coordinators.GroupLocator == nil {
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "this broker serves no consumer groups")
	}
	return nil
}

// later makes a handler whose work may wait (a coordinator's state-log
// append, a rebalance). fn runs in the connection's request order and
// does what needs the connection (authorization: the caller may change
// on re-authentication); the work it returns runs on its own goroutine,
// so that the requests after it are read and started meanwhile, and
// makes the answer, written when ready, in order. The work uses only
// what fn captured, c.s and c.ctx.
func later(fn func(c *conn, r *request) func() kmsg.Response) func(c *conn, r *request) func() kmsg.Response {
	return func(c *conn, r *request) func() kmsg.Response {
		work := fn(c, r)
		done := make(chan kmsg.Response, 1)
		go func() { done <- work() }()
		return func() kmsg.Response { return <-done }
	}
}

// answered is work that has nothing left to do: resp.
func answered(resp kmsg.Response) func() kmsg.Response { return func() kmsg.Response { return resp } }

// deniedErr is the refusal of op on res to the connection's caller.
func (c *conn) deniedErr(op auth.Operation, res auth.Resource) error {
	return errs.New(auth.DeniedCode(res.Type), "%s", auth.DeniedMessage(c.caller.Principal, op, res))
}

// Coordinator key types of FindCoordinator.
const (
	keyTypeGroup       int8 = 0
	keyTypeTransaction int8 = 1
)

// findCoordinator serves FindCoordinator (v4+: several keys in one
// request, KIP-699): per key, the broker leading its partition of
// __consumer_offsets (key type 0, a group) or __transaction_state (1, a
// transactional id), at its Kafka listener; the first call creates the
// topic. A key needs DESCRIBE on its group or transactional id
// (GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
// nothing created). COORDINATOR_NOT_AVAILABLE (retriable) until the
// partition has a leader with a Kafka listener; INVALID_REQUEST for
// another key type (share groups).
func findCoordinator(c *conn, r *request) func() kmsg.Response {
	req := r.msg.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if r.version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	refused := make([]error, len(keys))
	for i, key := range keys {
		refused[i] = c.mayLocate(req.CoordinatorType, key)
	}
	return func() kmsg.Response {
		for i, key := range keys {
			k := kmsg.NewFindCoordinatorResponseCoordinator()
			k.Key, k.NodeID, k.Port = key, -1, -1
			err := refused[i]
			if err == nil {
				err = c.s.locate(c.ctx, req.CoordinatorType, key, &k)
			}
			k.ErrorCode, k.ErrorMessage = errCode(err), errMessage(err)
			resp.Coordinators = append(resp.Coordinators, k)
		}
		if r.version < 4 {
			k := resp.Coordinators[0]
			resp.ErrorCode, resp.ErrorMessage, resp.NodeID, resp.Host, resp.Port = k.ErrorCode, k.ErrorMessage, k.NodeID, k.Host, k.Port
			resp.Coordinators = nil
		}
		return resp
	}
}

// mayLocate is nil when the caller may find key's coordinator: DESCRIBE
// on the group or transactional id, of a key type served.
func (c *conn) mayLocate(keyType int8, key string) error {
	var res auth.Resource
	switch keyType {
	case keyTypeGroup:
		res = auth.Group(key)
	case keyTypeTransaction:
		res = auth.TransactionalID(key)
	default:
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "coordinator key type %d is not served", keyType)
	}
	if !c.allowed(c.ctx, auth.OpDescribe, res) {
		return c.deniedErr(auth.OpDescribe, res)
	}
	return nil
}

// locate fills k with key's coordinator, or returns why not.
func (s *Server) locate(ctx context.Context, keyType int8, key string, k *kmsg.FindCoordinatorResponseCoordinator) error {
	loc, serves := s.cfg.Coordinators.GroupLocator, s.servesGroups
	if keyType == keyTypeTransaction {
		loc, serves = s.cfg.Coordinators.TxnLocator, s.servesTransactions
	}
	if err := serves(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, coordinatorWait)
	defer cancel()
	n, err := loc.Locate(ctx, key)
	if err != nil {
		return err
	}
	b := s.cfg.Metadata.Image().Brokers[n.NodeID]
	var host string
	var port int32
	ok := false
	if b != nil {
		host, port, ok = splitAddress(brokerAddress(b))
	}
	if !ok {
		return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "the coordinator of %q, broker %d, has no Kafka listener", errs.Echo(key), n.NodeID)
	}
	k.NodeID, k.Host, k.Port = n.NodeID, host, port
	return nil
}
