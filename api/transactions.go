package api

import (
	"context"
	"math"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// initProducerIDWait bounds how long InitProducerId waits for a block of
// ids before answering COORDINATOR_LOAD_IN_PROGRESS.
const initProducerIDWait = time.Second

// txnRequestWait bounds one transaction request at the coordinator (a
// producer id, the state-log append, which has its own 10 s bound).
const txnRequestWait = 30 * time.Second

// TxnCoordinator is what TransactionsService asks of this broker's
// transaction coordinator (txn.Coordinator). Errors
// are *errs.Error; the handlers put them in the answer.
type TxnCoordinator interface {
	InitProducerID(ctx context.Context, req txn.InitProducerIDRequest) (txn.ProducerIDAndEpoch, error)
	EndTxn(ctx context.Context, req txn.EndTxnRequest) (txn.ProducerIDAndEpoch, error)
	Describe(transactionalID string) (txn.Description, error)
	List(f txn.ListFilter) ([]txn.Listing, error)
}

// CoordinatorLocator finds the coordinator of a transactional id,
// creating __transaction_state on first need (coordinator.Locator).
type CoordinatorLocator interface {
	Locate(ctx context.Context, transactionalID string) (coordinator.CoordinatorNode, error)
}

// TransactionsConfig is what a TransactionsService needs.
type TransactionsConfig struct {
	// ProducerIDs hands out the ids of idempotent producers (required).
	ProducerIDs txn.ProducerIDSource
	// Coordinator and Locator serve transactional ids; when either is
	// nil, requests with a transactional id are refused (INVALID_REQUEST).
	Coordinator TxnCoordinator
	Locator     CoordinatorLocator
	// GroupLocator finds consumer groups' coordinators (creating
	// __consumer_offsets on first need); nil: group keys are refused
	// (INVALID_REQUEST).
	GroupLocator CoordinatorLocator
	// Now may be nil (time.Now); ListTransactions' durations use it.
	Now func() time.Time
	// Authz authorizes the callers (nil: everything allowed).
	Authz *Authz
}

// TransactionsService serves sluice.v1.Transactions: it authorizes
// (auth.Operations), validates, routes to the producer-id manager or the
// transaction coordinator, and puts their errors in the answers
// (error_code, error_message); a gRPC status is never used for a
// request's own failure, except a request over the request limits,
// refused before it is decoded (InvalidArgument INVALID_REQUEST,
// LimitRequests). A refusal is answered in error_code too
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
// GROUP_AUTHORIZATION_FAILED), before anything is asked of a
// coordinator: a refused request changes nothing.
type TransactionsService struct {
	sluicev1.UnimplementedTransactionsServer

	cfg TransactionsConfig
}

// NewTransactionsService returns the service.
func NewTransactionsService(cfg TransactionsConfig) *TransactionsService {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &TransactionsService{cfg: cfg}
}

func (s *TransactionsService) servesTransactions() error {
	if s.cfg.Coordinator == nil || s.cfg.Locator == nil {
		return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "this broker serves no transactions")
	}
	return nil
}

// producerEpoch converts a wire epoch, which must fit an int16 (-1: none).
func producerEpoch(e int32) (int16, error) {
	if e < -1 || e > math.MaxInt16 {
		return 0, errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "producer epoch %d is out of range", e)
	}
	return int16(e), nil
}

// InitProducerId implements the Transactions service. Without a
// transactional id: a new producer id at epoch 0 from this broker's block
// (COORDINATOR_LOAD_IN_PROGRESS while it has none). With one: the
// coordinator's answer (txn.Coordinator.InitProducerID;
// NOT_COORDINATOR on another broker), after making sure
// __transaction_state exists (COORDINATOR_NOT_AVAILABLE until the id's
// partition has a leader). A timeout of 0 is the default, 60 s.
// Authorization first (authorizeInit).
func (s *TransactionsService) InitProducerId(ctx context.Context, req *sluicev1.InitProducerIdRequest) (*sluicev1.InitProducerIdResponse, error) {
	if err := s.authorizeInit(ctx, req.TransactionalId); err != nil {
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}, nil
	}
	if req.TransactionalId != "" {
		r, err := s.initTransactional(ctx, req)
		if err != nil {
			return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}, nil
		}
		return &sluicev1.InitProducerIdResponse{ProducerId: r.ProducerID, ProducerEpoch: int32(r.ProducerEpoch)}, nil
	}
	wctx, cancel := context.WithTimeout(ctx, initProducerIDWait)
	defer cancel()
	id, err := s.cfg.ProducerIDs.Next(wctx)
	if err != nil {
		code, msg := errs.Code(err), errs.Message(err)
		if code == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
			code = sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS
		}
		return &sluicev1.InitProducerIdResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: code, ErrorMessage: msg}, nil
	}
	return &sluicev1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}, nil
}

