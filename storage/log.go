package storage

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/internal/goroutine"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// AppendResult describes an appended batch.
type AppendResult struct {
	BaseOffset   int64
	LastOffset   int64
	MaxTimestamp int64
	// Duplicate: the batch was a producer's retry of a batch already in
	// the log (same producer id, epoch and sequences); nothing was written
	// and the offsets are the original's.
	Duplicate bool
}

// ReadResult is the outcome of Read.
type ReadResult struct {
	// Batches are canonical batches (frames stripped) in offset order; the
	// first may start before the requested offset. They are copies read
	// from the files: they stay valid after any later log operation, and
	// callers must not modify them (they may share one buffer).
	Batches [][]byte
	// NextOffset is the offset after the last returned batch, or the
	// requested offset when none was returned. For ReadConsumer it is the
	// offset after the last batch looked at, returned or left out.
	NextOffset int64
}

// SegmentInfo describes one segment, for tools and tests.
type SegmentInfo struct {
	BaseOffset int64
	NextOffset int64
	Size       int64
	Path       string
}

// Log is one partition's log in a directory.
//
// Concurrency: all methods are safe for concurrent use. Writers (Append,
// AppendControl, AppendTxn, AppendVerbatim, TruncateTo,
// TruncateFullyAndStartAt, EnforceRetention, Flush, SetConfig, Close,
// Delete) are serialised by appendMu, which they hold across their file
// IO; StartTxnVerification and the producer-state readers take it too. Readers (Read, ReadConsumer,
// OffsetForTimestamp, LastStableOffset, AbortedTransactions, ...) take
// mu shared only to snapshot segment positions and never hold it during
// file IO; writers take mu exclusively only to publish new state after the
// bytes are written. A reader therefore only ever reads committed bytes
// (below the size snapshot) and never sees a partially written batch.
// The exceptions are the truncations, which remove committed bytes: they
// hold mu exclusively across the cut (ftruncate, fsync, unlink; no data
// is written) and count it in truncations, so a read that snapshotted
// before the cut notices and is retried. The log cleaner's swap of
// rewritten segments (Clean, cleaner.go) counts as one too.
//
// The high watermark is guarded by mu alone (SetHighWatermark does not
// wait for appends); ckptMu serialises writes of its checkpoint file.
//
// Lock order: cleanMu before appendMu before ckptMu before mu. The cleaner
// (cleaner.go) reads sealed segments without appendMu and swaps its
// rewritten segments in under appendMu and mu, counting the swap as a
// truncation.
type Log struct {
	dir  string
	opts Options // set at Open, never changed
	// failure is set once, at the first file error (failure.go).
	failure atomic.Pointer[Failure]

	appendMu  sync.Mutex // guards the following and serialises writers
	unflushed int64      // records appended since the last flush
	lastFlush time.Time
	// sealedSyncs tracks the background fsyncs of rolled segments
	// (syncSealed), the only goroutines a Log starts; Go and Wait are
	// called under appendMu.
	sealedSyncs goroutine.Group

	ckptMu sync.Mutex // serialises writes of the high watermark (its own file, or its entry in Options.HighWatermarks)
	// ckptName is the log's name in the shared checkpoints
	// (Options.HighWatermarks, Options.RecoveryPoints; "": it keeps files
	// of its own); set at Open.
	ckptName string

	// rpMu guards the following and serialises writes of the recovery
	// point (recoverypoint.go). It is taken after appendMu, or alone by
	// the background fsyncs of rolled segments.
	rpMu sync.Mutex
	// recoveryPoint: every byte of the log below it is on disk (fsynced),
	// so a recovery after a crash need not scan it.
	recoveryPoint int64
	// rpWritten is the value the log's own recovery-point file holds (-1:
	// unknown); with a shared checkpoint it is unused.
	rpWritten int64
	// syncsTo is where the fsyncs handed to background goroutines end:
	// the next roll's goroutine syncs the segments from there on. Guarded
	// by appendMu.
	syncsTo int64
	// lastSync is closed when the latest background fsync goroutine is
	// done; each waits for the one before, so that they advance the
	// recovery point in order. Guarded by appendMu.
	lastSync chan struct{}

	mu          sync.RWMutex // guards the following (writes also need appendMu, except hw)
	cfg         Config
	segments    []*segment // ascending base offsets; the last is active
	startOffset int64
	epochs      epochCache // leader-epoch cache; replaced, never modified in place
	// producers is the idempotent-producer state (producers.go); guarded
	// by appendMu alone.
	producers   *ProducerState
	producerErr error  // why the last rebuild of producers stopped early
	hw          int64  // high watermark, in [startOffset, log end offset]
	truncations uint64 // count of truncations, for readers racing with them
	changed     chan struct{}
	// dataChanged is changed without the high-watermark advances (see
	// DataChanged).
	dataChanged chan struct{}
	closed      bool
	// firstUnstable is the producer state's FirstUnstableOffset (-1: no
	// open transaction), published here so that readers of the last
	// stable offset need not take appendMu.
	firstUnstable int64
	// unreplicated are the transactions whose marker is appended but not
	// yet below the high watermark (Kafka's unreplicatedTxns): they hold
	// the last stable offset back until the marker is committed, as an
	// open transaction does. Ordered by marker offset.
	unreplicated []txnRange

	// txnRebuildFrom is, during Open only, the base offset of the first
	// segment whose aborted-transaction index recovery must rebuild (-1:
	// none).
	txnRebuildFrom int64

	// truncateHook, set only by tests before the log is shared, is called
	// between the steps of a truncation (see crashPoint).
	truncateHook func(step string)
	// swapHook, set only by tests before the log is shared, is called
	// between the steps of a cleaner swap (cleanCrashPoint, cleaner.go).
	swapHook func(step string)

	// cleanMu serialises Clean passes (cleaner.go); it is taken before
	// appendMu.
	cleanMu sync.Mutex

	// changeHook (SetChangeHook) is called at each change that closes
	// changed; nil when none is set.
	changeHook atomic.Pointer[func(data bool)]
}

