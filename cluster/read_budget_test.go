package cluster

import "testing"

// Rule: only the first partition with data may answer more than the
// fetch's budget; a later partition keeps the batches that fit in what is
// left, and its next fetch starts at the first batch it left out. Before,
// each later partition with a byte of budget left answered a whole batch
// (up to max.message.bytes, 32 MiB), so an answer could exceed what gRPC
// sends (issue 29).
func TestFetchLaterPartitionsKeepWithinTheBudget(t *testing.T) {
	r := newReadRig(t)
	for i := 0; i < 3; i++ {
		if _, err := r.m.Append("s", 0, plainBatch(1), r.now); err != nil {
			t.Fatal(err)
		}
	}
	one, _ := r.m.Replica("s", 0)
	read, _ := one.Read(0, 1<<20, 3)
	size := len(read.Batches[0])

	// One batch and a half of budget: the first partition takes one, the
	// second would need a whole batch for the half left, and takes none.
	params := consumerFetch(FetchHighWatermark, part("s", 0), part("s", 1))
	params.MaxBytes = size + size/2
	got := r.fetch(params)
	if a := got.Partitions[0]; len(a.Batches) != 1 || a.NextFetchOffset != 1 {
		t.Fatalf("first partition: %d batches, next %d; want 1, 1", len(a.Batches), a.NextFetchOffset)
	}
	if b := got.Partitions[1]; len(b.Batches) != 0 || b.NextFetchOffset != 1 || b.Err != nil || b.HighWatermark != 3 {
		t.Fatalf("second partition past the budget: %+v", b)
	}
	// Room for one more batch: the second partition keeps one and goes on
	// from the next.
	params.MaxBytes = 2 * size
	got = r.fetch(params)
	if b := got.Partitions[1]; len(b.Batches) != 1 || b.NextFetchOffset != 2 {
		t.Fatalf("second partition with one batch of budget: %d batches, next %d; want 1, 2", len(b.Batches), b.NextFetchOffset)
	}
}
