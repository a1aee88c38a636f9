package client

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is the transactional producer's state machine (Kafka:
// TransactionManager's State and its transitions, ref §3). Like the
// accumulator it is pure: no network, no clock, no goroutines; the
// Producer guards it with its mutex and txncoordinator.go does the
// requests.
//
//	uninitialized --InitTransactions--> initializing --answer--> ready
//	ready --BeginTransaction--> inTransaction
//	inTransaction --CommitTransaction--> committing --EndTxn--> ready
//	inTransaction|abortable --AbortTransaction--> aborting --EndTxn--> ready
//	inTransaction|committing --a send fails--> abortable
//	any --fenced, or a non-retriable coordinator error--> fatal (for good)
//
// A call whose ctx ends leaves initializing, committing or aborting in
// place: the same call must be made again (Kafka: "the previous call timed
// out and must be retried"). A commit in particular can never turn into an
// abort on the client's side: its outcome may already be decided.

// ErrProducerFenced means another producer with the same transactional id
// has called InitTransactions since this one did (the coordinator holds a
// newer epoch: PRODUCER_FENCED or INVALID_PRODUCER_EPOCH). It is fatal: it
// comes wrapped in a *TransactionFatalError and the producer must be closed.
var ErrProducerFenced = errors.New("sluice: producer fenced: a newer producer with the same transactional id exists")

// ErrTransactionState is wrapped by the errors of calls made in the wrong
// transaction state: Send or CommitTransaction outside a transaction,
// BeginTransaction twice, any call before InitTransactions, transaction
// calls on a producer without WithTransactionalID. Such a call changes
// nothing; fix the calling code.
var ErrTransactionState = errors.New("sluice: invalid transaction state")

// ErrTransactionAborted is the error of records dropped by
// AbortTransaction before they were acknowledged.
var ErrTransactionAborted = errors.New("sluice: the transaction was aborted")

// TransactionAbortableError means the current transaction cannot be
// committed (a record of it failed, the broker answered
// TRANSACTION_ABORTABLE, or the coordinator already aborted it because it
// stayed open past its timeout: the commit answered PRODUCER_FENCED and an
// abort at the same epoch NONE, or INVALID_TXN_STATE on commit). Nothing
// of it is committed. Call AbortTransaction; the producer can then begin
// a new transaction. Err is the first cause.
type TransactionAbortableError struct{ Err error }

func (e *TransactionAbortableError) Error() string {
	return "sluice: the transaction must be aborted: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *TransactionAbortableError) Unwrap() error { return e.Err }

// TransactionFatalError means the transactional producer cannot go on:
// fenced (errors.Is(err, ErrProducerFenced)), or the cluster refused it
// for good (authorization, an unsupported request, an invalid transaction
// timeout, ...). Every later call fails with it; close
// the producer (a new one with the same transactional id fences this one
// and aborts its open transaction).
type TransactionFatalError struct{ Err error }

func (e *TransactionFatalError) Error() string {
	return "sluice: transactional producer failed: " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *TransactionFatalError) Unwrap() error { return e.Err }

type txnState int

const (
	txnUninitialized txnState = iota
	txnInitializing
	txnReady
	txnInTransaction
	txnCommitting
	txnAborting
	txnAbortable
	txnFatal
)

func (s txnState) String() string {
	return [...]string{"uninitialized", "initializing", "ready", "in transaction", "committing", "aborting", "abortable error", "fatal error"}[s]
}

// txnMachine is the transaction state of a transactional producer.
type txnMachine struct {
	state txnState
	// started: a record was appended in the current transaction, so the
	// coordinator may know it (EndTxn is needed to end it).
	started bool
	// abortable is the first failure of the current transaction (a
	// *TransactionAbortableError), set in inTransaction and committing.
	abortable error
	// fatal is set in state txnFatal (a *TransactionFatalError).
	fatal error
}

func misuse(call, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrTransactionState, call, fmt.Sprintf(format, args...))
}

// failed returns the error every call gets in the error states, or nil.
func (m *txnMachine) failed() error {
	switch m.state {
	case txnFatal:
		return m.fatal
	case txnAbortable:
		return m.abortable
	}
	return nil
}

// pending explains a pending call that must be repeated, or "".
func (m *txnMachine) pending() string {
	switch m.state {
	case txnInitializing:
		return "InitTransactions has not completed: call it again"
	case txnCommitting:
		return "a commit is pending (its outcome is unknown): call CommitTransaction again"
	case txnAborting:
		return "an abort is pending: call AbortTransaction again"
	}
	return ""
}

// beginInit starts (or resumes) InitTransactions.
func (m *txnMachine) beginInit() error {
	switch m.state {
	case txnUninitialized, txnInitializing:
		m.state = txnInitializing
		return nil
	case txnFatal:
		return m.fatal
	}
	return misuse("InitTransactions", "already done (it is called once per producer)")
}

// initialized ends InitTransactions.
func (m *txnMachine) initialized() { m.state = txnReady }