const (
	cleanShutdownFile = ".clean_shutdown"
	startOffsetFile   = "log-start-offset-checkpoint"
	// recoveryPointFile is a log's own recovery-point checkpoint: logs
	// with a shared one (Options.RecoveryPoints) read it only once, to
	// migrate (RecoveryPointFile).
	recoveryPointFile = "recovery-point-offset-checkpoint"
)

// ErrClosed is returned by operations on a closed or deleted log.
var ErrClosed = errors.New("storage: log is closed")

// Open opens the log in dir, creating the directory if needed, and
// recovers it (see recovery.go): after a clean shutdown the indexes are
// trusted and only the active segment's tail is verified; otherwise every
// segment past the recovery point is scanned, CRCs checked, a torn or
// corrupt tail truncated (dropping every later segment) and indexes
// rebuilt. The clean-shutdown marker is removed, so a crash of this
// incarnation rescans. The high watermark and the leader-epoch cache are
// loaded from their checkpoints and fitted to the recovered log (the
// cache is rebuilt from the batch headers when its checkpoint is missing
// or disagrees with the log; see epochs.go). cfg must pass Validate.
func Open(dir string, cfg Config, now time.Time) (*Log, error) {
	return OpenWith(dir, cfg, now, Options{})
}

// OpenWith is Open with hooks: fault injection and the failure callback
// (failure.go).
func OpenWith(dir string, cfg Config, now time.Time, opts Options) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !opts.Created {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	if opts.Faults != nil {
		if err := opts.Faults.Fault(OpOpen, dir); err != nil {
			return nil, err
		}
	}
	l := &Log{dir: dir, opts: opts, cfg: cfg, changed: make(chan struct{}), dataChanged: make(chan struct{}), lastFlush: now, firstUnstable: -1, txnRebuildFrom: -1, rpWritten: -1}
	if opts.HighWatermarks != nil || opts.RecoveryPoints != nil {
		l.ckptName = sharedCheckpointName(dir)
	}
	if opts.Created {
		if err := l.startEmpty(now); err != nil {
			return nil, errRecover(dir, err)
		}
		return l, nil
	}
	ckptClean, err := l.recover(now)
	if err == nil {
		err = l.fitRecoveryPoint(l.recoveryPoint, ckptClean)
	}
	if err == nil {
		l.loadHighWatermark()
		err = l.loadEpochs()
	}
	if err == nil {
		err = l.loadProducers()
	}
	if err != nil {
		for _, s := range l.segments {
			s.close()
		}
		return nil, errRecover(dir, err)
	}
	return l, nil
}

// startEmpty is OpenWith of a directory just created (Options.Created):
// an empty log at offset 0, as recovering an empty directory gives, with
// none of its reads.
func (l *Log) startEmpty(now time.Time) error {
	s, err := createFirstSegment(l.files(), l.dir, 0, now)
	if err != nil {
		return err
	}
	l.segments = []*segment{s}
	if store, name := l.rpStore(); store != nil {
		store.Set(name, 0)
	} else {
		l.rpWritten = 0 // no file reads as 0
	}
	if store, name := l.hwStore(); store != nil {
		store.Set(name, 0)
	}
	l.producers = NewProducerState(DefaultMaxProducers)
	return nil
}

func (l *Log) active() *segment { return l.segments[len(l.segments)-1] }

// files is the cache the log's segment files are opened through.
func (l *Log) files() *FileCache {
	if l.opts.Files != nil {
		return l.opts.Files
	}
	return DefaultFileCache()
}

// StartOffset is the log start offset: the first offset still readable.
func (l *Log) StartOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.startOffset
}

// EndOffset is the log end offset: the offset the next record will get.
func (l *Log) EndOffset() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.active().next
}

// Changed returns a channel that is closed at the next append, truncation,
// retention change, high-watermark advance or close; each close is
// followed by a new channel, so callers fetch it again after waking.
func (l *Log) Changed() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.changed
}

