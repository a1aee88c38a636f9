package txn

import (
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Result is the decision of one transition (see the package comment for
// the order in which the caller persists, applies and answers).
type Result struct {
	// Err is the answer to the requester: nil for NONE, else an
	// *errs.Error. It does not depend on Write being committed, except
	// that an answer is only sent after Write (if any) is applied.
	Err error
	// Write is the Metadata to persist, then apply in memory; nil when
	// nothing changes. It shares nothing with the input Metadata.
	// Write and Err are both set in one case only: InitProducerId on an
	// open transaction writes its abort and answers CONCURRENT_TRANSACTIONS.
	Write *Metadata
	// ProducerID and ProducerEpoch are the producer id and epoch to
	// answer when Err is nil: InitProducerId's result, EndTxn's bumped
	// epoch (TV2), or the current ones for an idempotent retry.
	ProducerID    int64
	ProducerEpoch int16
	// SendMarkers: once Write is applied, write a marker (COMMIT if
	// Write.State is PrepareCommit, else ABORT) with Write's producer id
	// and epoch to every partition in Write.Partitions — none for an empty
	// transaction — then call Complete. Set exactly when Write is Prepare*.
	SendMarkers bool
	// NeedProducerID: the transition moves the id to a new producer id
	// (a new transactional id, or the epoch is exhausted) and the request
	// carried none. Nothing else is set: allocate an id and call again
	// with it. This package never allocates.
	NeedProducerID bool
}

// Code returns the wire code of r.Err (NONE for nil).
func (r Result) Code() sluicev1.ErrorCode { return errs.Code(r.Err) }

func fail(code sluicev1.ErrorCode, format string, args ...any) Result {
	return Result{Err: errs.New(code, format, args...)}
}

// ErrConcurrent is the answer, CONCURRENT_TRANSACTIONS (retriable), to a
// request for an id that has a transition in flight (written, not yet
// applied): the caller gives it without calling this package.
func ErrConcurrent(transactionalID string) error {
	return errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
		"transactional id %q has a state change in progress; retry", errs.Echo(transactionalID))
}

// write returns the Result writing w, after checking that w.State may
// follow from (the state table). A transition this package computes never
// fails the check (TestEveryWriteFollowsTheStateTable); if one did, nothing
// is written and the requester gets UNKNOWN_SERVER_ERROR, not a corrupt log.
func write(from State, w Metadata) Result {
	if !w.State.CanFollow(from) {
		return fail(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR,
			"bug: transactional id %q: transition %v -> %v is not allowed", errs.Echo(w.TransactionalID), from, w.State)
	}
	return Result{Write: &w, ProducerID: w.ProducerID, ProducerEpoch: w.ProducerEpoch, SendMarkers: w.State.IsPrepare()}
}

// InitProducerIDRequest is an InitProducerId with a transactional id.
// The caller has checked TransactionalID with ValidateTransactionalID and
// TimeoutMs with ValidateTimeout.
type InitProducerIDRequest struct {
	TransactionalID string
	TimeoutMs       int32
	// ProducerID and ProducerEpoch are the producer's current id and
	// epoch (KIP-360: a producer recovering from an abortable error keeps
	// its id). ProducerID ≤ 0 means "not given" (a new producer); allocated
	// ids are never ≤ 0 (decision 4).
	ProducerID    int64
	ProducerEpoch int16
	// NewProducerID is a freshly allocated producer id, used when the id
	// is new or its epoch is exhausted; ≤ 0 means none was allocated (the
	// Result asks for one when needed).
	NewProducerID int64
}

// InitProducerID decides an InitProducerId for m (nil: unknown id). On
// success (Err nil) the answer is Result.ProducerID/ProducerEpoch once
// Write is applied. Rules (Kafka's prepareInitProducerIdTransit, TV2):
//   - unknown id: a new producer id (NewProducerID) at epoch 0, Empty;
//   - a transition or the end of a transaction in progress (Prepare*,
//     and the never-written PrepareEpochFence, Dead): CONCURRENT_TRANSACTIONS;
//   - a given ProducerID that is neither the current one, nor the previous
//     one with an exhausted epoch (a retry across a producer id move):
//     PRODUCER_FENCED;
//   - Ongoing: the open transaction is fenced and aborted — Ongoing →
//     PrepareEpochFence (in memory) → PrepareAbort written with the epoch
//     bumped once, markers sent — and the answer is CONCURRENT_TRANSACTIONS;
//     the producer's retry finds CompleteAbort and gets the next epoch;
//   - Empty/Complete*: Empty with the epoch bumped. With a given epoch
//     (KIP-360): equal to the current one → bump; equal to
//     LastProducerEpoch → a retry of the call that bumped, answered with
//     the current epoch unchanged; else PRODUCER_FENCED. Without one,
//     LastProducerEpoch becomes NoProducerEpoch, so an older producer's
//     KIP-360 retry is fenced;
//   - epoch exhausted (≥ 32766) where a bump is due: a new producer id
//     (NewProducerID) at epoch 0, PrevProducerID the old one.
//
// The new TimeoutMs is stored on every Empty written.
func InitProducerID(m *Metadata, req InitProducerIDRequest, now time.Time) Result {
	nowMs := now.UnixMilli()
	given := req.ProducerID > 0
	if m == nil {
		// Kafka: a given but unknown producer id (the producer recovering
		// from UNKNOWN_PRODUCER_ID) also gets the new id at epoch 0.
		if req.NewProducerID <= 0 {
			return Result{NeedProducerID: true}
		}
		w := Metadata{
			TransactionalID:   req.TransactionalID,
			ProducerID:        req.NewProducerID,
			PrevProducerID:    req.NewProducerID,
			NextProducerID:    NoProducerID,
			ProducerEpoch:     0,
			LastProducerEpoch: NoProducerEpoch,
			TimeoutMs:         req.TimeoutMs,
			State:             Empty,
			StartTimeMs:       NoTimestamp,
			UpdateTimeMs:      nowMs,
		}
		return write(Empty, w)
	}
	switch m.State {
	case PrepareCommit, PrepareAbort, PrepareEpochFence, Dead:
		return fail(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q is in state %v; retry once it completes", errs.Echo(m.TransactionalID), m.State)
	}
	if given && !(m.ProducerEpoch == NoProducerEpoch || req.ProducerID == m.ProducerID ||
		(req.ProducerID == m.PrevProducerID && epochExhausted(req.ProducerEpoch))) {
		return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
			"transactional id %q: producer id %d is not the current one %d", errs.Echo(m.TransactionalID), req.ProducerID, m.ProducerID)
	}
	if m.State == Ongoing {
		r := fenceAndAbort(*m, req.NewProducerID, nowMs)
		if r.NeedProducerID || r.Write == nil {
			return r
		}
		r.Err = errs.New(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q had an open transaction; it is being aborted and the producer at epoch %d fenced; retry",
			errs.Echo(m.TransactionalID), m.ProducerEpoch)
		r.ProducerID, r.ProducerEpoch = 0, 0
		return r
	}

	// Empty, CompleteCommit, CompleteAbort.
	w := m.Clone()
	w.State = Empty
	w.PrevProducerID = m.ProducerID
	w.NextProducerID = NoProducerID
	w.TimeoutMs = req.TimeoutMs
	w.Partitions = nil
	w.StartTimeMs = NoTimestamp
	w.UpdateTimeMs = nowMs
	if epochExhausted(m.ProducerEpoch) && (!given || req.ProducerEpoch == m.ProducerEpoch) {
		if req.NewProducerID <= 0 {
			return Result{NeedProducerID: true}
		}
		w.ProducerID = req.NewProducerID
		w.ProducerEpoch = 0
		w.LastProducerEpoch = NoProducerEpoch
		if given {
			w.LastProducerEpoch = m.ProducerEpoch
		}
		return write(m.State, w)
	}
	switch {
	case !given:
		w.ProducerEpoch = m.ProducerEpoch + 1
		w.LastProducerEpoch = NoProducerEpoch
	case m.ProducerEpoch == NoProducerEpoch || req.ProducerEpoch == m.ProducerEpoch:
		w.ProducerEpoch = m.ProducerEpoch + 1
		w.LastProducerEpoch = m.ProducerEpoch
	case req.ProducerEpoch == m.LastProducerEpoch:
		// A retry of the InitProducerId (or EndTxn) that bumped: no other
		// producer initialised since, or LastProducerEpoch would be -1.
	default:
		return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
			"transactional id %q: producer epoch %d is neither the current %d nor the last %d",
			errs.Echo(m.TransactionalID), req.ProducerEpoch, m.ProducerEpoch, m.LastProducerEpoch)
	}
	return write(m.State, w)
}

