package cluster

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/sluice-io/sluice/cluster/replication"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// The read path (DESIGN §3, §8): one Fetch serves consumers and followers.
// Per partition it fences stale or future leader epochs, bounds the read
// by what this kind of reader may see (FetchIsolation), applies the byte
// budgets, records a follower's fetch position (high watermark, ISR), and
// long-polls until enough bytes are there. The gRPC handlers only
// translate requests and answers.

// FetchIsolation is the upper bound of what a reader may see (Kafka's
// FetchIsolation).
type FetchIsolation int

const (
	// FetchLogEnd reads up to the log end offset: followers.
	FetchLogEnd FetchIsolation = iota
	// FetchHighWatermark reads below the high watermark: consumers
	// with read_uncommitted. Control batches (transaction markers) are
	// left out.
	FetchHighWatermark
	// FetchTxnCommitted reads below the last stable offset: consumers
	// with read_committed. Control batches and the batches of aborted
	// transactions are left out (storage.Log.ReadConsumer), so a client
	// reads exactly-once with no logic of its own.
	FetchTxnCommitted
)

// NoReplica is FetchParams.ReplicaID of a consumer's fetch.
const NoReplica int32 = -1

// FetchParams is one fetch request.
type FetchParams struct {
	// ReplicaID is the fetching follower's node id, or NoReplica for a
	// consumer. A follower's fetch is accounted (the leader's ISR and HW) and must
	// carry the follower's current BrokerEpoch.
	ReplicaID   int32
	BrokerEpoch int64
	// Isolation bounds the read; followers use FetchLogEnd.
	Isolation FetchIsolation
	// MaxWait is how long to wait for MinBytes (<= 0: answer at once).
	MaxWait time.Duration
	// MinBytes is the batch bytes worth answering with (at least 1).
	MinBytes int
	// MaxBytes bounds the batch bytes of the whole answer (> 0). The
	// first partition with data answers at least one batch even when it
	// is larger; the others only batches that fit.
	MaxBytes   int
	Partitions []FetchPartition
	// Alloc, if set, supplies the buffers the reads go into
	// (storage.Log.ReadInto); the caller owns them and frees them once
	// the answer is written.
	Alloc func(n int) []byte
	// Unfiltered, for a consumer's fetch, returns every batch below the
	// isolation's bound — transaction markers, batches the cleaner
	// emptied and, under FetchTxnCommitted, the batches of aborted
	// transactions with the aborted transactions of the range read
	// (FetchPartitionResult.AbortedTransactions) — for a reader that
	// filters them itself and moves on by the batches' offsets, as Kafka
	// clients do (the Kafka door). Otherwise the broker filters
	// (storage.Log.ReadConsumer).
	Unfiltered bool
}

// FetchPartition is one partition of a fetch.
type FetchPartition struct {
	TopicPartition
	// FetchOffset is the first offset wanted; for a follower it is also
	// its log end offset.
	FetchOffset int64
	// CurrentLeaderEpoch is the leader epoch the reader believes current
	// (KIP-320), or NoLeaderEpoch to skip the check (consumers only).
	CurrentLeaderEpoch int32
	// PartitionMaxBytes bounds this partition's batch bytes (> 0; a
	// negative value is INVALID_FETCH_SIZE).
	PartitionMaxBytes int
}

// NoLeaderEpoch is FetchPartition.CurrentLeaderEpoch of a reader that does
// not know the leader epoch (Kafka NO_PARTITION_LEADER_EPOCH).
const NoLeaderEpoch int32 = -1

// FetchResult is Fetch's answer: one entry per FetchParams.Partitions, in
// the same order.
type FetchResult struct {
	Partitions []FetchPartitionResult
	// Waited is the time Fetch spent in its long poll, waiting for data
	// (MinBytes, MaxWait): not this broker's work, which the request
	// quota leaves out (api).
	Waited time.Duration
}

