package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// --- fakes and helpers ---

// allocFunc adapts a function to ProducerIDBlockAllocator.
type allocFunc func(ctx context.Context) (int64, int64, error)

func (f allocFunc) AllocateProducerIDBlock(ctx context.Context) (int64, int64, error) { return f(ctx) }

// fakeController hands out ascending blocks from a mutex-guarded next start,
// as the controller FSM does (first block at 1000).
type fakeController struct {
	size int64

	mu    sync.Mutex // guards the following
	next  int64
	calls int
}

func newFakeController(size int64) *fakeController { return &fakeController{size: size, next: 1000} }

func (c *fakeController) AllocateProducerIDBlock(ctx context.Context) (int64, int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	start := c.next
	c.next += c.size
	return start, start + c.size, nil
}

func (c *fakeController) Calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// step is one scripted allocation result.
type step struct {
	start, end int64
	err        error
}

// script returns its steps in order, then blocks until ctx is done, so no
// block beyond the script is ever handed out.
type script struct {
	mu    sync.Mutex // guards the following
	steps []step
	calls int
}

func (s *script) AllocateProducerIDBlock(ctx context.Context) (int64, int64, error) {
	s.mu.Lock()
	i := s.calls
	s.calls++
	s.mu.Unlock()
	if i >= len(s.steps) {
		<-ctx.Done()
		return 0, 0, ctx.Err()
	}
	st := s.steps[i]
	return st.start, st.end, st.err
}

func (s *script) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// logRecorder is a slog.Handler that keeps "LEVEL message attrs" lines.
type logRecorder struct {
	mu    sync.Mutex // guards lines
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}

// count returns how many lines were logged at level and contain substr.
func (r *logRecorder) count(level slog.Level, substr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if strings.HasPrefix(l, level.String()+" ") && strings.Contains(l, substr) {
			n++
		}
	}
	return n
}

// fastRetry retries failed allocations within milliseconds.
func fastRetry() ProducerIDManagerConfig {
	return ProducerIDManagerConfig{RetryBackoff: time.Millisecond, RetryBackoffMax: 4 * time.Millisecond}
}

// newManager starts a manager that is closed when the test ends; a nil
// Logger discards.
func newManager(t testing.TB, alloc ProducerIDBlockAllocator, cfg ProducerIDManagerConfig) *ProducerIDManager {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := NewProducerIDManager(alloc, cfg)
	t.Cleanup(m.Close)
	return m
}

// take calls Next n times with ctx and fails the test on any error.
func take(t testing.TB, m *ProducerIDManager, ctx context.Context, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for i := range n {
		id, err := m.Next(ctx)
		if err != nil {
			t.Fatalf("Next #%d: %v", i, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitCtx bounds a wait that must succeed.
func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// canceledCtx makes Next fail at once unless an id is already at hand.
func canceledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// rangeIDs returns start..end-1.
func rangeIDs(start, end int64) []int64 {
	var ids []int64
	for id := start; id < end; id++ {
		ids = append(ids, id)
	}
	return ids
}

// checkUnique fails if any id appears twice.
func checkUnique(t *testing.T, ids []int64) {
	t.Helper()
	seen := make(map[int64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %d handed out twice", id)
		}
		seen[id] = true
	}
}

// --- the pure block state ---

// Rule: a block that is empty, reversed, at or below 0, or overlapping or
// preceding a block already received is refused; a good block is kept.
func TestProducerIDBlocksOfferRules(t *testing.T) {
	tests := []struct {
		name       string
		before     [][2]int64 // blocks accepted first
		start, end int64
		wantErr    string // "" means accepted
	}{
		{"first block", nil, 1000, 2000, ""},
		{"contiguous", [][2]int64{{1000, 2000}}, 2000, 3000, ""},
		{"gap", [][2]int64{{1000, 2000}}, 5000, 6000, ""},
		{"single id", nil, 1, 2, ""},
		{"empty", nil, 1000, 1000, "ends at or before its start"},
		{"reversed", nil, 2000, 1000, "ends at or before its start"},
		{"starts at 0", nil, 0, 1000, "start at 1"},
		{"negative", nil, -1000, -1, "start at 1"},
		{"same block again", [][2]int64{{1000, 2000}}, 1000, 2000, "overlaps or precedes"},
		{"overlaps", [][2]int64{{1000, 2000}}, 1999, 3000, "overlaps or precedes"},
		{"precedes", [][2]int64{{3000, 4000}}, 1000, 2000, "overlaps or precedes"},
		{"third block while two are held", [][2]int64{{1000, 2000}, {2000, 3000}}, 3000, 4000, "two blocks are already held"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b producerIDBlocks
			for _, blk := range tc.before {
				if err := b.offer(blk[0], blk[1]); err != nil {
					t.Fatalf("setup offer %v: %v", blk, err)
				}
			}
			held := b.remaining()
			err := b.offer(tc.start, tc.end)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("offer [%d, %d): %v", tc.start, tc.end, err)
				}
				if got, want := b.remaining(), held+tc.end-tc.start; got != want {
					t.Fatalf("remaining = %d, want %d", got, want)
				}
				return
			}
			if !errors.Is(err, errInvalidBlock) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("offer [%d, %d) = %v, want errInvalidBlock containing %q", tc.start, tc.end, err, tc.wantErr)
			}
			if b.remaining() != held {
				t.Fatalf("rejected block changed remaining from %d to %d", held, b.remaining())
			}
		})
	}
}