// AddPartitionsRequest is an AddPartitionsToTxn: from a partition leader
// for a transactional produce (TV2: the leader adds; TV1: the leader only
// verifies, VerifyOnly), or from a TV1 client itself (AddPartitionsToTxn
// v0–v3, and AddOffsetsToTxn with the group's __consumer_offsets
// partition).
type AddPartitionsRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// Partitions to add (or verify); at least one, duplicates allowed.
	Partitions []TopicPartition
	// ClientVersion is the transaction version of the producer: TV2 for a
	// partition leader adding for a TV2 produce (and for every request of
	// the gRPC door), TV1 (or 0) for a TV1 client's own
	// AddPartitionsToTxn or AddOffsetsToTxn. A write records it in
	// Metadata.ClientVersion. The zero value is TV1, as Kafka's.
	ClientVersion ClientVersion
	// VerifyOnly: change nothing, only check that every partition is
	// already in the open transaction at ProducerID/ProducerEpoch (KIP-890
	// part 1: the partition leader of a TV1 produce, the group coordinator
	// of a TV1 TxnOffsetCommit; Kafka's AddPartitionsToTxn v4+ with
	// verifyOnly). ClientVersion is not read then.
	VerifyOnly bool
}

// AddPartitions decides an AddPartitionsToTxn for m (nil: unknown id).
// Rules (Kafka's handleAddPartitionsToTransaction):
//   - no partitions, or an invalid one (empty topic, negative
//     partition): INVALID_REQUEST;
//   - unknown id, or another producer id: INVALID_PRODUCER_ID_MAPPING —
//     except the producer id a Prepare* is moving to (NextProducerID),
//     which is CONCURRENT_TRANSACTIONS until Complete applies it;
//   - another epoch: PRODUCER_FENCED (the partition leader answers its
//     producer INVALID_PRODUCER_EPOCH, as Kafka's AddPartitionsToTxnManager);
//   - Prepare* (and PrepareEpochFence, Dead): CONCURRENT_TRANSACTIONS;
//   - Ongoing with every partition already in: NONE, nothing written;
//   - VerifyOnly (Kafka's handleVerifyPartitionsInTransaction): nothing
//     is ever written; NONE only in the case above, else INVALID_TXN_STATE
//     — the partition is not in the transaction, or none is open (Kafka's
//     coordinator answers TRANSACTION_ABORTABLE and the partition leader
//     turns it into INVALID_TXN_STATE for the clients that verify, which
//     predate TRANSACTION_ABORTABLE; Sluice answers the leader's code
//     here, so every caller gets the same);
//   - Ongoing: the partitions are added; Empty/Complete*: a transaction
//     starts (Ongoing, StartTimeMs = now) with exactly these partitions,
//     at the current epoch (neither version bumps here). Either write
//     records req.ClientVersion.
func AddPartitions(m *Metadata, req AddPartitionsRequest, now time.Time) Result {
	if len(req.Partitions) == 0 {
		return fail(sluicev1.ErrorCode_INVALID_REQUEST, "transactional id %q: no partitions to add", errs.Echo(req.TransactionalID))
	}
	if m == nil {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q is unknown to this coordinator", errs.Echo(req.TransactionalID))
	}
	if m.State.IsPrepare() && m.NextProducerID > 0 && req.ProducerID == m.NextProducerID {
		return fail(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q is moving to producer id %d; retry", errs.Echo(m.TransactionalID), req.ProducerID)
	}
	if req.ProducerID != m.ProducerID {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q has producer id %d, not %d", errs.Echo(m.TransactionalID), m.ProducerID, req.ProducerID)
	}
	if req.ProducerEpoch > m.ProducerEpoch {
		return staleCoordinator(m, req.ProducerEpoch)
	}
	if req.ProducerEpoch != m.ProducerEpoch {
		return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
			"transactional id %q: producer epoch %d is not the current %d", errs.Echo(m.TransactionalID), req.ProducerEpoch, m.ProducerEpoch)
	}
	for _, p := range req.Partitions {
		if p.Topic == "" || p.Partition < 0 {
			return fail(sluicev1.ErrorCode_INVALID_REQUEST,
				"transactional id %q: invalid partition %q-%d", errs.Echo(req.TransactionalID), errs.Echo(p.Topic), p.Partition)
		}
	}
	add := slices.Clone(req.Partitions)
	slices.SortFunc(add, comparePartitions)
	add = slices.Compact(add)
	switch m.State {
	case Ongoing:
		if containsAll(m.Partitions, add) {
			return Result{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch}
		}
	case Empty, CompleteCommit, CompleteAbort:
	default:
		return fail(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q is in state %v; retry once it completes", errs.Echo(m.TransactionalID), m.State)
	}
	if req.VerifyOnly {
		for _, p := range add {
			if _, in := slices.BinarySearchFunc(m.Partitions, p, comparePartitions); !in || m.State != Ongoing {
				return fail(sluicev1.ErrorCode_INVALID_TXN_STATE,
					"transactional id %q: partition %s is not in the open transaction of producer %d epoch %d (state %v); a TV1 producer adds it with AddPartitionsToTxn (or AddOffsetsToTxn) first",
					errs.Echo(m.TransactionalID), errs.Echo(p.String()), m.ProducerID, m.ProducerEpoch, m.State)
			}
		}
	}
	nowMs := now.UnixMilli()
	w := m.Clone()
	w.PrevProducerID = m.ProducerID
	w.NextProducerID = NoProducerID
	w.UpdateTimeMs = nowMs
	w.ClientVersion = req.ClientVersion
	if m.State == Ongoing {
		w.Partitions = unionPartitions(m.Partitions, add)
	} else {
		w.State = Ongoing
		w.Partitions = add
		w.StartTimeMs = nowMs
	}
	return write(m.State, w)
}

// staleCoordinator answers a request whose producer epoch is above the
// one m holds for the same producer id. Epochs only grow and only the
// coordinator hands them out, each written to the state log before it is
// answered, so the current coordinator always knows the producer's
// epoch: this one's state is behind — it was deposed (a pause, a
// partition) and has not learnt it yet. NOT_COORDINATOR sends the
// requester to the current one; PRODUCER_FENCED here would tell a live
// producer it was fenced (found by the chaos harness: a resumed node's
// verifier routed a produce to its own stale coordinator).
func staleCoordinator(m *Metadata, epoch int16) Result {
	return fail(sluicev1.ErrorCode_NOT_COORDINATOR,
		"transactional id %q: producer epoch %d is above this coordinator's %d; its state is behind, it no longer coordinates the id",
		errs.Echo(m.TransactionalID), epoch, m.ProducerEpoch)
}

// EndTxnRequest is an EndTxn (commit or abort) from the producer.
type EndTxnRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// Commit: commit; else abort.
	Commit bool
	// NewProducerID: a freshly allocated id, used when the epoch bump
	// reaches the last epoch; ≤ 0 means none (the Result asks for one).
	NewProducerID int64
	// ClientVersion is the transaction version of the producer: TV2
	// (EndTxn v5+ from a TV2 client, every EndTxn of the gRPC door) or
	// TV1 (EndTxn v0–v4; the zero value, as Kafka's). It picks the rules
	// below and is recorded in the Prepare* written.
	ClientVersion ClientVersion
}