// FetchPartitionResult is one partition's answer. Offsets are -1 when not
// known (the partition failed before they were read).
type FetchPartitionResult struct {
	// Err is the partition's failure (an *errs.Error), or nil. A consumer
	// fetch of a partition this node does not lead fails with an error
	// that wraps ErrNotLeader; the caller can then say who leads it.
	Err              error
	HighWatermark    int64
	LastStableOffset int64
	LogStartOffset   int64
	LogEndOffset     int64
	// Batches are whole canonical batches, copied from the log; the first
	// may start before FetchOffset. The caller must not modify them. A
	// consumer gets no control batch, and under FetchTxnCommitted no batch
	// of an aborted transaction.
	Batches [][]byte
	// AbortedTransactions are, for an Unfiltered FetchTxnCommitted
	// read, the aborted transactions that overlap the batches read
	// (storage.Log.AbortedTransactions), for the reader to filter with.
	AbortedTransactions []storage.AbortedTxn
	// NextFetchOffset is where the next fetch starts: the offset after
	// the last batch looked at, returned or left out (a consumer's answer
	// may hold no batches and still move it), or FetchOffset when there
	// was none.
	NextFetchOffset int64
}

// Fetch reads every partition of p and returns at once when at least
// MinBytes of batches are there, MaxWait is 0, no partition could be
// read, or a consumer partition's NextFetchOffset moved past batches that
// were all left out (so that the consumer fetches on from there at once
// instead of waiting); otherwise it waits for any read partition to change (append,
// truncation, high-watermark move) and reads again, until MaxWait passes,
// when it answers with what there is. The change channels are taken before
// each read, so no change between a read and the wait is missed.
//
// A follower's fetch (ReplicaID >= 0) is first checked against the
// follower's broker epoch (STALE_BROKER_EPOCH fails the whole fetch), and
// each of its partitions' fetch offsets is recorded once (recordFollowerFetch:
// the high watermark and ISR may move) before the first read. A follower
// partition that fails stays failed for the rest of the fetch; a consumer
// partition is read afresh each round.
//
// Partition errors are in the result; Fetch itself fails only with
// STALE_BROKER_EPOCH or ctx's error (ctx ended during the wait). Safe for
// concurrent use; it holds no lock while it waits.
func (m *ReplicaManager) Fetch(ctx context.Context, p FetchParams) (FetchResult, error) {
	now := time.Now()
	follower := p.ReplicaID != NoReplica
	if follower {
		if err := m.checkBrokerEpoch(p.ReplicaID, p.BrokerEpoch); err != nil {
			return FetchResult{}, err
		}
	}
	reads := make([]partitionRead, len(p.Partitions))
	res := FetchResult{Partitions: make([]FetchPartitionResult, len(p.Partitions))}
	for i, fp := range p.Partitions {
		reads[i] = partitionRead{req: fp, out: &res.Partitions[i]}
		*reads[i].out = emptyResult(fp)
		if follower {
			reads[i].replica, reads[i].out.Err = m.followerFetched(p.ReplicaID, fp, reads[i].out, now)
			reads[i].failed = reads[i].out.Err != nil
		}
	}
	deadline := now.Add(p.MaxWait)
	for {
		total, moved := 0, false
		var changed []<-chan struct{}
		for i := range reads {
			r := &reads[i]
			if r.failed {
				continue
			}
			if !follower {
				*r.out = emptyResult(r.req)
				r.replica, r.out.Err = m.consumerReplica(r.req)
				if r.out.Err != nil {
					continue
				}
			}
			ch, n := m.readPartition(r, p, follower, total)
			changed = append(changed, ch)
			total += n
			moved = moved || (r.out.Err == nil && r.out.NextFetchOffset > r.req.FetchOffset && len(r.out.Batches) == 0)
		}
		if total >= max(1, p.MinBytes) || moved || len(changed) == 0 || time.Until(deadline) <= 0 {
			return res, nil
		}
		waitStart := time.Now()
		woken := waitAny(ctx, changed, time.Until(deadline))
		res.Waited += time.Since(waitStart)
		if !woken && ctx.Err() != nil {
			return FetchResult{}, ctx.Err()
		}
		// Woken by a change, or the wait is over: read again (after the
		// deadline the loop answers with this last read).
	}
}

