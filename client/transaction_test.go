package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the transactional producer against the fake cluster's
// coordinator (txn_fake_test.go), named after the rule they check
// (docs/transactions.md, Kafka's TransactionManager).

func newTxnProducer(t *testing.T, f *fakeBroker, opts ...ProducerOption) *Producer {
	t.Helper()
	c, err := New([]string{f.addr}, WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := c.NewProducer(append([]ProducerOption{WithTransactionalID("tx"), WithBatchBytes(1024), WithLinger(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sendTxn sends values to partitions of "t" in the open transaction and
// returns a function that reports the callbacks' errors.
func sendTxn(p *Producer, a *acks, prefix string, partitions []int32, n int) {
	for i := 0; i < n; i++ {
		for _, part := range partitions {
			v := fmt.Sprintf("%s-%d-%d", prefix, part, i)
			p.Send(context.Background(), Record{Topic: "t", Partition: part, Value: []byte(v)}, a.cb(v))
		}
	}
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// InitTransactions finds the coordinator, retries CONCURRENT_TRANSACTIONS
// and COORDINATOR_LOAD_IN_PROGRESS with backoff, and finds the coordinator
// again after NOT_COORDINATOR; it sends the transactional id and timeout.
func TestTxnInitRetriesAndFindsCoordinatorAgain(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 2}, 2)
	f.mu.Lock()
	f.txn.coordinator = 2
	f.txn.staleFinds = 1
	f.txn.initErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS}
	f.mu.Unlock()
	p := newTxnProducer(t, f, WithTransactionTimeout(30*time.Second))
	mustOK(t, "InitTransactions", p.InitTransactions(ctxT(t)))
	f.mu.Lock()
	defer f.mu.Unlock()
	// node 1 (stale answer): NOT_COORDINATOR; node 2: two retriable errors, then the id.
	if f.txn.initCalls != 4 || f.txn.findCalls != 2 {
		t.Errorf("init calls %d, find calls %d; want 4 and 2", f.txn.initCalls, f.txn.findCalls)
	}
	for _, r := range f.txn.initReqs {
		if r.TransactionalId != "tx" || r.TransactionTimeoutMs != 30000 {
			t.Errorf("InitProducerId request %v", r)
		}
	}
	if st := p.Stats(); st.ProducerID < 1000 || st.Epoch != 0 {
		t.Errorf("identity %d/%d after init", st.ProducerID, st.Epoch)
	}
}

// Produce requests carry the transactional id and their batches the
// transactional attribute; each commit's answer gives the next epoch and
// every partition's sequences restart at 0 under it (TV2).
func TestTxnBatchesTransactionalAndSequencesRestartPerEpoch(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	a := &acks{}
	for round := 0; round < 3; round++ {
		mustOK(t, "BeginTransaction", p.BeginTransaction())
		sendTxn(p, a, fmt.Sprintf("r%d", round), []int32{0, 1}, 40)
		mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
	}
	if len(a.errs) > 0 {
		t.Fatalf("send errors: %v", a.errs)
	}
	for part := int32(0); part < 2; part++ {
		hs := f.headers("t", part)
		if epochs := checkSequences(t, hs); fmt.Sprint(epochs) != "[0 1 2]" {
			t.Errorf("partition %d: epochs %v, want [0 1 2]", part, epochs)
		}
		if hs[0].BaseSequence != 0 {
			t.Errorf("partition %d starts at sequence %d", part, hs[0].BaseSequence)
		}
		for i, h := range hs {
			if !h.IsTransactional() || h.IsControl() {
				t.Errorf("partition %d batch %d: attributes %#x, want transactional", part, i, h.Attributes)
			}
		}
		if got := len(f.records(t, "t", part)); got != 120 {
			t.Errorf("partition %d holds %d records, want 120", part, got)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range f.txn.produceIDs {
		if id != "tx" {
			t.Fatalf("a produce request carried transactional id %q", id)
		}
	}
	if f.txn.endCalls != 3 {
		t.Errorf("EndTxn calls %d, want 3", f.txn.endCalls)
	}
	for i, r := range f.txn.endReqs {
		if !r.Committed || r.ProducerEpoch != int32(i) {
			t.Errorf("EndTxn %d: %v", i, r)
		}
	}
}

// A commit whose answer is lost is retried with the same epoch until the
// coordinator confirms it; the retry of an already committed transaction
// succeeds, and the producer goes on with the epoch bumped once.
func TestTxnCommitWithLostAnswerIsRetriedToSuccess(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	a := &acks{}
	sendTxn(p, a, "x", []int32{0}, 3)
	f.mu.Lock()
	f.txn.endLost = 1
	f.txn.endErrs = nil
	f.mu.Unlock()
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
	f.mu.Lock()
	calls, reqs, state := f.txn.endCalls, f.txn.endReqs, f.txn.txns["tx"].state
	f.mu.Unlock()
	if calls != 2 || reqs[0].ProducerEpoch != reqs[1].ProducerEpoch || !reqs[1].Committed {
		t.Errorf("EndTxn calls %d: %v", calls, reqs)
	}
	if state != "CompleteCommit" {
		t.Errorf("coordinator state %s", state)
	}
	if st := p.Stats(); st.Epoch != 1 {
		t.Errorf("epoch %d after one commit, want 1", st.Epoch)
	}
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, a, "y", []int32{0}, 3)
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
}

// A commit whose ctx ends before the coordinator answers stays pending: it
// is not reported as aborted, AbortTransaction is refused, and calling
// CommitTransaction again completes it.
func TestTxnCommitInterruptedMustBeRetried(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f)
	mustOK(t, "InitTransactions", p.InitTransactions(ctxT(t)))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, &acks{}, "x", []int32{0}, 3)
	f.mu.Lock()
	f.txn.endErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS}
	f.mu.Unlock()
	short, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err := p.CommitTransaction(short)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "call CommitTransaction again") {
		t.Fatalf("interrupted commit: %v", err)
	}
	if err := p.AbortTransaction(ctxT(t)); !errors.Is(err, ErrTransactionState) {
		t.Errorf("abort during a pending commit: %v, want ErrTransactionState", err)
	}
	mustOK(t, "CommitTransaction again", p.CommitTransaction(ctxT(t)))
}

// PRODUCER_FENCED on a record, or INVALID_PRODUCER_EPOCH from EndTxn, is
// fatal: the error is ErrProducerFenced and every later call fails.
func TestTxnFencedIsFatal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(f *fakeBroker)
	}{
		{"produce", func(f *fakeBroker) { f.reject["t/0"] = sluicev1.ErrorCode_PRODUCER_FENCED }},
		{"end txn", func(f *fakeBroker) { f.txn.endErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			p := newTxnProducer(t, f)
			ctx := ctxT(t)
			mustOK(t, "InitTransactions", p.InitTransactions(ctx))
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			f.mu.Lock()
			tc.fault(f)
			f.mu.Unlock()
			sendTxn(p, &acks{}, "x", []int32{0}, 2)
			err := p.CommitTransaction(ctx)
			var fatal *TransactionFatalError
			if !errors.Is(err, ErrProducerFenced) || !errors.As(err, &fatal) {
				t.Fatalf("commit: %v, want fatal ErrProducerFenced", err)
			}
			if err := p.BeginTransaction(); !errors.Is(err, ErrProducerFenced) {
				t.Errorf("begin after fencing: %v", err)
			}
			if err := p.AbortTransaction(ctx); !errors.Is(err, ErrProducerFenced) {
				t.Errorf("abort after fencing: %v", err)
			}
			if err := p.CommitTransaction(ctx); !errors.Is(err, ErrProducerFenced) {
				t.Errorf("commit after fencing: %v", err)
			}
			var sendErr error
			p.Send(ctx, Record{Topic: "t", Partition: 0, Value: []byte("z")}, func(_ RecordMetadata, err error) { sendErr = err })
			if !errors.Is(sendErr, ErrProducerFenced) {
				t.Errorf("send after fencing: %v", sendErr)
			}
		})
	}
}

