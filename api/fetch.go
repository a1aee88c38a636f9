package api

import (
	"context"
	"reflect"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Fetch returns whole batches from each requested partition, bounded by
// partition_max_bytes and max_bytes, below the high watermark. When fewer
// than min_bytes are available it waits up to max_wait_ms for appends.
// Batch bytes are copied from segments into the response without decoding.
func (s *Server) Fetch(ctx context.Context, req *sluicev1.FetchRequest) (*internalv1.FetchResponseView, error) {
	if req.MaxWaitMs < 0 || req.MinBytes < 0 || req.MaxBytes < 0 {
		return nil, invalidRequest("max_wait_ms, min_bytes and max_bytes must be >= 0 (got %d, %d, %d)", req.MaxWaitMs, req.MinBytes, req.MaxBytes)
	}
	switch req.IsolationLevel {
	case sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED:
	default:
		return nil, invalidRequest("unknown isolation_level %d", req.IsolationLevel)
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes == 0 || maxBytes > MaxMessageSize-(1<<20) {
		maxBytes = min(DefaultFetchMaxBytes, MaxMessageSize-(1<<20))
	}
	wait := time.Duration(req.MaxWaitMs) * time.Millisecond
	if wait > MaxFetchWait {
		wait = MaxFetchWait
	}
	deadline := time.Now().Add(wait)
	for {
		resp, size, changed := s.fetchOnce(req, maxBytes)
		if size >= max(1, int(req.MinBytes)) || wait == 0 || len(changed) == 0 {
			return resp, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return resp, nil
		}
		if !waitAny(ctx, changed, left) {
			// Deadline or cancellation: answer with what there is.
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			resp, _, _ = s.fetchOnce(req, maxBytes)
			return resp, nil
		}
	}
}

// fetchOnce reads every partition once. It returns the response, the bytes
// of batches in it, and the change channels of the partitions read (taken
// before reading, so no append between read and wait is missed).
func (s *Server) fetchOnce(req *sluicev1.FetchRequest, maxBytes int) (*internalv1.FetchResponseView, int, []<-chan struct{}) {
	resp := &internalv1.FetchResponseView{Topics: make([]*internalv1.FetchableTopicResponseView, 0, len(req.Topics))}
	total := 0
	var changed []<-chan struct{}
	for _, t := range req.Topics {
		tr := &internalv1.FetchableTopicResponseView{Name: t.Name, Partitions: make([]*internalv1.PartitionDataView, 0, len(t.Partitions))}
		for _, fp := range t.Partitions {
			pd := &internalv1.PartitionDataView{Partition: fp.Partition, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, NextFetchOffset: fp.FetchOffset}
			tr.Partitions = append(tr.Partitions, pd)
			part, err := s.leaderPartition(t.Name, fp.Partition)
			if err != nil {
				pd.ErrorCode, pd.ErrorMessage = partitionError(err)
				pd.CurrentLeader = s.leaderHint(t.Name, fp.Partition, pd.ErrorCode)
				continue
			}
			epoch := part.LeaderEpoch()
			if fp.PartitionMaxBytes < 0 {
				pd.ErrorCode, pd.ErrorMessage = sluicev1.ErrorCode_INVALID_FETCH_SIZE, "partition_max_bytes must be >= 0"
				continue
			}
			if fp.CurrentLeaderEpoch > epoch {
				pd.ErrorCode, pd.ErrorMessage = sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch is newer than this broker knows"
				continue
			}
			if fp.CurrentLeaderEpoch >= 0 && fp.CurrentLeaderEpoch < epoch {
				pd.ErrorCode, pd.ErrorMessage = sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch is stale; refresh metadata"
				pd.CurrentLeader = s.leaderHint(t.Name, fp.Partition, pd.ErrorCode)
				continue
			}
			changed = append(changed, part.Log.Changed())
			// Consumers read below the high watermark only; with no
			// transactions yet the LSO equals it.
			hw := part.Log.HighWatermark()
			pd.HighWatermark, pd.LastStableOffset, pd.LogStartOffset = hw, hw, part.Log.StartOffset()
			limit := int(fp.PartitionMaxBytes)
			if limit == 0 {
				limit = DefaultPartitionMaxBytes
			}
			if rem := maxBytes - total; rem < limit {
				limit = rem
			}
			if limit <= 0 && total > 0 {
				continue
			}
			res, err := part.Log.Read(fp.FetchOffset, max(limit, 1), hw)
			if err != nil {
				pd.ErrorCode, pd.ErrorMessage = partitionError(err)
				if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
					pd.ErrorCode = sluicev1.ErrorCode_KAFKA_STORAGE_ERROR
				}
				continue
			}
			pd.Batches = res.Batches
			pd.NextFetchOffset = res.NextOffset
			total += batchBytes(res)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, total, changed
}

func batchBytes(r storage.ReadResult) int {
	n := 0
	for _, b := range r.Batches {
		n += len(b)
	}
	return n
}

// waitAny blocks until one of chans is closed (true), or d passes or ctx
// ends (false).
func waitAny(ctx context.Context, chans []<-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	if len(chans) == 1 {
		select {
		case <-chans[0]:
			return true
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	cases := make([]reflect.SelectCase, 0, len(chans)+2)
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, c := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	i, _, _ := reflect.Select(cases)
	return i >= 2
}
