package client

import (
	"context"
	"errors"
	"fmt"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the transactional producer's API and its requests to the
// transaction coordinator (transaction version 2, as docs/transactions.md
// "Driving the protocol from any language" describes it for clients; the
// coordinator's side is docs/design.md, decisions 30 to 37):
// FindCoordinator, then InitProducerId once, then per transaction the
// records (the partition leaders add their partitions to the transaction)
// and EndTxn. transaction.go is the state machine.
//
// Every request is retried inside the call until it has a definite
// answer or ctx ends (Kafka's TransactionManager does the same with its
// handlers):
//
//   - NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or no answer at all (the
//     broker unreachable, the answer lost, the request timeout): find the
//     coordinator again, retry;
//   - COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS and other
//     retriable codes: retry after a pause (100ms doubling to 1s);
//   - PRODUCER_FENCED, INVALID_PRODUCER_EPOCH: fatal, ErrProducerFenced —
//     except PRODUCER_FENCED on a commit, which the coordinator also
//     answers when it aborted the transaction on its timeout: an EndTxn
//     abort at the same epoch tells the two apart (commitFenced);
//   - TRANSACTION_ABORTABLE on a commit, or INVALID_TXN_STATE (the
//     coordinator already aborted the transaction; Sluice's coordinator
//     answers such a commit PRODUCER_FENCED, above, since KAFKA-20785):
//     the transaction must be aborted;
//   - anything else (INVALID_TXN_STATE on an abort, INVALID_TRANSACTION_TIMEOUT,
//     TRANSACTIONAL_ID_NOT_FOUND, authorization, an unimplemented RPC):
//     fatal.
//
// A retried EndTxn carries the same producer id and epoch: if the first
// attempt was applied and its answer lost, the coordinator recognises the
// retry (same outcome) and answers it with the next epoch again.

// txnIdentity is an InitProducerId or EndTxn answer.
type txnIdentity struct {
	id    int64
	epoch int16
}

// InitTransactions gets the producer its producer id and epoch from the
// coordinator of its transactional id, fencing any older producer with the
// same id and aborting (or completing) the transaction that producer left
// open. It must be called once, before the first BeginTransaction.
// Retriable errors are retried until ctx ends; then the error wraps ctx's
// and InitTransactions must be called again. Other errors are fatal
// (*TransactionFatalError).
func (p *Producer) InitTransactions(ctx context.Context) error {
	if err := p.transactional("InitTransactions"); err != nil {
		return err
	}
	p.txnOp.Lock()
	defer p.txnOp.Unlock()
	p.mu.Lock()
	err := p.txn.beginInit()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	req := &sluicev1.InitProducerIdRequest{
		TransactionalId:      p.cfg.transactionalID,
		TransactionTimeoutMs: int32(p.cfg.txnTimeout.Milliseconds()),
		ProducerId:           -1,
		ProducerEpoch:        -1,
	}
	var id txnIdentity
	err = p.coordinatorCall(ctx, "init transactions", func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := sluicev1.NewTransactionsClient(cc).InitProducerId(ctx, req)
		if err != nil {
			return err
		}
		id, err = identityFrom(resp.ErrorCode, resp.ErrorMessage, resp.ProducerId, resp.ProducerEpoch)
		return err
	})
	if err != nil {
		return p.txnFailed(ctx, err, false)
	}
	p.mu.Lock()
	p.acc.setIdentity(id.id, id.epoch)
	p.txn.initialized()
	p.mu.Unlock()
	return nil
}

// BeginTransaction starts a transaction: the records sent from now until
// CommitTransaction or AbortTransaction belong to it. It needs
// InitTransactions to have succeeded and no transaction to be open
// (ErrTransactionState otherwise); after an abortable error it returns
// that error until AbortTransaction.
func (p *Producer) BeginTransaction() error {
	if err := p.transactional("BeginTransaction"); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.txn.begin()
}

// CommitTransaction sends every record of the transaction, waits until
// all are acknowledged, and commits the transaction; on success the
// records become visible to read_committed consumers, all together, and a
// new transaction may begin.
//
// If a record of the transaction failed, nothing is committed and the
// error is a *TransactionAbortableError: call AbortTransaction. The same
// holds when the coordinator had already aborted the transaction, because
// it stayed open past its transaction timeout (WithTransactionTimeout):
// the producer is healthy and already holds the epoch the coordinator
// handed out with that abort, and AbortTransaction ends the transaction
// on the producer's side without a request. Fencing and other fatal
// errors are a *TransactionFatalError. If ctx ends first
// the outcome may be unknown (the commit may have been decided): the error
// wraps ctx's, the transaction stays committing, and CommitTransaction
// must be called again (AbortTransaction is refused meanwhile); it returns
// nil once the coordinator confirms the commit. A commit is never
// reported as aborted.
func (p *Producer) CommitTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, true)
}

