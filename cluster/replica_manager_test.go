package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// imageBuilder applies controller records at increasing offsets, as the
// metadata stream would deliver them.
type imageBuilder struct {
	t   *testing.T
	im  *controller.Image
	off uint64
}

func newImage(t *testing.T, clusterID string) *imageBuilder {
	b := &imageBuilder{t: t, im: controller.NewImage()}
	if clusterID != "" {
		b.apply(controller.BootstrapCluster{ClusterID: clusterID})
	}
	for id := int32(1); id <= 3; id++ {
		b.apply(controller.RegisterBroker{BrokerID: id, Address: "b:1", IncarnationID: "i"})
		b.apply(controller.UnfenceBroker{BrokerID: id, BrokerEpoch: int64(b.off)})
	}
	return b
}

func (b *imageBuilder) apply(r controller.Record) *imageBuilder {
	b.t.Helper()
	b.off++
	if _, err := controller.Apply(b.im, r, b.off); err != nil {
		b.t.Fatalf("apply %T: %v", r, err)
	}
	return b
}

// snapshot is what a broker holds: an immutable copy.
func (b *imageBuilder) snapshot() *controller.Image { return b.im.Clone() }

func createTopic(name, id string, replicas ...[]int32) controller.CreateTopic {
	ct := controller.CreateTopic{Name: name, TopicID: id}
	for _, r := range replicas {
		ct.Partitions = append(ct.Partitions, controller.PartitionAssignment{Replicas: r})
	}
	return ct
}

func newManager(t *testing.T, dir string, node int32) *ReplicaManager {
	t.Helper()
	m, err := NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func plainBatch(n int) []byte {
	var b batch.Builder
	b.Reset(1000)
	for i := 0; i < n; i++ {
		b.Add(1000, nil, []byte("v"), nil)
	}
	return b.Finish(batch.PlainProducer, 0)
}

func hosted(m *ReplicaManager) map[string]int32 {
	out := map[string]int32{}
	for _, p := range m.Replicas() {
		l, _ := p.Leadership()
		out[p.String()] = l
	}
	return out
}

func TestReplicaManagerFollowsImage(t *testing.T) {
	now := time.Unix(5000, 0)
	dir := t.TempDir()
	m := newManager(t, dir, 2)
	b := newImage(t, "c1").apply(createTopic("a", "id-a", []int32{1, 2}, []int32{2, 3}, []int32{1, 3}))
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	// Node 2 hosts a-0 (follower, leader 1) and a-1 (leader), not a-2.
	if got, want := hosted(m), map[string]int32{"a-0": 1, "a-1": 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("hosted %v, want %v", got, want)
	}
	if _, err := m.Append("a", 0, plainBatch(1), now); errs.Code(err) != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER {
		t.Errorf("append on a follower: %v", err)
	}
	if res, err := m.Append("a", 1, plainBatch(3), now); err != nil || res.BaseOffset != 0 {
		t.Fatalf("append on the leader: %v %v", res, err)
	}
	p, _ := m.Replica("a", 1)
	if p.LeaderEpoch() != 0 || p.TopicID != "id-a" {
		t.Errorf("a-1 epoch %d topic id %s", p.LeaderEpoch(), p.TopicID)
	}

	// Leadership moves: node 2 fenced, a-1's leader becomes 3 with epoch 1.
	b.apply(controller.FenceBroker{BrokerID: 2, BrokerEpoch: 4})
	for _, pc := range controller.ReelectChanges(b.im) {
		b.apply(pc)
	}
	// A config change reaches the logs.
	b.apply(controller.ConfigChange{Topic: "a", Key: "retention.ms", Value: "1000"})
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if l, e := p.Leadership(); l != 3 || e != 1 {
		t.Errorf("a-1 leadership %d/%d, want 3/1", l, e)
	}
	if _, err := m.Append("a", 1, plainBatch(1), now); errs.Code(err) != sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER {
		t.Errorf("append after losing leadership: %v", err)
	}
	if p.Config().Storage.RetentionMs != 1000 || p.log.Config().RetentionMs != 1000 {
		t.Errorf("config not applied: %v / %v", p.Config().Storage.RetentionMs, p.log.Config().RetentionMs)
	}

	// Deleting the topic deletes the logs.
	b.apply(controller.DeleteTopic{Name: "a"})
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if len(m.Replicas()) != 0 {
		t.Errorf("still hosting %v", hosted(m))
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "a-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("log dir of a deleted topic left: %v", err)
	}
}

func TestReplicaManagerRestartKeepsDataAndDropsRecreatedTopics(t *testing.T) {
	now := time.Unix(5000, 0)
	dir := t.TempDir()
	m := newManager(t, dir, 1)
	b := newImage(t, "c1").apply(createTopic("keep", "id-k", []int32{1})).apply(createTopic("gone", "id-g1", []int32{1}))
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"keep", "gone"} {
		if _, err := m.Append(name, 0, plainBatch(5), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// While the broker was away, "gone" was deleted and re-created (new id).
	b.apply(controller.DeleteTopic{Name: "gone"}).apply(createTopic("gone", "id-g2", []int32{1}))
	m2 := newManager(t, dir, 1)
	// A controller still replaying its log first sends a prefix of the
	// image, without the topics: nothing may be deleted for it.
	if err := m2.Apply(newImage(t, "c1").snapshot(), now, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "keep-0", "00000000000000000000.log")); err != nil {
		t.Fatalf("a prefix image deleted a log: %v", err)
	}
	if err := m2.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if p, _ := m2.Replica("keep", 0); p == nil || p.log.EndOffset() != 5 {
		t.Fatalf("kept topic lost its data: %v", p)
	}
	if p, _ := m2.Replica("gone", 0); p == nil || p.log.EndOffset() != 0 || p.TopicID != "id-g2" {
		t.Fatalf("re-created topic: %+v", p)
	}
}

func TestReplicaManagerRefusesAnotherClustersImage(t *testing.T) {
	now := time.Unix(5000, 0)
	dir := t.TempDir()
	m := newManager(t, dir, 1)
	if err := m.Apply(newImage(t, "c1").apply(createTopic("a", "id-a", []int32{1})).snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("a", 0, plainBatch(2), now); err != nil {
		t.Fatal(err)
	}
	// An image of another cluster (no topics) must not delete anything.
	if err := m.Apply(newImage(t, "c2").snapshot(), now, true); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("foreign image: %v, want ErrClusterMismatch", err)
	}
	if p, err := m.Replica("a", 0); err != nil || p.log.EndOffset() != 2 {
		t.Fatalf("data touched by a foreign image: %v %v", p, err)
	}
	m.Close()
	// The cluster id is remembered across restarts; an image before the
	// cluster is bootstrapped changes nothing.
	m2 := newManager(t, dir, 1)
	if err := m2.Apply(newImage(t, "").snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply(newImage(t, "c2").snapshot(), now, true); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("after restart: %v, want ErrClusterMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "a-0")); err != nil {
		t.Fatalf("log dir gone: %v", err)
	}
	// A data dir of node 1 is refused to node 2.
	if _, err := NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: 2}); err == nil {
		t.Fatal("node 2 opened node 1's data dir")
	}
}