// DataChanged is Changed without the high-watermark advances: it is
// closed at the next append, truncation, retention change, cleaning swap
// or close. A follower's fetch reads to the log end and waits on it: a
// high-watermark move gives it nothing new to read, and each one used to
// wake every follower fetch of the partition for a read of nothing.
func (l *Log) DataChanged() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.dataChanged
}

// notifyLocked wakes waiters on Changed and DataChanged; the caller holds
// mu exclusively.
func (l *Log) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
	close(l.dataChanged)
	l.dataChanged = make(chan struct{})
	if fn := l.changeHook.Load(); fn != nil {
		(*fn)(true)
	}
}

// SetChangeHook makes fn be called at every change that Changed reports,
// with data true when DataChanged reports it too (an append, truncation,
// retention change, cleaning swap or close) and false for a
// high-watermark move. It is called under the log's lock, after the
// channels are replaced: fn must be quick and must not call the log. A
// replica's fetch sessions use it to learn which of thousands of
// partitions changed without a channel each (cluster/fetchsession.go).
// nil removes the hook.
func (l *Log) SetChangeHook(fn func(data bool)) {
	if fn == nil {
		l.changeHook.Store(nil)
		return
	}
	l.changeHook.Store(&fn)
}

// notifyWatermarkLocked wakes waiters on Changed only: the high watermark
// (and with it the last stable offset) moved, the data did not. The
// caller holds mu exclusively.
func (l *Log) notifyWatermarkLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
	if fn := l.changeHook.Load(); fn != nil {
		(*fn)(false)
	}
}

func storageErr(format string, args ...any) error {
	return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, format, args...)
}

// Append assigns the next offsets to canonical batch b (already validated,
// CRC set): it patches the base offset to the log end offset and the
// partition leader epoch in place, and writes the frame. b is written to
// the segment (copied) and not kept after the call, so the caller may reuse
// its buffer. A batch over max.message.bytes is refused with
// MESSAGE_TOO_LARGE and nothing is written. leaderEpoch must be >= 0
// (else INVALID_RECORD) and >= LatestEpoch (else FENCED_LEADER_EPOCH: a
// stale leader); a larger one becomes the latest epoch, starting at this
// batch. The active segment is rolled
// first if the frame would take it past segment.bytes or it is older than
// segment.ms (measured from its first append). Write failures are
// KAFKA_STORAGE_ERROR and leave the log as it was.
func (l *Log) Append(b []byte, leaderEpoch int32, now time.Time) (AppendResult, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	h, err := l.stampLocked(b, leaderEpoch)
	if err != nil {
		return AppendResult{}, err
	}
	if _, d, err := l.checkProducer(h); err != nil {
		return AppendResult{}, err
	} else if d.Duplicate {
		// A retry of a batch already in the log: nothing is written and
		// the original offsets are returned.
		return AppendResult{BaseOffset: d.FirstOffset, LastOffset: d.LastOffset, MaxTimestamp: d.MaxTimestamp, Duplicate: true}, nil
	}
	return l.appendLocked(b, now)
}

// stampLocked checks that the log is open and b's size, patches b's base
// offset (the log end) and partition leader epoch in place, and parses its
// header: the common first steps of Append and AppendControl. Caller holds
// appendMu.
func (l *Log) stampLocked(b []byte, leaderEpoch int32) (batch.Header, error) {
	if l.closed {
		return batch.Header{}, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return batch.Header{}, err
	}
	if len(b) > int(l.cfg.MaxMessageBytes) {
		return batch.Header{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d", len(b), l.cfg.MaxMessageBytes)
	}
	if len(b) < batch.HeaderSize {
		return batch.Header{}, errs.New(sluicev1.ErrorCode_CORRUPT_RECORD, "batch of %d bytes is shorter than its header", len(b))
	}
	batch.SetBaseOffset(b, l.active().next)
	batch.SetPartitionLeaderEpoch(b, leaderEpoch)
	return batch.ParseHeader(b)
}

// AppendControl is Append for a control batch the leader writes itself
// (a transaction marker from a coordinator; producers never send one, and
// Append refuses it). b must carry the control attribute (else
// INVALID_RECORD); a producer id > 0 must carry a transaction marker
// record (else INVALID_RECORD) and pass the marker rules instead of the
// idempotence rules: ProducerState.CheckMarker (under TV2 a marker's epoch
// exceeds the data's: else INVALID_PRODUCER_EPOCH), then
// ProducerState.CheckCoordinatorEpoch (a coordinator epoch below that of
// the producer's last marker: TRANSACTION_COORDINATOR_FENCED). The
// producer state is updated as for any append: the marker ends the
// producer's open transaction and its coordinator epoch is remembered. A
// retried marker of a transaction already ended (KAFKA-19999) is written
// again but ends nothing: no second .txnindex entry, and the last stable
// offset does not move. Everything else is Append's.
func (l *Log) AppendControl(b []byte, leaderEpoch int32, now time.Time) (AppendResult, error) {
	return l.AppendMarker(b, leaderEpoch, MarkerTV2, now)
}

// AppendMarker is AppendControl for a marker ending a transaction of
// version v: CheckMarker applies v's epoch rule (TV2: above the
// producer's epoch; TV1: at least it). AppendControl is AppendMarker with
// MarkerTV2.
func (l *Log) AppendMarker(b []byte, leaderEpoch int32, v MarkerVersion, now time.Time) (AppendResult, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	h, err := l.stampLocked(b, leaderEpoch)
	if err != nil {
		return AppendResult{}, err
	}
	if !h.IsControl() {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "not a control batch")
	}
	info, err := BatchInfoFromHeader(h)
	if err != nil {
		return AppendResult{}, err
	}
	if info.ProducerID > 0 {
		mk := readMarker(b)
		if !mk.ok {
			return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "control batch of producer %d holds no transaction marker", info.ProducerID)
		}
		if err := l.producers.CheckMarker(info.ProducerID, info.Epoch, v); err != nil {
			return AppendResult{}, err
		}
		if err := l.producers.CheckCoordinatorEpoch(info.ProducerID, mk.coordinatorEpoch); err != nil {
			return AppendResult{}, err
		}
	}
	return l.appendLocked(b, now)
}