// partitionRead is one partition's state during a Fetch.
type partitionRead struct {
	req     FetchPartition
	out     *FetchPartitionResult
	replica *Replica
	// failed: a follower partition that failed; it is not read again.
	failed bool
}

func emptyResult(fp FetchPartition) FetchPartitionResult {
	return FetchPartitionResult{HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1, LogEndOffset: -1, NextFetchOffset: fp.FetchOffset}
}

// checkBrokerEpoch refuses a follower whose broker epoch is not the one
// the metadata image holds for it (a previous incarnation of the broker).
func (m *ReplicaManager) checkBrokerEpoch(replica int32, epoch int64) error {
	if m.repl.Load() != nil {
		if b := m.metadata().Image().Brokers[replica]; b != nil && b.Epoch == epoch {
			return nil
		}
	}
	return errs.New(sluicev1.ErrorCode_STALE_BROKER_EPOCH, "replica %d broker epoch %d is not current", replica, epoch)
}

// ErrNotLeader is the cause of a consumer fetch's NOT_LEADER_OR_FOLLOWER
// for a partition this node does not host or does not lead: the caller,
// which knows the metadata, can say who leads it instead.
var ErrNotLeader = errors.New("this node is not the partition's leader")

// consumerReplica returns the replica a consumer may read: one this node
// leads (as the image says) at the reader's leader epoch.
func (m *ReplicaManager) consumerReplica(fp FetchPartition) (*Replica, error) {
	r, err := m.Replica(fp.Topic, fp.Partition)
	if errs.Code(err) == sluicev1.ErrorCode_KAFKA_STORAGE_ERROR {
		return nil, err // offline here (decision 42)
	}
	if err != nil {
		return nil, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d does not host %s: %w", m.cfg.NodeID, fp.TopicPartition, ErrNotLeader)
	}
	leader, epoch := r.Leadership()
	if leader != m.cfg.NodeID {
		return nil, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d does not lead %s: %w", m.cfg.NodeID, fp.TopicPartition, ErrNotLeader)
	}
	if fp.PartitionMaxBytes < 0 {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_FETCH_SIZE, "partition_max_bytes must be >= 0")
	}
	if err := checkLeaderEpoch(fp.TopicPartition, fp.CurrentLeaderEpoch, epoch, false); err != nil {
		return nil, err
	}
	return r, nil
}

// followerFetched looks up the replica a follower fetches and records the
// follower's fetch offset on it (the leader's tracker).
func (m *ReplicaManager) followerFetched(replica int32, fp FetchPartition, out *FetchPartitionResult, now time.Time) (*Replica, error) {
	r, err := m.Replica(fp.Topic, fp.Partition)
	if err != nil {
		return nil, err
	}
	hw, err := r.recordFollowerFetch(replica, fp.CurrentLeaderEpoch, fp.FetchOffset, now)
	if err != nil {
		if errs.Code(err) == sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE {
			out.LogStartOffset, out.LogEndOffset = r.log.StartOffset(), r.log.EndOffset()
		}
		return nil, err
	}
	out.HighWatermark = hw
	return r, nil
}

