package client

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Coordinator is the broker that coordinates a transactional id (the
// leader of its __transaction_state partition, DESIGN §10) or a consumer
// group (the leader of its __consumer_offsets partition).
type Coordinator struct {
	NodeID  int32
	Address string // host:port of its gRPC listener
}

// FindCoordinator asks any broker which broker coordinates
// transactionalID. It makes one attempt: a key-level failure comes back as
// an *errs.Error (COORDINATOR_NOT_AVAILABLE, retriable, while
// __transaction_state has no leader for the id's partition).
func (c *Client) FindCoordinator(ctx context.Context, transactionalID string) (Coordinator, error) {
	return c.findCoordinator(ctx, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, transactionalID)
}

// findCoordinator makes one FindCoordinator attempt for one key.
func (c *Client) findCoordinator(ctx context.Context, keyType sluicev1.CoordinatorKeyType, key string) (Coordinator, error) {
	var resp *sluicev1.FindCoordinatorResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewTransactionsClient(cc).FindCoordinator(ctx, &sluicev1.FindCoordinatorRequest{
			KeyType: keyType,
			Keys:    []string{key},
		})
		resp = r
		return err
	})
	if err != nil {
		return Coordinator{NodeID: -1}, fmt.Errorf("find coordinator of %q: %w", key, err)
	}
	for _, co := range resp.Coordinators {
		if co.Key != key {
			continue
		}
		if err := codeError(co.ErrorCode, co.ErrorMessage); err != nil {
			return Coordinator{NodeID: -1}, fmt.Errorf("find coordinator of %q: %w", key, err)
		}
		if co.Address == "" {
			return Coordinator{NodeID: -1}, fmt.Errorf("find coordinator of %q: %w", key, errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "node %d has no address", co.NodeId))
		}
		return Coordinator{NodeID: co.NodeId, Address: co.Address}, nil
	}
	return Coordinator{NodeID: -1}, fmt.Errorf("find coordinator of %q: %w", key, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "no answer for the key"))
}

// coordinatorRetriable reports whether a transaction request's error asks
// for another attempt, and whether the coordinator must be found again
// first (it moved, or could not be reached).
func coordinatorRetriable(err error) (retry, refind bool) {
	switch errs.Code(err) {
	case sluicev1.ErrorCode_NOT_COORDINATOR, sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE:
		return true, true
	}
	if isTransportError(err) {
		return true, true
	}
	return isRetriable(err), false
}

// DescribeTransactions answers the state of each transactional id, in the
// order given, each from its coordinator (found with FindCoordinator).
// Retriable failures (a coordinator moving or loading) are retried until
// ctx ends; a failure for one id is reported in its entry's error_code and
// error_message (TRANSACTIONAL_ID_NOT_FOUND for an unknown id) and does not
// fail the others. The error is for ctx ending only.
func (c *Client) DescribeTransactions(ctx context.Context, transactionalIDs ...string) ([]*sluicev1.TransactionState, error) {
	out := make([]*sluicev1.TransactionState, len(transactionalIDs))
	for i, id := range transactionalIDs {
		st, err := c.describeTransaction(ctx, id)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("describe transactions: %w", ctx.Err())
		}
		if err != nil {
			st = &sluicev1.TransactionState{TransactionalId: id, ErrorCode: errs.Code(err), ErrorMessage: err.Error(), ProducerId: -1, ProducerEpoch: -1}
		}
		out[i] = st
	}
	return out, nil
}

// describeTransaction describes one id, retrying retriable failures (a
// bounded number of times) and finding its coordinator again when it
// moved; not a lookup that reached no broker (*NoBrokerError), which
// retried every address already.
func (c *Client) describeTransaction(ctx context.Context, id string) (*sluicev1.TransactionState, error) {
	var last error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt > 0 {
			if err := sleepCtx(ctx, initBackoff(attempt-1)); err != nil {
				return nil, err
			}
		}
		co, err := c.FindCoordinator(ctx, id)
		if err != nil {
			if last = err; !isRetriable(err) || isNoBroker(err) {
				return nil, err
			}
			continue
		}
		cc, err := c.conn(co.Address)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
		resp, err := sluicev1.NewTransactionsClient(cc).DescribeTransactions(rctx, &sluicev1.DescribeTransactionsRequest{TransactionalIds: []string{id}})
		cancel()
		if err = rpcError(err); err == nil {
			err = errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "node %d answered nothing for the id", co.NodeID)
			for _, st := range resp.TransactionStates {
				if st.TransactionalId == id {
					err = codeError(st.ErrorCode, st.ErrorMessage)
					if err == nil {
						return st, nil
					}
				}
			}
		}
		if retry, _ := coordinatorRetriable(err); !retry {
			return nil, err
		}
		last = err
	}
	return nil, last
}

// ListTransactionsFilter selects what ListTransactions returns; the zero
// value selects every transactional id.
type ListTransactionsFilter struct {
	// States keeps only these states (Empty, Ongoing, PrepareCommit,
	// PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence,
	// Dead); empty: all.
	States []string
	// ProducerIDs keeps only these producer ids; empty: all.
	ProducerIDs []int64
	// MinDuration keeps only transactions open for at least this long
	// (KIP-994); 0: no filter.
	MinDuration time.Duration
}

// ListTransactions asks every broker for the transactional ids it
// coordinates (each broker knows only its own) and returns the merged
// listings sorted by transactional id. Every broker must answer: a broker
// that fails, or a state filter that names no state, fails the call (the
// error names the broker), since a partial list would look complete.
func (c *Client) ListTransactions(ctx context.Context, filter ListTransactionsFilter) ([]*sluicev1.TransactionListing, error) {
	md, err := c.Metadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	req := &sluicev1.ListTransactionsRequest{StateFilters: filter.States, ProducerIdFilters: filter.ProducerIDs, DurationFilterMs: filter.MinDuration.Milliseconds()}
	var out []*sluicev1.TransactionListing
	err = askEveryBroker(ctx, c, md.Brokers,
		func(ctx context.Context, cc *grpc.ClientConn) (*sluicev1.ListTransactionsResponse, sluicev1.ErrorCode, string, error) {
			resp, err := sluicev1.NewTransactionsClient(cc).ListTransactions(ctx, req)
			return resp, resp.GetErrorCode(), resp.GetErrorMessage(), err
		},
		func(_ int32, resp *sluicev1.ListTransactionsResponse) error {
			if len(resp.UnknownStateFilters) > 0 {
				return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "unknown transaction states %q", resp.UnknownStateFilters)
			}
			out = append(out, resp.TransactionStates...)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].TransactionalId != out[j].TransactionalId {
			return out[i].TransactionalId < out[j].TransactionalId
		}
		return out[i].ProducerId < out[j].ProducerId
	})
	return out, nil
}
