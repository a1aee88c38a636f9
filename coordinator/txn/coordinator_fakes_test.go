package txn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/runtime"
	"github.com/sluice-io/sluice/internal/fakeclock"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeStateLog is __transaction_state in memory, shared by every
// coordinator of a test (it plays the replicated log): one batch per
// offset, a leader epoch per partition, and hooks deciding outcomes.
type fakeStateLog struct {
	mu sync.Mutex // guards the following
	// batches per partition; committed[p] is the high watermark.
	batches   map[int32][][]byte
	committed map[int32]int64
	epochs    map[int32]int32
	// appendHook, if set, decides an append's outcome before it is
	// made: nil appends and commits; an error wrapping
	// cluster.ErrCommitUnknown appends without committing; any other
	// error appends nothing.
	appendHook func(tp cluster.TopicPartition) error
	// maxRecords, if > 0, refuses a batch of more records
	// (MESSAGE_TOO_LARGE), appending nothing.
	maxRecords int
	// loadGate, if set, blocks ReadForLoad until it is closed.
	loadGate chan struct{}
	// readHook, if set, may fail a ReadForLoad (numbered from 1).
	readHook func(read int) error
	reads    int // ReadForLoad calls
}

func newFakeStateLog() *fakeStateLog {
	return &fakeStateLog{
		batches:   make(map[int32][][]byte),
		committed: make(map[int32]int64),
		epochs:    make(map[int32]int32),
	}
}

var errUnknown = errs.New(sluicev1.ErrorCode_REQUEST_TIMED_OUT, "not replicated in time; %w", cluster.ErrCommitUnknown)

func (l *fakeStateLog) setLeaderEpoch(p, epoch int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs[p] = epoch
}

func (l *fakeStateLog) setAppendHook(h func(tp cluster.TopicPartition) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.appendHook = h
}

func (l *fakeStateLog) setMaxRecords(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxRecords = n
}

func (l *fakeStateLog) setLoadGate(ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loadGate = ch
}

// commitAll moves every partition's high watermark to its log end.
func (l *fakeStateLog) commitAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, bs := range l.batches {
		l.committed[p] = int64(len(bs))
	}
}

func (l *fakeStateLog) checkEpoch(tp cluster.TopicPartition, epoch int32) error {
	if cur, ok := l.epochs[tp.Partition]; !ok || cur != epoch {
		return errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "%v is led at epoch %d, not %d", tp, cur, epoch)
	}
	return nil
}

