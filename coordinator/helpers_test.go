package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/wait"
)

// The transaction coordinator's tests and their fakes live with it in
// coordinator/txn; these few serve the tests here that run it on a
// ReplicaStateLog (statelog_test.go, load_skips_test.go), which
// coordinator/txn cannot import.

// txnEnv is the other dependencies and the configuration of the
// transaction coordinators of one test.
type txnEnv struct {
	pids    *fakeProducerIDs
	markers markersWritten
	now     func() time.Time
	cfg     txn.CoordinatorConfig
}

func newTxnEnv() *txnEnv {
	t0 := time.UnixMilli(1_794_026_921_000)
	return &txnEnv{
		pids: &fakeProducerIDs{},
		now:  func() time.Time { return t0 },
		cfg: txn.CoordinatorConfig{
			StatePartitions:       1,
			AbortTimedOutInterval: time.Hour,
			MarkerRetryBackoff:    time.Millisecond,
			MarkerRetryBackoffMax: 5 * time.Millisecond,
			AppendTimeout:         5 * time.Second,
			CloseWait:             5 * time.Second,
		},
	}
}

// fakeProducerIDs hands out 1000, 1001, ... (decision 4).
type fakeProducerIDs struct{ next atomic.Int64 }

func (f *fakeProducerIDs) Next(ctx context.Context) (int64, error) {
	return 1000 + f.next.Add(1) - 1, nil
}

// markersWritten writes every marker at once.
type markersWritten struct{}

func (markersWritten) WriteMarkers(ctx context.Context, m txn.Markers) map[txn.TopicPartition]error {
	out := make(map[txn.TopicPartition]error, len(m.Partitions))
	for _, tp := range m.Partitions {
		out[tp] = nil
	}
	return out
}

// waitLoaded waits until c has loaded partition p.
func waitLoaded(t *testing.T, c *txn.Coordinator, p int32) {
	t.Helper()
	waitFor(t, fmt.Sprintf("partition %d loaded", p), func() error {
		for _, s := range c.Stats() {
			if s.Partition == p && !s.Loading {
				return nil
			}
		}
		return errors.New("not loaded")
	})
}

// waitState waits until id's applied state on c is want.
func waitState(t *testing.T, c *txn.Coordinator, id string, want txn.State) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s in %v", id, want), func() error {
		d, err := c.Describe(id)
		if err != nil {
			return err
		}
		if d.State != want {
			return fmt.Errorf("state %v", d.State)
		}
		return nil
	})
}

var bg = context.Background()

func initPID(c *txn.Coordinator, id string, timeoutMs int32) (txn.ProducerIDAndEpoch, error) {
	return c.InitProducerID(bg, txn.InitProducerIDRequest{TransactionalID: id, TimeoutMs: timeoutMs, ProducerID: txn.NoProducerID, ProducerEpoch: txn.NoProducerEpoch})
}

func addPartition(c *txn.Coordinator, id string, pe txn.ProducerIDAndEpoch, tps ...txn.TopicPartition) error {
	return c.AddPartitions(bg, txn.AddPartitionsRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, ClientVersion: txn.TV2, Partitions: tps})
}

func endTxn(c *txn.Coordinator, id string, pe txn.ProducerIDAndEpoch, commit bool) (txn.ProducerIDAndEpoch, error) {
	return c.EndTxn(bg, txn.EndTxnRequest{TransactionalID: id, ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, Commit: commit, ClientVersion: txn.TV2})
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// waitFor is wait.For with the bound these tests use.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	wait.For(t, 10*time.Second, what, cond)
}