// readPartition reads one partition once into r.out, within what is left
// of the fetch's byte budget (MaxBytes - total). It returns the replica's
// change channel, taken before the read, and the bytes read.
func (m *ReplicaManager) readPartition(r *partitionRead, p FetchParams, follower bool, total int) (<-chan struct{}, int) {
	rep, out, fp := r.replica, r.out, r.req
	// Taken before reading: no change is missed. A follower reads to the
	// log end, so only new data (or a truncation) changes its answer; a
	// consumer's also changes with the high watermark.
	ch := rep.log.Changed()
	if follower {
		ch = rep.log.DataChanged()
	}
	out.LogStartOffset, out.LogEndOffset = rep.log.StartOffset(), rep.log.EndOffset()
	if follower && !rep.IsLeader(fp.CurrentLeaderEpoch) {
		out.Err = errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leadership of %s moved while the fetch waited", fp.TopicPartition)
		r.failed = true
		return ch, 0
	}
	out.HighWatermark = rep.log.HighWatermark()
	out.LastStableOffset = rep.lastStableOffset()
	limit := min(fp.PartitionMaxBytes, p.MaxBytes-total)
	if limit <= 0 && total > 0 {
		return ch, 0 // the fetch's budget is spent
	}
	var res storage.ReadResult
	var err error
	out.AbortedTransactions = nil
	switch {
	case p.Unfiltered && p.Isolation != FetchLogEnd:
		res, err = rep.log.ReadInto(fp.FetchOffset, max(limit, 1), rep.fetchBound(p.Isolation), p.Alloc)
		if err == nil && p.Isolation == FetchTxnCommitted && len(res.Batches) > 0 {
			out.AbortedTransactions = rep.log.AbortedTransactions(fp.FetchOffset, res.NextOffset)
		}
	case p.Isolation == FetchHighWatermark:
		res, err = rep.log.ReadConsumerInto(fp.FetchOffset, max(limit, 1), storage.ReadUncommitted, p.Alloc)
	case p.Isolation == FetchTxnCommitted:
		res, err = rep.log.ReadConsumerInto(fp.FetchOffset, max(limit, 1), storage.ReadCommitted, p.Alloc)
	default:
		res, err = rep.log.ReadInto(fp.FetchOffset, max(limit, 1), rep.fetchBound(p.Isolation), p.Alloc)
	}
	if err != nil {
		out.Err = err
		if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
			out.Err = errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "read %s: %w", fp.TopicPartition, err)
		}
		r.failed = follower
		return ch, 0
	}
	out.Batches, out.NextFetchOffset = res.Batches, res.NextOffset
	if total > 0 {
		// Only the first partition with data may answer more than its
		// budget (one batch larger than it): the others keep the batches
		// that fit, so that an answer holds at most MaxBytes, or that one
		// batch, which the API sizes to what gRPC can send (Kafka's rule;
		// before, each partition could add a batch past the budget).
		keepWithin(out, fp.FetchOffset, limit)
	}
	return ch, batchBytes(out.Batches)
}

// keepWithin drops the batches of out past limit bytes; the next fetch
// starts at the first one dropped (or at fetchOffset, which the first
// batch may start before).
func keepWithin(out *FetchPartitionResult, fetchOffset int64, limit int) {
	n := 0
	for i, b := range out.Batches {
		if n += len(b); n <= limit {
			continue
		}
		if h, err := batch.ParseHeader(b); err == nil {
			out.NextFetchOffset = max(h.BaseOffset, fetchOffset)
		} else {
			out.NextFetchOffset = fetchOffset // cannot happen: the log holds canonical batches
			i = 0
		}
		out.Batches = out.Batches[:i]
		return
	}
}

// fetchBound is the offset below which a reader of isolation may read
// (consumer reads bound themselves in storage.Log.ReadConsumer, from the
// same high watermark and last stable offset).
func (r *Replica) fetchBound(isolation FetchIsolation) int64 {
	switch isolation {
	case FetchLogEnd:
		return r.log.EndOffset()
	case FetchTxnCommitted:
		return r.lastStableOffset()
	default:
		return r.log.HighWatermark()
	}
}

