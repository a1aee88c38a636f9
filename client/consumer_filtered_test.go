package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
)

// A fetch that answers no batches but moves NextFetchOffset (the broker
// left out markers or aborted transactions) moves the consumer's
// position: a partition that ends with a transaction marker is read to
// its end, and positions and lag do not trail behind.
func TestConsumerPositionFollowsFilteredRanges(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.filteredUpTo = map[string]int64{"t/0": 7}
	f.mu.Unlock()
	c, err := New([]string{f.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co, err := c.NewConsumer(WithMaxWait(20 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 0, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wait.For(t, 10*time.Second, "position past the filtered range", func() error {
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		recs, err := co.Poll(pctx)
		pcancel()
		if err != nil && ctx.Err() == nil && pctx.Err() == nil {
			return err
		}
		if len(recs) > 0 {
			t.Fatalf("got %d records from a range of left-out batches", len(recs))
		}
		if pos, _ := co.Position("t", 0); pos != 7 {
			return fmt.Errorf("position %d", pos)
		}
		return nil
	})
}