// Rule: ids are taken from the current block, then the prefetched one, and a
// block is needed only when nothing is prefetched and the current block is
// down to prefetchAt ids.
func TestProducerIDBlocksTakeAndNeedsBlock(t *testing.T) {
	var b producerIDBlocks
	if !b.needsBlock(0) {
		t.Fatal("empty state does not need a block")
	}
	if _, ok := b.take(); ok {
		t.Fatal("take from empty state succeeded")
	}
	if err := b.offer(10, 13); err != nil {
		t.Fatal(err)
	}
	if b.needsBlock(2) || !b.needsBlock(3) {
		t.Fatal("needsBlock with 3 ids left: want false at 2, true at 3")
	}
	if err := b.offer(20, 22); err != nil {
		t.Fatal(err)
	}
	if b.needsBlock(100) {
		t.Fatal("needsBlock with a prefetched block")
	}
	var got []int64
	for {
		id, ok := b.take()
		if !ok {
			break
		}
		got = append(got, id)
		if id == 12 && b.needsBlock(1) {
			t.Fatal("needsBlock right after promoting a 2-id block with prefetchAt 1")
		}
	}
	if want := []int64{10, 11, 12, 20, 21}; !slices.Equal(got, want) {
		t.Fatalf("taken %v, want %v", got, want)
	}
	if b.remaining() != 0 || !b.needsBlock(0) {
		t.Fatalf("after exhaustion remaining=%d needsBlock(0)=%v", b.remaining(), b.needsBlock(0))
	}
}

// --- the manager ---

// Rule: sequential Next calls return consecutive ids, block after block in
// the order received, with gaps only between blocks.
func TestNextReturnsConsecutiveIDsAcrossBlocks(t *testing.T) {
	small := make([]step, 20)
	for i := range small {
		small[i] = step{start: 1000 + int64(i)*10, end: 1010 + int64(i)*10}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"contiguous 1000-id blocks", []step{{start: 1000, end: 2000}, {start: 2000, end: 3000}, {start: 3000, end: 4000}}},
		{"gaps between blocks", []step{{start: 1000, end: 2000}, {start: 5000, end: 6000}, {start: 10000, end: 10500}}},
		{"blocks smaller than PrefetchAt", small},
		{"single-id blocks", []step{{start: 1, end: 2}, {start: 2, end: 3}, {start: 9, end: 10}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			alloc := &script{steps: tc.steps}
			m := newManager(t, alloc, fastRetry())
			var want []int64
			for _, st := range tc.steps {
				want = append(want, rangeIDs(st.start, st.end)...)
			}
			got := take(t, m, waitCtx(t), len(want))
			if !slices.Equal(got, want) {
				t.Fatalf("ids differ from the blocks in order: got %d ids starting %v, want %d starting %v",
					len(got), got[:min(5, len(got))], len(want), want[:min(5, len(want))])
			}
			if s := m.Stats(); s.BlocksFetched != len(tc.steps) || s.Remaining != 0 || s.LastError != "" {
				t.Fatalf("Stats = %+v, want %d blocks, 0 remaining, no error", s, len(tc.steps))
			}
			// The script has no more blocks: nothing beyond them is handed out.
			if id, err := m.Next(canceledCtx()); err == nil {
				t.Fatalf("Next after the scripted blocks returned %d", id)
			}
		})
	}
}

