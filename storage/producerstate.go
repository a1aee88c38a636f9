package storage

import (
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is a partition's idempotent-producer state (DESIGN §9): Kafka's
// ProducerStateManager, ProducerStateEntry and ProducerAppendInfo as one
// pure value. No files, no clock, no goroutines, no locks.
//
// Citations: "ref" is /work/shared/reference/kafka-idempotence-and-
// transactions.txt (Kafka 4.5.0-SNAPSHOT, commit ab1e816411), section 1
// unless said otherwise; "Kafka" names a class of that source tree
// (storage/src/main/java/org/apache/kafka/storage/internals/log/) for rules
// the reference text leaves out.
//
// Contract with the owner (the partition's append path, serialised by the
// log's append lock):
//
//	leader:   Check(b) -> Log.Append -> Update(b, first, last, maxTS)
//	follower:               Log.AppendVerbatim -> Update(b, ...)
//	markers:  CheckMarker, CheckCoordinatorEpoch -> Log.Append -> Update(marker, ...)
//	first batch of a transaction (producerstate_verification.go):
//	          StartVerification -> (coordinator asked, lock released)
//	          -> CheckVerified(b, guard), Check(b) -> Log.Append -> Update(b, ...)
//
// Update must follow the local append immediately, under the same lock and
// before the next Check, not wait for the high watermark: Kafka updates the
// state in UnifiedLog.append right after the local write. A producer may
// have up to 5 requests in flight (ref: max.in.flight.requests.per.connection
// <= 5); if Update waited for replication, the second of two pipelined
// batches would be judged against the state before the first and refused as
// OUT_OF_ORDER_SEQUENCE_NUMBER. A batch that is later truncated away is taken
// back with TruncateTo (or by a rebuild, see producerstate_replay.go).

// ProducerBatchesRetained is how many batches are remembered per producer
// (ref: ProducerStateEntry.NUM_BATCHES_TO_RETAIN = 5). It matches the client's
// limit of 5 requests in flight per connection, so a retried batch is always
// among those remembered.
const ProducerBatchesRetained = 5

// DefaultProducerIDExpiration is producer.id.expiration.ms's default (24 h),
// the expiration to pass to ExpireBefore.
const DefaultProducerIDExpiration = 24 * time.Hour

// DefaultMaxProducers is the default bound on producer ids remembered per
// partition. Kafka has no such bound (only expiration); Sluice has one so
// that many short-lived producers cannot exhaust a broker's memory. About
// 300 bytes each, so the default costs at most ~30 MB per partition.
const DefaultMaxProducers = 100_000

// NoProducerEpoch and NoSequence are Kafka's RecordBatch.NO_PRODUCER_EPOCH
// and NO_SEQUENCE: "no epoch known" and "no batch remembered". They are also
// what control batches carry as base sequence.
const (
	NoProducerEpoch int16 = -1
	NoSequence      int32 = -1
)

// BatchInfo is what the producer-state rules read from a batch header
// (BatchInfoFromHeader builds it from a batch.Header).
type BatchInfo struct {
	// ProducerID <= 0 is a plain producer: no checks, no state. Kafka's
	// plain producers have -1 and ids start at 0; Sluice never allocates 0
	// (docs/record-format.md: an absent producer_id, 0 on the wire, is
	// plain).
	ProducerID int64
	Epoch      int16
	// FirstSeq and LastSeq are the sequences of the first and last records.
	// LastSeq < FirstSeq when the batch wraps past MaxInt32 to 0.
	FirstSeq, LastSeq int32
	IsTransactional   bool
	// TV1 marks a transactional data batch of a producer speaking
	// transaction version 1 (it added the partition to its transaction
	// itself; the leader only verified it): Check's rule 3 does not apply
	// to it, as in Kafka. Only the leader knows it (from the produce
	// request); nothing stores it.
	TV1 bool
	// IsControl marks a transaction marker (COMMIT/ABORT); its sequences are
	// NoSequence.
	IsControl bool
	// CoordinatorEpoch is, for a marker, the coordinator epoch its record
	// carries (batch.ParseMarker); NoCoordinatorEpoch when not read (a
	// replay from headers only). Unused for data batches.
	CoordinatorEpoch int32
	// AppendTime is the broker's clock (ms) when the batch was appended
	// here, leader or follower; 0 when unknown (a replay of the log), and
	// then the batch's max timestamp stands in. It dates the start of a
	// transaction (OldestTxnStart).
	AppendTime int64
}

// NoCoordinatorEpoch is "no marker coordinator epoch known".
const NoCoordinatorEpoch int32 = -1

// Decision is the outcome of an accepted Check. Duplicate means the batch
// was already written: the caller must write nothing and answer success with
// the original FirstOffset, LastOffset and MaxTimestamp (ref: "append()
// writes nothing to the log and returns, in the response, the offset at
// which that batch was first written", UnifiedLog.java lines 1261-1268).
// Otherwise the fields are zero and the batch is to be appended.
type Decision struct {
	Duplicate    bool
	FirstOffset  int64
	LastOffset   int64
	MaxTimestamp int64
}

// BatchMetadata is one remembered batch of a producer (Kafka's BatchMetadata).
type BatchMetadata struct {
	FirstSeq, LastSeq       int32
	FirstOffset, LastOffset int64
	MaxTimestamp            int64
}

// ProducerEntry is a copy of what is remembered about one producer id.
type ProducerEntry struct {
	ProducerID int64
	Epoch      int16
	// Batches are the remembered batches of Epoch, oldest first, at most
	// ProducerBatchesRetained; empty after a marker or an epoch change.
	Batches []BatchMetadata
	// LastTimestamp is the max timestamp of the last batch or marker
	// applied: the clock of expiration and eviction (Kafka's lastTimestamp,
	// which is also the batch's own timestamp, not the broker's clock).
	LastTimestamp int64
	// TxnFirstOffset is the first offset of the producer's open transaction,
	// or -1 (Kafka's currentTxnFirstOffset). The LSO of the partition is the
	// smallest over producers, capped by the high watermark (ref §5).
	TxnFirstOffset int64
	// TxnStartTime is when the open transaction's first batch was appended
	// here (ms, BatchInfo.AppendTime), or -1 with no open transaction.
	TxnStartTime int64
	// CoordinatorEpoch is the coordinator epoch of the last marker
	// applied (Kafka's ProducerStateEntry.coordinatorEpoch), or
	// NoCoordinatorEpoch. A marker from a lower one is fenced
	// (CheckCoordinatorEpoch).
	CoordinatorEpoch int32
	// LastOffset is the last offset of the producer's last batch or
	// marker applied: after a marker, with no batch since (Batches
	// empty, no open transaction), the marker's offset. For tools.
	LastOffset int64
}

// producerEntry is the mutable state of one producer id.
type producerEntry struct {
	id             int64
	epoch          int16
	batches        []BatchMetadata // oldest first, len <= ProducerBatchesRetained
	lastTimestamp  int64
	txnFirstOffset int64 // -1: no open transaction
	txnStartTime   int64 // ms; -1 when txnFirstOffset is -1
	// coordinatorEpoch is the last marker's (NoCoordinatorEpoch: none).
	coordinatorEpoch int32
	// lastOffset is the last offset of the last batch or marker applied;
	// TruncateTo leaves entries below its offset alone.
	lastOffset int64
	// complete says the entry holds everything its producer wrote to this
	// partition: it was created by a data batch and has since lost nothing
	// (no batch pushed out of the window, no epoch change, no marker). Then
	// dropping a suffix of batches is exactly what replaying the log without
	// them gives, and TruncateTo can be exact.
	complete  bool
	heapIndex int // position in ProducerState.byAge
}

func (e *producerEntry) lastSeq() int32 {
	if len(e.batches) == 0 {
		return NoSequence
	}
	return e.batches[len(e.batches)-1].LastSeq
}

func (e *producerEntry) export() ProducerEntry {
	return ProducerEntry{
		ProducerID:       e.id,
		Epoch:            e.epoch,
		Batches:          cloneBatches(e.batches),
		LastTimestamp:    e.lastTimestamp,
		TxnFirstOffset:   e.txnFirstOffset,
		TxnStartTime:     e.txnStartTime,
		CoordinatorEpoch: e.coordinatorEpoch,
		LastOffset:       e.lastOffset,
	}
}

// cloneBatches copies batches; none is nil, so that copies compare equal
// whatever the capacity of the original.
func cloneBatches(b []BatchMetadata) []BatchMetadata {
	if len(b) == 0 {
		return nil
	}
	return slices.Clone(b)
}

// setEpoch is Kafka's ProducerStateEntry.maybeUpdateProducerEpoch: a new
// epoch forgets the batches of the old one.
func (e *producerEntry) setEpoch(epoch int16) {
	if e.epoch != epoch {
		e.batches = e.batches[:0]
		e.epoch = epoch
		e.complete = false
	}
}

// ProducerState is the producer state of one partition.
//
// It is not safe for concurrent use: its owner is the partition's append
// path (see the contract at the top of this file). Methods never retain or
// return internal slices; ProducerEntry values are copies.
type ProducerState struct {
	producers    map[int64]*producerEntry
	byAge        producerHeap // every entry; the next one to expire or evict first
	maxProducers int          // 0: unbounded
	// open holds the entries with an open transaction (txnFirstOffset >=
	// 0), so that FirstUnstableOffset costs the number of open
	// transactions, not of producers. Every change of txnFirstOffset goes
	// through setTxn.
	open map[int64]*producerEntry
	// verifying holds the verification guard of each producer whose
	// first transactional batch is being verified (StartVerification);
	// guards counts the guards handed out, so each has its own id.
	verifying map[int64]verification
	guards    uint64
}

// NewProducerState returns an empty state remembering at most maxProducers
// producer ids (0: no bound; see SetMaxProducers).
func NewProducerState(maxProducers int) *ProducerState {
	return &ProducerState{producers: map[int64]*producerEntry{}, open: map[int64]*producerEntry{}, verifying: map[int64]verification{}, maxProducers: max(maxProducers, 0)}
}

// setTxn sets e's open transaction (first offset, or -1 for none, and
// when it started) and keeps s.open in step.
func (s *ProducerState) setTxn(e *producerEntry, firstOffset, start int64) {
	e.txnFirstOffset = firstOffset
	if firstOffset >= 0 {
		e.txnStartTime = start
		s.open[e.id] = e
	} else {
		e.txnStartTime = -1
		delete(s.open, e.id)
	}
}

// OldestTxnStart is the earliest start time (ms, ProducerEntry.
// TxnStartTime) of the open transactions, and false when none is open.
// It costs the number of open transactions.
func (s *ProducerState) OldestTxnStart() (int64, bool) {
	oldest, ok := int64(0), false
	for _, e := range s.open {
		if !ok || e.txnStartTime < oldest {
			oldest, ok = e.txnStartTime, true
		}
	}
	return oldest, ok
}

// FirstUnstableOffset is the first offset of the oldest open transaction
// (Kafka ProducerStateManager.firstUnstableOffset, without the completed
// transactions whose markers are not yet replicated: storage.Log tracks
// those), and false when no transaction is open. The partition's last
// stable offset is this capped by the high watermark (ref §5,
// UnifiedLog.lastStableOffset). It costs the number of open transactions.
func (s *ProducerState) FirstUnstableOffset() (int64, bool) {
	return s.firstOpenExcept(0)
}

// firstOpenExcept is FirstUnstableOffset ignoring producer id except (0:
// none, as no producer has id 0).
func (s *ProducerState) firstOpenExcept(except int64) (int64, bool) {
	first, ok := int64(0), false
	for id, e := range s.open {
		if id != except && (!ok || e.txnFirstOffset < first) {
			first, ok = e.txnFirstOffset, true
		}
	}
	return first, ok
}

// OpenTxn returns the first offset of producerID's open transaction, if
// it has one.
func (s *ProducerState) OpenTxn(producerID int64) (int64, bool) {
	e := s.open[producerID]
	if e == nil {
		return 0, false
	}
	return e.txnFirstOffset, true
}

// EndingTxn describes the transaction that a marker of producerID about
// to be appended at offset markerOffset would end (Kafka's CompletedTxn
// with the lastStableOffset its TransactionIndex entry records), without
// changing anything: FirstOffset is the transaction's first offset,
// LastOffset the marker's, and LastStableOffset the first offset of the
// oldest transaction of another producer still open after it, or
// markerOffset+1 when none is (Kafka ProducerStateManager.lastStableOffset(
// completedTxn)). ok is false when producerID has no open transaction (a
// retried marker, or a transaction with no data here): nothing ends.
func (s *ProducerState) EndingTxn(producerID, markerOffset int64) (t AbortedTxn, ok bool) {
	first, ok := s.OpenTxn(producerID)
	if !ok {
		return AbortedTxn{}, false
	}
	lso := markerOffset + 1
	if other, ok := s.firstOpenExcept(producerID); ok && other < lso {
		lso = other
	}
	return AbortedTxn{ProducerID: producerID, FirstOffset: first, LastOffset: markerOffset, LastStableOffset: lso}, true
}

// OpenTxnCount is the number of producers with an open transaction.
func (s *ProducerState) OpenTxnCount() int { return len(s.open) }

// Len is the number of producer ids remembered.
func (s *ProducerState) Len() int { return len(s.producers) }

// Producer returns a copy of the state of producer id, if remembered.
func (s *ProducerState) Producer(id int64) (ProducerEntry, bool) {
	e, ok := s.producers[id]
	if !ok {
		return ProducerEntry{}, false
	}
	return e.export(), true
}

// Producers returns a copy of every remembered producer, by producer id.
func (s *ProducerState) Producers() []ProducerEntry {
	out := make([]ProducerEntry, 0, len(s.producers))
	for _, e := range s.sortedEntries() {
		out = append(out, e.export())
	}
	return out
}

func (s *ProducerState) sortedEntries() []*producerEntry {
	out := make([]*producerEntry, 0, len(s.producers))
	for _, e := range s.producers {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *producerEntry) int { return cmpInt64(a.id, b.id) })
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Check decides whether data batch b, sent by a client, may be appended. It
// changes nothing; after a successful append the owner calls Update.
//
// A plain producer (ProducerID <= 0) is not checked: Decision{} and nil (ref:
// "batches with producerId: -1 skip the checks above"). Otherwise, in order:
//
//  1. Duplicate: the remembered epoch equals b.Epoch and one of the
//     remembered batches has exactly (b.FirstSeq, b.LastSeq): Decision with
//     Duplicate and the original offsets; nothing may be written (ref:
//     findDuplicateBatch, ProducerStateEntry.java lines 128-137).
//  2. b.Epoch below the remembered epoch: INVALID_PRODUCER_EPOCH (ref:
//     checkProducerEpoch, ProducerAppendInfo.java lines 122-159; data batches
//     are refused only when lower, TV2 markers also when equal, see
//     CheckMarker). A TV1 producer's next transaction after its marker is
//     at the same epoch and continues its sequence (rule 5: the marker
//     kept the epoch's batches).
//  3. A transactional batch of a TV2 producer with no remembered batch
//     must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka
//     ProducerAppendInfo.checkSequence, "for transactions v2 idempotent
//     producers, reject non-zero sequences when there is no producer ID
//     state"; the reference leaves this rule out). As in Kafka, a TV1
//     producer's batch (b.TV1) is exempt: its sequences continue across
//     transactions at one epoch, so one whose state here expired while it
//     lived goes on at its next sequence (rule 6). For a known producer
//     with no batch remembered (after a marker) rules 4 and 5 already
//     demand 0, so only the unknown producer needs the test.
//  4. b.Epoch above the remembered epoch: b.FirstSeq must be 0, else
//     OUT_OF_ORDER_SEQUENCE_NUMBER (ref: checkSequence, ProducerAppendInfo.java
//     lines 181-210: "if the epoch is new, the sequence must start at 0").
//     The same holds for transactional batches: the reference's code has no
//     exception for them (TV2 bumps the epoch at every commit or abort and
//     the client restarts its sequences at 0, ref §3, TransactionManager.java
//     lines 1817-1824).
//  5. Same epoch: b.FirstSeq must follow the last remembered sequence,
//     wrapping from MaxInt32 to 0 (ref: inSequence); with no batch
//     remembered for the epoch (after a marker) it must be 0. Else
//     OUT_OF_ORDER_SEQUENCE_NUMBER.
//  6. An unknown producer id (never seen, expired, evicted, or truncated
//     away) may start at any sequence (ref: "If there is no current producer
//     epoch (possibly because all producer records have been deleted due to
//     retention or the DeleteRecords API) accept writes with any sequence
//     number"); the broker cannot tell a new producer from a forgotten one,
//     and UNKNOWN_PRODUCER_ID is never returned here.
//  7. A non-transactional batch from a producer with an open transaction is
//     INVALID_TXN_STATE (Kafka ProducerAppendInfo.appendDataBatch).
//
// A control batch is not checked here (CheckMarker is), and an idempotent
// batch with a negative epoch or sequence is INVALID_RECORD.
func (s *ProducerState) Check(b BatchInfo) (Decision, error) {
	if b.ProducerID <= 0 {
		return Decision{}, nil
	}
	if b.IsControl {
		return Decision{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producer %d: a control batch is not a client write", b.ProducerID)
	}
	if b.Epoch < 0 || b.FirstSeq < 0 || b.LastSeq < 0 {
		return Decision{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producer %d: batch has epoch %d and sequences %d..%d; an idempotent batch needs all >= 0", b.ProducerID, b.Epoch, b.FirstSeq, b.LastSeq)
	}
	e := s.producers[b.ProducerID]
	if e == nil {
		if b.IsTransactional && !b.TV1 && b.FirstSeq != 0 {
			return Decision{}, outOfOrder("producer %d has no state here, so its first transactional batch must start at sequence 0, not %d", b.ProducerID, b.FirstSeq)
		}
		return Decision{}, nil // rule 6
	}
	if e.epoch == b.Epoch {
		for _, m := range e.batches {
			if m.FirstSeq == b.FirstSeq && m.LastSeq == b.LastSeq {
				return Decision{Duplicate: true, FirstOffset: m.FirstOffset, LastOffset: m.LastOffset, MaxTimestamp: m.MaxTimestamp}, nil
			}
		}
	}
	if b.Epoch < e.epoch {
		return Decision{}, errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "epoch of producer %d is %d, which is smaller than the last seen epoch %d", b.ProducerID, b.Epoch, e.epoch)
	}
	if b.Epoch > e.epoch {
		if b.FirstSeq != 0 {
			return Decision{}, outOfOrder("new epoch %d of producer %d must start at sequence 0, not %d (current epoch %d)", b.Epoch, b.ProducerID, b.FirstSeq, e.epoch)
		}
	} else if last := e.lastSeq(); !inSequence(last, b.FirstSeq) {
		return Decision{}, outOfOrder("producer %d sent sequence %d, expected %d (last sequence %d)", b.ProducerID, b.FirstSeq, nextSeq(last), last)
	}
	if e.txnFirstOffset >= 0 && !b.IsTransactional {
		return Decision{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "producer %d sent a non-transactional batch while its transaction from offset %d is open", b.ProducerID, e.txnFirstOffset)
	}
	return Decision{}, nil
}

func outOfOrder(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER, format, args...)
}

// inSequence is Kafka's ProducerAppendInfo.inSequence: next follows last,
// and 0 follows MaxInt32. It computes in int64 so that last = MaxInt32 does
// not overflow; last = NoSequence (-1) accepts 0.
func inSequence(last, next int32) bool {
	return int64(next) == int64(last)+1 || (next == 0 && last == math.MaxInt32)
}

func nextSeq(last int32) int32 {
	if last == math.MaxInt32 {
		return 0
	}
	return last + 1
}

// MarkerVersion is the transaction version of the transaction a marker
// ends (the coordinator's Markers.ClientVersion, the internal
// WriteTxnMarkers' transaction_version): it picks CheckMarker's epoch
// rule. The zero value is TV2, the only version Sluice wrote markers for
// before TV1 was served (docs/design.md decision 69).
type MarkerVersion int8

// The marker versions.
const (
	// MarkerTV2: the marker's epoch is the transaction's data epoch + 1.
	MarkerTV2 MarkerVersion = iota
	// MarkerTV1: the marker's epoch is the data's (or above it, after a
	// coordinator's fence or timeout abort).
	MarkerTV1
)

// CheckMarker decides whether a transaction marker (control batch) of
// producerID with epoch, ending a transaction of version v, may be
// appended. It changes nothing.
//
// TV2 markers carry an epoch one above the data they close, so a marker
// whose epoch is not above the remembered one is late or duplicate:
// INVALID_PRODUCER_EPOCH (ref §4, ProducerAppendInfo.java lines 122-124:
// "TV2 markers are 'reject if equal or lower'"). The exception is a retry of
// a marker already written: same epoch and no open transaction is accepted
// (ref: lines 127-144, KAFKA-19999).
//
// TV1 markers carry the epoch of the data they close (the producer keeps
// its epoch across transactions), so only an epoch below the remembered
// one is stale: INVALID_PRODUCER_EPOCH (Kafka ProducerAppendInfo.
// checkProducerEpoch for a marker without epoch bump: "producerEpoch <
// updatedEntry.producerEpoch()"); equal, with the transaction open or
// not, and above are accepted.
//
// The coordinator-epoch check on the marker's record is
// CheckCoordinatorEpoch: it is not in the batch header.
//
// Replay needs no version: Update applies a marker by its epoch alone
// (equal: the producer's batches and sequence go on, as TV1 wants; above:
// forgotten, as for any new epoch), so followers, rebuilds and snapshots
// reach the same state without knowing which rule the leader checked.
func (s *ProducerState) CheckMarker(producerID int64, epoch int16, v MarkerVersion) error {
	if producerID <= 0 || epoch < 0 {
		return errs.New(sluicev1.ErrorCode_INVALID_RECORD, "marker has producer %d epoch %d; both must be set", producerID, epoch)
	}
	e := s.producers[producerID]
	if e == nil || epoch > e.epoch {
		return nil
	}
	if v == MarkerTV1 {
		if epoch == e.epoch {
			return nil
		}
		return errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "TV1 marker epoch %d of producer %d is below the last seen epoch %d", epoch, producerID, e.epoch)
	}
	if epoch == e.epoch && e.txnFirstOffset < 0 {
		return nil // retried marker of a transaction that already ended
	}
	return errs.New(sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, "marker epoch %d of producer %d is not above the last seen epoch %d", epoch, producerID, e.epoch)
}

