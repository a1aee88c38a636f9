package api_test

import (
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Rule (Kafka ListOffsets with an isolation level; ref §5 "while B is
// open: latest offset read_uncommitted=7 (high watermark),
// read_committed=4 (LSO)"): LATEST is the last stable offset under
// read_committed, and under the unset level (Sluice's default, as for
// Fetch), the high watermark under read_uncommitted.
func TestListOffsetsLatestPerIsolation(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	tn.produceRaw("t", 0, makeBatch("a", 2, 1000)) // offsets 0-1
	// An open transaction from offset 2, appended as the partition's
	// leader writes it (producers' transactional batches are not taken
	// yet).
	var b batch.Builder
	b.Reset(1000)
	b.Add(1000, nil, []byte("open"), nil)
	txn := b.Finish(batch.Producer{ID: 77, Epoch: 0, BaseSequence: 0}, batch.AttrTransactional)
	if _, err := tn.node.Replicas().AppendCommitted(ctx(t), cluster.TopicPartition{Topic: "t", Partition: 0}, txn, cluster.NoLeaderEpoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	tn.produceRaw("t", 0, makeBatch("b", 1, 2000)) // offset 3
	for _, c := range []struct {
		iso  sluicev1.IsolationLevel
		want int64
	}{
		{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, 2},
		{sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, 2},
		{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, 4},
	} {
		resp, err := tn.log.ListOffsets(ctx(t), &sluicev1.ListOffsetsRequest{IsolationLevel: c.iso,
			Topics: []*sluicev1.ListOffsetsTopic{{Name: "t", Partitions: []*sluicev1.ListOffsetsPartition{{Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != sluicev1.ErrorCode_NONE || p.Offset != c.want {
			t.Errorf("%v: latest %d (%v), want %d", c.iso, p.Offset, p.ErrorCode, c.want)
		}
	}
}
