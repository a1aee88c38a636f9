package cluster

import (
	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// EndOffsetForEpoch answers OffsetForLeaderEpoch on the leader.
func (p *Replica) EndOffsetForEpoch(currentEpoch, epoch int32) (int32, int64, error) {
	p.roleMu.Lock()
	t := p.tracker
	var cur int32
	if t != nil {
		cur = t.LeaderEpoch()
	}
	p.roleMu.Unlock()
	switch {
	case t == nil:
		return 0, 0, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", p)
	case currentEpoch >= 0 && currentEpoch < cur:
		return 0, 0, errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch %d of %s is stale, current is %d", currentEpoch, p, cur)
	case currentEpoch > cur:
		return 0, 0, errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch %d of %s is newer than this leader's %d", currentEpoch, p, cur)
	}
	// The leader's current epoch counts as starting at its log end even
	// before its first append under it (Kafka assigns it at election).
	e, off := replication.LeaderEndOffsetForEpoch(epochEntries(p.Log), p.Log.EndOffset(), cur, epoch)
	return e, off, nil
}

// epochEntries is l's leader-epoch cache in the replication package's
// terms.
func epochEntries(l *storage.Log) []replication.EpochEntry {
	entries := l.EpochEntries()
	out := make([]replication.EpochEntry, len(entries))
	for i, e := range entries {
		out[i] = replication.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return out
}