// EndTxn decides an EndTxn for m (nil: unknown id). A TV1 request
// (req.ClientVersion) is endTxnV1's. TV2: a request is a retry when the
// stored epoch is the request's plus one (the bump of the EndTxn being
// retried) and the stored transaction is TV2's (m.ClientVersion: a TV1
// transaction's epoch is one above a TV2 producer's only when that
// producer was fenced), or when the id moved to a new producer id at
// epoch 0 and the request carries the previous id at the last usable
// epoch (32766). Rules (Kafka's endTransaction, 4.5):
//   - unknown id, or another producer id (not a retry): INVALID_PRODUCER_ID_MAPPING;
//   - Prepare* (markers being written; also PrepareEpochFence, Dead):
//     CONCURRENT_TRANSACTIONS, whatever the request — the answer after
//     completion is the decisive one (KAFKA-18464 checks this first);
//   - epoch: Ongoing and Empty need the current epoch, Complete* the
//     current one or a retry; otherwise PRODUCER_FENCED;
//   - Ongoing: Prepare* written with the epoch bumped, markers sent; the
//     answer is the bumped epoch (or the next producer id at epoch 0 when
//     the bump exhausts the epochs);
//   - Complete* and a retry: the same outcome → NONE with the current id
//     and epoch, nothing written; CompleteCommit and abort →
//     INVALID_TXN_STATE; CompleteAbort and commit → PRODUCER_FENCED: only
//     a coordinator-side abort (timeout, fencing) bumps the epoch under a
//     producer's commit, and the producer must learn it was fenced, never
//     that its commit succeeded or that the state is invalid (KAFKA-20785);
//   - Empty/Complete* and not a retry: an empty transaction; Prepare*
//     written with the epoch bumped and no partitions (no markers), and
//     the caller completes it at once (Kafka 4.5, KAFKA-21181 for commit).
func EndTxn(m *Metadata, req EndTxnRequest, now time.Time) Result {
	if m == nil {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q is unknown to this coordinator", errs.Echo(req.TransactionalID))
	}
	switch m.State {
	case PrepareCommit, PrepareAbort, PrepareEpochFence, Dead:
		return fail(sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS,
			"transactional id %q is in state %v; retry once it completes", errs.Echo(m.TransactionalID), m.State)
	}
	if !req.ClientVersion.SupportsEpochBump() {
		return endTxnV1(m, req, now)
	}
	bumped := m.ClientVersion.SupportsEpochBump()
	retryOnOverflow := bumped && m.ProducerID != req.ProducerID && m.PrevProducerID == req.ProducerID &&
		req.ProducerEpoch == maxEpoch-1 && m.ProducerEpoch == 0
	retryOnBump := bumped && m.ProducerID == req.ProducerID && int(m.ProducerEpoch) == int(req.ProducerEpoch)+1
	isRetry := retryOnOverflow || retryOnBump
	if m.ProducerID != req.ProducerID && !retryOnOverflow {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q has producer id %d, not %d", errs.Echo(m.TransactionalID), m.ProducerID, req.ProducerID)
	}
	if m.ProducerID == req.ProducerID && req.ProducerEpoch > m.ProducerEpoch {
		return staleCoordinator(m, req.ProducerEpoch)
	}
	validEpoch := req.ProducerEpoch == m.ProducerEpoch && m.ProducerID == req.ProducerID
	if m.State.IsComplete() {
		validEpoch = validEpoch || isRetry
	}
	if !validEpoch {
		return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
			"transactional id %q: producer %d epoch %d is not current (producer %d epoch %d)",
			errs.Echo(m.TransactionalID), req.ProducerID, req.ProducerEpoch, m.ProducerID, m.ProducerEpoch)
	}
	outcome := "abort"
	if req.Commit {
		outcome = "commit"
	}
	nowMs := now.UnixMilli()
	switch m.State {
	case Ongoing:
		if req.Commit && m.ProducerEpoch == maxEpoch {
			// Only a broken state gets here (the epoch is moved to a new
			// producer id before it can reach the maximum); an abort still
			// goes through without a bump, a commit cannot carry an epoch
			// above the data's.
			return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
				"transactional id %q: producer epoch %d is exhausted; abort the transaction", errs.Echo(m.TransactionalID), m.ProducerEpoch)
		}
		return prepareEnd(*m, req.Commit, req.NewProducerID, TV2, nowMs)
	case CompleteCommit, CompleteAbort:
		same := req.Commit == (m.State == CompleteCommit)
		switch {
		case isRetry && same:
			return Result{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch}
		case isRetry && m.State == CompleteAbort:
			return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
				"transactional id %q: the transaction was aborted by the coordinator (timeout or a new producer) before this %s",
				errs.Echo(m.TransactionalID), outcome)
		case isRetry:
			return fail(sluicev1.ErrorCode_INVALID_TXN_STATE,
				"transactional id %q: the transaction already ended in %v; cannot %s it", errs.Echo(m.TransactionalID), m.State, outcome)
		}
	}
	// Empty or Complete*, not a retry: end an empty transaction.
	return prepareEnd(*m, req.Commit, req.NewProducerID, TV2, nowMs)
}

