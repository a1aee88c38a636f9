package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A partition in a transaction existed when it was added: missing from a
// lagging broker's metadata it is retried (or found after the barrier),
// and declared gone only once the metadata caught up with the controller.
func TestMarkerPartitionMissingOnlyAfterTheMetadataBarrier(t *testing.T) {
	cache := cluster.NewMetadataCache()
	if err := cache.Update(1, controller.NewImage(), nil); err != nil {
		t.Fatal(err)
	}
	cache.MarkApplied(1)
	tp := cluster.TopicPartition{Topic: "__consumer_offsets", Partition: 0}
	ctx := context.Background()

	// Caught up: the barrier brings the topic in.
	w := PartitionMarkers{Metadata: cache, Barrier: func(context.Context) error {
		im := controller.NewImage()
		im.Topics[tp.Topic] = &controller.Topic{Name: tp.Topic, Partitions: []*controller.PartitionState{{Replicas: []int32{1}, Leader: 1}}}
		if err := cache.Update(2, im, nil); err != nil {
			return err
		}
		cache.MarkApplied(2)
		return nil
	}}
	if err := w.exists(ctx, tp); err != nil {
		t.Fatalf("after the barrier the partition exists: %v", err)
	}
	// Really gone: still missing after the barrier.
	gone := cluster.TopicPartition{Topic: "deleted", Partition: 0}
	w.Barrier = func(context.Context) error { return nil }
	if err := w.exists(ctx, gone); errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("a deleted topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	// The barrier cannot be passed (no controller): retriable.
	w.Barrier = func(context.Context) error { return errors.New("no controller") }
	if err := w.exists(ctx, gone); errs.Code(err) != sluicev1.ErrorCode_LEADER_NOT_AVAILABLE {
		t.Fatalf("without a barrier: %v, want LEADER_NOT_AVAILABLE", err)
	}
}