// A record that fails with a non-fatal error makes the transaction
// abortable: Commit fails with the abortable error and commits nothing;
// Begin is refused until Abort; after Abort a new transaction commits
// under a new epoch.
func TestTxnFailedSendMakesCommitAbortable(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	f.mu.Lock()
	f.reject["t/0"] = sluicev1.ErrorCode_TRANSACTION_ABORTABLE
	f.mu.Unlock()
	a := &acks{}
	sendTxn(p, a, "x", []int32{0, 1}, 2)
	err := p.CommitTransaction(ctx)
	var abortable *TransactionAbortableError
	if !errors.As(err, &abortable) || errs.Code(err) != sluicev1.ErrorCode_TRANSACTION_ABORTABLE {
		t.Fatalf("commit: %v, want *TransactionAbortableError with TRANSACTION_ABORTABLE", err)
	}
	f.mu.Lock()
	ends := f.txn.endCalls
	f.mu.Unlock()
	if ends != 0 {
		t.Errorf("EndTxn sent %d times for an abortable transaction", ends)
	}
	if err := p.BeginTransaction(); !errors.As(err, &abortable) {
		t.Errorf("begin before abort: %v", err)
	}
	mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, a, "y", []int32{0, 1}, 2)
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.txn.endReqs) != 2 || f.txn.endReqs[0].Committed || !f.txn.endReqs[1].Committed || f.txn.endReqs[1].ProducerEpoch != 1 {
		t.Errorf("EndTxn requests %v, want abort at epoch 0 then commit at 1", f.txn.endReqs)
	}
}

