package storage

import (
	"iter"
	"math"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Rebuilding producer state from the log.
//
// The state at offset X (after every batch below X, none at or above it) is
//
//	s := LoadSnapshot(latest snapshot with offset S <= X)  // LatestSnapshotOffset
//	Replay(s, headers of the batches from S up to X)
//
// or, with no usable snapshot (none, or LoadSnapshot failed: delete that
// file and try the next older one), an empty NewProducerState replayed from
// the log start offset. Then SetMaxProducers and ExpireBefore(now, ...).
// This is Kafka's ProducerStateManager.truncateAndReload + loadFromSnapshot
// followed by UnifiedLog's rebuildProducerState scan, and it is what
// recovery (past the recovery point), a follower's truncation and
// TruncateTo's inexact case all do. Replay reads headers only: a segment
// scan with batch.ParseHeader (or Verify) supplies them without reading
// records.

// BatchInfoFromHeader returns what the producer-state rules read from a
// batch header. A plain producer's batch (ProducerID <= 0) gives a
// BatchInfo with only ProducerID set. An idempotent batch must have an epoch
// in [0, MaxInt16] (Kafka's producer epoch is a short; the wire field is 32
// bits) and, unless it is a control batch, a base sequence >= 0: else
// INVALID_RECORD, which the produce path should answer before Check. The
// last sequence wraps after MaxInt32 (batch.Header.LastSequence).
func BatchInfoFromHeader(h batch.Header) (BatchInfo, error) {
	if h.ProducerID <= 0 {
		return BatchInfo{ProducerID: h.ProducerID}, nil
	}
	if h.ProducerEpoch < 0 || h.ProducerEpoch > math.MaxInt16 {
		return BatchInfo{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producer %d: epoch %d is outside [0, %d]", h.ProducerID, h.ProducerEpoch, math.MaxInt16)
	}
	b := BatchInfo{
		ProducerID:      h.ProducerID,
		Epoch:           int16(h.ProducerEpoch),
		IsTransactional: h.IsTransactional(),
		IsControl:       h.IsControl(),
	}
	if b.IsControl {
		b.FirstSeq, b.LastSeq = NoSequence, NoSequence
		b.CoordinatorEpoch = NoCoordinatorEpoch
		return b, nil
	}
	if h.BaseSequence < 0 {
		return BatchInfo{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producer %d: base sequence %d is negative", h.ProducerID, h.BaseSequence)
	}
	b.FirstSeq, b.LastSeq = h.BaseSequence, h.LastSequence()
	return b, nil
}

// Replay applies every batch of batches to s with Update, unchecked, as a
// follower does: offsets from the header (BaseOffset, LastOffset()), the
// last timestamp from MaxTimestamp. Batches must come in offset order (each
// base offset above the previous batch's last offset) and be the log's
// batches from the snapshot's offset on; plain producers' batches may be
// included and are skipped. On an error (a header BatchInfoFromHeader
// refuses, or offsets out of order: CORRUPT_RECORD) Replay stops, s holds
// the batches before the bad one, and the caller should treat the log as
// corrupt there. Headers carry no marker's coordinator epoch: Replay
// leaves the producers' coordinator epochs as they were (ReplayBatches
// takes them).
func Replay(s *ProducerState, batches iter.Seq[batch.Header]) error {
	return ReplayBatches(s, func(yield func(ReplayBatch) bool) {
		for h := range batches {
			if !yield(ReplayBatch{Header: h, CoordinatorEpoch: NoCoordinatorEpoch}) {
				return
			}
		}
	})
}

// ReplayBatch is one batch for ReplayBatches: its header and, for a
// marker, the coordinator epoch its record carries (NoCoordinatorEpoch
// when not read).
type ReplayBatch struct {
	Header           batch.Header
	CoordinatorEpoch int32
}

// ReplayBatches is Replay with each marker's coordinator epoch, so that a
// rebuilt state fences old coordinators as the original did. The start
// time of a transaction opened by the replay is its first batch's max
// timestamp (the broker's append time is not in the log).
func ReplayBatches(s *ProducerState, batches iter.Seq[ReplayBatch]) error {
	prev := int64(math.MinInt64)
	for rb := range batches {
		h := rb.Header
		if h.BaseOffset <= prev || h.LastOffsetDelta < 0 {
			return errs.New(sluicev1.ErrorCode_CORRUPT_RECORD, "replay: batch [%d, %d] does not follow offset %d", h.BaseOffset, h.LastOffset(), prev)
		}
		prev = h.LastOffset()
		b, err := BatchInfoFromHeader(h)
		if err != nil {
			return err
		}
		b.CoordinatorEpoch = rb.CoordinatorEpoch
		s.Update(b, h.BaseOffset, h.LastOffset(), h.MaxTimestamp)
	}
	return nil
}
