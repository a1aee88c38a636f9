package storage

import (
	"errors"
	"sort"

	"github.com/sluice-io/sluice/proto/batch"
)

// The log's side of transactions (DESIGN §10): the last stable offset, the
// aborted-transaction index (txnindex.go) and the consumer reads that use
// them. The open transactions themselves are the producer state's
// (producerstate.go: txnFirstOffset); this file publishes what readers need
// under mu, so that no reader waits for appendMu.

// txnRange is a transaction's first offset and its marker's offset.
type txnRange struct{ first, last int64 }

// endedTxn is the transaction a marker being appended ends.
type endedTxn struct {
	AbortedTxn
	abort bool // an ABORT marker: the entry goes into the .txnindex
}

// markerInfo is what a control batch's one record says.
type markerInfo struct {
	ok               bool // the record is a transaction marker
	abort            bool // an ABORT marker
	coordinatorEpoch int32
}

// readMarker decodes control batch b's marker record (a few bytes), never
// a data record. A control record that is not a transaction marker gives
// ok false.
func readMarker(b []byte) markerInfo {
	var mk markerInfo
	errStop := errors.New("stop")
	_ = batch.ForEachRecord(b, func(r batch.Record) error {
		t, ce, err := batch.ParseMarker(r.Key, r.Value)
		if err == nil {
			mk = markerInfo{ok: true, abort: t == batch.ControlAbort, coordinatorEpoch: ce}
		}
		return errStop
	})
	return mk
}

// epoch is the marker's coordinator epoch, or
// NoCoordinatorEpoch when b was not a marker.
func (mk markerInfo) epoch() int32 {
	if !mk.ok {
		return NoCoordinatorEpoch
	}
	return mk.coordinatorEpoch
}

// endingTxn reports the transaction that batch b (header h, marker mk
// read from it when it is a control batch), about to be appended, ends: a
// marker (control batch of a producer id > 0) of a producer with an open
// transaction. A retried marker (KAFKA-19999: same epoch, transaction
// already ended) ends nothing, so it adds no .txnindex entry and leaves
// the last stable offset alone. The caller holds appendMu, and calls it
// before updateProducer.
func (l *Log) endingTxn(h batch.Header, mk markerInfo) (endedTxn, bool) {
	if !h.IsControl() || h.ProducerID <= 0 || l.producers == nil {
		return endedTxn{}, false
	}
	t, ok := l.producers.EndingTxn(h.ProducerID, h.LastOffset())
	if !ok {
		return endedTxn{}, false
	}
	return endedTxn{AbortedTxn: t, abort: mk.ok && mk.abort}, true
}

// producerFirstUnstable is the producer state's first unstable offset, -1
// for none. The caller holds appendMu.
func (l *Log) producerFirstUnstable() int64 {
	if l.producers == nil {
		return -1
	}
	if off, ok := l.producers.FirstUnstableOffset(); ok {
		return off
	}
	return -1
}

// publishTxnState republishes the transaction state after the producer
// state was replaced or cut (truncation, rebuild): the first unstable
// offset, and the unreplicated transactions whose marker is below end
// (the new log end; math.MinInt64 when the whole log was replaced). It wakes Changed waiters. The caller holds appendMu.
func (l *Log) publishTxnState(end int64) {
	fu := l.producerFirstUnstable()
	l.mu.Lock()
	l.firstUnstable = fu
	k := sort.Search(len(l.unreplicated), func(i int) bool { return l.unreplicated[i].last >= end })
	l.unreplicated = l.unreplicated[:k:k]
	if !l.closed {
		l.notifyLocked()
	}
	l.mu.Unlock()
}

// LastStableOffset is the offset below which every transaction is decided
// and its marker committed: min(first offset of the oldest open
// transaction, high watermark) (DESIGN §10; Kafka
// UnifiedLog.lastStableOffset), where a transaction counts as open until
// its marker is below the high watermark (Kafka's unreplicated
// transactions), and an open transaction's first offset counts as at least
// the log start offset (Kafka's firstUnstableOffset after retention). It is
// within [StartOffset, HighWatermark], equals the high watermark when no
// transaction is open, and is correct on leaders and followers (both
// update the producer state from every batch they append), after recovery
// (the producer state is rebuilt) and after truncation. Producer
// expiration never forgets an open transaction (ExpireBefore), so a
// transaction left open holds the last stable offset until a marker ends
// it. Changed waiters wake whenever it may have moved.
func (l *Log) LastStableOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.lsoLocked()
}