// authorizeInit is InitProducerId's authorization, Kafka's: WRITE on the
// transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without
// one, an idempotent producer, IDEMPOTENT_WRITE on the cluster or (Kafka
// 3) WRITE on any topic (else CLUSTER_AUTHORIZATION_FAILED). It runs
// before the coordinator is asked anything, so a refused caller can
// neither bump the id's epoch, fencing the producer that owns it, nor
// abort its transaction, nor create __transaction_state.
func (s *TransactionsService) authorizeInit(ctx context.Context, transactionalID string) error {
	z := s.cfg.Authz
	if transactionalID != "" {
		return z.Check(ctx, auth.OpWrite, auth.TransactionalID(transactionalID))
	}
	if z.AllowedQuiet(ctx, auth.OpIdempotentWrite, auth.Cluster) || z.AllowedAny(ctx, auth.OpWrite, auth.ResourceTopic) {
		return nil
	}
	// Check again, for the audit line and count of the denial.
	if err := z.Check(ctx, auth.OpIdempotentWrite, auth.Cluster); err != nil {
		return errs.New(errs.Code(err), "%s, nor write any topic", errs.Message(err))
	}
	return nil
}

func (s *TransactionsService) initTransactional(ctx context.Context, req *sluicev1.InitProducerIdRequest) (txn.ProducerIDAndEpoch, error) {
	if err := s.servesTransactions(); err != nil {
		return txn.ProducerIDAndEpoch{}, err
	}
	if _, err := s.cfg.Locator.Locate(ctx, req.TransactionalId); err != nil {
		return txn.ProducerIDAndEpoch{}, err
	}
	timeout := req.TransactionTimeoutMs
	if timeout == 0 {
		timeout = int32(txn.DefaultTimeout / time.Millisecond)
	}
	pid, epoch := txn.NoProducerID, txn.NoProducerEpoch
	if req.ProducerId > 0 {
		e, err := producerEpoch(req.ProducerEpoch)
		if err != nil {
			return txn.ProducerIDAndEpoch{}, err
		}
		pid, epoch = req.ProducerId, e
	}
	ctx, cancel := context.WithTimeout(ctx, txnRequestWait)
	defer cancel()
	return s.cfg.Coordinator.InitProducerID(ctx, txn.InitProducerIDRequest{
		TransactionalID: req.TransactionalId, TimeoutMs: timeout, ProducerID: pid, ProducerEpoch: epoch})
}

