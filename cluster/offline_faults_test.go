//go:build sluicetest

package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/storage"
)

// Decision 42, broker side: the first disk error of a hosted replica's
// log takes that replica offline on this broker: it stops leading (at
// once, and whatever later images say), every request for it answers
// KAFKA_STORAGE_ERROR naming the path and the OS error, the heartbeat's
// report names it, and the broker's other partitions keep working. When
// the partition is no longer hosted (topic deleted) the failure is
// forgotten.
func TestOfflineReplicaStopsServing(t *testing.T) {
	dir := t.TempDir()
	faults := &storage.FaultSet{}
	m, err := NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: 1, StorageFaults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b := newImage(t, "c1").apply(createTopic("t", "id-t", []int32{1}, []int32{1}))
	now := time.Now()
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("t", 0, plainBatch(3), now); err != nil {
		t.Fatal(err)
	}
	p0, _ := m.Replica("t", 0)
	if !p0.IsLeader(-1) {
		t.Fatal("t-0 not led before the failure")
	}

	pdir := filepath.Join(dir, "logs", "t-0")
	faults.Fail(pdir+string(os.PathSeparator), syscall.EIO, storage.OpWrite)
	_, err = m.Append("t", 0, plainBatch(1), now)
	checkStorageError(t, "append hitting the failure", err, pdir, "input/output error")
	faults.Clear() // sticky even with a healthy disk

	wait.For(t, 5*time.Second, "t-0 stops leading", func() error {
		if p0.IsLeader(-1) {
			return errors.New("still leader")
		}
		return nil
	})
	_, err = m.Replica("t", 0)
	checkStorageError(t, "Replica", err, pdir, "input/output error")
	_, err = m.Append("t", 0, plainBatch(1), now)
	checkStorageError(t, "append after the failure", err, pdir, "input/output error")
	res, err := m.Fetch(t.Context(), FetchParams{ReplicaID: NoReplica, Isolation: FetchHighWatermark, MaxBytes: 1 << 20,
		Partitions: []FetchPartition{{TopicPartition: TopicPartition{Topic: "t", Partition: 0}, CurrentLeaderEpoch: NoLeaderEpoch, PartitionMaxBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	checkStorageError(t, "consumer fetch", res.Partitions[0].Err, pdir, "input/output error")

	// A later image (say the controller has not moved the leadership
	// yet) does not make it lead again.
	b.apply(controller.ConfigChange{Topic: "t", Key: "retention.ms", Value: "1000000"})
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if p0.IsLeader(-1) {
		t.Fatal("an offline replica leads again after an image")
	}

	// The report, and the other partition.
	reps := m.OfflineReplicaReports()
	if len(reps) != 1 || reps[0].Topic != "t" || reps[0].TopicID != "id-t" || reps[0].Partition != 0 || reps[0].Path != pdir ||
		!strings.Contains(reps[0].Error, "write ") || !strings.Contains(reps[0].Error, "input/output error") {
		t.Fatalf("reports %+v", reps)
	}
	if fs := m.OfflineReplicas(); len(fs) != 1 || !strings.HasPrefix(fs[0].Reason(), "partition t-0 at "+pdir+": write ") {
		t.Fatalf("offline replicas %+v", fs)
	}
	if _, err := m.Append("t", 1, plainBatch(1), now); err != nil {
		t.Fatalf("the healthy partition: %v", err)
	}

	// Deleting the topic forgets the failure.
	b.apply(controller.DeleteTopic{Name: "t"})
	_ = m.Apply(b.snapshot(), now, true) // deleting the failed log may fail; the replica goes anyway
	if fs := m.OfflineReplicas(); len(fs) != 0 {
		t.Fatalf("offline replicas after the topic was deleted: %+v", fs)
	}
}