// AbortTransaction drops the records not yet sent (their callbacks get
// ErrTransactionAborted), ends the transaction with EndTxn abort, and the
// next transaction starts at sequence 0 under the new epoch.
func TestTxnAbortThenNewTransaction(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f, WithLinger(time.Hour))
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	a := &acks{}
	sendTxn(p, a, "dropped", []int32{0}, 3) // lingering: never sent
	mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
	if len(a.errs) != 3 || !errors.Is(a.errs[0], ErrTransactionAborted) {
		t.Fatalf("callbacks of dropped records: %v", a.errs)
	}
	if got := f.records(t, "t", 0); len(got) != 0 {
		t.Errorf("aborted records were sent: %v", got)
	}
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	a = &acks{}
	sendTxn(p, a, "kept", []int32{0}, 3)
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
	if len(a.errs) != 0 {
		t.Fatalf("send errors: %v", a.errs)
	}
	hs := f.headers("t", 0)
	if len(hs) == 0 || hs[0].ProducerEpoch != 1 || hs[0].BaseSequence != 0 {
		t.Errorf("first batch after the abort: %+v, want epoch 1 sequence 0", hs)
	}
	if p.Stats().Epoch != 2 {
		t.Errorf("epoch %d, want 2 after abort and commit", p.Stats().Epoch)
	}
}

// Calls in the wrong state fail with ErrTransactionState and change
// nothing.
func TestTxnMisuse(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	var sendErr error
	cb := func(_ RecordMetadata, err error) { sendErr = err }
	p.Send(ctx, Record{Topic: "t", Partition: 0, Value: []byte("v")}, cb)
	type check struct {
		what string
		err  error
	}
	checks := []check{
		{"Send before InitTransactions", sendErr},
		{"BeginTransaction before InitTransactions", p.BeginTransaction()},
		{"CommitTransaction before InitTransactions", p.CommitTransaction(ctx)},
	}
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	p.Send(ctx, Record{Topic: "t", Partition: 0, Value: []byte("v")}, cb)
	checks = append(checks,
		check{"Send outside a transaction", sendErr},
		check{"InitTransactions twice", p.InitTransactions(ctx)},
		check{"CommitTransaction without BeginTransaction", p.CommitTransaction(ctx)},
		check{"AbortTransaction without BeginTransaction", p.AbortTransaction(ctx)},
	)
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	checks = append(checks, check{"BeginTransaction twice", p.BeginTransaction()})
	for _, c := range checks {
		if !errors.Is(c.err, ErrTransactionState) {
			t.Errorf("%s: %v, want ErrTransactionState", c.what, c.err)
		}
	}
	mustOK(t, "CommitTransaction of the open (empty) transaction", p.CommitTransaction(ctx))

	c, _ := New([]string{f.addr})
	defer c.Close()
	plain, err := c.NewProducer()
	mustOK(t, "NewProducer", err)
	defer plain.Close()
	if err := plain.InitTransactions(ctx); !errors.Is(err, ErrTransactionState) {
		t.Errorf("InitTransactions without a transactional id: %v", err)
	}
	for name, opts := range map[string][]ProducerOption{
		"idempotence off": {WithTransactionalID("x"), WithIdempotence(false)},
		"acks leader":     {WithTransactionalID("x"), WithAcks(AcksLeader)},
		"empty id":        {WithTransactionalID("")},
		"zero timeout":    {WithTransactionalID("x"), WithTransactionTimeout(0)},
	} {
		if _, err := c.NewProducer(opts...); err == nil {
			t.Errorf("NewProducer with %s: no error", name)
		}
	}
}