// StartTxnVerification begins the verification of a transactional batch
// of producerID at epoch, starting at sequence firstSeq, before its
// append with AppendTxn
// (ProducerState.StartVerification, at now): INVALID_PRODUCER_EPOCH when
// the epoch is below the producer's here, a guard whose Needed is false
// when the producer's transaction is already open here at epoch, else a
// guard to hold while the coordinator adds the partition to the
// transaction. ErrClosed on a closed log.
func (l *Log) StartTxnVerification(producerID int64, epoch int16, firstSeq int32, now time.Time) (VerificationGuard, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return VerificationGuard{}, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return VerificationGuard{}, err
	}
	return l.producers.StartVerification(producerID, epoch, firstSeq, now.UnixMilli())
}

// AppendTxn is Append for a transactional data batch verified with guard
// (StartTxnVerification): b must be a transactional, non-control batch of
// a producer id > 0 (else INVALID_RECORD). A retry of a batch already
// written is a duplicate as in Append; otherwise the batch is appended
// only if the guard still holds (ProducerState.CheckVerified: else
// INVALID_TXN_STATE wrapping ErrVerificationEnded, nothing written) and
// then passes the idempotence rules — a TV1 producer's (the guard's
// ForTV1) without the TV2-only rule that an unknown producer start at
// sequence 0. Everything else is Append's.
func (l *Log) AppendTxn(b []byte, leaderEpoch int32, guard VerificationGuard, now time.Time) (AppendResult, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	h, err := l.stampLocked(b, leaderEpoch)
	if err != nil {
		return AppendResult{}, err
	}
	if h.IsControl() || !h.IsTransactional() || h.ProducerID <= 0 {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "not a transactional data batch of a producer (control %v, transactional %v, producer id %d)", h.IsControl(), h.IsTransactional(), h.ProducerID)
	}
	info, d, err := l.checkProducerVersion(h, guard.tv1)
	if err == nil && d.Duplicate {
		return AppendResult{BaseOffset: d.FirstOffset, LastOffset: d.LastOffset, MaxTimestamp: d.MaxTimestamp, Duplicate: true}, nil
	}
	// Kafka checks the verification before the epoch and sequence
	// (UnifiedLog.analyzeAndValidateProducerState), so a batch whose
	// transaction ended while it was verified is INVALID_TXN_STATE even
	// though the marker's higher epoch would also refuse it.
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_RECORD {
		if verr := l.producers.CheckVerified(info, guard); verr != nil {
			return AppendResult{}, verr
		}
	}
	if err != nil {
		return AppendResult{}, err
	}
	return l.appendLocked(b, now)
}

// OldestOpenTransactionStart is when the oldest transaction open in this
// log started: the broker's clock at the append of its first batch here
// (leader or follower), or that batch's max timestamp when the state was
// rebuilt from the log. false when no transaction is open.
func (l *Log) OldestOpenTransactionStart() (time.Time, bool) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.producers == nil {
		return time.Time{}, false
	}
	ms, ok := l.producers.OldestTxnStart()
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// AppendVerbatim appends a batch that already carries its offsets and
// leader epoch (a follower's copy of the leader's bytes). It must pass
// batch.Verify (else CORRUPT_RECORD) and its base offset must equal the log
// end offset (else INVALID_RECORD; a compacted log has no offset gaps
// between batches: cleaner.go); its partition leader epoch follows
// Append's rules (a lower epoch than LatestEpoch means the follower did
// not truncate to the divergence point first: FENCED_LEADER_EPOCH).
// Nothing is written on error. b is not modified, and not kept after the
// call.
func (l *Log) AppendVerbatim(b []byte, now time.Time) (AppendResult, error) {
	h, err := batch.Verify(b)
	if err != nil {
		return AppendResult{}, err
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return AppendResult{}, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return AppendResult{}, err
	}
	if len(b) > int(l.cfg.MaxMessageBytes) {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d", len(b), l.cfg.MaxMessageBytes)
	}
	if end := l.active().next; h.BaseOffset != end {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_RECORD, "batch base offset %d is not the log end offset %d", h.BaseOffset, end)
	}
	return l.appendLocked(b, now)
}

