package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// PRODUCER_FENCED on EndTxn(commit) is answered both to a fenced producer
// and to a commit that arrived after the coordinator aborted the
// transaction on its timeout (docs/transactions.md, protocol step 4): the
// producer sends EndTxn abort at the same epoch. NONE: the transaction is
// abortable, not fatal, the producer takes the answered epoch, and
// AbortTransaction sends nothing more. PRODUCER_FENCED again: fatal.
// (The fake answers the codes it is told; node_txn_timeout_test.go has
// the real coordinator.)
func TestTxnCommitFencedAsksWithAnAbortAtTheSameEpoch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []sluicev1.ErrorCode // to the commit, then to the abort
		fenced bool
	}{
		{"aborted on the coordinator's timeout", []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED}, false},
		{"fenced by a newer producer", []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED, sluicev1.ErrorCode_PRODUCER_FENCED}, true},
		{"the abort refused otherwise", []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED, sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			p := newTxnProducer(t, f)
			ctx := ctxT(t)
			mustOK(t, "InitTransactions", p.InitTransactions(ctx))
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			a := &acks{}
			sendTxn(p, a, "x", []int32{0}, 2)
			f.mu.Lock()
			f.txn.endErrs = tc.answer
			epoch := f.txn.txns["tx"].epoch
			f.mu.Unlock()

			err := p.CommitTransaction(ctx)
			f.mu.Lock()
			reqs := f.txn.endReqs
			f.mu.Unlock()
			if len(reqs) != 2 || !reqs[0].Committed || reqs[1].Committed || reqs[0].ProducerEpoch != epoch || reqs[1].ProducerEpoch != epoch {
				t.Fatalf("EndTxn requests %v, want commit then abort, both at epoch %d", reqs, epoch)
			}
			var abortable *TransactionAbortableError
			var fatal *TransactionFatalError
			if tc.fenced {
				if !errors.Is(err, ErrProducerFenced) || !errors.As(err, &fatal) {
					t.Fatalf("commit: %v, want fatal ErrProducerFenced", err)
				}
				if err := p.BeginTransaction(); !errors.Is(err, ErrProducerFenced) {
					t.Errorf("begin after fencing: %v, want ErrProducerFenced", err)
				}
				return
			}
			if !errors.As(err, &abortable) || errors.Is(err, ErrProducerFenced) || errors.As(err, &fatal) ||
				errs.Code(err) == sluicev1.ErrorCode_PRODUCER_FENCED || !strings.Contains(err.Error(), "transaction timeout") {
				t.Fatalf("commit: %v, want a *TransactionAbortableError naming the transaction timeout, not a fence", err)
			}
			if err := p.BeginTransaction(); !errors.As(err, &abortable) {
				t.Errorf("begin before the abort: %v, want the abortable error", err)
			}
			p.mu.Lock()
			got := p.acc.identity.epoch
			p.mu.Unlock()
			if int32(got) != epoch+1 {
				t.Errorf("producer epoch %d after the coordinator's abort, want the answered %d", got, epoch+1)
			}
			mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
			f.mu.Lock()
			n := len(f.txn.endReqs)
			f.mu.Unlock()
			if n != 2 {
				t.Errorf("AbortTransaction sent EndTxn (%d requests in all): the coordinator had ended the transaction already", n)
			}
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			sendTxn(p, a, "y", []int32{0}, 1)
			mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
			f.mu.Lock()
			last := f.txn.endReqs[len(f.txn.endReqs)-1]
			f.mu.Unlock()
			if !last.Committed || last.ProducerEpoch != epoch+1 {
				t.Errorf("next commit %v, want a commit at epoch %d", last, epoch+1)
			}
		})
	}
}

// A commit whose ctx ends while the abort that follows PRODUCER_FENCED
// waits for its answer stays pending, like any interrupted commit:
// CommitTransaction again repeats both requests.
func TestTxnCommitFencedInterruptedStaysPending(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, &acks{}, "x", []int32{0}, 2)
	mustOK(t, "Flush", p.Flush(ctx))
	f.mu.Lock()
	f.txn.endErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED,
		sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS}
	f.mu.Unlock()
	short, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err := p.CommitTransaction(short)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrProducerFenced) || !strings.Contains(err.Error(), "call CommitTransaction again") {
		t.Fatalf("interrupted commit: %v, want ctx's error and the commit pending", err)
	}
	f.mu.Lock()
	f.txn.endErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED}
	before := len(f.txn.endReqs)
	f.mu.Unlock()
	err = p.CommitTransaction(ctx)
	var abortable *TransactionAbortableError
	if !errors.As(err, &abortable) {
		t.Fatalf("commit again: %v, want *TransactionAbortableError", err)
	}
	f.mu.Lock()
	again := f.txn.endReqs[before:]
	f.mu.Unlock()
	if len(again) != 2 || !again[0].Committed || again[1].Committed {
		t.Errorf("EndTxn requests of the second call %v, want commit then abort", again)
	}
	mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
}
