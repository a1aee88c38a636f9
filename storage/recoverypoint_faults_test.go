//go:build sluicetest

package storage

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// Rule (decision 57): segments a recovery scanned may be only in the page
// cache, so the recovery point does not claim them until they are synced:
// the next Flush (or roll) fsyncs them — here the fsync of the first one
// fails, and the failure names it — and the recovery point stays where
// the checkpoint had it.
func TestFlushSyncsSegmentsRecoveryScanned(t *testing.T) {
	dir := t.TempDir()
	rps := mustOpenRecoveryPoints(t, dir)
	l := openWithRecoveryPoints(t, dir, "orders-0", rps, nil)
	appendEpochs(t, l, truncationEpochs, 10_000, 100)
	waitSealedSyncs(l)
	abandon(l) // the recovery point was never checkpointed: 0

	var faults FaultSet
	r := openWithRecoveryPoints(t, dir, "orders-0", mustOpenRecoveryPoints(t, dir), &faults)
	defer r.Close()
	if rp := r.RecoveryPoint(); rp != 0 {
		t.Fatalf("recovery point %d after recovering from 0, want 0", rp)
	}
	first := r.Segments()[0].Path
	faults.Fail(first, syscall.EIO, OpSync)
	err := r.Flush()
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), first) {
		t.Fatalf("Flush: %v, want EIO naming %s", err, first)
	}
	if rp := r.RecoveryPoint(); rp != 0 {
		t.Fatalf("recovery point %d after a failed sync, want 0", rp)
	}
}