// appendLocked writes b (base offset already the log end offset) as the
// next frame. A batch opening a new leader epoch is recorded in the
// leader-epoch checkpoint before it is written (epochs.go). The caller
// holds appendMu.
func (l *Log) appendLocked(b []byte, now time.Time) (AppendResult, error) {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return AppendResult{}, err
	}
	if h.LastOffsetDelta < 0 {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_CORRUPT_RECORD, "negative last offset delta %d", h.LastOffsetDelta)
	}
	newEpoch, err := l.epochs.checkAppend(h.PartitionLeaderEpoch, h.BaseOffset)
	if err != nil {
		return AppendResult{}, err
	}
	epochs := l.epochs
	if newEpoch {
		epochs = epochs.assign(h.PartitionLeaderEpoch, h.BaseOffset)
		if err := l.writeEpochs(epochs); err != nil {
			return AppendResult{}, l.fail(OpWrite, filepath.Join(l.dir, epochCheckpointFile), err)
		}
	}
	frameSize := int64(batch.FrameSize(len(b)))
	s := l.active()
	if s.size > 0 && (s.size+frameSize > l.cfg.SegmentBytes ||
		now.Sub(s.created) >= time.Duration(l.cfg.SegmentMs)*time.Millisecond ||
		h.LastOffset()-s.base > maxRelOffset) {
		if s, err = l.rollLocked(now); err != nil {
			return AppendResult{}, err
		}
	}
	if s.size == 0 {
		s.created = now // segment.ms counts from the first append
	}
	// A marker ends its producer's open transaction: note it before the
	// producer state forgets it (an ABORT goes into the .txnindex).
	var mk markerInfo
	if h.IsControl() && h.ProducerID > 0 {
		mk = readMarker(b)
	}
	ended, ending := l.endingTxn(h, mk)
	var fh [batch.MaxFrameHeader]byte
	hdr := batch.AppendFrameHeader(fh[:0], len(b))
	pos := s.size
	e := s.plan(h, pos, l.cfg.IndexIntervalBytes)
	err = l.inject(OpWrite, s.path)
	if err == nil {
		err = s.writeFrame(hdr, b, pos)
	}
	if err != nil {
		_ = s.log.Truncate(pos)
		return AppendResult{}, l.fail(OpWrite, s.path, err)
	}
	idxSize, timeSize, txnSize := s.idxSize, s.timeSize, s.txnSize
	err = s.writeEntries(e)
	if err == nil && ending && ended.abort {
		err = s.writeAborted(ended.AbortedTxn)
	}
	if err != nil {
		_ = s.log.Truncate(pos)
		s.idxSize, s.timeSize, s.txnSize = idxSize, timeSize, txnSize
		_ = s.truncateIndexFiles()
		return AppendResult{}, l.fail(OpWrite, segmentName(l.dir, s.base, ".index"), err) // the OS error names the file
	}
	l.updateProducer(h, mk, now)
	l.mu.Lock()
	s.keepTail(pos, hdr, b)
	s.apply(h, int(frameSize), e)
	l.epochs = epochs
	if ending {
		if ended.abort {
			s.aborted = append(s.aborted, ended.AbortedTxn)
		}
		l.unreplicated = append(l.unreplicated, txnRange{first: ended.FirstOffset, last: ended.LastOffset})
	}
	if h.ProducerID > 0 && (h.IsTransactional() || h.IsControl()) {
		l.firstUnstable = l.producerFirstUnstable()
	}
	l.notifyLocked()
	l.mu.Unlock()

	// s.size is read without mu: only this append path (under appendMu)
	// changes it.
	if s.size-s.wbFrom >= writebackChunk {
		s.advise(l.opts.PageCacheWindow)
	}
	l.unflushed += int64(h.RecordCount)
	if (l.cfg.FlushMessages > 0 && l.unflushed >= l.cfg.FlushMessages) ||
		(l.cfg.FlushMs > 0 && now.Sub(l.lastFlush) >= time.Duration(l.cfg.FlushMs)*time.Millisecond) {
		// The batch is in the log already; a failed fsync is reported but
		// does not undo it. A recovery-point checkpoint that found no file
		// descriptor is not reported: the batch is written and synced,
		// the checkpoint only lags (recovery scans from the older one),
		// and an error would make the producer resend a batch the log
		// holds (resource.go).
		if err := l.flushLocked(now); err != nil && !IsResourceError(err) {
			return AppendResult{}, err
		}
	}
	return AppendResult{BaseOffset: h.BaseOffset, LastOffset: h.LastOffset(), MaxTimestamp: h.MaxTimestamp}, nil
}

