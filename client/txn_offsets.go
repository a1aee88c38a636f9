package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// SendOffsetsToTransaction commits a consumer group's offsets as part of
// the open transaction (KIP-447, consume-transform-produce): they become
// the group's committed offsets when the transaction commits and are
// dropped when it aborts. offsets maps each partition to the next offset
// to consume (a consumer's Position); meta is the consumer's
// GroupMetadata, taken after the Poll whose records the transaction
// holds, so that the coordinator can fence a zombie member. A zero
// MemberEpoch with an empty MemberID is sent as epoch -1: no member check.
//
// It must be called inside a transaction (ErrTransactionState otherwise).
// The request goes to the group's coordinator with the producer's
// transactional id, producer id and epoch; retriable coordinator errors
// are retried for up to the request timeout. Then:
//
//   - PRODUCER_FENCED, INVALID_PRODUCER_EPOCH: *TransactionFatalError
//     wrapping ErrProducerFenced;
//   - UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID (the
//     member was fenced: its partitions may be someone else's), any other
//     error, and ctx or the request timeout ending (the offsets may or may
//     not be in the transaction): *TransactionAbortableError — call
//     AbortTransaction, then rewind the consumer to its committed offsets.
func (p *Producer) SendOffsetsToTransaction(ctx context.Context, offsets map[TopicPartition]int64, meta GroupMetadata) error {
	const call = "SendOffsetsToTransaction"
	if err := p.transactional(call); err != nil {
		return err
	}
	if meta.GroupID == "" {
		return fmt.Errorf("sluice: %s: the group metadata has no group id", call)
	}
	for tp, off := range offsets {
		if off < 0 {
			return fmt.Errorf("sluice: %s: offset %d of %s is negative", call, off, tp)
		}
	}
	p.txnOp.Lock()
	defer p.txnOp.Unlock()
	p.mu.Lock()
	switch p.txn.state {
	case txnInTransaction:
	case txnReady, txnUninitialized:
		p.mu.Unlock()
		return misuse(call, "no transaction is open (call BeginTransaction)")
	default:
		err := p.txn.failed()
		if err == nil {
			err = misuse(call, "the transaction is ending (%s)", p.txn.state)
		}
		p.mu.Unlock()
		return err
	}
	if len(offsets) == 0 {
		p.mu.Unlock()
		return nil
	}
	// The coordinator may add the group's __consumer_offsets partition to
	// the transaction (TV2) even if the answer is lost: the transaction
	// needs an EndTxn from now on.
	p.txn.appended()
	id := p.acc.identity
	p.mu.Unlock()

	memberID, epoch := meta.MemberID, meta.MemberEpoch
	if memberID == "" && epoch == 0 {
		epoch = -1
	}
	req := &sluicev1.TxnOffsetCommitRequest{
		TransactionalId: p.cfg.transactionalID, GroupId: meta.GroupID,
		ProducerId: id.id, ProducerEpoch: int32(id.epoch),
		MemberId: memberID, MemberEpoch: epoch, GroupInstanceId: meta.InstanceID,
		Topics: commitTopics(offsets),
	}
	coord := &groupCoordinator{c: p.c, group: meta.GroupID}
	err := coord.call(ctx, "txn offset commit", func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := sluicev1.NewGroupsClient(cc).TxnOffsetCommit(ctx, req)
		if err != nil {
			return err
		}
		return commitError(resp.ErrorCode, resp.ErrorMessage, resp.Topics)
	})
	if err == nil {
		return nil
	}
	err = fmt.Errorf("sluice: %s for group %q: %w", call, meta.GroupID, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	if isFenced(err) {
		err = p.txn.fail(fencedError(err))
		if p.fatal == nil {
			p.fatal = err
			p.signal()
		}
		return err
	}
	switch errs.Code(err) {
	case sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, sluicev1.ErrorCode_ILLEGAL_GENERATION, sluicev1.ErrorCode_FENCED_INSTANCE_ID:
		err = fmt.Errorf("%w (the consumer was fenced from its group: its partitions may belong to another member)", err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w (the offsets may or may not be part of the transaction)", err)
	}
	return p.txn.abortableNow(err)
}
