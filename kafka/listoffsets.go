package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Kafka's ListOffsets timestamps that name a position.
const (
	listLatest       = -1
	listEarliest     = -2
	listMaxTimestamp = -3
	listEarliestLoc  = -4 // earliest local (KIP-405): the log start here
)

// listOffsets serves ListOffsets (v1+): latest (the high watermark, or
// the last stable offset under read_committed), earliest, max timestamp,
// and the first offset at or after a timestamp; per partition, from its
// leader, after the current-leader-epoch check (KIP-320).
func listOffsets(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.ListOffsetsRequest)
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	committed := req.IsolationLevel == 1
	resp.Topics = make([]kmsg.ListOffsetsResponseTopic, len(req.Topics))
	for i := range req.Topics {
		rt := &req.Topics[i]
		tr := &resp.Topics[i]
		tr.Topic = rt.Topic
		tr.Partitions = make([]kmsg.ListOffsetsResponseTopicPartition, len(rt.Partitions))
		var deniedCode int16
		if !c.allowed(c.ctx, auth.OpDescribe, auth.Topic(rt.Topic)) {
			deniedCode, _ = c.denied(auth.OpDescribe, auth.Topic(rt.Topic))
		}
		for j, lp := range rt.Partitions {
			pr := &tr.Partitions[j]
			*pr = kmsg.NewListOffsetsResponseTopicPartition()
			pr.Partition, pr.Offset, pr.Timestamp, pr.LeaderEpoch = lp.Partition, -1, -1, -1
			if deniedCode != 0 {
				pr.ErrorCode = deniedCode
				continue
			}
			if err := c.listPartitionOffset(rt.Topic, lp, pr, committed, r.version); err != nil {
				pr.ErrorCode = errCode(err)
			}
		}
	}
	return resp
}

// listPartitionOffset answers one partition of ListOffsets into pr.
func (c *conn) listPartitionOffset(topic string, lp kmsg.ListOffsetsRequestTopicPartition, pr *kmsg.ListOffsetsResponseTopicPartition, committed bool, version int16) error {
	part, err := c.s.leaders.Partition(topic, lp.Partition)
	if err != nil {
		return err
	}
	epoch := part.LeaderEpoch()
	if version >= 4 && lp.CurrentLeaderEpoch != cluster.NoLeaderEpoch {
		switch {
		case lp.CurrentLeaderEpoch < epoch:
			return errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch %d of %s-%d is older than %d", lp.CurrentLeaderEpoch, topic, lp.Partition, epoch)
		case lp.CurrentLeaderEpoch > epoch:
			return errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch %d of %s-%d is newer than %d", lp.CurrentLeaderEpoch, topic, lp.Partition, epoch)
		}
	}
	pr.LeaderEpoch = epoch
	switch ts := lp.Timestamp; ts {
	case listLatest:
		pr.Offset = part.HighWatermark()
		if committed {
			pr.Offset = part.LastStableOffset()
		}
	case listEarliest, listEarliestLoc:
		pr.Offset = part.LogStartOffset()
	case listMaxTimestamp:
		pr.Offset, pr.Timestamp = part.MaxTimestampOffset()
	default:
		if ts < 0 {
			return errs.New(sluicev1.ErrorCode_INVALID_REQUEST, "timestamp %d is neither a time nor one of -1 (latest), -2 (earliest), -3 (max timestamp), -4 (earliest local)", ts)
		}
		off, found, err := offsetForTimestamp(part, ts)
		if err != nil {
			return err
		}
		if found != nil {
			pr.Offset, pr.Timestamp = off, *found
		}
	}
	if version == 0 {
		pr.OldStyleOffsets = []int64{pr.Offset}
	}
	return nil
}

// offsetForTimestamp is the first offset at or after ts, with its
// timestamp (nil when no record is that late).
func offsetForTimestamp(part *cluster.Replica, ts int64) (int64, *int64, error) {
	off, t, found, err := part.OffsetForTimestamp(ts)
	if err != nil || !found {
		return -1, nil, err
	}
	return off, &t, nil
}