// rollLocked syncs the active segment and starts a new one at the log end
// offset. A file error takes the log offline (the error returned is
// offlineErr). The caller holds appendMu.
func (l *Log) rollLocked(now time.Time) (*segment, error) {
	old := l.active()
	if err := old.sealTimeIndex(&l.mu); err != nil {
		return nil, l.fail(OpWrite, segmentName(l.dir, old.base, ".timeindex"), err)
	}
	path := segmentName(l.dir, old.next, ".log")
	err := l.inject(OpRoll, path)
	var s *segment
	if err == nil {
		s, err = openSegment(l.files(), l.dir, old.next, now)
	}
	if err != nil {
		if IsResourceError(err) {
			// Out of file descriptors: the active segment stays active and
			// the next append tries again; files the open created go, so
			// that none is left inside the active segment's range if
			// appends continue there (resource.go).
			_ = removeSegmentFiles(l.dir, old.next)
		}
		return nil, l.fail(OpRoll, path, err)
	}
	if s.size != 0 {
		// A stale file at this base (should not exist): start it afresh.
		if err := s.log.Truncate(0); err != nil {
			s.close()
			return nil, l.fail(OpRoll, path, err)
		}
		s.size = 0
	}
	if err := s.truncateIndexFiles(); err != nil { // drop any stale entries
		s.close()
		if IsResourceError(err) {
			// An index file evicted since openSegment could not be
			// reopened (filecache.go): as above, no file of the new
			// segment stays.
			_ = removeSegmentFiles(l.dir, old.next)
		}
		return nil, l.fail(OpRoll, path, err)
	}
	s.created = now
	l.mu.Lock()
	l.segments = append(l.segments, s)
	old.dropTail() // reads of a sealed segment are rare; its copy goes
	l.mu.Unlock()
	l.syncSealed(old)
	// The producer state as of the roll bounds recovery's replay. A failed
	// snapshot only makes the next recovery scan further back.
	_ = l.writeProducerSnapshot()
	return s, nil
}

// syncSealed fsyncs a segment just sealed by a roll in the background, as
// Kafka flushes a rolled segment on its scheduler: appends go on in the
// new segment meanwhile. (Done in the roll, the fsync of a 1 GiB segment
// held a partition's appends — and so its followers and acks=all
// producers — for about half a second.) With it go the earlier segments
// not yet synced (after a recovery, those it scanned), and once all are
// on disk the recovery point advances to the sealed segment's end
// (recoverypoint.go): a crash then rescans no more than the segments
// after it. Each such goroutine waits for the previous one, so the
// recovery point advances in order and no two sync the same segment. A
// failure takes the log offline as a foreground one does; a segment
// closed meanwhile (retention, a cleaner swap, a truncation) has nothing
// left to sync. flushLocked, Close, Delete and the truncations wait for
// these first. The caller holds appendMu.
func (l *Log) syncSealed(old *segment) {
	segs := l.segmentsFromLocked(l.syncsTo, old)
	end := old.next
	l.syncsTo = max(l.syncsTo, end)
	prev, done := l.lastSync, make(chan struct{})
	l.lastSync = done
	l.sealedSyncs.Go(func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		if l.syncSegments(segs, true) != nil || l.offlineErr() != nil {
			return // offline: this or an earlier sync failed
		}
		l.advanceRecoveryPoint(end)
	})
}

// Read returns whole batches holding offsets >= offset whose base offset
// is below maxOffset (the high watermark, exclusive), with at most
// maxBytes of frames in total, except that the first batch is always
// returned whole. A read returns batches from one segment; NextOffset says
// where to continue. Reading at the log end offset, or at/after maxOffset,
// returns no batches and no error. An offset outside [StartOffset,
// EndOffset] is OFFSET_OUT_OF_RANGE. Read does its file IO without any
// lock, concurrently with appends; a read that raced with a truncation is
// retried on the truncated log.
func (l *Log) Read(offset int64, maxBytes int, maxOffset int64) (ReadResult, error) {
	return l.ReadInto(offset, maxBytes, maxOffset, nil)
}

