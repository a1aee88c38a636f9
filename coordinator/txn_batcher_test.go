package coordinator

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestBrokerBatcherCoalescesWhileInFlight: while one request to a broker
// is in flight the next calls queue, and the next request carries all of
// them; each caller gets its own answer; a caller that gives up gets
// REQUEST_TIMED_OUT; after close calls are refused (retriable).
func TestBrokerBatcherCoalescesWhileInFlight(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex // guards sent
	var sent [][]int
	b := newBrokerBatcher(func(ctx context.Context, addr string, reqs []int) ([]int, error) {
		mu.Lock()
		sent = append(sent, slices.Clone(reqs))
		first := len(sent) == 1
		mu.Unlock()
		if first {
			<-release
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make([]int, 4)
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.do(ctx, "broker-a", i)
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
			got[i] = r
		}()
	}
	call(1)
	wait.Until(t, 5*time.Second, "the first request is in flight", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sent) == 1
	})
	call(2)
	call(3)
	wait.Until(t, 5*time.Second, "two calls queued behind it", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues["broker-a"] != nil && len(b.queues["broker-a"].calls) == 2
	})
	// A caller that gives up while queued.
	gctx, gcancel := context.WithCancel(ctx)
	gcancel()
	if _, err := b.do(gctx, "broker-a", 9); errs.Code(err) != sluicev1.ErrorCode_REQUEST_TIMED_OUT {
		t.Errorf("abandoned call: %v", err)
	}
	close(release)
	wg.Wait()
	mu.Lock()
	if len(sent) != 2 || !slices.Equal(sent[0], []int{1}) || len(sent[1]) != 3 || !slices.Contains(sent[1], 2) || !slices.Contains(sent[1], 3) {
		t.Errorf("requests sent: %v, want [1] then one carrying 2, 3 (and the abandoned 9)", sent)
	}
	mu.Unlock()
	if got[1] != 10 || got[2] != 20 || got[3] != 30 {
		t.Errorf("answers: %v", got)
	}
	b.close()
	if _, err := b.do(ctx, "broker-a", 4); !errs.Retriable(errs.Code(err)) {
		t.Errorf("call after close: %v, want a retriable error", err)
	}
	if n := b.goroutines.Running(); n != 0 {
		t.Errorf("%d senders still running after close", n)
	}
}