// Rule (DESIGN: brokers fetch the next block before the current one runs
// out): the second block is requested once PrefetchAt ids are left, not
// before, and while the 1000th id of the first block is still unused.
func TestPrefetchRequestsNextBlockBeforeExhaustion(t *testing.T) {
	ctrl := newFakeController(1000)
	release := make(chan struct{})
	var calls atomic.Int32
	alloc := allocFunc(func(ctx context.Context) (int64, int64, error) {
		if calls.Add(1) == 2 {
			select { // hold the prefetch until the test has looked
			case <-release:
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		return ctrl.AllocateProducerIDBlock(ctx)
	})
	m := newManager(t, alloc, ProducerIDManagerConfig{PrefetchAt: 100})
	ctx := waitCtx(t)

	ids := take(t, m, ctx, 899) // 101 left
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d allocations with 101 ids left, want 1 (prefetch too early)", n)
	}
	ids = append(ids, take(t, m, ctx, 1)...) // 100 left: the prefetch point
	wait.For(t, 5*time.Second, "prefetch of the next block started", func() error {
		if n := calls.Load(); n != 2 {
			return fmt.Errorf("%d allocations after consuming 900 ids, want 2", n)
		}
		return nil
	})
	if s := m.Stats(); s.Remaining != 100 || s.BlocksFetched != 1 {
		t.Fatalf("Stats while the prefetch is in flight = %+v, want 100 remaining of block 1", s)
	}
	// The rest of the first block needs no allocation.
	ids = append(ids, take(t, m, canceledCtx(), 100)...)
	if !slices.Equal(ids, rangeIDs(1000, 2000)) {
		t.Fatalf("first block ids are not 1000..1999")
	}
	close(release)
	if id, err := m.Next(ctx); err != nil || id != 2000 {
		t.Fatalf("first id of the second block = %d, %v; want 2000", id, err)
	}
}

// Rule: with an allocator that answers before the last PrefetchAt ids are
// used up, Next never waits. Next with a canceled context succeeds only if
// an id is already at hand; the consumer pauses at each prefetch point until
// the fast fetch lands, which is what "fast" means here.
func TestNextDoesNotWaitWhenAllocatorIsFast(t *testing.T) {
	ctrl := newFakeController(1000)
	m := newManager(t, ctrl, ProducerIDManagerConfig{PrefetchAt: 100})
	wait.For(t, 5*time.Second, "first block fetched", func() error {
		if s := m.Stats(); s.BlocksFetched != 1 {
			return fmt.Errorf("first block not fetched: %+v", s)
		}
		return nil
	})
	var ids []int64
	for blk := 1; blk <= 5; blk++ {
		ids = append(ids, take(t, m, canceledCtx(), 900)...)
		wait.For(t, 5*time.Second, "next block prefetched", func() error {
			if s := m.Stats(); s.BlocksFetched != blk+1 || s.Remaining != 1100 {
				return fmt.Errorf("after block %d reached its prefetch point: %+v, want %d blocks and 1100 remaining", blk, s, blk+1)
			}
			return nil
		})
		ids = append(ids, take(t, m, canceledCtx(), 100)...)
	}
	if !slices.Equal(ids, rangeIDs(1000, 6000)) {
		t.Fatal("ids are not 1000..5999 in order")
	}
	if n := ctrl.Calls(); n != 6 {
		t.Fatalf("%d allocations for 5 blocks used, want 6 (5 + one prefetched)", n)
	}
}

// Rule: ids from one manager are unique under concurrent Next, each caller
// sees them ascend, and at most one block beyond those used is fetched.
func TestConcurrentNextNoDuplicates(t *testing.T) {
	const goroutines, perG = 8, 5000
	ctrl := newFakeController(1000)
	m := newManager(t, ctrl, ProducerIDManagerConfig{})
	ctx := waitCtx(t)
	results := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range perG {
				id, err := m.Next(ctx)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				results[g] = append(results[g], id)
			}
		})
	}
	wg.Wait()
	var all []int64
	for g, ids := range results {
		if !slices.IsSorted(ids) {
			t.Errorf("goroutine %d saw ids out of order", g)
		}
		all = append(all, ids...)
	}
	checkUnique(t, all)
	slices.Sort(all)
	if !slices.Equal(all, rangeIDs(1000, 1000+goroutines*perG)) {
		t.Fatalf("the %d ids are not exactly 1000..%d", len(all), 1000+goroutines*perG-1)
	}
	if n := ctrl.Calls(); n > goroutines*perG/1000+1 {
		t.Fatalf("%d allocations for %d ids: more than one block fetched ahead", n, goroutines*perG)
	}
}

