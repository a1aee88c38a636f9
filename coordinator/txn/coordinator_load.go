package txn

import (
	"errors"
	"fmt"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/batch"
)

var _ cluster.LeadershipListener = (*Coordinator)(nil)

// BecameLeader implements cluster.LeadershipListener for
// __transaction_state (other topics are ignored; runtime.BecameLeader):
// the partition's ids answer COORDINATOR_LOAD_IN_PROGRESS while it is
// loaded from the log (stateLoader); then it serves, with leaderEpoch as the
// coordinator epoch, and every id found in PrepareCommit/PrepareAbort has
// its markers resent and is completed. (PrepareEpochFence is never
// written, so a load never finds it: the fence's PrepareAbort is resumed
// like any other.) It returns at once.
func (c *Coordinator) BecameLeader(tp cluster.TopicPartition, leaderEpoch int32) {
	c.rt.BecameLeader(tp, leaderEpoch)
}

// Resigned implements cluster.LeadershipListener (runtime.Resigned): the
// partition's state at leaderEpoch is dropped (a load in progress is
// abandoned, marker rounds stop) and its ids answer NOT_COORDINATOR.
func (c *Coordinator) Resigned(tp cluster.TopicPartition, leaderEpoch int32) {
	c.rt.Resigned(tp, leaderEpoch)
}

// stateLoader is one load of a __transaction_state partition: it replays
// the partition into a fresh map and, once read to the end, publishes it
// and resumes the Prepare* ids.
//
// A corrupt record (ErrCorruptRecord: not one a coordinator wrote) is
// skipped and reported (log and SkippedRecords; issue 29) and the load
// goes on: stopping would leave every transactional id of the partition
// without a coordinator for good. A record of a newer version
// (ErrNewerRecordVersion: a newer Sluice led the partition) still
// stops the load for good (the partition answers
// COORDINATOR_NOT_AVAILABLE): it is the id's latest state, and skipping
// it would resume an older one — a PrepareCommit forgotten, its
// transaction aborted after some of its partitions committed. The fix
// there is to run the newer version, not to guess.
type stateLoader struct {
	c    *Coordinator
	ps   *statePartition
	txns map[string]*Metadata
}

// Replay implements runtime.Loader.
func (l *stateLoader) Replay(b []byte, skip func(offset int64, err error)) error {
	return replayBatch(l.txns, b, skip)
}

// Done implements runtime.Loader (c.mu held).
func (l *stateLoader) Done(int64) {
	l.ps.txns = l.txns
	for _, m := range l.txns {
		if m.PendingMarkers() {
			l.c.startMarkersLocked(l.ps, *m)
		}
	}
	l.c.scheduleScan(l.ps)
}

// replayBatch folds one __transaction_state batch into txns. Control
// batches (none are written to this topic) are skipped. A corrupt record
// is left out and passed to skip with its offset; any other error (a
// record of a newer version, a batch that is not canonical) is returned.
func replayBatch(txns map[string]*Metadata, b []byte, skip func(offset int64, err error)) error {
	h, err := batch.ParseHeader(b)
	if err != nil {
		return err
	}
	if h.IsControl() {
		return nil
	}
	return batch.ForEachRecord(b, func(r batch.Record) error {
		err := Replay(txns, r.Key, r.Value)
		switch {
		case err == nil:
		case errors.Is(err, ErrCorruptRecord):
			skip(r.Offset, err)
		default:
			return errors.Join(fmt.Errorf("record at offset %d", r.Offset), err)
		}
		return nil
	})
}

// SkippedRecords is the number of __transaction_state records the loads
// of this node have skipped as corrupt (a record skipped by several
// loads counts each time), for metrics.
func (c *Coordinator) SkippedRecords() int64 { return c.rt.SkippedRecords() }