// endTxnV1 decides a TV1 EndTxn (EndTxn v0–v4) for m, known and not in
// Prepare*, PrepareEpochFence or Dead (EndTxn's first checks). The epoch
// never moves: the producer ends its transaction at its current epoch
// and keeps it. Rules (Kafka's endTransaction for a client without epoch
// bump):
//   - another producer id: INVALID_PRODUCER_ID_MAPPING (TV1 never moves
//     the id at EndTxn, so there is no overflow retry);
//   - an epoch above the current: NOT_COORDINATOR (staleCoordinator);
//     below it: PRODUCER_FENCED (a new producer, or a coordinator-side
//     abort, bumped it);
//   - Ongoing: PrepareCommit or PrepareAbort written at the same epoch
//     (LastProducerEpoch unchanged), markers at that epoch, answered with
//     the same producer id and epoch;
//   - CompleteCommit or CompleteAbort (a retry: a TV1 request cannot tell
//     one from a repeated call): the same outcome → NONE with the current
//     id and epoch, nothing written; the opposite → INVALID_TXN_STATE;
//   - Empty: INVALID_TXN_STATE (no transaction is open: a TV1 client adds
//     a partition before it ends a transaction, and never ends an empty
//     one).
func endTxnV1(m *Metadata, req EndTxnRequest, now time.Time) Result {
	if m.ProducerID != req.ProducerID {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING,
			"transactional id %q has producer id %d, not %d", errs.Echo(m.TransactionalID), m.ProducerID, req.ProducerID)
	}
	if req.ProducerEpoch > m.ProducerEpoch {
		return staleCoordinator(m, req.ProducerEpoch)
	}
	if req.ProducerEpoch != m.ProducerEpoch {
		return fail(sluicev1.ErrorCode_PRODUCER_FENCED,
			"transactional id %q: producer %d epoch %d is not current (epoch %d)",
			errs.Echo(m.TransactionalID), req.ProducerID, req.ProducerEpoch, m.ProducerEpoch)
	}
	outcome := "abort"
	if req.Commit {
		outcome = "commit"
	}
	switch m.State {
	case Ongoing:
		w := m.Clone()
		w.State = PrepareAbort
		if req.Commit {
			w.State = PrepareCommit
		}
		w.PrevProducerID = m.ProducerID
		w.NextProducerID = NoProducerID
		w.ClientVersion = req.ClientVersion
		w.UpdateTimeMs = now.UnixMilli()
		return write(m.State, w)
	case CompleteCommit, CompleteAbort:
		if req.Commit == (m.State == CompleteCommit) {
			return Result{ProducerID: m.ProducerID, ProducerEpoch: m.ProducerEpoch}
		}
		return fail(sluicev1.ErrorCode_INVALID_TXN_STATE,
			"transactional id %q: the transaction already ended in %v; cannot %s it", errs.Echo(m.TransactionalID), m.State, outcome)
	default: // Empty
		return fail(sluicev1.ErrorCode_INVALID_TXN_STATE,
			"transactional id %q has no open transaction to %s (state %v)", errs.Echo(m.TransactionalID), outcome, m.State)
	}
}