// ReadInto is Read with the buffers file data is read into coming from
// alloc (nil: freshly allocated ones). alloc(n) returns a slice of length
// n whose contents do not matter: the read overwrites what it uses. The
// batches returned are slices of what alloc handed out (or of memory the
// log keeps, which needs no buffer); the caller owns every buffer alloc
// handed out, used or not, and may reuse one once the batches read into
// it are no longer used. The replica fetch path takes them from a pool
// and gives them back once gRPC has written them, sparing the leader the
// zeroing of a fresh buffer per follower fetch.
func (l *Log) ReadInto(offset int64, maxBytes int, maxOffset int64, alloc func(n int) []byte) (ReadResult, error) {
	for attempt := 0; ; attempt++ {
		res, gen, err := l.readOnce(offset, maxBytes, maxOffset, alloc)
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

// maxReadAttempts bounds Read's retries after racing with truncations
// (each retry needs a new truncation, which are rare).
const maxReadAttempts = 8

// readOnce is one attempt of Read; gen is the truncation count its
// snapshot was taken at.
func (l *Log) readOnce(offset int64, maxBytes int, maxOffset int64, alloc func(int) []byte) (_ ReadResult, gen uint64, _ error) {
	l.mu.RLock()
	gen = l.truncations
	if l.closed {
		l.mu.RUnlock()
		return ReadResult{}, gen, ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		l.mu.RUnlock()
		return ReadResult{}, gen, err
	}
	start, end := l.startOffset, l.active().next
	if offset < start || offset > end {
		l.mu.RUnlock()
		return ReadResult{}, gen, errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, "offset %d is outside the log [%d, %d]", offset, start, end)
	}
	if offset == end || offset >= maxOffset {
		l.mu.RUnlock()
		return ReadResult{NextOffset: offset}, gen, nil
	}
	// The last segment with base <= offset, then skip empty segments.
	i := sort.Search(len(l.segments), func(i int) bool { return l.segments[i].base > offset }) - 1
	if i < 0 {
		i = 0
	}
	for l.segments[i].next <= offset && i+1 < len(l.segments) {
		i++
	}
	s := l.segments[i]
	pos := int64(0)
	if offset > s.base {
		pos = s.readStart(offset, lookupIndex(s.index, uint32(offset-s.base)))
	}
	size := s.size
	tail := s.tailView(pos, size)
	l.mu.RUnlock()

	for {
		var batches [][]byte
		var next int64
		err := l.inject(OpRead, s.path)
		if err == nil {
			batches, next, err = s.readFrames(pos, size, offset, maxBytes, maxOffset, tail, alloc)
		}
		if err != nil {
			if l.StartOffset() > offset {
				// Retention removed the segment while we read it.
				return ReadResult{}, gen, errs.New(sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE, "offset %d was deleted by retention", offset)
			}
			if isFileError(err) {
				return ReadResult{}, gen, l.fail(OpRead, s.path, err)
			}
			return ReadResult{}, gen, storageErr("read offset %d: %v", offset, err)
		}
		if len(batches) > 0 {
			return ReadResult{Batches: batches, NextOffset: next}, gen, nil
		}
		// Nothing at or after offset in s: the log end, or a segment
		// with no batch there (empty): the next batch is in a later
		// segment. A swap by the cleaner counts as a truncation: a read
		// racing with it stops here and Read retries it.
		l.mu.RLock()
		j := sort.Search(len(l.segments), func(j int) bool { return l.segments[j].base > s.base })
		if l.truncations != gen || j == len(l.segments) || l.segments[j].base >= maxOffset {
			l.mu.RUnlock()
			return ReadResult{NextOffset: offset}, gen, nil
		}
		s, pos, size = l.segments[j], 0, l.segments[j].size
		tail = s.tailView(pos, size)
		l.mu.RUnlock()
	}
}

// OffsetForTimestamp returns the first offset whose record timestamp is
// >= ts, with that record's timestamp; found is false when no stored
// record is that recent. It finds the batch with the time index and then
// scans that batch's records.
func (l *Log) OffsetForTimestamp(ts int64) (offset, timestamp int64, found bool, err error) {
	l.mu.RLock()
	var seg *segment
	var rel uint32
	for _, s := range l.segments {
		// Time index entries track the running maximum, so the first
		// segment (and the first entry) to reach ts holds the first
		// batch with a record >= ts.
		if s.maxTS >= ts && s.next > l.startOffset {
			seg = s
			rel = lookupTime(s.times, ts)
			break
		}
	}
	if seg == nil {
		l.mu.RUnlock()
		return -1, -1, false, nil
	}
	from := max(seg.base+int64(rel), l.startOffset)
	l.mu.RUnlock()
	for {
		res, err := l.Read(from, 1, 1<<62)
		if err != nil {
			return -1, -1, false, err
		}
		if len(res.Batches) == 0 {
			return -1, -1, false, nil
		}
		b := res.Batches[0]
		if h, _ := batch.ParseHeader(b); h.MaxTimestamp >= ts {
			errFound := errors.New("found")
			err := batch.ForEachRecord(b, func(r batch.Record) error {
				if r.Offset >= from && r.Timestamp >= ts {
					offset, timestamp, found = r.Offset, r.Timestamp, true
					return errFound
				}
				return nil
			})
			if found {
				return offset, timestamp, true, nil
			}
			if err != nil {
				return -1, -1, false, storageErr("decode records at %d: %v", from, err)
			}
		}
		// The time index is sparse: the scan starts at or before the
		// first batch reaching ts.
		from = res.NextOffset
	}
}

// MaxTimestampOffset returns the offset and timestamp of the (first)
// record with the largest timestamp, or (-1, -1) when the log is empty.
func (l *Log) MaxTimestampOffset() (offset, timestamp int64) {
	l.mu.RLock()
	var best *segment
	for _, s := range l.segments {
		if s.maxTS >= 0 && s.next > l.startOffset && (best == nil || s.maxTS > best.maxTS) {
			best = s
		}
	}
	if best == nil {
		l.mu.RUnlock()
		return -1, -1
	}
	base, maxTS := best.maxTSBase, best.maxTS
	l.mu.RUnlock()
	res, err := l.Read(base, 1, 1<<62)
	if err != nil || len(res.Batches) == 0 {
		return -1, -1
	}
	offset = -1
	_ = batch.ForEachRecord(res.Batches[0], func(r batch.Record) error {
		if r.Timestamp == maxTS && offset < 0 {
			offset = r.Offset
		}
		return nil
	})
	if offset < 0 {
		h, _ := batch.ParseHeader(res.Batches[0])
		offset = h.LastOffset() // LogAppendTime batch: records carry no such timestamp
	}
	return offset, maxTS
}

// SetConfig replaces the configuration; it applies to later appends,
// rolls and retention runs. cfg should pass Validate.
func (l *Log) SetConfig(cfg Config) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.mu.Lock()
	l.cfg = cfg
	l.mu.Unlock()
}