// begin starts a transaction.
func (m *txnMachine) begin() error {
	switch m.state {
	case txnReady:
		m.state, m.started, m.abortable = txnInTransaction, false, nil
		return nil
	case txnUninitialized:
		return misuse("BeginTransaction", "call InitTransactions first")
	case txnInTransaction:
		return misuse("BeginTransaction", "a transaction is already open")
	}
	if err := m.failed(); err != nil {
		return err
	}
	return misuse("BeginTransaction", "%s", m.pending())
}

// checkSend says whether a record may be appended now.
func (m *txnMachine) checkSend() error {
	switch m.state {
	case txnInTransaction:
		return nil
	case txnReady:
		return misuse("Send", "no transaction is open (call BeginTransaction)")
	case txnUninitialized:
		return misuse("Send", "call InitTransactions and BeginTransaction first")
	}
	if err := m.failed(); err != nil {
		return err
	}
	return misuse("Send", "the transaction is ending (%s)", m.state)
}

// appended notes that a record of the transaction was appended.
func (m *txnMachine) appended() { m.started = true }

// beginCommit starts (or resumes) CommitTransaction.
func (m *txnMachine) beginCommit() error {
	switch m.state {
	case txnInTransaction, txnCommitting:
		m.state = txnCommitting
		return nil
	case txnReady, txnUninitialized:
		return misuse("CommitTransaction", "no transaction is open (call BeginTransaction)")
	}
	if err := m.failed(); err != nil {
		return err
	}
	return misuse("CommitTransaction", "%s", m.pending())
}

// beginAbort starts (or resumes) AbortTransaction.
func (m *txnMachine) beginAbort() error {
	switch m.state {
	case txnInTransaction, txnAbortable, txnAborting:
		m.state = txnAborting
		return nil
	case txnReady, txnUninitialized:
		return misuse("AbortTransaction", "no transaction is open")
	case txnFatal:
		return m.fatal
	}
	return misuse("AbortTransaction", "%s", m.pending())
}

// recordFailed notes that a record of the current transaction failed with
// err: PRODUCER_FENCED is fatal, anything else (INVALID_PRODUCER_EPOCH
// included) makes the transaction abortable
// (Kafka: a failed batch moves the TransactionManager to an abortable
// error). It returns the fatal error when the producer must stop sending.
// Failures while aborting are the abort's own doing and are ignored.
func (m *txnMachine) recordFailed(err error) (fatal error) {
	// INVALID_PRODUCER_EPOCH on a record is abortable (KIP-588): the
	// coordinator bumped the epoch, either because it aborted the
	// transaction on its timeout — then the abort's EndTxn is answered as
	// a retry of that abort and the producer goes on — or because a newer
	// producer took the id — then the abort's EndTxn is PRODUCER_FENCED,
	// fatal. Only the coordinator can tell which.
	if isFenced(err) && errs.Code(err) != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
		return m.fail(fencedError(err))
	}
	switch m.state {
	case txnInTransaction, txnCommitting:
		if m.abortable == nil {
			m.abortable = &TransactionAbortableError{Err: err}
		}
		if m.state == txnInTransaction {
			m.state = txnAbortable
		}
	}
	return nil
}

// commitFlushed is called once every record of a committing transaction
// has completed: it returns the transaction's failure, if any (the state
// becomes abortable).
func (m *txnMachine) commitFlushed() error {
	if m.state == txnFatal {
		return m.fatal
	}
	if m.abortable != nil {
		m.state = txnAbortable
		return m.abortable
	}
	return nil
}

// ended ends the transaction (committed or aborted): a new one may begin.
func (m *txnMachine) ended() {
	m.state, m.started, m.abortable = txnReady, false, nil
}

// abortableNow makes the open (committing) transaction abortable with err.
func (m *txnMachine) abortableNow(err error) error {
	if m.state == txnFatal {
		return m.fatal
	}
	m.state = txnAbortable
	if m.abortable == nil {
		m.abortable = &TransactionAbortableError{Err: err}
	}
	return m.abortable
}

// fail moves to the fatal state (the first fatal error stays) and returns
// the fatal error.
func (m *txnMachine) fail(err error) error {
	if m.state != txnFatal {
		var fe *TransactionFatalError
		if !errors.As(err, &fe) {
			fe = &TransactionFatalError{Err: err}
		}
		m.state, m.fatal = txnFatal, fe
	}
	return m.fatal
}

// isFenced reports whether err says a newer epoch of the producer exists.
func isFenced(err error) bool {
	if errors.Is(err, ErrProducerFenced) {
		return true
	}
	switch errs.Code(err) {
	case sluicev1.ErrorCode_PRODUCER_FENCED, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH:
		return true
	}
	return false
}

// fencedError wraps a fencing cause so that errors.Is finds both
// ErrProducerFenced and the broker's code.
func fencedError(cause error) error {
	if errors.Is(cause, ErrProducerFenced) {
		return cause
	}
	return &TransactionFatalError{Err: fmt.Errorf("%w: %w", ErrProducerFenced, cause)}
}