// prepareEnd writes PrepareCommit or PrepareAbort for m with the TV2 epoch
// bump (none at the maximum epoch, which only an abort reaches), moving to
// newProducerID at Complete when the bump exhausts the epochs, and
// records version (TV2 for a TV2 EndTxn; the aborted transaction's own
// for a coordinator-side abort). From an idle state it ends an empty
// transaction: no partitions, started now.
func prepareEnd(m Metadata, commit bool, newProducerID int64, version ClientVersion, nowMs int64) Result {
	w := m.Clone()
	w.ClientVersion = version
	w.State = PrepareAbort
	if commit {
		w.State = PrepareCommit
	}
	w.PrevProducerID = m.ProducerID
	w.NextProducerID = NoProducerID
	w.LastProducerEpoch = m.ProducerEpoch
	if m.ProducerEpoch < maxEpoch {
		w.ProducerEpoch = m.ProducerEpoch + 1
	}
	if epochExhausted(m.ProducerEpoch) {
		if newProducerID <= 0 {
			return Result{NeedProducerID: true}
		}
		w.NextProducerID = newProducerID
	}
	if m.State.idle() {
		w.Partitions = nil
		w.StartTimeMs = nowMs
	}
	w.UpdateTimeMs = nowMs
	r := write(m.State, w)
	if r.Write != nil && w.NextProducerID > 0 {
		// The producer continues with the new id; the markers still
		// carry the old one at the bumped epoch.
		r.ProducerID, r.ProducerEpoch = w.NextProducerID, 0
	}
	return r
}

