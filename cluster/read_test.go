package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Rule (KIP-320): a request naming an older leader epoch is fenced, a newer
// one is unknown here; NoLeaderEpoch skips the check unless the requester
// must name one (a follower).
func TestCheckLeaderEpoch(t *testing.T) {
	tp := TopicPartition{Topic: "t", Partition: 0}
	for _, tc := range []struct {
		requested, current int32
		required           bool
		want               sluicev1.ErrorCode
	}{
		{3, 3, false, sluicev1.ErrorCode_NONE},
		{3, 3, true, sluicev1.ErrorCode_NONE},
		{2, 3, false, sluicev1.ErrorCode_FENCED_LEADER_EPOCH},
		{4, 3, true, sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH},
		{NoLeaderEpoch, 3, false, sluicev1.ErrorCode_NONE},
		{NoLeaderEpoch, 3, true, sluicev1.ErrorCode_FENCED_LEADER_EPOCH},
	} {
		if got := errs.Code(checkLeaderEpoch(tp, tc.requested, tc.current, tc.required)); got != tc.want {
			t.Errorf("requested %d current %d required %v: %v, want %v", tc.requested, tc.current, tc.required, got, tc.want)
		}
	}
}

// An OffsetForLeaderEpoch about an epoch later than the leader's own is
// refused UNKNOWN_LEADER_EPOCH (retriable): only a later leader writes a
// later epoch, so the asker has seen one and this leadership is stale. A
// stale leader answering UNDEFINED_EPOCH_OFFSET (as Kafka) led franz-go,
// validating a committed offset of the later epoch, to fetch that offset
// here, past this log's end, and on OFFSET_OUT_OF_RANGE to reset to the
// log start: a group copier copied a partition again from offset 0.
func TestOffsetForLeaderEpochRefusesALaterEpoch(t *testing.T) {
	r := newReadRig(t)
	tp := TopicPartition{Topic: "s", Partition: 0}
	if _, err := r.m.Append("s", 0, plainBatch(2), r.now); err != nil {
		t.Fatal(err)
	}
	got, err := r.m.OffsetForLeaderEpoch(tp, NoLeaderEpoch, 0)
	if err != nil || got.EndOffset != 2 || got.LeaderEpoch != 0 {
		t.Fatalf("epoch 0: %+v, %v; want end offset 2 at epoch 0", got, err)
	}
	for _, current := range []int32{NoLeaderEpoch, 0} {
		_, err := r.m.OffsetForLeaderEpoch(tp, current, 1)
		if code := errs.Code(err); code != sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH {
			t.Fatalf("epoch 1 (current %d) at a leader of epoch 0: %v (%v), want UNKNOWN_LEADER_EPOCH", current, code, err)
		}
	}
}

// readRig is node 2 leading r-0 (replicas 2 and 3, both in the ISR) and
// s-0 (replica 2 alone), with the metadata a follower's fetch is checked
// against.
type readRig struct {
	t           *testing.T
	m           *ReplicaManager
	brokerEpoch int64 // node 3's
	now         time.Time
}

func newReadRig(t *testing.T) *readRig {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 2)
	im := newImage(t, "c1").apply(createTopic("r", "id-r", []int32{2, 3})).apply(createTopic("s", "id-s", []int32{2})).snapshot()
	cache := NewMetadataCache()
	if err := cache.Update(im.Offset, im, nil); err != nil {
		t.Fatal(err)
	}
	m.repl.Store(&ReplicationConfig{Metadata: cache, LagTimeMax: DefaultReplicaLagTimeMax})
	applyImage(t, m, im, now)
	return &readRig{t: t, m: m, brokerEpoch: im.Brokers[3].Epoch, now: now}
}