// Config returns the current configuration.
func (l *Log) Config() Config {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.cfg
}

// Flush fsyncs the active segment and its indexes (sealed segments were
// synced when rolled; any not yet synced are now) and advances the
// recovery point to the log end offset: written to the log's own file,
// or recorded in the shared checkpoint (Options.RecoveryPoints), which
// its owner writes.
func (l *Log) Flush() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if err := l.offlineErr(); err != nil {
		return err
	}
	return l.flushLocked(time.Now())
}

// flushLocked is Flush with appendMu held. A file error takes the log
// offline (the error returned is offlineErr).
func (l *Log) flushLocked(now time.Time) error {
	l.sealedSyncs.Wait()
	if err := l.offlineErr(); err != nil {
		return err // a sealed segment's fsync failed
	}
	// The active segment, and any earlier one not yet known to be on
	// disk (after a recovery, those it scanned).
	s := l.active()
	if err := l.syncSegments(l.segmentsFromLocked(l.RecoveryPoint(), s), false); err != nil {
		return err
	}
	l.unflushed, l.lastFlush = 0, now
	l.syncsTo = max(l.syncsTo, s.next)
	l.rpMu.Lock()
	defer l.rpMu.Unlock()
	l.recoveryPoint = max(l.recoveryPoint, s.next)
	if err := l.writeRecoveryPoint(l.recoveryPoint, false); err != nil {
		return l.fail(OpWrite, l.rpPath(), err)
	}
	return nil
}

// Close flushes, checkpoints the log start offset and the high
// watermark, writes the clean-shutdown marker and closes the files. Later
// calls return nil; other methods return ErrClosed. An offline log
// (failure.go) only closes its files, writes nothing and returns its
// offline error: the next Open recovers it as after a crash.
func (l *Log) Close() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	if l.closed {
		return nil
	}
	l.sealedSyncs.Wait()
	err := l.offlineErr()
	if err == nil {
		err = l.flushLocked(time.Now())
	}
	if err == nil {
		err = writeCheckpoint(filepath.Join(l.dir, startOffsetFile), l.startOffset)
	}
	if err == nil {
		l.mu.RLock()
		hw := l.hw
		l.mu.RUnlock()
		if store, name := l.hwStore(); store != nil {
			store.Set(name, hw) // its owner flushes after closing the logs
		} else {
			err = writeCheckpoint(filepath.Join(l.dir, highWatermarkFile), hw)
		}
	}
	if err == nil {
		err = l.writeProducerSnapshot()
	}
	if err == nil {
		// Only a fully flushed log may claim a clean shutdown.
		err = writeCheckpoint(filepath.Join(l.dir, cleanShutdownFile), l.active().next)
	}
	l.mu.Lock()
	l.closed = true
	l.notifyLocked()
	segs := l.segments
	l.mu.Unlock()
	for _, s := range segs {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// Delete closes the log (without a clean-shutdown marker) and removes its
// directory.
func (l *Log) Delete() error {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	l.sealedSyncs.Wait() // a failure found after the delete would take a deleted log offline
	l.ckptMu.Lock()
	defer l.ckptMu.Unlock()
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		l.notifyLocked()
	}
	segs := l.segments
	l.mu.Unlock()
	for _, s := range segs {
		s.close()
	}
	if store, name := l.hwStore(); store != nil {
		store.Remove(name)
	}
	if store, name := l.rpStore(); store != nil {
		store.Remove(name)
	}
	return os.RemoveAll(l.dir)
}

// Dir is the log's directory.
func (l *Log) Dir() string { return l.dir }

// Segments describes the segments in offset order.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, 0, len(l.segments))
	for _, s := range l.segments {
		out = append(out, SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Size: s.size, Path: s.path})
	}
	return out
}

// Size is the total size of the segments' .log files.
func (l *Log) Size() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var n int64
	for _, s := range l.segments {
		n += s.size
	}
	return n
}