// CheckCoordinatorEpoch decides whether a marker of producerID written by
// a coordinator at coordinatorEpoch may be appended: a coordinator epoch
// below that of the producer's last marker is a deposed coordinator's,
// TRANSACTION_COORDINATOR_FENCED (Kafka ProducerAppendInfo.
// checkCoordinatorEpoch, for appends that are not replication; DESIGN §10:
// "a marker ... with an old coordinator epoch, is rejected"). Equal is
// accepted (the same coordinator's next marker, or its retry). It changes
// nothing; the owner checks it after CheckMarker, as Kafka does.
func (s *ProducerState) CheckCoordinatorEpoch(producerID int64, coordinatorEpoch int32) error {
	e := s.producers[producerID]
	if e == nil || coordinatorEpoch >= e.coordinatorEpoch {
		return nil
	}
	return errs.New(sluicev1.ErrorCode_TRANSACTION_COORDINATOR_FENCED, "marker of producer %d comes from coordinator epoch %d, below the epoch %d of its last marker", producerID, coordinatorEpoch, e.coordinatorEpoch)
}

// Update applies batch b, stored at offsets [firstOffset, lastOffset] with
// max timestamp maxTimestamp, to the state. Leaders call it right after the
// local append of a batch Check or CheckMarker accepted; followers and
// rebuilds call it for every batch they store, unchecked (Kafka validates
// only client appends and trusts replication, ProducerAppendInfo's origin
// REPLICATION). A plain producer's batch changes nothing.
//
// Data batch (Kafka ProducerStateEntry.addBatch): a new epoch forgets the
// old epoch's batches; the batch is remembered, dropping the oldest beyond
// ProducerBatchesRetained (ref: addBatchMetadata, lines 101-104); a
// transactional batch with no open transaction opens one at firstOffset.
// Marker (Kafka appendEndTxnMarker / ProducerStateEntry.update): the epoch
// becomes the marker's, forgetting the batches if it changed (ref: "When the
// ABORT marker (epoch 1) was written, this partition's ProducerStateEntry
// started remembering epoch 1"), and the open transaction ends. Both set the
// producer's last timestamp to maxTimestamp.
//
// A marker also records its coordinator epoch (when known: b.CoordinatorEpoch
// >= 0; Kafka's ProducerStateEntry.setCoordinatorEpoch), and a transaction
// opened records b.AppendTime (or maxTimestamp) as its start.
//
// Any batch or marker of the producer ends its verification guard (see
// StartVerification).
//
// Adding a producer id beyond the bound evicts the oldest (see
// SetMaxProducers).
func (s *ProducerState) Update(b BatchInfo, firstOffset, lastOffset, maxTimestamp int64) {
	if b.ProducerID <= 0 {
		return
	}
	delete(s.verifying, b.ProducerID)
	e := s.producers[b.ProducerID]
	added := e == nil
	if added {
		e = &producerEntry{id: b.ProducerID, epoch: b.Epoch, txnFirstOffset: -1, txnStartTime: -1, coordinatorEpoch: NoCoordinatorEpoch, complete: !b.IsControl}
		e.batches = make([]BatchMetadata, 0, ProducerBatchesRetained)
		s.producers[b.ProducerID] = e
		heap.Push(&s.byAge, e)
	}
	e.setEpoch(b.Epoch)
	if b.IsControl {
		s.setTxn(e, -1, -1)
		e.complete = false
		if b.CoordinatorEpoch >= 0 {
			e.coordinatorEpoch = b.CoordinatorEpoch
		}
	} else {
		if len(e.batches) == ProducerBatchesRetained {
			e.batches = append(e.batches[:0], e.batches[1:]...)
			e.complete = false
		}
		e.batches = append(e.batches, BatchMetadata{FirstSeq: b.FirstSeq, LastSeq: b.LastSeq, FirstOffset: firstOffset, LastOffset: lastOffset, MaxTimestamp: maxTimestamp})
		if b.IsTransactional && e.txnFirstOffset < 0 {
			start := b.AppendTime
			if start == 0 {
				start = maxTimestamp
			}
			s.setTxn(e, firstOffset, max(start, 0))
		}
	}
	e.lastTimestamp = maxTimestamp
	e.lastOffset = lastOffset
	heap.Fix(&s.byAge, e.heapIndex)
	if added {
		s.evict()
	}
}