// AbortTransaction aborts the open transaction: records not yet sent are
// dropped (their callbacks get ErrTransactionAborted), the ones in flight
// are waited for, and the coordinator aborts the transaction, so that
// read_committed consumers never see its records. Then a new transaction
// may begin. It is allowed after an abortable error, not after a fatal
// one. If ctx ends first, the error wraps ctx's and AbortTransaction must
// be called again.
func (p *Producer) AbortTransaction(ctx context.Context) error {
	return p.endTransaction(ctx, false)
}

// endTransaction is CommitTransaction (commit) or AbortTransaction.
func (p *Producer) endTransaction(ctx context.Context, commit bool) error {
	call := "AbortTransaction"
	if commit {
		call = "CommitTransaction"
	}
	if err := p.transactional(call); err != nil {
		return err
	}
	p.txnOp.Lock()
	defer p.txnOp.Unlock()
	p.mu.Lock()
	var err error
	if commit {
		err = p.txn.beginCommit()
	} else if err = p.txn.beginAbort(); err == nil {
		// The sender loop fails every batch not in flight, now and
		// whenever an in-flight one comes back for a retry.
		p.txnAborting = true
	}
	started := p.txn.started
	p.mu.Unlock()
	if err != nil {
		return err
	}
	p.signal()
	if err := p.Flush(ctx); err != nil {
		return fmt.Errorf("sluice: %s: waiting for the transaction's records: %w (%s)", call, err, p.pendingNote())
	}
	p.mu.Lock()
	p.txnAborting = false
	if commit {
		err = p.txn.commitFlushed()
	} else if p.txn.state == txnFatal {
		err = p.txn.fatal
	}
	id := p.acc.identity
	p.mu.Unlock()
	if err != nil {
		return err
	}
	next := txnIdentity{id: id.id, epoch: id.epoch}
	if started {
		// TV2: EndTxn is needed once a record may have reached a partition
		// leader (which then added the partition to the transaction); its
		// answer is the identity of the next transaction.
		req := &sluicev1.EndTxnRequest{TransactionalId: p.cfg.transactionalID, ProducerId: id.id, ProducerEpoch: int32(id.epoch), Committed: commit}
		err = p.coordinatorCall(ctx, "end transaction", func(ctx context.Context, cc *grpc.ClientConn) error {
			resp, err := sluicev1.NewTransactionsClient(cc).EndTxn(ctx, req)
			if err != nil {
				return err
			}
			next, err = identityFrom(resp.ErrorCode, resp.ErrorMessage, resp.ProducerId, resp.ProducerEpoch)
			return err
		})
		if commit && errs.Code(err) == sluicev1.ErrorCode_PRODUCER_FENCED {
			return p.commitFenced(ctx, id, err)
		}
		if err != nil {
			return p.txnFailed(ctx, err, commit)
		}
	}
	p.mu.Lock()
	// Sequences restart at 0 on every partition under the new epoch
	// (accumulator.maySend adopts it; every partition is idle now).
	p.acc.setIdentity(next.id, next.epoch)
	p.txn.ended()
	p.mu.Unlock()
	return nil
}

// commitFenced handles PRODUCER_FENCED (fenced) on the EndTxn commit that
// id sent. The coordinator answers it in two cases (docs/transactions.md,
// protocol step 4, and coordinator/txn.EndTxn): a newer producer took the
// transactional id, or the coordinator aborted the transaction before the
// commit arrived — on its timeout, which bumped the epoch under a healthy
// producer (TV2); such a commit never succeeds (KAFKA-20785). To tell
// them apart it sends EndTxn abort with the same producer id and epoch:
//
//   - NONE: the coordinator took it as a retry of its own abort
//     (CompleteAbort at the epoch after id's) and answered the identity to
//     go on with. The producer adopts it (sequences restart at 0, as after
//     any end) and the transaction becomes abortable; it has ended at the
//     coordinator already, so AbortTransaction sends no EndTxn;
//   - ctx ended first: the commit stays pending, as for any interrupted
//     commit; calling CommitTransaction again repeats both requests (the
//     coordinator's answers to them do not change);
//   - PRODUCER_FENCED again (a newer producer holds the id), or anything
//     else: fatal, ErrProducerFenced, as the commit's answer said.
func (p *Producer) commitFenced(ctx context.Context, id producerIdentity, fenced error) error {
	req := &sluicev1.EndTxnRequest{TransactionalId: p.cfg.transactionalID, ProducerId: id.id, ProducerEpoch: int32(id.epoch), Committed: false}
	var next txnIdentity
	err := p.coordinatorCall(ctx, "end transaction (abort at the same epoch, after the commit was refused)", func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := sluicev1.NewTransactionsClient(cc).EndTxn(ctx, req)
		if err != nil {
			return err
		}
		next, err = identityFrom(resp.ErrorCode, resp.ErrorMessage, resp.ProducerId, resp.ProducerEpoch)
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil && !isFenced(err):
		return p.txnFailed(ctx, err, true)
	case err != nil:
		// The commit's own error first, so that the result is fenced
		// (isFenced) whatever the abort was answered.
		return p.txnFailed(ctx, fmt.Errorf("%w; then %v", fenced, err), true)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acc.setIdentity(next.id, next.epoch)
	// Nothing is left to end at the coordinator: AbortTransaction must not
	// send EndTxn at the new epoch (that would end an empty transaction
	// and bump the epoch once more).
	p.txn.started = false
	// The commit's answer is kept as text only: the cause is not a fence,
	// and errs.Code must not say PRODUCER_FENCED.
	return p.txn.abortableNow(fmt.Errorf("the coordinator had aborted the transaction before the commit arrived (it stayed open past its transaction timeout, %v); nothing was committed, and the producer goes on at epoch %d (the commit was answered: %v)",
		p.cfg.txnTimeout, next.epoch, fenced))
}

// pendingNote tells what to call after a ctx ended mid-call.
func (p *Producer) pendingNote() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.txn.pending(); s != "" {
		return s
	}
	return "the transaction state is " + p.txn.state.String()
}

