package client

import (
	"context"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The fake cluster's transaction coordinator: InitProducerId with a
// transactional id, FindCoordinator, EndTxn (TV2: every end bumps the
// epoch; a retry of an ended transaction with the same outcome succeeds),
// DescribeTransactions and ListTransactions. Faults are injected through
// fakeTxnState's fields, under fakeState.mu.

// fakeTxnState is the coordinator state of the fake cluster.
type fakeTxnState struct {
	txns map[string]*fakeTxn
	// owner: id -> the node coordinating it; absent: coordinator, or node
	// 1 when that is 0.
	owner       map[string]int32
	coordinator int32
	// staleFinds: FindCoordinator answers left naming node 1 whatever the
	// coordinator (an outdated answer: node 1 then says NOT_COORDINATOR).
	staleFinds int
	// initErrs and endErrs are answered, in order, before serving.
	initErrs, endErrs []sluicev1.ErrorCode
	// endLost: EndTxn calls left that are applied, then answered
	// UNAVAILABLE (the answer lost).
	endLost int

	findCalls, initCalls, endCalls int
	initReqs                       []*sluicev1.InitProducerIdRequest
	endReqs                        []*sluicev1.EndTxnRequest
	produceIDs                     []string                  // transactional_id of every produce request
	fetchIsolation                 []sluicev1.IsolationLevel // of every fetch request
}

type fakeTxn struct {
	pid           int64
	epoch         int32
	state         string
	lastCommitted bool
}

func (st *fakeState) coordinatorOf(id string) int32 {
	if n, ok := st.txn.owner[id]; ok {
		return n
	}
	if st.txn.coordinator != 0 {
		return st.txn.coordinator
	}
	return 1
}

func popCode(q *[]sluicev1.ErrorCode) sluicev1.ErrorCode {
	if len(*q) == 0 {
		return sluicev1.ErrorCode_NONE
	}
	c := (*q)[0]
	*q = (*q)[1:]
	return c
}

func (f *fakeBroker) FindCoordinator(_ context.Context, req *sluicev1.FindCoordinatorRequest) (*sluicev1.FindCoordinatorResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txn.findCalls++
	resp := &sluicev1.FindCoordinatorResponse{}
	for _, k := range req.Keys {
		node := f.coordinatorOf(k)
		if f.txn.staleFinds > 0 {
			f.txn.staleFinds--
			node = 1
		}
		resp.Coordinators = append(resp.Coordinators, &sluicev1.Coordinator{Key: k, NodeId: node, Address: f.nodes[node].addr})
	}
	return resp, nil
}

func (f *fakeBroker) initTransactional(req *sluicev1.InitProducerIdRequest) (*sluicev1.InitProducerIdResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txn.initCalls++
	f.txn.initReqs = append(f.txn.initReqs, req)
	refuse := func(c sluicev1.ErrorCode) (*sluicev1.InitProducerIdResponse, error) {
		return &sluicev1.InitProducerIdResponse{ErrorCode: c, ErrorMessage: "fake", ProducerId: -1, ProducerEpoch: -1}, nil
	}
	if f.coordinatorOf(req.TransactionalId) != f.node {
		return refuse(sluicev1.ErrorCode_NOT_COORDINATOR)
	}
	if c := popCode(&f.txn.initErrs); c != sluicev1.ErrorCode_NONE {
		return refuse(c)
	}
	if f.txn.txns == nil {
		f.txn.txns = map[string]*fakeTxn{}
	}
	t := f.txn.txns[req.TransactionalId]
	if t == nil {
		t = &fakeTxn{pid: f.nextPID, epoch: -1}
		f.nextPID++
		f.txn.txns[req.TransactionalId] = t
	}
	t.epoch++
	t.state = "Empty"
	return &sluicev1.InitProducerIdResponse{ProducerId: t.pid, ProducerEpoch: t.epoch}, nil
}

func (f *fakeBroker) EndTxn(_ context.Context, req *sluicev1.EndTxnRequest) (*sluicev1.EndTxnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txn.endCalls++
	f.txn.endReqs = append(f.txn.endReqs, req)
	refuse := func(c sluicev1.ErrorCode) (*sluicev1.EndTxnResponse, error) {
		return &sluicev1.EndTxnResponse{ErrorCode: c, ErrorMessage: "fake", ProducerId: -1, ProducerEpoch: -1}, nil
	}
	if f.coordinatorOf(req.TransactionalId) != f.node {
		return refuse(sluicev1.ErrorCode_NOT_COORDINATOR)
	}
	if c := popCode(&f.txn.endErrs); c != sluicev1.ErrorCode_NONE {
		return refuse(c)
	}
	t := f.txn.txns[req.TransactionalId]
	switch {
	case t == nil || t.pid != req.ProducerId:
		return refuse(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING)
	case req.ProducerEpoch == t.epoch:
		t.epoch++
		t.lastCommitted = req.Committed
		t.state = map[bool]string{true: "CompleteCommit", false: "CompleteAbort"}[req.Committed]
	case req.ProducerEpoch == t.epoch-1 && t.state != "Empty":
		// A retry of the transaction that just ended.
		if t.lastCommitted != req.Committed {
			return refuse(sluicev1.ErrorCode_INVALID_TXN_STATE)
		}
	default:
		return refuse(sluicev1.ErrorCode_PRODUCER_FENCED)
	}
	if f.txn.endLost > 0 {
		f.txn.endLost--
		return nil, status.Error(codes.Unavailable, "fake: answer lost")
	}
	return &sluicev1.EndTxnResponse{ProducerId: t.pid, ProducerEpoch: t.epoch}, nil
}

func (f *fakeBroker) DescribeTransactions(_ context.Context, req *sluicev1.DescribeTransactionsRequest) (*sluicev1.DescribeTransactionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DescribeTransactionsResponse{}
	for _, id := range req.TransactionalIds {
		st := &sluicev1.TransactionState{TransactionalId: id}
		t := f.txn.txns[id]
		switch {
		case f.coordinatorOf(id) != f.node:
			st.ErrorCode = sluicev1.ErrorCode_NOT_COORDINATOR
		case t == nil:
			st.ErrorCode = sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND
		default:
			st.State, st.ProducerId, st.ProducerEpoch, st.TransactionTimeoutMs = t.state, t.pid, t.epoch, 60000
			st.Topics = []*sluicev1.TxnTopic{{Name: "t", Partitions: []int32{0, 1}}}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}

func (f *fakeBroker) ListTransactions(_ context.Context, req *sluicev1.ListTransactionsRequest) (*sluicev1.ListTransactionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.ListTransactionsResponse{}
	var ids []string
	for id := range f.txn.txns {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids))) // the client must sort
	for _, id := range ids {
		t := f.txn.txns[id]
		if f.coordinatorOf(id) != f.node {
			continue
		}
		if len(req.StateFilters) > 0 && req.StateFilters[0] != t.state {
			continue
		}
		resp.TransactionStates = append(resp.TransactionStates, &sluicev1.TransactionListing{TransactionalId: id, ProducerId: t.pid, State: t.state, DurationMs: -1})
	}
	return resp, nil
}