// A non-retriable InitProducerId answer (INVALID_TRANSACTION_TIMEOUT) is
// fatal.
func TestTxnInvalidTimeoutIsFatal(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.txn.initErrs = []sluicev1.ErrorCode{sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT}
	f.mu.Unlock()
	p := newTxnProducer(t, f)
	err := p.InitTransactions(ctxT(t))
	var fatal *TransactionFatalError
	if !errors.As(err, &fatal) || errs.Code(err) != sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT {
		t.Fatalf("init: %v", err)
	}
	if err := p.BeginTransaction(); !errors.As(err, &fatal) {
		t.Errorf("begin after a fatal init: %v", err)
	}
}

// DescribeTransactions asks each id's coordinator; ListTransactions asks
// every broker and merges, sorted.
func TestAdminDescribeAndListTransactions(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	f.mu.Lock()
	f.txn.owner = map[string]int32{"a": 2, "b": 1, "c": 2}
	f.txn.txns = map[string]*fakeTxn{"a": {pid: 1, state: "Ongoing"}, "b": {pid: 2, state: "Empty"}, "c": {pid: 3, state: "CompleteCommit"}}
	f.mu.Unlock()
	c, err := New([]string{f.addr})
	mustOK(t, "New", err)
	defer c.Close()
	ctx := ctxT(t)
	ls, err := c.ListTransactions(ctx, ListTransactionsFilter{})
	mustOK(t, "ListTransactions", err)
	var got []string
	for _, l := range ls {
		got = append(got, l.TransactionalId+"="+l.State)
	}
	if fmt.Sprint(got) != "[a=Ongoing b=Empty c=CompleteCommit]" {
		t.Errorf("listing %v", got)
	}
	ds, err := c.DescribeTransactions(ctx, "c", "zz")
	mustOK(t, "DescribeTransactions", err)
	if len(ds) != 2 || ds[0].State != "CompleteCommit" || ds[0].ProducerId != 3 || ds[1].ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND {
		t.Errorf("describe: %v", ds)
	}
	co, err := c.FindCoordinator(ctx, "a")
	mustOK(t, "FindCoordinator", err)
	if co.NodeID != 2 {
		t.Errorf("coordinator of a: %+v", co)
	}
}

