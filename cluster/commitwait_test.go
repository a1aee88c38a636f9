package cluster

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// commitRecorder collects AwaitCommit outcomes in the order they arrive.
// Its done callbacks keep AwaitCommit's contract: a leaf lock, no block.
type commitRecorder struct {
	mu   sync.Mutex
	got  []string
	errs map[string]error
}

func newCommitRecorder() *commitRecorder { return &commitRecorder{errs: map[string]error{}} }

// waiterFunc is a func as a CommitWaiter.
type waiterFunc func(error)

func (f waiterFunc) Committed(err error) { f(err) }

// in is the deadline d from now.
func in(d time.Duration) time.Time { return time.Now().Add(d) }

func (r *commitRecorder) done(name string) CommitWaiter {
	return waiterFunc(func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, dup := r.errs[name]; dup {
			panic("AwaitCommit called done twice for " + name)
		}
		r.got = append(r.got, name)
		r.errs[name] = err
	})
}

func (r *commitRecorder) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func (r *commitRecorder) err(name string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.errs[name]
	return err, ok
}

// waitFor waits (bounded) until every name has an outcome.
func (r *commitRecorder) waitFor(t *testing.T, names ...string) {
	t.Helper()
	wait.For(t, 10*time.Second, fmt.Sprintf("outcomes of %v", names), func() error {
		for _, n := range names {
			if _, ok := r.err(n); !ok {
				return fmt.Errorf("%s still waits (done so far: %v)", n, r.order())
			}
		}
		return nil
	})
}