// lsoLocked is LastStableOffset; the caller holds mu.
func (l *Log) lsoLocked() int64 {
	lso := l.hw
	if l.firstUnstable >= 0 {
		lso = min(lso, max(l.firstUnstable, l.startOffset))
	}
	for _, t := range l.unreplicated {
		lso = min(lso, max(t.first, l.startOffset))
	}
	return lso
}

// replicatedLocked forgets the unreplicated transactions whose marker is
// now below the high watermark. The caller holds mu exclusively.
func (l *Log) replicatedLocked() {
	k := 0
	for k < len(l.unreplicated) && l.unreplicated[k].last < l.hw {
		k++
	}
	if k > 0 {
		l.unreplicated = append(l.unreplicated[:0:0], l.unreplicated[k:]...)
	}
}

// AbortedTransactions returns the aborted transactions that overlap the
// offsets [from, to): those with LastOffset >= from and FirstOffset < to,
// in the order their ABORT markers are in the log (Kafka
// UnifiedLog.collectAbortedTransactions). It reads the in-memory index of
// the segment holding from and of the later ones, stopping at an entry
// whose last stable offset reaches to. The result is a copy.
func (l *Log) AbortedTransactions(from, to int64) []AbortedTxn {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.abortedLocked(from, to)
}

func (l *Log) abortedLocked(from, to int64) []AbortedTxn {
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > from }) - 1
	var out []AbortedTxn
	for _, s := range l.segments[max(i, 0):] {
		var done bool
		if out, done = s.collectAborted(out, from, to); done {
			break
		}
	}
	return out
}

// Isolation is what a consumer read may see (Kafka's isolation.level).
type Isolation int

const (
	// ReadUncommitted reads below the high watermark, every data batch.
	ReadUncommitted Isolation = iota
	// ReadCommitted reads below the last stable offset, leaving out the
	// batches of aborted transactions.
	ReadCommitted
)

// maxConsumerScanBytes bounds the batch bytes one ReadConsumer looks at
// when everything it finds is left out; it then answers no batches but a
// NextOffset past them, and the consumer fetches again from there.
const maxConsumerScanBytes = 8 << 20

// ReadConsumer is Read for a consumer: batches below the high watermark
// (ReadUncommitted) or the last stable offset (ReadCommitted), without
// control batches (transaction markers) or batches without records
// (compaction's, see keepForConsumer), and under ReadCommitted without
// the batches of aborted transactions (a transactional batch of producer P
// whose base offset lies in [FirstOffset, LastOffset] of one of P's
// entries in AbortedTransactions). Batches are left out whole, judged by
// their headers; no record is decoded. The first batch may start before
// offset.
//
// NextOffset is the offset after the last batch looked at, kept or not, so
// that a consumer that fetches from it never sees a left-out batch again
// and never stalls on them: when everything read is left out, ReadConsumer
// reads on (up to maxConsumerScanBytes) and may answer no batches with a
// NextOffset past offset. maxBytes bounds the kept batches as Read does
// (at least one whole batch when one is kept). Errors and concurrency are
// Read's; a read that raced with a truncation is retried.
func (l *Log) ReadConsumer(offset int64, maxBytes int, iso Isolation) (ReadResult, error) {
	return l.ReadConsumerInto(offset, maxBytes, iso, nil)
}

// ReadConsumerInto is ReadConsumer with the buffers file data is read
// into coming from alloc, as ReadInto.
func (l *Log) ReadConsumerInto(offset int64, maxBytes int, iso Isolation, alloc func(n int) []byte) (ReadResult, error) {
	for attempt := 0; ; attempt++ {
		l.mu.RLock()
		gen := l.truncations
		bound := l.hw
		if iso == ReadCommitted {
			bound = l.lsoLocked()
		}
		l.mu.RUnlock()
		res, err := l.readConsumerOnce(offset, maxBytes, bound, iso, alloc)
		l.mu.RLock()
		raced := l.truncations != gen
		l.mu.RUnlock()
		if !raced {
			return res, err
		}
		if attempt == maxReadAttempts-1 {
			return ReadResult{}, storageErr("read offset %d: the log was truncated %d times during the read", offset, maxReadAttempts)
		}
	}
}