// transactional fails calls on a producer without a transactional id.
func (p *Producer) transactional(call string) error {
	if p.txn == nil {
		return misuse(call, "the producer has no transactional id (WithTransactionalID)")
	}
	return nil
}

// txnFailed turns the final error of a coordinator request into the
// call's error and state: ctx ended (the call stays pending), abortable
// (commit only), or fatal.
func (p *Producer) txnFailed(ctx context.Context, err error, commit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ctx.Err() != nil && !isFenced(err):
		return fmt.Errorf("sluice: %w (%s); last error: %v", ctx.Err(), p.txn.pending(), err)
	case isFenced(err):
		err = p.txn.fail(fencedError(err))
	case commit && errs.Code(err) == sluicev1.ErrorCode_TRANSACTION_ABORTABLE:
		return p.txn.abortableNow(err)
	case commit && errs.Code(err) == sluicev1.ErrorCode_INVALID_TXN_STATE:
		// The transaction ended the other way: the coordinator aborted it
		// (its timeout passed). It is not committed, and the abort's
		// EndTxn, a retry of the same outcome, ends it on our side too.
		return p.txn.abortableNow(fmt.Errorf("the coordinator has aborted the transaction (did it stay open past the transaction timeout?): %w", err))
	default:
		err = p.txn.fail(err)
	}
	if p.fatal == nil {
		p.fatal = err
		p.signal()
	}
	return err
}

// identityFrom checks an InitProducerId or EndTxn answer.
func identityFrom(code sluicev1.ErrorCode, msg string, id int64, epoch int32) (txnIdentity, error) {
	if err := codeError(code, msg); err != nil {
		return txnIdentity{}, err
	}
	if id < 0 || epoch < 0 || epoch > math.MaxInt16 {
		return txnIdentity{}, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "coordinator answered producer id %d epoch %d", id, epoch)
	}
	return txnIdentity{id: id, epoch: int16(epoch)}, nil
}

// coordinatorCall runs one transaction request against the coordinator of
// the producer's transactional id until it succeeds, fails for good, or
// ctx ends (see the top of this file). call makes one attempt and returns
// the transport error or the answer's error code. The caller holds txnOp,
// which guards the cached coordinator.
func (p *Producer) coordinatorCall(ctx context.Context, what string, call func(ctx context.Context, cc *grpc.ClientConn) error) error {
	for attempt := 0; ; attempt++ {
		err := p.coordinatorAttempt(ctx, call)
		if err == nil {
			return nil
		}
		err = fmt.Errorf("%s: %w", what, err)
		if ctx.Err() != nil {
			return err
		}
		if status.Code(unwrapStatus(err)) == codes.Unimplemented {
			return fmt.Errorf("the broker does not support transactions: %w", err)
		}
		retry, refind := coordinatorRetriable(err)
		if !retry || isFenced(err) {
			return err
		}
		if refind {
			p.coordinator = ""
		}
		if sleepCtx(ctx, initBackoff(attempt)) != nil {
			return err
		}
	}
}

// coordinatorAttempt finds the coordinator when it is not known and makes
// one attempt of call there, bounded by the request timeout.
func (p *Producer) coordinatorAttempt(ctx context.Context, call func(ctx context.Context, cc *grpc.ClientConn) error) error {
	if p.coordinator == "" {
		co, err := p.c.FindCoordinator(ctx, p.cfg.transactionalID)
		if err != nil {
			return err
		}
		p.coordinator = co.Address
	}
	cc, err := p.c.conn(p.coordinator)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, p.c.cfg.requestTimeout)
	defer cancel()
	return rpcError(call(rctx, cc))
}
