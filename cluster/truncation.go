package cluster

import (
	"github.com/sluice-io/sluice/cluster/replication"
)

// truncateFollower truncates a follower's log where it diverges from the
// leader's answer (KIP-101/279). again reports that another
// OffsetForLeaderEpoch round is needed.
func (m *ReplicaManager) truncateFollower(p *Replica, leaderEpoch int32, endOffset, leaderStart int64) (again bool, err error) {
	d := replication.TruncationOffset(replication.TruncationInput{
		LogStartOffset: p.log.StartOffset(), LogEndOffset: p.log.EndOffset(), HighWatermark: p.log.HighWatermark(),
		Epochs: p.log.EpochEntries(), Leader: replication.EpochEndOffset{LeaderEpoch: leaderEpoch, EndOffset: endOffset},
		LeaderLogStartOffset: leaderStart,
	})
	if d.BelowHW {
		m.log.Error("truncating below the high watermark: committed data is lost (unclean leader election?)",
			p.LogAttr(), "truncate_to", d.TruncateTo, "high_watermark", p.log.HighWatermark(), "rule", d.Rule.String())
	}
	switch {
	case d.Fully:
		m.log.Warn("follower log restarts empty", p.LogAttr(), "at", d.FetchFrom, "rule", d.Rule.String())
		err = p.log.TruncateFullyAndStartAt(d.FetchFrom)
	case d.Truncate:
		m.log.Info("follower truncating to the divergence point", p.LogAttr(), "from", p.log.EndOffset(), "to", d.TruncateTo, "rule", d.Rule.String())
		err = p.log.TruncateTo(d.TruncateTo)
	case p.log.LatestEpoch() > leaderEpoch && leaderEpoch >= 0 && d.TruncateTo == p.log.EndOffset():
		// Nothing to cut, but an epoch entry with no records sits at the
		// log end (a leader that crashed before its first batch reached
		// the log): drop it, or the leader's lower-epoch batches would be
		// refused.
		err = p.log.TruncateTo(d.TruncateTo)
	}
	return d.NeedAnotherRound, err
}

// restartFollowerAt empties a follower whose log ends below the leader's
// log start offset. Caller holds p.roleMu, taken with lockAsFollower.
func (m *ReplicaManager) restartFollowerAt(p *Replica, offset int64) error {
	m.log.Warn("follower is behind the leader's log start; restarting its log", p.LogAttr(), "at", offset)
	return p.log.TruncateFullyAndStartAt(offset)
}