// SetMaxProducers sets the bound on producer ids remembered (0: none) and
// evicts down to it. When a new producer id takes the count above the bound,
// the one with the oldest last timestamp (ties: lowest id) is forgotten,
// as if it had expired. Producers with an open transaction are never
// evicted, since the LSO depends on them; if only they are left, the count
// stays above the bound until their transactions end. A forgotten producer
// is unknown: its next batch is accepted at any sequence (Check rule 6), so
// a retry of one of its old batches would be written again. Kafka has no
// such bound.
func (s *ProducerState) SetMaxProducers(n int) {
	s.maxProducers = max(n, 0)
	s.evict()
}

func (s *ProducerState) evict() {
	for s.maxProducers > 0 && len(s.producers) > s.maxProducers {
		oldest := s.byAge.entries[0]
		if oldest.txnFirstOffset >= 0 {
			return // all left have open transactions (they sort last)
		}
		s.remove(oldest)
	}
}

func (s *ProducerState) remove(e *producerEntry) {
	heap.Remove(&s.byAge, e.heapIndex)
	delete(s.producers, e.id)
	delete(s.open, e.id)
}

// ExpireBefore forgets the producers idle for expiration
// (producer.id.expiration.ms; DefaultProducerIDExpiration) at now: those
// whose last timestamp is at least expiration before now and that have no
// open transaction (Kafka ProducerStateManager.isProducerExpired:
// "currentTimeMs - lastTimestamp >= producerIdExpirationMs" and no
// currentTxnFirstOffset). It returns how many were forgotten. Kafka runs it
// every producer.id.expiration.check.interval.ms (10 min) and also when
// loading a snapshot; the owner should call it after LoadSnapshot too.
// Verification guards started that long ago are forgotten too.
func (s *ProducerState) ExpireBefore(now time.Time, expiration time.Duration) int {
	cutoff := now.UnixMilli() - expiration.Milliseconds()
	s.expireVerifications(cutoff)
	n := 0
	for len(s.byAge.entries) > 0 {
		oldest := s.byAge.entries[0]
		if oldest.txnFirstOffset >= 0 || oldest.lastTimestamp > cutoff {
			break
		}
		s.remove(oldest)
		n++
	}
	return n
}