// FindCoordinator implements the Transactions service: per key, the
// leader of its __transaction_state (transactional id) or
// __consumer_offsets (group id) partition from this broker's metadata;
// the first call creates the topic. Errors per key (node_id -1):
// INVALID_REQUEST or INVALID_GROUP_ID for a bad key,
// COORDINATOR_NOT_AVAILABLE (retriable) until the key's partition has a
// leader. A key needs DESCRIBE on its transactional id or group
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED
// for that key, which creates no topic).
func (s *TransactionsService) FindCoordinator(ctx context.Context, req *sluicev1.FindCoordinatorRequest) (*sluicev1.FindCoordinatorResponse, error) {
	resp := &sluicev1.FindCoordinatorResponse{}
	for _, key := range req.Keys {
		c := &sluicev1.Coordinator{Key: key, NodeId: -1}
		resp.Coordinators = append(resp.Coordinators, c)
		var err error
		switch req.KeyType {
		case sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_UNSPECIFIED, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION:
			if err = s.cfg.Authz.Check(ctx, auth.OpDescribe, auth.TransactionalID(key)); err != nil {
				break
			}
			if err = s.servesTransactions(); err == nil {
				var n coordinator.CoordinatorNode
				if n, err = s.cfg.Locator.Locate(ctx, key); err == nil {
					c.NodeId, c.Address = n.NodeID, n.Address
				}
			}
		case sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP:
			if err = s.cfg.Authz.Check(ctx, auth.OpDescribe, auth.Group(key)); err != nil {
				break
			}
			if s.cfg.GroupLocator == nil {
				err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "this broker serves no consumer groups")
				break
			}
			var n coordinator.CoordinatorNode
			if n, err = s.cfg.GroupLocator.Locate(ctx, key); err == nil {
				c.NodeId, c.Address = n.NodeID, n.Address
			}
		default:
			err = errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "unknown key type %d", req.KeyType)
		}
		c.ErrorCode, c.ErrorMessage = errs.Code(err), errs.Message(err)
	}
	return resp, nil
}

// EndTxn implements the Transactions service
// (txn.Coordinator.EndTxn): answered once PrepareCommit
// or PrepareAbort is durable, with the producer id and epoch of the next
// transaction. It needs WRITE on the transactional id
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: nothing committed or aborted).
func (s *TransactionsService) EndTxn(ctx context.Context, req *sluicev1.EndTxnRequest) (*sluicev1.EndTxnResponse, error) {
	r, err := s.endTxn(ctx, req)
	if err != nil {
		return &sluicev1.EndTxnResponse{ProducerId: -1, ProducerEpoch: -1, ErrorCode: errs.Code(err), ErrorMessage: errs.Message(err)}, nil
	}
	return &sluicev1.EndTxnResponse{ProducerId: r.ProducerID, ProducerEpoch: int32(r.ProducerEpoch)}, nil
}