// Rule: given a correct allocator, no id is handed out by two managers.
func TestManagersSharingControllerNoDuplicates(t *testing.T) {
	const managers, perM = 3, 5000
	ctrl := newFakeController(1000)
	ctx := waitCtx(t)
	results := make([][]int64, managers)
	var wg sync.WaitGroup
	for i := range managers {
		m := newManager(t, ctrl, ProducerIDManagerConfig{})
		wg.Go(func() {
			for range perM {
				id, err := m.Next(ctx)
				if err != nil {
					t.Errorf("manager %d: %v", i, err)
					return
				}
				results[i] = append(results[i], id)
			}
		})
	}
	wg.Wait()
	var all []int64
	for _, ids := range results {
		all = append(all, ids...)
	}
	if len(all) != managers*perM {
		t.Fatalf("%d ids, want %d", len(all), managers*perM)
	}
	checkUnique(t, all)
}

// Rule: failed allocations are retried whatever their code until one
// succeeds; Stats keeps the last error; non-retriable codes log at Warn.
func TestFailedAllocationsAreRetried(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		failures  int
		level     slog.Level
		wantInErr string
	}{
		{"not controller", errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "leader is 2"), 3, slog.LevelInfo, "NOT_CONTROLLER"},
		{"non-retriable code", errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "bad"), 2, slog.LevelWarn, "INVALID_REQUEST"},
		{"plain error", errors.New("connection refused"), 1, slog.LevelWarn, "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			steps := make([]step, 0, tc.failures+1)
			for range tc.failures {
				steps = append(steps, step{err: tc.err})
			}
			steps = append(steps, step{start: 1000, end: 2000})
			alloc := &script{steps: steps}
			rec := &logRecorder{}
			cfg := fastRetry()
			cfg.Logger = slog.New(rec)
			m := newManager(t, alloc, cfg)

			id, err := m.Next(waitCtx(t))
			if err != nil || id != 1000 {
				t.Fatalf("Next = %d, %v; want 1000", id, err)
			}
			if n := alloc.Calls(); n != tc.failures+1 {
				t.Fatalf("%d allocation calls, want %d", n, tc.failures+1)
			}
			s := m.Stats()
			if s.BlocksFetched != 1 || !strings.Contains(s.LastError, tc.wantInErr) {
				t.Fatalf("Stats = %+v, want 1 block and LastError naming %q", s, tc.wantInErr)
			}
			if n := rec.count(tc.level, tc.wantInErr); n != tc.failures {
				t.Fatalf("%d %v log lines naming %q, want %d; log: %q", n, tc.level, tc.wantInErr, tc.failures, rec.lines)
			}
		})
	}
}

