package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// SendOffsetsToTransaction (KIP-447) sends TxnOffsetCommit to the group's
// coordinator with the transactional id, the producer's id and epoch and
// the consumer's member id, epoch and instance id; the transaction then
// needs an EndTxn even without records.
func TestSendOffsetsToTransactionRequest(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	f.mu.Lock()
	f.txn.owner = map[string]int32{"g": 2}
	// Retriable answers are retried, NOT_COORDINATOR after finding the
	// coordinator again.
	f.grp.txnErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS, sluicev1.ErrorCode_NOT_COORDINATOR}
	f.mu.Unlock()
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	meta := GroupMetadata{GroupID: "g", MemberID: "member-1", MemberEpoch: 4, InstanceID: "i-1"}
	offsets := map[TopicPartition]int64{{Topic: "u", Partition: 1}: 9, {Topic: "t", Partition: 0}: 5, {Topic: "t", Partition: 2}: 7}
	mustOK(t, "SendOffsetsToTransaction", p.SendOffsetsToTransaction(ctx, offsets, meta))
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.grp.txnReqs) != 3 {
		t.Fatalf("%d TxnOffsetCommit requests, want 3 (two retried answers)", len(f.grp.txnReqs))
	}
	r := f.grp.txnReqs[2]
	tx := f.txn.txns["tx"]
	if r.TransactionalId != "tx" || r.GroupId != "g" || r.ProducerId != tx.pid || r.ProducerEpoch != tx.epoch-1 ||
		r.MemberId != "member-1" || r.MemberEpoch != 4 || r.GroupInstanceId != "i-1" {
		t.Errorf("request %v (producer %d epoch %d before the commit)", r, tx.pid, tx.epoch-1)
	}
	got := ""
	for _, tp := range r.Topics {
		for _, p := range tp.Partitions {
			got += fmt.Sprintf("%s:%d=%d ", tp.Name, p.Partition, p.CommittedOffset)
		}
	}
	if got != "t:0=5 t:2=7 u:1=9 " {
		t.Errorf("offsets %q", got)
	}
	if len(f.txn.endReqs) != 1 || !f.txn.endReqs[0].Committed {
		t.Errorf("EndTxn requests %v, want one commit", f.txn.endReqs)
	}
}

// A fenced member makes the transaction abortable; a fenced producer is
// fatal; outside a transaction the call is refused.
func TestSendOffsetsToTransactionErrors(t *testing.T) {
	for _, tc := range []struct {
		code  sluicev1.ErrorCode
		fatal bool
	}{
		{sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, false},
		{sluicev1.ErrorCode_ILLEGAL_GENERATION, false},
		{sluicev1.ErrorCode_FENCED_INSTANCE_ID, false},
		{sluicev1.ErrorCode_PRODUCER_FENCED, true},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			p := newTxnProducer(t, f)
			ctx := ctxT(t)
			meta := GroupMetadata{GroupID: "g", MemberID: "m", MemberEpoch: 1}
			offsets := map[TopicPartition]int64{{Topic: "t", Partition: 0}: 1}
			mustOK(t, "InitTransactions", p.InitTransactions(ctx))
			if err := p.SendOffsetsToTransaction(ctx, offsets, meta); !errors.Is(err, ErrTransactionState) {
				t.Errorf("outside a transaction: %v", err)
			}
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			f.mu.Lock()
			f.grp.txnErrs = []sluicev1.ErrorCode{tc.code}
			f.mu.Unlock()
			err := p.SendOffsetsToTransaction(ctx, offsets, meta)
			if errs.Code(err) != tc.code {
				t.Errorf("error %v does not carry %v", err, tc.code)
			}
			if tc.fatal {
				var fatal *TransactionFatalError
				if !errors.As(err, &fatal) || !errors.Is(err, ErrProducerFenced) {
					t.Fatalf("%v: want a fatal ErrProducerFenced", err)
				}
				return
			}
			var abortable *TransactionAbortableError
			if !errors.As(err, &abortable) {
				t.Fatalf("%v: want a TransactionAbortableError", err)
			}
			if err := p.CommitTransaction(ctx); !errors.As(err, &abortable) {
				t.Errorf("commit after it: %v, want abortable", err)
			}
			mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
			mustOK(t, "BeginTransaction after the abort", p.BeginTransaction())
		})
	}
}