func (l *fakeStateLog) AppendCommitted(ctx context.Context, tp cluster.TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (cluster.AppendResult, error) {
	l.mu.Lock()
	hook := l.appendHook
	l.mu.Unlock()
	var outcome error
	if hook != nil {
		outcome = hook(tp) // outside the lock: a hook may block
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkEpoch(tp, leaderEpoch); err != nil {
		return cluster.AppendResult{}, err
	}
	if outcome != nil && !errors.Is(outcome, cluster.ErrCommitUnknown) {
		return cluster.AppendResult{}, outcome
	}
	h, err := batch.ParseHeader(raw)
	if err != nil {
		return cluster.AppendResult{}, err
	}
	if l.maxRecords > 0 && int(h.RecordCount) > l.maxRecords {
		return cluster.AppendResult{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "%d records, at most %d", h.RecordCount, l.maxRecords)
	}
	off := int64(len(l.batches[tp.Partition]))
	l.batches[tp.Partition] = append(l.batches[tp.Partition], raw)
	res := cluster.AppendResult{BaseOffset: off, LastOffset: off}
	if outcome != nil {
		return res, outcome
	}
	l.committed[tp.Partition] = off + 1
	return res, nil
}

func (l *fakeStateLog) WaitCommitted(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, lastOffset int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkEpoch(tp, leaderEpoch); err != nil {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%v; %w", err, cluster.ErrCommitUnknown)
	}
	if l.committed[tp.Partition] > lastOffset {
		return nil
	}
	return errUnknown
}

func (l *fakeStateLog) ReadForLoad(ctx context.Context, tp cluster.TopicPartition, leaderEpoch int32, offset int64, maxBytes int) (runtime.LogRead, error) {
	l.mu.Lock()
	l.reads++
	gate, hook, n := l.loadGate, l.readHook, l.reads
	l.mu.Unlock()
	if hook != nil {
		if err := hook(n); err != nil {
			return runtime.LogRead{}, err
		}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return runtime.LogRead{}, ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.checkEpoch(tp, leaderEpoch); err != nil {
		return runtime.LogRead{}, err
	}
	// A new leader loads its whole log (the real adapter waits for it to
	// commit): everything appended counts.
	bs := l.batches[tp.Partition]
	end := int64(len(bs))
	if offset >= end {
		return runtime.LogRead{NextOffset: offset, EndOffset: end}, nil
	}
	// Two batches per read, so loads take several reads.
	stop := min(offset+2, end)
	return runtime.LogRead{Batches: bs[offset:stop], NextOffset: stop, EndOffset: end}, nil
}

// records decodes partition p's records in log order.
// batchCount returns the number of batches in partition p.
func (l *fakeStateLog) batchCount(p int32) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.batches[p])
}

func (l *fakeStateLog) records(t *testing.T, p int32) []Metadata {
	t.Helper()
	l.mu.Lock()
	bs := append([][]byte(nil), l.batches[p]...)
	l.mu.Unlock()
	var out []Metadata
	for _, b := range bs {
		err := batch.ForEachRecord(b, func(r batch.Record) error {
			m, err := DecodeRecord(r.Key, r.Value)
			out = append(out, m)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// fakeMarkers records marker rounds; fail, if set, decides each
// partition's outcome (nil: written).
type fakeMarkers struct {
	mu     sync.Mutex // guards the following
	rounds []Markers
	fail   func(m Markers, tp TopicPartition, round int) error
}

func (f *fakeMarkers) WriteMarkers(ctx context.Context, m Markers) map[TopicPartition]error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds = append(f.rounds, m)
	out := make(map[TopicPartition]error)
	for _, tp := range m.Partitions {
		var err error
		if f.fail != nil {
			err = f.fail(m, tp, len(f.rounds))
		}
		out[tp] = err
	}
	return out
}

func (f *fakeMarkers) setFail(fail func(m Markers, tp TopicPartition, round int) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

func (f *fakeMarkers) calls() []Markers {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Markers(nil), f.rounds...)
}

// fakeProducerIDs hands out 1000, 1001, ... (decision 4).
type fakeProducerIDs struct{ next atomic.Int64 }

func (f *fakeProducerIDs) Next(ctx context.Context) (int64, error) {
	return 1000 + f.next.Add(1) - 1, nil
}

// txnEnv is one test's fakes and the coordinators built on them.
type txnEnv struct {
	t       *testing.T
	log     *fakeStateLog
	pids    *fakeProducerIDs
	clock   *fakeclock.Clock
	markers *fakeMarkers
	cfg     CoordinatorConfig
}

func newTxnEnv(t *testing.T) *txnEnv {
	return &txnEnv{
		t:       t,
		log:     newFakeStateLog(),
		pids:    &fakeProducerIDs{},
		clock:   fakeclock.New(time.UnixMilli(1_794_026_921_000)),
		markers: &fakeMarkers{},
		cfg: CoordinatorConfig{
			StatePartitions:       1,
			AbortTimedOutInterval: time.Hour, // tests scan by hand unless they set it
			MarkerRetryBackoff:    time.Millisecond,
			MarkerRetryBackoffMax: 5 * time.Millisecond,
			AppendTimeout:         5 * time.Second,
			CloseWait:             5 * time.Second,
		},
	}
}

// coordinator starts a coordinator on the env's fakes (markers: the
// env's unless given), closed at the end of the test.
func (e *txnEnv) coordinator(markers MarkerWriter) *Coordinator {
	if markers == nil {
		markers = e.markers
	}
	c := NewCoordinator(CoordinatorDeps{
		Log: e.log, ProducerIDs: e.pids, Markers: markers, Now: e.clock.Now,
	}, e.cfg)
	e.t.Cleanup(func() {
		if err := c.Close(); err != nil {
			e.t.Error(err)
		}
	})
	return c
}

// lead makes c the leader of partition p at epoch and waits for its load.
func (e *txnEnv) lead(c *Coordinator, p, epoch int32) {
	e.t.Helper()
	e.log.setLeaderEpoch(p, epoch)
	c.BecameLeader(cluster.TopicPartition{Topic: StateTopic, Partition: p}, epoch)
	waitLoaded(e.t, c, p)
}

func waitLoaded(t *testing.T, c *Coordinator, p int32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("partition %d loaded", p), func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		ps := c.rt.PartitionsLocked()[p]
		if ps == nil || ps.Loading() {
			return errors.New("not loaded")
		}
		return nil
	})
}

// stateLogPairs is the [state, epoch] sequence of records.
func stateLogPairs(ms []Metadata) [][2]any {
	var out [][2]any
	for _, m := range ms {
		out = append(out, [2]any{m.State.String(), float64(m.ProducerEpoch)})
	}
	return out
}

// kafkaStateLogs is the vectors' transaction_state_log of the
// commit_abort_commit and fencing runs.
func kafkaStateLogs(t *testing.T) (commitAbortCommit, fencing [][2]any) {
	t.Helper()
	v := loadKafkaExamples(t)
	return v.CommitAbortCommit.TransactionStateLog, v.Fencing.TransactionStateLog
}

// waitFor is wait.For with the bound these tests use.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	wait.For(t, 10*time.Second, what, cond)
}

// waitState waits until id's applied state on c is want.
func waitState(t *testing.T, c *Coordinator, id string, want State) Metadata {
	t.Helper()
	var m Metadata
	waitFor(t, fmt.Sprintf("%s in %v", id, want), func() error {
		d, err := c.Describe(id)
		if err != nil {
			return err
		}
		if d.State != want {
			return fmt.Errorf("state %v", d.State)
		}
		m = d.Metadata
		return nil
	})
	return m
}

func wantErrCode(t *testing.T, what string, err error, want sluicev1.ErrorCode) {
	t.Helper()
	if got := errs.Code(err); got != want {
		t.Fatalf("%s: %v (%v), want %v", what, got, err, want)
	}
}

// seed appends records to partition p as an earlier leader wrote them.
func (l *fakeStateLog) seed(t *testing.T, p int32, ms ...Metadata) {
	t.Helper()
	for _, m := range ms {
		raw, err := encodeStateBatch(time.UnixMilli(m.UpdateTimeMs), m)
		if err != nil {
			t.Fatal(err)
		}
		l.seedRaw(p, raw)
	}
}

func (l *fakeStateLog) seedRaw(p int32, raw []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches[p] = append(l.batches[p], raw)
	l.committed[p] = int64(len(l.batches[p]))
}

// setReadHook makes ReadForLoad fail while fail returns an error.
func (l *fakeStateLog) setReadHook(fail func(read int) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readHook = fail
}

// markerFunc is a MarkerWriter made of a function.
type markerFunc func(ctx context.Context, m Markers) map[TopicPartition]error

func (f markerFunc) WriteMarkers(ctx context.Context, m Markers) map[TopicPartition]error {
	return f(ctx, m)
}