// Rule: AllocateTimeout bounds one call; a timed-out call is retried and
// recorded as REQUEST_TIMED_OUT.
func TestAllocateTimeoutIsRetried(t *testing.T) {
	var calls atomic.Int32
	alloc := allocFunc(func(ctx context.Context) (int64, int64, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // a controller that never answers
			return 0, 0, ctx.Err()
		}
		return 1000, 2000, nil
	})
	cfg := fastRetry()
	cfg.AllocateTimeout = 10 * time.Millisecond
	m := newManager(t, alloc, cfg)
	if id, err := m.Next(waitCtx(t)); err != nil || id != 1000 {
		t.Fatalf("Next = %d, %v; want 1000", id, err)
	}
	if s := m.Stats(); !strings.Contains(s.LastError, "REQUEST_TIMED_OUT") {
		t.Fatalf("LastError = %q, want REQUEST_TIMED_OUT", s.LastError)
	}
}

// Rule: with no id at hand, Next waits until ctx is done and then returns
// COORDINATOR_LOAD_IN_PROGRESS, retriable, naming the allocation error.
func TestNextReturnsLoadInProgressWhenCtxEnds(t *testing.T) {
	tests := []struct {
		name      string
		steps     []step // then the allocator blocks
		consume   int    // ids to take first
		wantInMsg string
		notInMsg  string
	}{
		{"allocator blocks", nil, 0, "in progress", "failed"},
		{"allocator failed then blocks", []step{{err: errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "no leader")}}, 0,
			"last block allocation failed: NOT_CONTROLLER: no leader", ""},
		{"failure before the last accepted block is not named", []step{{err: errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "no leader")}, {start: 1000, end: 1001}}, 1,
			"in progress", "NOT_CONTROLLER"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			alloc := &script{steps: tc.steps}
			m := newManager(t, alloc, fastRetry())
			take(t, m, waitCtx(t), tc.consume)
			// Wait until the scripted failures are done and the blocking call is in flight.
			wait.For(t, 5*time.Second, "scripted failures done and the blocking call in flight", func() error {
				if n := alloc.Calls(); n != len(tc.steps)+1 {
					return fmt.Errorf("%d calls", n)
				}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			id, err := m.Next(ctx)
			var e *errs.Error
			if !errors.As(err, &e) || e.Code != sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS {
				t.Fatalf("Next = %d, %v; want *errs.Error COORDINATOR_LOAD_IN_PROGRESS", id, err)
			}
			if !errs.Retriable(errs.Code(err)) || !e.Retriable() {
				t.Fatal("COORDINATOR_LOAD_IN_PROGRESS is not retriable")
			}
			if !strings.Contains(e.Message, tc.wantInMsg) || !strings.Contains(e.Message, "deadline exceeded") {
				t.Fatalf("message %q does not name %q and the deadline", e.Message, tc.wantInMsg)
			}
			if tc.notInMsg != "" && strings.Contains(e.Message, tc.notInMsg) {
				t.Fatalf("message %q names %q", e.Message, tc.notInMsg)
			}
		})
	}
}

// Rule: an invalid block is rejected (logged at Error, retried) and none of
// its ids is handed out; the next good block is used.
func TestInvalidBlockRejected(t *testing.T) {
	tests := []struct {
		name string
		good []step // good blocks, with bad inserted at index badAt
		bad  step
		at   int
	}{
		{"empty", []step{{start: 1000, end: 2000}, {start: 2000, end: 3000}}, step{start: 2000, end: 2000}, 1},
		{"reversed first block", []step{{start: 1000, end: 2000}}, step{start: 3000, end: 1000}, 0},
		{"starts at 0", []step{{start: 1000, end: 2000}}, step{start: 0, end: 1000}, 0},
		{"duplicate", []step{{start: 1000, end: 2000}, {start: 2000, end: 3000}}, step{start: 1000, end: 2000}, 1},
		{"overlaps", []step{{start: 1000, end: 2000}, {start: 2000, end: 3000}}, step{start: 1500, end: 2500}, 1},
		{"precedes", []step{{start: 3000, end: 4000}, {start: 4000, end: 5000}}, step{start: 1000, end: 2000}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			steps := slices.Insert(slices.Clone(tc.good), tc.at, tc.bad)
			alloc := &script{steps: steps}
			rec := &logRecorder{}
			cfg := fastRetry()
			cfg.Logger = slog.New(rec)
			m := newManager(t, alloc, cfg)

			var want []int64
			for _, st := range tc.good {
				want = append(want, rangeIDs(st.start, st.end)...)
			}
			got := take(t, m, waitCtx(t), len(want))
			if !slices.Equal(got, want) {
				t.Fatalf("ids are not exactly the good blocks' ids in order")
			}
			if id, err := m.Next(canceledCtx()); err == nil {
				t.Fatalf("extra id %d handed out", id)
			}
			s := m.Stats()
			if s.BlocksFetched != len(tc.good) || !strings.Contains(s.LastError, "invalid producer id block") {
				t.Fatalf("Stats = %+v, want %d blocks and LastError naming the invalid block", s, len(tc.good))
			}
			if n := rec.count(slog.LevelError, "rejected producer id block"); n != 1 {
				t.Fatalf("%d Error log lines for the rejected block, want 1; log: %q", n, rec.lines)
			}
		})
	}
}