// fenceAndAbort aborts m's open transaction on the coordinator's own
// initiative (a new producer's InitProducerId, or the timeout): Ongoing →
// PrepareEpochFence, which Kafka keeps in memory only, → PrepareAbort with
// a single epoch bump (KAFKA-19367: TV2 does not bump twice), markers owed.
// An exhausted epoch moves to newProducerID at Complete (KAFKA-20090).
//
// Both versions are fenced the same way: Kafka bumps a TV1 transaction's
// epoch once in prepareFenceProducerEpoch and then ends it without a bump,
// a TV2 one once in prepareAbortOrCommit; either way PrepareAbort is at
// the data's epoch + 1, so the old producer is fenced at every partition
// its markers reach. The write keeps the transaction's ClientVersion: its
// markers then carry that version, and the epoch + 1 passes both marker
// rules (TV1: at least the data's epoch; TV2: above it).
func fenceAndAbort(m Metadata, newProducerID int64, nowMs int64) Result {
	if !PrepareEpochFence.CanFollow(m.State) {
		return fail(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR,
			"bug: transactional id %q: cannot fence from %v", errs.Echo(m.TransactionalID), m.State)
	}
	fenced := m.Clone()
	fenced.State = PrepareEpochFence
	r := prepareEnd(fenced, false, newProducerID, m.ClientVersion, nowMs)
	return r
}