// A commit refused INVALID_TXN_STATE (the coordinator aborted the
// transaction on its timeout) is abortable, not committed and not fatal:
// the abort's EndTxn is a retry of the coordinator's outcome and succeeds,
// and the next transaction commits.
func TestTxnCommitAfterCoordinatorTimeoutIsAbortable(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newTxnProducer(t, f)
	ctx := ctxT(t)
	mustOK(t, "InitTransactions", p.InitTransactions(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, &acks{}, "x", []int32{0}, 2)
	mustOK(t, "Flush", p.Flush(ctx))
	f.mu.Lock()
	tx := f.txn.txns["tx"] // the coordinator's timeout aborts it (TV2: epoch bump)
	tx.epoch, tx.state, tx.lastCommitted = tx.epoch+1, "CompleteAbort", false
	f.mu.Unlock()
	err := p.CommitTransaction(ctx)
	var abortable *TransactionAbortableError
	if !errors.As(err, &abortable) || errs.Code(err) != sluicev1.ErrorCode_INVALID_TXN_STATE {
		t.Fatalf("commit: %v, want *TransactionAbortableError with INVALID_TXN_STATE", err)
	}
	mustOK(t, "AbortTransaction", p.AbortTransaction(ctx))
	mustOK(t, "BeginTransaction", p.BeginTransaction())
	sendTxn(p, &acks{}, "y", []int32{0}, 2)
	mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
}

// Consumers read committed data unless told otherwise (DESIGN §10: Kafka's
// read_uncommitted default is a trap): fetches carry READ_COMMITTED by
// default and READ_UNCOMMITTED with WithIsolation(ReadUncommitted).
func TestConsumerIsolationDefaultsToReadCommitted(t *testing.T) {
	for _, tc := range []struct {
		opts []ConsumerOption
		want sluicev1.IsolationLevel
	}{
		{nil, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED},
		{[]ConsumerOption{WithIsolation(ReadUncommitted)}, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED},
	} {
		f := startFake(t, map[string]int{"t": 1})
		c, err := New([]string{f.addr})
		mustOK(t, "New", err)
		defer c.Close()
		co, err := c.NewConsumer(append(tc.opts, WithMaxWait(20*time.Millisecond))...)
		mustOK(t, "NewConsumer", err)
		defer co.Close()
		mustOK(t, "Assign", co.Assign("t", 0, 0))
		var got []sluicev1.IsolationLevel
		wait.For(t, 10*time.Second, "a fetch", func() error {
			pctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, _ = co.Poll(pctx)
			cancel()
			f.mu.Lock()
			got = append([]sluicev1.IsolationLevel(nil), f.txn.fetchIsolation...)
			f.mu.Unlock()
			if len(got) == 0 {
				return errors.New("no fetch sent yet")
			}
			return nil
		})
		for _, iso := range got {
			if iso != tc.want {
				t.Errorf("fetch isolation %v, want %v", iso, tc.want)
			}
		}
	}
}

// A record refused INVALID_PRODUCER_EPOCH makes the transaction abortable
// (KIP-588), not the producer fatal: the coordinator may have aborted it
// on its timeout, and then the abort is answered and the producer goes on;
// if a newer producer took the id, the abort is PRODUCER_FENCED, fatal.
func TestTxnInvalidEpochOnSendIsAbortable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		abortErr []sluicev1.ErrorCode
		fenced   bool
	}{
		{"timed out by the coordinator", nil, false},
		{"fenced by a newer producer", []sluicev1.ErrorCode{sluicev1.ErrorCode_PRODUCER_FENCED}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, map[string]int{"t": 1})
			p := newTxnProducer(t, f)
			ctx := ctxT(t)
			mustOK(t, "InitTransactions", p.InitTransactions(ctx))
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			f.mu.Lock()
			f.reject["t/0"] = sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH
			f.mu.Unlock()
			sendTxn(p, &acks{}, "x", []int32{0}, 2)
			err := p.CommitTransaction(ctx)
			var abortable *TransactionAbortableError
			if !errors.As(err, &abortable) || errors.Is(err, ErrProducerFenced) {
				t.Fatalf("commit: %v, want *TransactionAbortableError", err)
			}
			f.mu.Lock()
			delete(f.reject, "t/0")
			f.txn.endErrs = tc.abortErr
			f.mu.Unlock()
			err = p.AbortTransaction(ctx)
			if tc.fenced {
				if !errors.Is(err, ErrProducerFenced) {
					t.Fatalf("abort: %v, want ErrProducerFenced", err)
				}
				return
			}
			mustOK(t, "AbortTransaction", err)
			mustOK(t, "BeginTransaction", p.BeginTransaction())
			sendTxn(p, &acks{}, "y", []int32{0}, 1)
			mustOK(t, "CommitTransaction", p.CommitTransaction(ctx))
		})
	}
}
