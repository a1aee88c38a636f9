package coordinator

import (
	"log/slog"
	"sync/atomic"

	"github.com/sluice-io/sluice/cluster"
)

// skippedRecords counts and reports the records of an internal topic that
// a coordinator's load left out because it could not decode them (issue
// 29): one bad record must not leave a whole partition, and every group
// or transactional id on it, without a coordinator. Both coordinators
// report through it, so their log lines and counters agree. Safe for
// concurrent use (loads of different partitions run at once).
type skippedRecords struct {
	n atomic.Int64 // records skipped by every load so far
}

// report logs one skipped record of tp at offset, with the reason, and
// counts it.
func (s *skippedRecords) report(logger *slog.Logger, tp cluster.TopicPartition, leaderEpoch int32, offset int64, reason error) {
	s.n.Add(1)
	logger.Warn("coordinator load skipped a record it cannot decode", "topic", tp.Topic, "partition", tp.Partition,
		"leader_epoch", leaderEpoch, "offset", offset, "reason", reason)
}

// count is the number of records skipped so far; a record skipped by
// several loads (the partition led again) counts each time.
func (s *skippedRecords) count() int64 { return s.n.Load() }