func TestReplicaManagerLeavesLegacyDirsAlone(t *testing.T) {
	now := time.Unix(5000, 0)
	dir := t.TempDir()
	for _, d := range []string{"old-0", "adopt-0"} {
		if err := os.MkdirAll(filepath.Join(dir, "logs", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := newManager(t, dir, 1)
	if err := m.Apply(newImage(t, "c1").apply(createTopic("adopt", "id-x", []int32{1})).snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "old-0")); err != nil {
		t.Errorf("a directory without partition metadata was deleted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "adopt-0", partitionMetaFile)); err != nil {
		t.Errorf("adopted directory has no metadata: %v", err)
	}
}

func TestMetadataCacheFollowsDeltas(t *testing.T) {
	b := newImage(t, "c1")
	c := NewMetadataCache()
	if err := c.Update(b.off, b.snapshot(), nil); err != nil {
		t.Fatal(err)
	}
	start := b.off
	b.apply(createTopic("a", "id", []int32{1, 2})).apply(controller.ConfigChange{Key: "k", Value: "v"})
	deltas := []controller.Delta{
		{Offset: start + 1, Record: createTopic("a", "id", []int32{1, 2})},
		{Offset: start + 2, Record: controller.ConfigChange{Key: "k", Value: "v"}},
	}
	waited := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		waited <- c.WaitForOffset(ctx, start+3)
	}()
	// A rejected record at start+3 still moves the offset.
	if err := c.Update(start+3, nil, deltas); err != nil {
		t.Fatal(err)
	}
	b.im.Offset = start + 3
	if got := c.Image(); !reflect.DeepEqual(got.Clone(), b.im.Clone()) {
		t.Fatalf("cache image differs from the controller's:\n%+v\n%+v", got, b.im)
	}
	if c.Offset() != 0 {
		t.Errorf("applied offset moved before MarkApplied: %d", c.Offset())
	}
	c.MarkApplied(start + 3)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if h, ok := c.Leader("a", 0); !ok || h.LeaderID != 1 || h.Address != "b:1" {
		t.Errorf("leader hint %+v %v", h, ok)
	}
	if _, ok := c.Leader("a", 1); ok {
		t.Error("hint for a partition that does not exist")
	}
	// A delta that does not apply (diverged) is refused; nothing changes.
	bad := []controller.Delta{{Offset: start + 4, Record: controller.DeleteTopic{Name: "nope"}}}
	if err := c.Update(start+4, nil, bad); err == nil {
		t.Fatal("diverging delta accepted")
	}
	if c.Image().Offset != start+3 {
		t.Errorf("image moved on a refused update: %d", c.Image().Offset)
	}
	if err := c.Update(start+1, nil, nil); err == nil {
		t.Error("update behind the image accepted")
	}
}

// The high watermarks (and recovery points) of a broker's logs are in one
// file each (storage.HighWatermarkFile, storage.RecoveryPointFile in
// logs/), written at Close (and every
// hwCheckpointEvery when one changed), restored at the next start, and a
// deleted topic's lines go with it (issue 31).
func TestReplicaManagerHighWatermarksInOneFile(t *testing.T) {
	now := time.Unix(5000, 0)
	dir := t.TempDir()
	m := newManager(t, dir, 1)
	b := newImage(t, "c1").apply(createTopic("hw", "id-hw", []int32{1}, []int32{1}, []int32{1})).apply(createTopic("gone", "id-g", []int32{1}))
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		if _, err := m.Append("hw", p, plainBatch(int(p)+2), now); err != nil {
			t.Fatal(err)
		}
	}
	b.apply(controller.DeleteTopic{Name: "gone"})
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "logs", storage.HighWatermarkFile))
	if want := "0\n3\nhw 0 2\nhw 1 3\nhw 2 4\n"; err != nil || string(data) != want {
		t.Fatalf("%s: %q %v, want %q", storage.HighWatermarkFile, data, err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "hw-0", "high-watermark-checkpoint")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partition has a high-watermark file of its own: %v", err)
	}
	// The recovery points likewise (decision 57).
	data, err = os.ReadFile(filepath.Join(dir, "logs", storage.RecoveryPointFile))
	if want := "0\n3\nhw 0 2\nhw 1 3\nhw 2 4\n"; err != nil || string(data) != want {
		t.Fatalf("%s: %q %v, want %q", storage.RecoveryPointFile, data, err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "hw-0", storage.RecoveryPointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partition has a recovery-point file of its own: %v", err)
	}
	m2 := newManager(t, dir, 1)
	if err := m2.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 3; p++ {
		r, err := m2.Replica("hw", p)
		if err != nil {
			t.Fatal(err)
		}
		if hw := r.log.HighWatermark(); hw != int64(p)+2 {
			t.Errorf("hw-%d restored at %d, want %d", p, hw, p+2)
		}
	}
}