// Complete is the marker sender's transition once every marker of m's
// Prepare* is written: Complete* with no partitions. producerID and
// producerEpoch are those of the Prepare* record whose markers were
// written; if m has moved on (another id or epoch), nothing is written
// (INVALID_PRODUCER_EPOCH: the round is stale). Not Prepare*:
// INVALID_TXN_STATE. When the Prepare* carried a NextProducerID, the id
// moves to it at epoch 0 and PrevProducerID keeps the old one;
// LastProducerEpoch stays the last epoch the producer used (Kafka keeps
// 32766 across the move). Result.ProducerID/ProducerEpoch are the ones the
// producer uses next.
func Complete(m *Metadata, producerID int64, producerEpoch int16, now time.Time) Result {
	if m == nil || !m.State.IsPrepare() {
		state := "unknown"
		if m != nil {
			state = m.State.String()
		}
		return fail(sluicev1.ErrorCode_INVALID_TXN_STATE, "cannot complete a transaction in state %s", state)
	}
	if m.ProducerID != producerID || m.ProducerEpoch != producerEpoch {
		return fail(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH,
			"transactional id %q: markers were written for producer %d epoch %d, the transaction is at producer %d epoch %d",
			errs.Echo(m.TransactionalID), producerID, producerEpoch, m.ProducerID, m.ProducerEpoch)
	}
	w := m.Clone()
	w.State = CompleteAbort
	if m.State == PrepareCommit {
		w.State = CompleteCommit
	}
	w.Partitions = nil
	w.PrevProducerID = m.ProducerID
	w.NextProducerID = NoProducerID
	if m.NextProducerID > 0 {
		w.ProducerID = m.NextProducerID
		w.ProducerEpoch = 0
	}
	w.UpdateTimeMs = now.UnixMilli()
	return write(m.State, w)
}

