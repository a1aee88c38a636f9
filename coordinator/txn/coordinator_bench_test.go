package txn

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The coordinator's own cost per request on an in-memory log (every append
// commits at once), so that a change to its locking or the runtime shows:
// docs/benchmarks.md, issue 30.

// BenchmarkEndTxnCycle: one transaction of a producer per iteration —
// AddPartitions (which waits for the previous transaction's markers and
// Complete*), then EndTxn until PrepareCommit is applied.
func BenchmarkEndTxnCycle(b *testing.B) {
	l := newFakeStateLog()
	l.setLeaderEpoch(0, 1)
	c := NewCoordinator(CoordinatorDeps{Log: l, ProducerIDs: &fakeProducerIDs{}, Markers: discardMarkers{}},
		CoordinatorConfig{StatePartitions: 1})
	defer func() { _ = c.Close() }()
	c.BecameLeader(cluster.TopicPartition{Topic: StateTopic, Partition: 0}, 1)
	ctx := context.Background()
	var pe ProducerIDAndEpoch
	wait.For(b, 10*time.Second, "the partition loaded and the producer initialized", func() error {
		var err error
		pe, err = c.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: "bench", TimeoutMs: 60000, ProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch})
		if err != nil && errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS && errs.Code(err) != sluicev1.ErrorCode_NOT_COORDINATOR {
			b.Fatal(err)
		}
		return err
	})
	tp := []TopicPartition{{Topic: "t", Partition: 0}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := c.AddPartitions(ctx, AddPartitionsRequest{TransactionalID: "bench", ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, ClientVersion: TV2, Partitions: tp}); err != nil {
			b.Fatal(err)
		}
		next, err := c.EndTxn(ctx, EndTxnRequest{TransactionalID: "bench", ProducerID: pe.ProducerID, ProducerEpoch: pe.ProducerEpoch, Commit: true, ClientVersion: TV2})
		if err != nil {
			b.Fatal(err)
		}
		pe = next
	}
}

// discardMarkers writes every marker at once.
type discardMarkers struct{}

func (discardMarkers) WriteMarkers(ctx context.Context, m Markers) map[TopicPartition]error {
	out := make(map[TopicPartition]error, len(m.Partitions))
	for _, tp := range m.Partitions {
		out[tp] = nil
	}
	return out
}
