package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// checkStorageError asserts err is KAFKA_STORAGE_ERROR naming dir and the
// OS error text.
func checkStorageError(t *testing.T, what string, err error, dir, oserr string) {
	t.Helper()
	if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), oserr) {
		t.Fatalf("%s: %v, want KAFKA_STORAGE_ERROR naming %s and %q", what, err, dir, oserr)
	}
}

// A log that cannot be created or opened is an offline replica too: the
// controller hears of it and another replica leads.
func TestUnopenableLogIsOffline(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, 1)
	// A file where the partition's directory must go.
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(dir, "logs", "t-0")
	if err := os.WriteFile(pdir, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Apply does not fail for it (the failure is logged once, by the
	// replica manager), and does not host it.
	for range 2 {
		if err := m.Apply(newImage(t, "c1").apply(createTopic("t", "id-t", []int32{1})).snapshot(), time.Now(), false); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Replicas()) != 0 {
		t.Fatal("Apply hosted a partition whose directory is a file")
	}
	_, err := m.Replica("t", 0)
	checkStorageError(t, "Replica", err, pdir, "not a directory")
	if reps := m.OfflineReplicaReports(); len(reps) != 1 || !strings.HasPrefix(reps[0].Error, "open "+pdir) {
		t.Fatalf("reports %+v", reps)
	}
}