// TimedOut reports whether m is an open transaction older than its
// timeout at now (Kafka: start + timeout < now).
func TimedOut(m Metadata, now time.Time) bool {
	return m.State == Ongoing && m.StartTimeMs+int64(m.TimeoutMs) < now.UnixMilli()
}

// AbortTimedOut is the coordinator's periodic timeout check for one id
// (Kafka's abortTimedOutTransactions, every
// transaction.abort.timed.out.transaction.cleanup.interval.ms): if m has
// TimedOut, it is fenced and aborted as by InitProducerID on an open
// transaction — PrepareAbort with the epoch bumped, so the producer's
// next request with its old epoch is fenced, markers owed. There is no
// requester: Err is nil. Not timed out: an empty Result. NewProducerID is
// needed only at an exhausted epoch (Result.NeedProducerID).
func AbortTimedOut(m Metadata, now time.Time, newProducerID int64) Result {
	if !TimedOut(m, now) {
		return Result{}
	}
	r := fenceAndAbort(m, newProducerID, now.UnixMilli())
	r.ProducerID, r.ProducerEpoch = 0, 0
	return r
}

// Expire is the coordinator's periodic expiry check for one id (Kafka's
// transactional.id.expiration.ms): an id with no open transaction (Empty,
// Complete*) not updated for expiration (zero: DefaultIDExpiration) is
// removed — Dead, written as a tombstone (EncodeRecord gives a nil value);
// once it is applied the caller forgets the id. Otherwise an empty Result.
func Expire(m Metadata, now time.Time, expiration time.Duration) Result {
	if expiration <= 0 {
		expiration = DefaultIDExpiration
	}
	if !m.State.idle() || m.UpdateTimeMs > now.UnixMilli()-expiration.Milliseconds() {
		return Result{}
	}
	w := m.Clone()
	w.State = Dead
	w.Partitions = nil
	w.UpdateTimeMs = now.UnixMilli()
	r := write(m.State, w)
	r.ProducerID, r.ProducerEpoch = 0, 0
	return r
}
