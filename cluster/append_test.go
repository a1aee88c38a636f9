package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func applyImage(t *testing.T, m *ReplicaManager, im *controller.Image, now time.Time) {
	t.Helper()
	if err := m.Apply(im, now, true); err != nil {
		t.Fatal(err)
	}
}

// withLeaderEpoch is im with topic's partition led at epoch (as after an
// election that kept the same leader).
func withLeaderEpoch(im *controller.Image, topic string, partition int, epoch int32) *controller.Image {
	im = im.Clone()
	im.Topics[topic].Partitions[partition].LeaderEpoch = epoch
	return im
}

func wantCode(t *testing.T, what string, err error, code sluicev1.ErrorCode) {
	t.Helper()
	if errs.Code(err) != code {
		t.Fatalf("%s: got %v, want %v", what, err, code)
	}
}

// The committed append (the coordinators' path) appends as the leader and
// answers once the batch is below the high watermark; it takes control
// batches, which the producer path refuses.
func TestAppendCommittedCommitsAndTakesControlBatches(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 2)
	applyImage(t, m, newImage(t, "c1").apply(createTopic("c", "id-c", []int32{2})).snapshot(), now)
	tp := TopicPartition{Topic: "c", Partition: 0}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, _ := m.Replica("c", 0)

	res, err := m.AppendCommitted(ctx, tp, plainBatch(2), 0, now)
	if err != nil || res.BaseOffset != 0 || res.LastOffset != 1 || p.HighWatermark() != 2 {
		t.Fatalf("internal records: %+v %v, HW %d; want offsets 0-1 committed", res, err, p.HighWatermark())
	}

	marker := batch.MarkerBatch(batch.Producer{ID: 7, Epoch: 1}, batch.ControlCommit, 3, 1000)
	res, err = m.AppendCommitted(ctx, tp, slices.Clone(marker), NoLeaderEpoch, now)
	if err != nil || res.BaseOffset != 2 || p.HighWatermark() != 3 {
		t.Fatalf("marker: %+v %v, HW %d; want offset 2 committed", res, err, p.HighWatermark())
	}
	read, err := p.Read(2, 1<<20, 3)
	if err != nil || len(read.Batches) != 1 {
		t.Fatalf("read marker back: %d batches, %v", len(read.Batches), err)
	}
	h, _ := batch.ParseHeader(read.Batches[0])
	if !h.IsControl() || !h.IsTransactional() || h.ProducerID != 7 || h.ProducerEpoch != 1 || h.BaseSequence != -1 {
		t.Fatalf("marker header %+v", h)
	}
	err = batch.ForEachRecord(read.Batches[0], func(r batch.Record) error {
		typ, coordinatorEpoch, err := batch.ParseMarker(r.Key, r.Value)
		if err == nil && (typ != batch.ControlCommit || coordinatorEpoch != 3) {
			err = fmt.Errorf("marker %v with coordinator epoch %d, want COMMIT with 3", typ, coordinatorEpoch)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// TV2: a marker whose producer epoch is below the last one is stale.
	stale := batch.MarkerBatch(batch.Producer{ID: 7, Epoch: 0}, batch.ControlAbort, 3, 1000)
	_, err = m.AppendCommitted(ctx, tp, stale, NoLeaderEpoch, now)
	wantCode(t, "stale marker", err, sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH)

	// Producers cannot write control batches.
	_, err = m.Append("c", 0, slices.Clone(marker), now)
	wantCode(t, "control batch on the producer path", err, sluicev1.ErrorCode_INVALID_RECORD)
	if end := p.LogEndOffset(); end != 3 {
		t.Fatalf("refused appends changed the log: end %d, want 3", end)
	}
}

// Nothing is appended when this broker does not lead the partition at the
// epoch the caller names, or has too few in-sync replicas.
func TestAppendCommittedRefusals(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 2)
	b := newImage(t, "c1").apply(createTopic("c", "id-c", []int32{2, 3}, []int32{3, 2}))
	b.apply(createTopic("n", "id-n", []int32{2, 3})).apply(controller.ConfigChange{Topic: "n", Key: "min.insync.replicas", Value: "2"})
	im := b.snapshot()
	im.Topics["c"].Partitions[0].ISR = []int32{2} // c-0 commits without its follower
	im.Topics["n"].Partitions[0].ISR = []int32{2} // fewer than min.insync.replicas
	applyImage(t, m, im, now)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := m.AppendCommitted(ctx, TopicPartition{Topic: "c", Partition: 1}, plainBatch(1), NoLeaderEpoch, now)
	wantCode(t, "follower", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
	_, err = m.AppendCommitted(ctx, TopicPartition{Topic: "c", Partition: 0}, plainBatch(1), 1, now)
	wantCode(t, "epoch newer than the leader's", err, sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH)
	applyImage(t, m, withLeaderEpoch(im, "c", 0, 2), now)
	_, err = m.AppendCommitted(ctx, TopicPartition{Topic: "c", Partition: 0}, plainBatch(1), 0, now)
	wantCode(t, "epoch older than the leader's", err, sluicev1.ErrorCode_FENCED_LEADER_EPOCH)
	if res, err := m.AppendCommitted(ctx, TopicPartition{Topic: "c", Partition: 0}, plainBatch(1), 2, now); err != nil || res.BaseOffset != 0 {
		t.Fatalf("append at the current epoch: %+v %v", res, err)
	}

	_, err = m.AppendCommitted(ctx, TopicPartition{Topic: "n", Partition: 0}, plainBatch(1), NoLeaderEpoch, now)
	wantCode(t, "ISR below min.insync.replicas", err, sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS)
	for _, tp := range []TopicPartition{{Topic: "c", Partition: 1}, {Topic: "n", Partition: 0}} {
		if p, _ := m.Replica(tp.Topic, tp.Partition); p.LogEndOffset() != 0 {
			t.Errorf("%s: a refused append wrote to the log (end %d)", tp, p.LogEndOffset())
		}
	}
}

// A batch appended but not yet committed when the wait ends may or may not
// be committed: the error says so (ErrCommitUnknown).
func TestAppendCommittedUncertainOutcomes(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 2)
	im := newImage(t, "c1").apply(createTopic("n", "id-n", []int32{2, 3})).snapshot()
	applyImage(t, m, im, now)
	tp := TopicPartition{Topic: "n", Partition: 0}

	// Follower 3 never fetches: the HW stays put.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m.AppendCommitted(short, tp, plainBatch(1), 0, now)
	wantCode(t, "timeout", err, sluicev1.ErrorCode_REQUEST_TIMED_OUT)
	if !errors.Is(err, ErrCommitUnknown) {
		t.Fatalf("timeout error %v does not say the outcome is unknown", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := m.AppendCommitted(context.Background(), tp, plainBatch(1), 0, now)
		done <- err
	}()
	p, _ := m.Replica("n", 0)
	wait.Until(t, 10*time.Second, "second batch appended", func() bool { return p.LogEndOffset() == 2 })
	applyImage(t, m, withLeaderEpoch(im, "n", 0, 1), now) // re-elected: same leader, new epoch
	select {
	case err := <-done:
		wantCode(t, "new leader epoch while waiting", err, sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER)
		if !errors.Is(err, ErrCommitUnknown) {
			t.Fatalf("epoch change error %v does not say the outcome is unknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end when the leader epoch changed")
	}
}

// recordingListener records leadership events as strings.
type recordingListener struct {
	mu     sync.Mutex
	events []string
}

func (l *recordingListener) BecameLeader(tp TopicPartition, epoch int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("lead %s@%d", tp, epoch))
}

func (l *recordingListener) Resigned(tp TopicPartition, epoch int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("resign %s@%d", tp, epoch))
}

func (l *recordingListener) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// A listener hears, in order, the leaderships this node holds when it
// registers, every change after, and the resignations of Close; only for
// its topic.
func TestLeadershipListenerHearsChangesInOrder(t *testing.T) {
	now := time.Unix(5000, 0)
	m, err := NewReplicaManager(ReplicaManagerConfig{DataDir: t.TempDir(), NodeID: 2})
	if err != nil {
		t.Fatal(err)
	}
	im := newImage(t, "c1").apply(createTopic("c", "id-c", []int32{2, 3}, []int32{3, 2})).apply(createTopic("other", "id-o", []int32{2})).snapshot()
	applyImage(t, m, im, now)
	l := &recordingListener{}
	m.RegisterLeadershipListener("c", l)
	applyImage(t, m, withLeaderEpoch(im, "c", 0, 1), now)
	moved := im.Clone()
	moved.Topics["c"].Partitions[0].LeaderEpoch = 2
	moved.Topics["c"].Partitions[1].Leader, moved.Topics["c"].Partitions[1].LeaderEpoch = 2, 1
	applyImage(t, m, moved, now)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waits for delivery: everything has been heard.
	got := l.got()
	want := []string{"lead c-0@0", "resign c-0@0", "lead c-0@1", "resign c-0@1", "lead c-0@2", "lead c-1@1"}
	if len(got) != len(want)+2 || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("events %q, want %q then the resignations of Close", got, want)
	}
	closing := got[len(want):]
	slices.Sort(closing)
	if !slices.Equal(closing, []string{"resign c-0@2", "resign c-1@1"}) {
		t.Fatalf("resignations at close %q", closing)
	}
}