func (l *Log) readConsumerOnce(offset int64, maxBytes int, bound int64, iso Isolation, alloc func(int) []byte) (ReadResult, error) {
	out := ReadResult{NextOffset: offset}
	scanned := 0
	for from := offset; ; from = out.NextOffset {
		res, err := l.ReadInto(from, maxBytes, bound, alloc)
		if err != nil {
			if from != offset {
				return out, nil // answer what was looked at; the next read reports it
			}
			return ReadResult{}, err
		}
		if len(res.Batches) == 0 {
			return out, nil
		}
		var aborted []AbortedTxn
		if iso == ReadCommitted {
			aborted = l.AbortedTransactions(from, res.NextOffset)
		}
		// out holds no batch yet (the loop goes on only while it holds
		// none). The common case keeps every batch: share Read's slice
		// until the first batch left out.
		var kept [][]byte
		all := true
		for i, b := range res.Batches {
			scanned += len(b)
			h, err := batch.ParseHeader(b)
			if err == nil && keepForConsumer(h, aborted) {
				if !all {
					kept = append(kept, b)
				}
				continue
			}
			if all {
				all, kept = false, append(kept, res.Batches[:i]...)
			}
		}
		if all {
			kept = res.Batches
		}
		out.Batches, out.NextOffset = kept, res.NextOffset
		if len(out.Batches) > 0 || out.NextOffset >= bound || scanned >= maxConsumerScanBytes {
			return out, nil
		}
	}
}

// keepForConsumer is the consumer filter of one batch: control batches
// never reach a consumer (Kafka's consumer drops them, CompletedFetch
// lines 234-240), nor do the batches of aborted transactions (isBatchAborted:
// a transactional batch of a producer whose aborted transaction covers it),
// nor batches without records (left by the log cleaner: fillers over
// removed batches and producers' emptied last batches, cleaner.go), so a
// consumer fetching a removed offset gets the next records.
func keepForConsumer(h batch.Header, aborted []AbortedTxn) bool {
	if h.IsControl() || h.RecordCount == 0 {
		return false
	}
	if !h.IsTransactional() || h.ProducerID <= 0 {
		return true
	}
	for _, t := range aborted {
		if t.ProducerID == h.ProducerID && t.FirstOffset <= h.BaseOffset && h.BaseOffset <= t.LastOffset {
			return false
		}
	}
	return true
}

// rebuildTxnIndexes rebuilds the aborted-transaction index of every
// segment from base offset from on (recovery found them rescanned or
// unreadable) while rebuilding the producer state, and returns that state
// at the log end: the state at the first such segment's base (snapshot and
// replay), then a replay of the rest in which each ABORT marker of an open
// transaction writes its entry, exactly as the append did. Called by Open
// before the log is shared.
func (l *Log) rebuildTxnIndexes(from int64) (*ProducerState, error) {
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base >= from })
	if i == len(l.segments) {
		return l.rebuildProducers(l.active().next), nil
	}
	segs := l.segments[i:]
	for _, s := range segs {
		s.aborted, s.txnSize = nil, 0
		if err := s.txnIdx.Truncate(0); err != nil {
			return nil, err
		}
	}
	st := l.rebuildProducers(segs[0].base)
	if l.producerErr != nil {
		return st, nil
	}
	var werr, readErr error
	batches := func(yield func(ReplayBatch) bool) {
		for lb := range l.scanBatches(segs[0].base, l.active().next, &readErr) {
			if lb.mk.ok && lb.mk.abort {
				if t, ok := st.EndingTxn(lb.h.ProducerID, lb.h.LastOffset()); ok {
					if werr = lb.seg.writeAborted(t); werr != nil {
						return
					}
					lb.seg.aborted = append(lb.seg.aborted, t)
				}
			}
			if !yield(ReplayBatch{Header: lb.h, CoordinatorEpoch: lb.mk.epoch()}) {
				return
			}
		}
	}
	l.producerErr = ReplayBatches(st, batches)
	if werr == nil {
		werr = readErr
	}
	return st, werr
}