// lastStableOffset is the LSO: min(first offset of the oldest open
// transaction, HW) (DESIGN §10; storage.Log.LastStableOffset). On a
// follower it is computed from its own producer state and the leader's
// HW as last fetched.
func (r *Replica) lastStableOffset() int64 { return r.log.LastStableOffset() }

func batchBytes(batches [][]byte) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// checkLeaderEpoch is the leader-epoch fencing rule (KIP-320), for every
// request that names the leader epoch it believes current (fetches of
// consumers and followers, OffsetForLeaderEpoch, committed appends): an
// older epoch is FENCED_LEADER_EPOCH (the requester must refresh its
// metadata), a newer one UNKNOWN_LEADER_EPOCH (this broker has not caught
// up yet; retriable). NoLeaderEpoch (any negative epoch) skips the check
// unless required: a follower always names its epoch.
func checkLeaderEpoch(tp TopicPartition, requested, current int32, required bool) error {
	switch {
	case requested < 0 && !required:
		return nil
	case requested < current:
		return errs.New(sluicev1.ErrorCode_FENCED_LEADER_EPOCH, "leader epoch %d of %s is stale, current is %d; refresh metadata", requested, tp, current)
	case requested > current:
		return errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH, "leader epoch %d of %s is newer than this broker's %d", requested, tp, current)
	}
	return nil
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

// EpochEndOffset answers OffsetForLeaderEpoch for one partition.
type EpochEndOffset struct {
	// LeaderEpoch is the largest epoch <= the requested one that the
	// leader's log has, and EndOffset the first offset after it
	// (replication.EndOffsetForEpoch); -1 and -1 when none.
	LeaderEpoch int32
	EndOffset   int64
	// LogStartOffset is the leader's log start offset (-1 when the
	// partition is not hosted here).
	LogStartOffset int64
}

// OffsetForLeaderEpoch answers a follower's OffsetForLeaderEpoch (KIP-279)
// on the leader: where epoch ends in the leader's log, after fencing the
// follower's currentLeaderEpoch (checkLeaderEpoch; NoLeaderEpoch skips
// it). Errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
// FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH.
func (m *ReplicaManager) OffsetForLeaderEpoch(tp TopicPartition, currentLeaderEpoch, epoch int32) (EpochEndOffset, error) {
	out := EpochEndOffset{LeaderEpoch: replication.UndefinedEpoch, EndOffset: replication.UndefinedOffset, LogStartOffset: -1}
	r, err := m.Replica(tp.Topic, tp.Partition)
	if err != nil {
		return out, err
	}
	out.LogStartOffset = r.log.StartOffset()
	r.roleMu.Lock()
	t := r.tracker
	var cur int32
	if t != nil {
		cur = t.LeaderEpoch()
	}
	r.roleMu.Unlock()
	if t == nil {
		return out, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", tp)
	}
	if err := checkLeaderEpoch(tp, currentLeaderEpoch, cur, false); err != nil {
		return out, err
	}
	if epoch > cur {
		// Only a later leader writes a later epoch: whoever asks has seen
		// one (a consumer validating an offset committed under it, KIP-320),
		// so this broker's leadership is stale — cut off from the
		// controller, it has not learnt of its successor yet. Kafka answers
		// UNDEFINED_EPOCH_OFFSET, on which a consumer that has read nothing
		// keeps its offset, fetches it here past this log's end, is
		// answered OFFSET_OUT_OF_RANGE and resets to its reset offset (the
		// log start: everything again). A retriable error sends it to the
		// metadata, and to the new leader.
		return out, errs.New(sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH,
			"leader epoch %d of %s is newer than this leader's %d: this broker's leadership is stale; refresh metadata", epoch, tp, cur)
	}
	// The leader's current epoch counts as starting at its log end even
	// before its first append under it (Kafka assigns it at election).
	out.LeaderEpoch, out.EndOffset = replication.LeaderEndOffsetForEpoch(r.log.EpochEntries(), r.log.EndOffset(), cur, epoch)
	return out, nil
}