// Rule: Close cancels the allocation in flight, releases waiting Next calls
// with COORDINATOR_NOT_AVAILABLE, stops the fetcher, and may be repeated.
func TestCloseReleasesWaitersAndStopsFetcher(t *testing.T) {
	before := runtime.NumGoroutine()
	entered := make(chan struct{})
	canceled := make(chan struct{})
	alloc := allocFunc(func(ctx context.Context) (int64, int64, error) {
		close(entered)
		<-ctx.Done()
		close(canceled)
		return 0, 0, ctx.Err()
	})
	m := NewProducerIDManager(alloc, ProducerIDManagerConfig{Logger: slog.New(slog.DiscardHandler)})
	<-entered

	const waiters = 4
	results := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := m.Next(context.Background()) // bounded only by Close
			results <- err
		}()
	}

	closed := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for range 3 { // concurrent Close calls all return
			wg.Go(m.Close)
		}
		wg.Wait()
		close(closed)
	}()
	timeout := time.After(5 * time.Second)
	select {
	case <-closed:
	case <-timeout:
		t.Fatal("Close did not return")
	}
	select {
	case <-canceled:
	default:
		t.Fatal("Close returned before the allocation in flight was canceled")
	}
	for range waiters {
		select {
		case err := <-results:
			if errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
				t.Fatalf("waiting Next after Close: %v, want COORDINATOR_NOT_AVAILABLE", err)
			}
		case <-timeout:
			t.Fatal("a waiting Next was not released by Close")
		}
	}
	if _, err := m.Next(context.Background()); errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
		t.Fatalf("Next after Close: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	m.Close() // idempotent
	wait.For(t, 5*time.Second, "manager goroutines gone after Close", func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before the manager", n, before)
		}
		return nil
	})
}

// Rule: after Close no id is handed out, even from a block still held.
func TestCloseDropsHeldIDs(t *testing.T) {
	m := newManager(t, newFakeController(1000), ProducerIDManagerConfig{})
	take(t, m, waitCtx(t), 1)
	m.Close()
	if id, err := m.Next(context.Background()); errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
		t.Fatalf("Next after Close = %d, %v; want COORDINATOR_NOT_AVAILABLE", id, err)
	}
}

// Rule: Close also stops a fetcher sleeping in its retry backoff.
func TestCloseDuringBackoff(t *testing.T) {
	var calls atomic.Int32
	alloc := allocFunc(func(context.Context) (int64, int64, error) {
		calls.Add(1)
		return 0, 0, errs.New(sluicev1.ErrorCode_NOT_CONTROLLER, "")
	})
	m := NewProducerIDManager(alloc, ProducerIDManagerConfig{
		RetryBackoff: time.Hour, RetryBackoffMax: time.Hour, Logger: slog.New(slog.DiscardHandler),
	})
	wait.For(t, 5*time.Second, "first allocation failure recorded", func() error {
		if m.Stats().LastError == "" {
			return errors.New("first failure not recorded")
		}
		return nil
	})
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt the backoff")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls within an hour-long backoff, want 1", n)
	}
}

func TestProducerIDManagerConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ProducerIDManagerConfig
		want    ProducerIDManagerConfig // Logger not compared
		wantErr bool
	}{
		{"defaults", ProducerIDManagerConfig{}, ProducerIDManagerConfig{
			PrefetchAt: 100, RetryBackoff: 50 * time.Millisecond, RetryBackoffMax: 2 * time.Second, AllocateTimeout: 5 * time.Second,
		}, false},
		{"kept", ProducerIDManagerConfig{PrefetchAt: 7, RetryBackoff: time.Millisecond, RetryBackoffMax: 3 * time.Millisecond, AllocateTimeout: time.Second},
			ProducerIDManagerConfig{PrefetchAt: 7, RetryBackoff: time.Millisecond, RetryBackoffMax: 3 * time.Millisecond, AllocateTimeout: time.Second}, false},
		{"max follows a large backoff", ProducerIDManagerConfig{RetryBackoff: 5 * time.Second}, ProducerIDManagerConfig{
			PrefetchAt: 100, RetryBackoff: 5 * time.Second, RetryBackoffMax: 5 * time.Second, AllocateTimeout: 5 * time.Second,
		}, false},
		{"negative prefetch", ProducerIDManagerConfig{PrefetchAt: -1}, ProducerIDManagerConfig{}, true},
		{"negative backoff", ProducerIDManagerConfig{RetryBackoff: -time.Second}, ProducerIDManagerConfig{}, true},
		{"negative timeout", ProducerIDManagerConfig{AllocateTimeout: -1}, ProducerIDManagerConfig{}, true},
		{"max below backoff", ProducerIDManagerConfig{RetryBackoff: time.Second, RetryBackoffMax: time.Millisecond}, ProducerIDManagerConfig{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.Validate()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Validate(%+v) = nil, want an error", tc.cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Logger == nil {
				t.Fatal("Logger not defaulted")
			}
			cfg.Logger = nil
			if cfg != tc.want {
				t.Fatalf("Validate filled %+v, want %+v", cfg, tc.want)
			}
		})
	}
}

func TestRetryDelayAndBackoff(t *testing.T) {
	tests := []struct {
		backoff time.Duration
		lo, hi  time.Duration // retryDelay with int64n returning 0 and n-1
		doubled time.Duration // nextBackoff with limit 2s
	}{
		{backoff: 50 * time.Millisecond, lo: 25 * time.Millisecond, hi: 50 * time.Millisecond, doubled: 100 * time.Millisecond},
		{backoff: time.Second, lo: 500 * time.Millisecond, hi: time.Second, doubled: 2 * time.Second},
		{backoff: 1500 * time.Millisecond, lo: 750 * time.Millisecond, hi: 1500 * time.Millisecond, doubled: 2 * time.Second},
		{backoff: 2 * time.Second, lo: time.Second, hi: 2 * time.Second, doubled: 2 * time.Second},
		{backoff: 1, lo: 0, hi: 1, doubled: 2},
	}
	for _, tc := range tests {
		if got := retryDelay(tc.backoff, func(int64) int64 { return 0 }); got != tc.lo {
			t.Errorf("retryDelay(%v) low = %v, want %v", tc.backoff, got, tc.lo)
		}
		if got := retryDelay(tc.backoff, func(n int64) int64 { return n - 1 }); got != tc.hi {
			t.Errorf("retryDelay(%v) high = %v, want %v", tc.backoff, got, tc.hi)
		}
		if got := nextBackoff(tc.backoff, 2*time.Second); got != tc.doubled {
			t.Errorf("nextBackoff(%v, 2s) = %v, want %v", tc.backoff, got, tc.doubled)
		}
	}
}

func BenchmarkProducerIDManagerNext(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		m := newManager(b, newFakeController(1000), ProducerIDManagerConfig{})
		ctx := context.Background()
		for b.Loop() {
			if _, err := m.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		m := newManager(b, newFakeController(1000), ProducerIDManagerConfig{})
		ctx := context.Background()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := m.Next(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