// acksAllPartition is node 2 leading w-0 with follower 3 in its ISR (so
// nothing commits until 3 fetches), and the image that says so.
func acksAllPartition(t *testing.T, configs ...controller.ConfigChange) (*ReplicaManager, *Replica, *controller.Image) {
	t.Helper()
	m := newManager(t, t.TempDir(), 2)
	b := newImage(t, "c1").apply(createTopic("w", "id-w", []int32{2, 3}))
	for _, c := range configs {
		b.apply(c)
	}
	im := b.snapshot()
	applyImage(t, m, im, time.Unix(5000, 0))
	p, err := m.Replica("w", 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, p, im
}

// appendAcksAll appends a batch of n records with acks=all.
func appendAcksAll(t *testing.T, m *ReplicaManager, n int) AppendResult {
	t.Helper()
	res, err := m.AppendWithAcks("w", 0, plainBatch(n), time.Unix(5000, 0), true)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A high watermark that passes several waits ends them all, in offset
// order whatever order they were registered in; a wait above the HW
// stays until the HW passes it too.
func TestAwaitCommitEndsWaitsTheHighWatermarkPassesInOffsetOrder(t *testing.T) {
	m, p, _ := acksAllPartition(t)
	var batches []AppendResult
	for range 4 {
		batches = append(batches, appendAcksAll(t, m, 2)) // offsets 0-1, 2-3, 4-5, 6-7
	}
	r := newCommitRecorder()
	for _, i := range []int{2, 0, 3, 1} { // registered out of order
		b := batches[i]
		p.AwaitCommit(context.Background(), b.LastOffset, b.LeaderEpoch, in(time.Minute), r.done(fmt.Sprint("b", i)))
	}
	epoch := p.LeaderEpoch()
	for _, step := range []struct {
		fetched   int64 // follower 3's log end: the new HW
		wantDone  []string
		wantWaits int
	}{
		{fetched: 1, wantDone: nil, wantWaits: 4},                        // HW 1: inside b0
		{fetched: 6, wantDone: []string{"b0", "b1", "b2"}, wantWaits: 1}, // passes three at once
		{fetched: 7, wantDone: []string{"b0", "b1", "b2"}, wantWaits: 1}, // b3 ends at 7: not yet
		{fetched: 8, wantDone: []string{"b0", "b1", "b2", "b3"}, wantWaits: 0},
	} {
		if _, err := p.recordFollowerFetch(3, epoch, step.fetched, time.Unix(5000, 0)); err != nil {
			t.Fatal(err)
		}
		if got := r.order(); fmt.Sprint(got) != fmt.Sprint(step.wantDone) {
			t.Fatalf("after a fetch at %d: ended %v, want %v", step.fetched, got, step.wantDone)
		}
		if n := p.CommitWaits(); n != step.wantWaits {
			t.Fatalf("after a fetch at %d: %d waits left, want %d", step.fetched, n, step.wantWaits)
		}
	}
	for _, name := range r.order() {
		if err, _ := r.err(name); err != nil {
			t.Errorf("%s: %v, want committed", name, err)
		}
	}
	// Already committed when registered: ends at once.
	p.AwaitCommit(context.Background(), batches[0].LastOffset, batches[0].LeaderEpoch, in(time.Minute), r.done("late"))
	if err, ok := r.err("late"); !ok || err != nil {
		t.Errorf("wait for a committed batch: ended %v, %v; want at once, committed", ok, err)
	}
}

// Every wait fails with NOT_LEADER_OR_FOLLOWER, outcome unknown, when
// this broker stops leading or leads at a new epoch (the batch's offsets
// may be truncated and reused); so does a wait registered for an epoch
// that is no longer the leader's.
func TestAwaitCommitFailsEveryWaitWhenLeadershipChanges(t *testing.T) {
	for _, tc := range []struct {
		name  string
		image func(im *controller.Image) *controller.Image
	}{
		{"resigned", func(im *controller.Image) *controller.Image {
			im = im.Clone()
			ps := im.Topics["w"].Partitions[0]
			ps.Leader, ps.LeaderEpoch, ps.ISR = 3, ps.LeaderEpoch+1, []int32{3}
			return im
		}},
		{"new leader epoch", func(im *controller.Image) *controller.Image {
			return withLeaderEpoch(im, "w", 0, im.Topics["w"].Partitions[0].LeaderEpoch+1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, p, im := acksAllPartition(t)
			r := newCommitRecorder()
			var names []string
			var last AppendResult
			for i := range 3 {
				last = appendAcksAll(t, m, 1)
				names = append(names, fmt.Sprint("b", i))
				p.AwaitCommit(context.Background(), last.LastOffset, last.LeaderEpoch, in(time.Minute), r.done(names[i]))
			}
			applyImage(t, m, tc.image(im), time.Unix(5000, 0))
			if got := r.order(); len(got) != len(names) {
				t.Fatalf("ended %v, want all of %v", got, names)
			}
			for _, name := range names {
				err, _ := r.err(name)
				wantCode(t, name, err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
				if !errors.Is(err, ErrCommitUnknown) {
					t.Errorf("%s: %v does not say the outcome is unknown", name, err)
				}
			}
			if n := p.CommitWaits(); n != 0 {
				t.Errorf("%d waits left", n)
			}
			// Registered after the change, for the old epoch.
			p.AwaitCommit(context.Background(), last.LastOffset, last.LeaderEpoch, in(time.Minute), r.done("stale"))
			err, ok := r.err("stale")
			if !ok {
				t.Fatal("a wait for an old epoch did not end at once")
			}
			wantCode(t, "stale epoch", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
		})
	}
}

// WaitCommitted (the coordinators' wait: offsets of TxnOffsetCommit,
// transaction and group records) ends when this same node starts a new
// leader epoch, as AwaitCommit does: the batch may have been truncated and
// its offsets reused, so a high watermark passing them later says nothing
// about it. Found in review: the wait took no epoch, and a re-election of
// the same node between the append and the commit would have answered a
// truncated TxnOffsetCommit as committed.
func TestWaitCommittedEndsAtANewEpochOfThisNode(t *testing.T) {
	m, p, im := acksAllPartition(t)
	b := appendAcksAll(t, m, 1)
	done := make(chan error, 1)
	go func() { done <- p.WaitCommitted(context.Background(), b.LastOffset, b.LeaderEpoch) }()
	// The wait is under way (nothing can end it yet), then the epoch moves.
	select {
	case err := <-done:
		t.Fatalf("the wait ended before anything happened: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	applyImage(t, m, withLeaderEpoch(im, "w", 0, im.Topics["w"].Partitions[0].LeaderEpoch+1), time.Unix(5000, 0))
	// The follower catches up in the new epoch: the HW passes the offsets.
	if _, err := p.recordFollowerFetch(3, p.LeaderEpoch(), b.LastOffset+1, time.Unix(5001, 0)); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
	}
	wantCode(t, "WaitCommitted across a new epoch", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
	if !errors.Is(err, ErrCommitUnknown) {
		t.Errorf("%v does not say the outcome is unknown", err)
	}
	// A wait that names no epoch follows the new one.
	if err := p.WaitCommitted(context.Background(), b.LastOffset, NoLeaderEpoch); err != nil {
		t.Errorf("WaitCommitted with no epoch after the HW passed: %v", err)
	}
}

// A wait whose deadline passes, or whose context ends, answers
// REQUEST_TIMED_OUT (outcome unknown) and leaves the list, from wherever
// it is in it; the others go on and commit. The partition's one timer
// follows the earliest deadline: moved earlier by a new wait, rearmed for
// the next one when it fires.
func TestAwaitCommitTimesOut(t *testing.T) {
	m, p, _ := acksAllPartition(t)
	r := newCommitRecorder()
	var b [4]AppendResult
	for i := range b {
		b[i] = appendAcksAll(t, m, 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.AwaitCommit(context.Background(), b[1].LastOffset, b[1].LeaderEpoch, in(time.Minute), r.done("kept"))
	p.AwaitCommit(context.Background(), b[0].LastOffset, b[0].LeaderEpoch, in(time.Millisecond), r.done("timeout"))
	p.AwaitCommit(context.Background(), b[3].LastOffset, b[3].LeaderEpoch, in(30*time.Millisecond), r.done("later"))
	p.AwaitCommit(ctx, b[2].LastOffset, b[2].LeaderEpoch, in(time.Minute), r.done("cancelled"))
	cancel()
	r.waitFor(t, "timeout", "cancelled", "later")
	for _, name := range []string{"timeout", "cancelled", "later"} {
		err, _ := r.err(name)
		wantCode(t, name, err, sluicev1.ErrorCode_REQUEST_TIMED_OUT)
		if !errors.Is(err, ErrCommitUnknown) {
			t.Errorf("%s: %v does not say the outcome is unknown", name, err)
		}
	}
	if _, ended := r.err("kept"); ended || p.CommitWaits() != 1 {
		t.Fatalf("kept ended %v, %d waits left; want it alone, waiting", ended, p.CommitWaits())
	}
	if _, err := p.recordFollowerFetch(3, p.LeaderEpoch(), b[1].LastOffset+1, time.Unix(5000, 0)); err != nil {
		t.Fatal(err)
	}
	if err, ok := r.err("kept"); !ok || err != nil {
		t.Errorf("the wait left: ended %v, %v; want committed", ok, err)
	}
	if got := r.order(); len(got) != 4 {
		t.Errorf("outcomes %v: each wait ends exactly once", got)
	}
}

// acks=all's answers around an ISR shrink below min.insync.replicas, as
// WaitCommitted's: a batch committed before the shrink but answered after
// it is NOT_ENOUGH_REPLICAS_AFTER_APPEND; one not committed yet stays
// waiting, since the HW does not move while the ISR is below
// min.insync.replicas, and ends REQUEST_TIMED_OUT. (A wait registered
// before the HW passes its batch is answered at that move, when the ISR
// was still large enough: the after-append answer needs the shrink to come
// between the commit and the registration.)
func TestAwaitCommitAfterISRShrinkBelowMinInsync(t *testing.T) {
	m, p, im := acksAllPartition(t, controller.ConfigChange{Topic: "w", Key: "min.insync.replicas", Value: "2"})
	committed := appendAcksAll(t, m, 3)
	if _, err := p.recordFollowerFetch(3, p.LeaderEpoch(), committed.LastOffset+1, time.Unix(5000, 0)); err != nil {
		t.Fatal(err)
	}
	pending := appendAcksAll(t, m, 3)
	r := newCommitRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.AwaitCommit(ctx, pending.LastOffset, pending.LeaderEpoch, in(time.Minute), r.done("pending"))

	im = im.Clone()
	ps := im.Topics["w"].Partitions[0]
	ps.ISR, ps.PartitionEpoch = []int32{2}, ps.PartitionEpoch+1
	applyImage(t, m, im, time.Unix(5000, 0))

	p.AwaitCommit(ctx, committed.LastOffset, committed.LeaderEpoch, in(time.Minute), r.done("committed"))
	err, ok := r.err("committed")
	if !ok {
		t.Fatal("the wait for a committed batch did not end at once")
	}
	wantCode(t, "AwaitCommit", err, sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND)
	wantCode(t, "WaitCommitted, for comparison", p.WaitCommitted(ctx, committed.LastOffset, committed.LeaderEpoch), sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND)

	if _, ended := r.err("pending"); ended || p.CommitWaits() != 1 || p.HighWatermark() != committed.LastOffset+1 {
		t.Fatalf("under min.insync.replicas: pending ended %v, %d waits, HW %d; want it waiting, HW %d",
			ended, p.CommitWaits(), p.HighWatermark(), committed.LastOffset+1)
	}
	cancel()
	r.waitFor(t, "pending")
	err, _ = r.err("pending")
	wantCode(t, "pending", err, sluicev1.ErrorCode_REQUEST_TIMED_OUT)
}

// Waiting costs no goroutine: a thousand waits registered, none ended.
func TestAwaitCommitStartsNoGoroutinePerWait(t *testing.T) {
	m, p, _ := acksAllPartition(t)
	b := appendAcksAll(t, m, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := runtime.NumGoroutine()
	var mu sync.Mutex
	ended := 0
	const n = 1000
	for range n {
		p.AwaitCommit(ctx, b.LastOffset, b.LeaderEpoch, in(time.Minute), waiterFunc(func(error) {
			mu.Lock()
			ended++
			mu.Unlock()
		}))
	}
	// Other goroutines of the manager come and go; a goroutine per wait
	// would add a thousand.
	if after := runtime.NumGoroutine(); after > before+20 {
		t.Fatalf("%d goroutines with %d waits, %d before", after, n, before)
	}
	if _, err := p.recordFollowerFetch(3, p.LeaderEpoch(), 1, time.Unix(5000, 0)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := ended
	mu.Unlock()
	if left := p.CommitWaits(); got != n || left != 0 {
		t.Fatalf("%d of %d waits ended by the commit, %d left", got, n, left)
	}
}
