//go:build sluicetest

package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Issue 29, broker side: running out of file descriptors takes no replica
// offline. An append that hits EMFILE fails with a retriable error and the
// replica keeps leading; a log that cannot be opened for want of
// descriptors is not reported offline and is opened in the background
// once descriptors are free, with no new image; every such error is
// counted (ResourceErrors).
func TestFileDescriptorExhaustionTakesNoReplicaOffline(t *testing.T) {
	dir := t.TempDir()
	faults := &storage.FaultSet{}
	m, err := NewReplicaManager(ReplicaManagerConfig{DataDir: dir, NodeID: 1, StorageFaults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	b := newImage(t, "c1").apply(createTopic("t", "id-t", []int32{1}))
	now := time.Now()
	if err := m.Apply(b.snapshot(), now, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Append("t", 0, plainBatch(3), now); err != nil {
		t.Fatal(err)
	}

	// An append while the process is out of descriptors.
	pdir := filepath.Join(dir, "logs", "t-0")
	faults.Fail(pdir+string(os.PathSeparator), syscall.EMFILE)
	_, err = m.Append("t", 0, plainBatch(1), now)
	if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !errs.Retriable(errs.Code(err)) || !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("append out of descriptors: %v, want a retriable KAFKA_STORAGE_ERROR wrapping EMFILE", err)
	}
	faults.Clear()
	p0, err := m.Replica("t", 0)
	if err != nil || !p0.IsLeader(-1) || p0.Offline() {
		t.Fatalf("after the resource error: replica %v, err %v; want it online and leading", p0, err)
	}
	if got := m.OfflineReplicas(); len(got) != 0 {
		t.Fatalf("offline replicas %v", got)
	}
	if _, err := m.Append("t", 0, plainBatch(1), now); err != nil {
		t.Fatalf("append with descriptors free: %v", err)
	}

	// A new partition whose log cannot be opened: not offline; opened by
	// the retry once descriptors are free.
	b.apply(createTopic("u", "id-u", []int32{1}))
	udir := filepath.Join(dir, "logs", "u-0")
	faults.Fail(udir, syscall.EMFILE, storage.OpOpen)
	err = m.Apply(b.snapshot(), now, true)
	if !storage.IsResourceError(err) {
		t.Fatalf("Apply with the open failing: %v, want the resource error", err)
	}
	if got := m.OfflineReplicas(); len(got) != 0 {
		t.Fatalf("offline replicas %v after a resource error", got)
	}
	before := m.ResourceErrors()
	if before < 2 {
		t.Fatalf("ResourceErrors = %d, want the append's and the open's", before)
	}
	faults.Clear()
	wait.For(t, 10*time.Second, "u-0 opened in the background and leading", func() error {
		p, err := m.Replica("u", 0)
		if err != nil {
			return err
		}
		if !p.IsLeader(-1) {
			return errors.New("not leading")
		}
		return nil
	})
	if _, err := m.Append("u", 0, plainBatch(2), now); err != nil {
		t.Fatalf("append to the reopened partition: %v", err)
	}
}