// Images built by copy-on-write (what the metadata cache publishes) are
// applied for what changed: a partition change reaches its replica, the
// partitions the update left alone keep their role (issue 31).
func TestReplicaManagerAppliesCopyOnWriteImages(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 1)
	b := newImage(t, "c1").apply(createTopic("a", "id-a", []int32{1, 2}, []int32{2, 1}))
	im := b.snapshot()
	if err := m.Apply(im, now, true); err != nil {
		t.Fatal(err)
	}
	if got, want := hosted(m), map[string]int32{"a-0": 1, "a-1": 2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("hosted %v, want %v", got, want)
	}
	p1 := im.Topics["a"].Partitions[1]
	ed := controller.EditImage(im)
	if _, err := ed.Apply(controller.PartitionChange{Topic: "a", Partition: 1, PartitionEpoch: p1.PartitionEpoch, LeaderEpoch: p1.LeaderEpoch,
		Leader: 1, ISR: []int32{1, 2}}, im.Offset+1); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(ed.Image(), now, true); err != nil {
		t.Fatal(err)
	}
	if got, want := hosted(m), map[string]int32{"a-0": 1, "a-1": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the change: hosted %v, want %v", got, want)
	}
	if _, err := m.Append("a", 1, plainBatch(1), now); err != nil {
		t.Fatalf("append on the new leader: %v", err)
	}
	if _, err := m.Append("a", 0, plainBatch(1), now); err != nil {
		t.Fatalf("append on the untouched leader: %v", err)
	}
}