func (r *readRig) fetch(p FetchParams) FetchResult {
	r.t.Helper()
	res, err := r.m.Fetch(context.Background(), p)
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

func consumerFetch(isolation FetchIsolation, parts ...FetchPartition) FetchParams {
	return FetchParams{ReplicaID: NoReplica, Isolation: isolation, MaxBytes: 1 << 20, Partitions: parts}
}

func (r *readRig) followerFetch(offset int64) FetchParams {
	return FetchParams{ReplicaID: 3, BrokerEpoch: r.brokerEpoch, Isolation: FetchLogEnd, MaxBytes: 1 << 20,
		Partitions: []FetchPartition{{TopicPartition: TopicPartition{Topic: "r", Partition: 0}, FetchOffset: offset, CurrentLeaderEpoch: 0, PartitionMaxBytes: 1 << 20}}}
}

func part(topic string, offset int64) FetchPartition {
	return FetchPartition{TopicPartition: TopicPartition{Topic: topic, Partition: 0}, FetchOffset: offset, CurrentLeaderEpoch: NoLeaderEpoch, PartitionMaxBytes: 1 << 20}
}

// Rule (DESIGN §8): a follower reads up to the leader's log end; its fetch
// offset is its log end, which moves the high watermark; consumers read
// below the high watermark only (read_committed below the last stable
// offset, the same while there are no transactions).
func TestFetchUpperBoundPerReader(t *testing.T) {
	r := newReadRig(t)
	for i := 0; i < 3; i++ {
		if _, err := r.m.Append("r", 0, plainBatch(1), r.now); err != nil {
			t.Fatal(err)
		}
	}
	for _, iso := range []FetchIsolation{FetchHighWatermark, FetchTxnCommitted} {
		got := r.fetch(consumerFetch(iso, part("r", 0))).Partitions[0]
		if got.Err != nil || len(got.Batches) != 0 || got.HighWatermark != 0 || got.LastStableOffset != 0 {
			t.Fatalf("consumer (isolation %d) before replication: %+v", iso, got)
		}
	}
	got := r.fetch(r.followerFetch(0)).Partitions[0]
	if got.Err != nil || len(got.Batches) != 3 || got.LogEndOffset != 3 || got.HighWatermark != 0 {
		t.Fatalf("follower at 0: %+v", got)
	}
	got = r.fetch(r.followerFetch(3)).Partitions[0]
	if got.Err != nil || len(got.Batches) != 0 || got.HighWatermark != 3 {
		t.Fatalf("follower caught up: %+v", got)
	}
	got = r.fetch(consumerFetch(FetchTxnCommitted, part("r", 1))).Partitions[0]
	if got.Err != nil || len(got.Batches) != 2 || got.NextFetchOffset != 3 || got.LogStartOffset != 0 {
		t.Fatalf("consumer after replication, from offset 1: %+v", got)
	}
}

// Rule: every partition answers at most partition max bytes, the whole
// answer at most max bytes, but the first partition with data answers at
// least one batch; a partition past the budget still reports its offsets.
func TestFetchByteBudgets(t *testing.T) {
	r := newReadRig(t)
	for i := 0; i < 3; i++ {
		if _, err := r.m.Append("s", 0, plainBatch(1), r.now); err != nil {
			t.Fatal(err)
		}
	}
	one, _ := r.m.Replica("s", 0)
	read, _ := one.Read(0, 1<<20, 3)
	size := len(read.Batches[0])

	p := part("s", 0)
	p.PartitionMaxBytes = 1
	if got := r.fetch(consumerFetch(FetchHighWatermark, p)).Partitions[0]; len(got.Batches) != 1 || got.NextFetchOffset != 1 {
		t.Fatalf("partition budget below one batch: %d batches, next %d; want 1, 1", len(got.Batches), got.NextFetchOffset)
	}
	params := consumerFetch(FetchHighWatermark, part("s", 0), part("s", 0))
	params.MaxBytes = size
	got := r.fetch(params)
	if a, b := got.Partitions[0], got.Partitions[1]; len(a.Batches) != 1 || len(b.Batches) != 0 || b.HighWatermark != 3 || b.NextFetchOffset != 0 || b.Err != nil {
		t.Fatalf("total budget of one batch: first %d batches, second %+v", len(a.Batches), b)
	}
	p.PartitionMaxBytes = -1
	if got := r.fetch(consumerFetch(FetchHighWatermark, p)).Partitions[0]; errs.Code(got.Err) != sluicev1.ErrorCode_INVALID_FETCH_SIZE {
		t.Fatalf("negative partition max bytes: %v", got.Err)
	}
}

// Rule: a consumer's fetch of a partition not led here says so with
// ErrNotLeader (the caller names the leader); stale and future leader
// epochs are fenced; a follower of an older broker incarnation is refused
// as a whole.
func TestFetchRefusals(t *testing.T) {
	r := newReadRig(t)
	got := r.fetch(consumerFetch(FetchHighWatermark, part("absent", 0))).Partitions[0]
	if !errors.Is(got.Err, ErrNotLeader) || errs.Code(got.Err) != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER {
		t.Fatalf("unknown partition: %v", got.Err)
	}
	p := part("s", 0)
	p.CurrentLeaderEpoch = 1
	if got := r.fetch(consumerFetch(FetchHighWatermark, p)).Partitions[0]; errs.Code(got.Err) != sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH {
		t.Fatalf("future epoch: %v", got.Err)
	}
	stale := r.followerFetch(0)
	stale.BrokerEpoch--
	if _, err := r.m.Fetch(context.Background(), stale); errs.Code(err) != sluicev1.ErrorCode_STALE_BROKER_EPOCH {
		t.Fatalf("stale broker epoch: %v", err)
	}
	f := r.followerFetch(0)
	f.Partitions[0].TopicPartition = TopicPartition{Topic: "s", Partition: 0} // node 3 is not a replica; s-0 has no follower
	if got := r.fetch(f).Partitions[0]; got.Err == nil {
		t.Fatal("a fetch as a follower that is not a replica was accepted")
	}
	f = r.followerFetch(0)
	f.Partitions[0].CurrentLeaderEpoch = NoLeaderEpoch
	if got := r.fetch(f).Partitions[0]; errs.Code(got.Err) != sluicev1.ErrorCode_FENCED_LEADER_EPOCH {
		t.Fatalf("follower without a leader epoch: %v", got.Err)
	}
}

// Rule: with less than min bytes available the fetch waits for a change
// of a partition it read, up to max wait; an append wakes it.
func TestFetchLongPoll(t *testing.T) {
	r := newReadRig(t)
	params := consumerFetch(FetchHighWatermark, part("s", 0))
	params.MinBytes, params.MaxWait = 1, 10*time.Second
	done := make(chan FetchResult, 1)
	go func() {
		res, _ := r.m.Fetch(context.Background(), params)
		done <- res
	}()
	select {
	case res := <-done:
		t.Fatalf("answered with nothing to read: %+v", res.Partitions[0])
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := r.m.Append("s", 0, plainBatch(1), r.now); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if len(res.Partitions[0].Batches) != 1 {
			t.Fatalf("woken fetch: %+v", res.Partitions[0])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an append did not wake the fetch")
	}

	params.Partitions[0].FetchOffset = 1
	params.MaxWait = 20 * time.Millisecond
	if res := r.fetch(params); len(res.Partitions[0].Batches) != 0 || res.Partitions[0].Err != nil {
		t.Fatalf("max wait passed: %+v", res.Partitions[0])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	params.MaxWait = 10 * time.Second
	if _, err := r.m.Fetch(ctx, params); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}