// TruncateTo takes back every batch and marker at offsets >= offset, for a
// log truncated to offset (a batch boundary; storage.Log.TruncateTo): their
// batch entries are dropped, a producer left with none is forgotten, the
// last timestamp falls back to the last remaining batch's, and an open
// transaction that began at or after offset is closed.
//
// exact reports whether the result equals a rebuild (LoadSnapshot and
// Replay up to offset). It is false when a producer touched at or after
// offset had lost older history: batches pushed out of its 5-batch window,
// an epoch change or a marker (whose previous epoch, batches and open
// transaction are gone). Kafka always rebuilds instead (UnifiedLog.truncateTo
// -> ProducerStateManager.truncateAndReload, which reloads the latest
// snapshot <= offset and replays the log); when exact is false the owner
// must do the same, else the window is short (a retry gets
// OUT_OF_ORDER_SEQUENCE_NUMBER instead of being found a duplicate) or a
// producer is forgotten (its retry could be written twice). Producers
// already forgotten by ExpireBefore or eviction stay forgotten (a rebuild
// followed by ExpireBefore forgets the expired ones again).
func (s *ProducerState) TruncateTo(offset int64) (exact bool) {
	exact = true
	for _, e := range s.producers {
		if e.lastOffset < offset {
			continue
		}
		if !e.complete {
			exact = false
		}
		keep := len(e.batches)
		for keep > 0 && e.batches[keep-1].LastOffset >= offset {
			keep--
		}
		e.batches = e.batches[:keep]
		if keep == 0 {
			s.remove(e)
			continue
		}
		last := e.batches[keep-1]
		e.lastTimestamp, e.lastOffset = last.MaxTimestamp, last.LastOffset
		if e.txnFirstOffset >= offset {
			s.setTxn(e, -1, -1)
		}
		heap.Fix(&s.byAge, e.heapIndex)
	}
	return exact
}