func (s *TransactionsService) endTxn(ctx context.Context, req *sluicev1.EndTxnRequest) (txn.ProducerIDAndEpoch, error) {
	if err := s.cfg.Authz.Check(ctx, auth.OpWrite, auth.TransactionalID(req.TransactionalId)); err != nil {
		return txn.ProducerIDAndEpoch{}, err
	}
	if err := s.servesTransactions(); err != nil {
		return txn.ProducerIDAndEpoch{}, err
	}
	epoch, err := producerEpoch(req.ProducerEpoch)
	if err != nil {
		return txn.ProducerIDAndEpoch{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, txnRequestWait)
	defer cancel()
	// The gRPC door speaks transaction version 2 only (decision 69): its
	// producers never send AddPartitionsToTxn and expect the epoch bump.
	return s.cfg.Coordinator.EndTxn(ctx, txn.EndTxnRequest{TransactionalID: req.TransactionalId,
		ProducerID: req.ProducerId, ProducerEpoch: epoch, Commit: req.Committed, ClientVersion: txn.TV2})
}

// DescribeTransactions implements the Transactions service: the applied
// state of each id this broker coordinates (per id: NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND, ...). An id
// needs DESCRIBE (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that id);
// the partitions of a transaction are listed only for the topics the
// caller may DESCRIBE (as Kafka).
func (s *TransactionsService) DescribeTransactions(ctx context.Context, req *sluicev1.DescribeTransactionsRequest) (*sluicev1.DescribeTransactionsResponse, error) {
	resp := &sluicev1.DescribeTransactionsResponse{}
	z := s.cfg.Authz
	described := map[string]bool{} // topic -> may DESCRIBE, asked once
	for _, id := range req.TransactionalIds {
		ts := &sluicev1.TransactionState{TransactionalId: id, ProducerId: -1, ProducerEpoch: -1, TransactionStartTimeMs: -1,
			LastUpdateTimeMs: -1, PreviousProducerId: -1, NextProducerId: -1, LastProducerEpoch: -1, CoordinatorEpoch: -1}
		resp.TransactionStates = append(resp.TransactionStates, ts)
		err := z.Check(ctx, auth.OpDescribe, auth.TransactionalID(id))
		if err == nil {
			err = s.servesTransactions()
		}
		var d txn.Description
		if err == nil {
			d, err = s.cfg.Coordinator.Describe(id)
		}
		if err != nil {
			ts.ErrorCode, ts.ErrorMessage = errs.Code(err), errs.Message(err)
			continue
		}
		ts.State = d.State.String()
		ts.ProducerId, ts.ProducerEpoch = d.ProducerID, int32(d.ProducerEpoch)
		ts.TransactionTimeoutMs = d.TimeoutMs
		ts.TransactionStartTimeMs, ts.LastUpdateTimeMs = d.StartTimeMs, d.UpdateTimeMs
		ts.PreviousProducerId, ts.NextProducerId = d.PrevProducerID, d.NextProducerID
		if d.PrevProducerID == d.ProducerID {
			// The state record keeps Kafka's form, the current id as the
			// previous one when the id never changed; the API says "none".
			ts.PreviousProducerId = -1
		}
		ts.LastProducerEpoch = int32(d.LastProducerEpoch)
		ts.CoordinatorEpoch = d.CoordinatorEpoch
		for _, tp := range d.Partitions { // sorted by topic, then partition
			ok, asked := described[tp.Topic]
			if !asked {
				ok = z.AllowedQuiet(ctx, auth.OpDescribe, auth.Topic(tp.Topic))
				described[tp.Topic] = ok
			}
			if !ok {
				continue
			}
			if n := len(ts.Topics); n == 0 || ts.Topics[n-1].Name != tp.Topic {
				ts.Topics = append(ts.Topics, &sluicev1.TxnTopic{Name: tp.Topic})
			}
			last := ts.Topics[len(ts.Topics)-1]
			last.Partitions = append(last.Partitions, tp.Partition)
		}
	}
	return resp, nil
}

// ListTransactions implements the Transactions service: the ids this
// broker coordinates, filtered. State names are Kafka's
// (txn.ParseState); names that match no state are answered in
// unknown_state_filters, and when every state filter is unknown nothing
// is listed (as Kafka). A coordinator still loading a partition answers
// COORDINATOR_LOAD_IN_PROGRESS. Only the ids the caller may DESCRIBE are
// listed.
func (s *TransactionsService) ListTransactions(ctx context.Context, req *sluicev1.ListTransactionsRequest) (*sluicev1.ListTransactionsResponse, error) {
	resp := &sluicev1.ListTransactionsResponse{}
	if err := s.servesTransactions(); err != nil {
		resp.ErrorCode, resp.ErrorMessage = errs.Code(err), errs.Message(err)
		return resp, nil
	}
	var f txn.ListFilter
	for _, name := range req.StateFilters {
		if st, ok := txn.ParseState(name); ok {
			f.States = append(f.States, st)
		} else {
			resp.UnknownStateFilters = append(resp.UnknownStateFilters, name)
		}
	}
	if len(req.StateFilters) > 0 && len(f.States) == 0 {
		return resp, nil
	}
	f.ProducerIDs = req.ProducerIdFilters
	if req.DurationFilterMs > 0 {
		f.MinDuration = time.Duration(req.DurationFilterMs) * time.Millisecond
	}
	list, err := s.cfg.Coordinator.List(f)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errs.Code(err), errs.Message(err)
		return resp, nil
	}
	nowMs := s.cfg.Now().UnixMilli()
	for _, l := range list {
		if !s.cfg.Authz.AllowedQuiet(ctx, auth.OpDescribe, auth.TransactionalID(l.TransactionalID)) {
			continue
		}
		d := int64(-1)
		if (l.State == txn.Ongoing || l.State.IsPrepare()) && l.StartTimeMs != txn.NoTimestamp {
			d = max(nowMs-l.StartTimeMs, 0)
		}
		resp.TransactionStates = append(resp.TransactionStates, &sluicev1.TransactionListing{
			TransactionalId: l.TransactionalID, ProducerId: l.ProducerID, State: l.State.String(), DurationMs: d})
	}
	return resp, nil
}