// producerHeap orders entries by what goes first on expiration or eviction:
// no open transaction before open, then oldest last timestamp, then lowest
// id (so the choice is deterministic, also after a snapshot round trip).
type producerHeap struct{ entries []*producerEntry }

func (h producerHeap) Len() int { return len(h.entries) }

func (h producerHeap) Less(i, j int) bool {
	a, b := h.entries[i], h.entries[j]
	if ao, bo := a.txnFirstOffset >= 0, b.txnFirstOffset >= 0; ao != bo {
		return bo
	}
	if a.lastTimestamp != b.lastTimestamp {
		return a.lastTimestamp < b.lastTimestamp
	}
	return a.id < b.id
}

func (h producerHeap) Swap(i, j int) {
	h.entries[i], h.entries[j] = h.entries[j], h.entries[i]
	h.entries[i].heapIndex = i
	h.entries[j].heapIndex = j
}

func (h *producerHeap) Push(x any) {
	e := x.(*producerEntry)
	e.heapIndex = len(h.entries)
	h.entries = append(h.entries, e)
}

func (h *producerHeap) Pop() any {
	n := len(h.entries) - 1
	e := h.entries[n]
	h.entries[n] = nil
	h.entries = h.entries[:n]
	e.heapIndex = -1
	return e
}
