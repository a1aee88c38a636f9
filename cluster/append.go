package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// AppendResult describes an appended batch.
type AppendResult struct {
	BaseOffset   int64
	LastOffset   int64
	MaxTimestamp int64
	// Duplicate: the batch was a producer's retry of a batch already in
	// the log (same producer id, epoch and sequences); nothing was written
	// and the offsets are the original's.
	Duplicate bool
	// LeaderEpoch is the leader epoch the batch was appended in: an
	// acks=all wait (AwaitCommit) ends if the epoch changes first.
	LeaderEpoch int32
	// LogAppendTime is the batch's timestamp when the topic stamps
	// batches at the append (message.timestamp.type=LogAppendTime: the
	// produce answer's log_append_time), else -1.
	LogAppendTime int64
	// Verifying is the time AppendTxnTo waited for the transaction
	// coordinator to add the partition to the transaction (0 for the
	// other appends), set with an error too: waiting, not this broker's
	// work, which the request quota leaves out (api).
	Verifying time.Duration
}

// appendResult is sr, appended in leaderEpoch.
func appendResult(sr storage.AppendResult, leaderEpoch int32, logAppendTime bool) AppendResult {
	r := AppendResult{BaseOffset: sr.BaseOffset, LastOffset: sr.LastOffset, MaxTimestamp: sr.MaxTimestamp, Duplicate: sr.Duplicate,
		LeaderEpoch: leaderEpoch, LogAppendTime: -1}
	if logAppendTime {
		r.LogAppendTime = sr.MaxTimestamp // a retry's: the original append's time
	}
	return r
}

// Append validates a batch as a producer sent it and appends it to the
// partition. Nothing is written unless every check passes. Errors are
// *errs.Error with the code to return for the partition.
func (m *ReplicaManager) Append(topic string, partition int32, raw []byte, now time.Time) (AppendResult, error) {
	return m.AppendWithAcks(topic, partition, raw, now, false)
}

// AppendWithAcks is Append; with acksAll it first refuses
// (NOT_ENOUGH_REPLICAS) when the ISR is smaller than min.insync.replicas.
// The caller then waits with Replica.WaitCommitted or AwaitCommit.
func (m *ReplicaManager) AppendWithAcks(topic string, partition int32, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	p, err := m.Replica(topic, partition)
	if err != nil {
		return AppendResult{}, err
	}
	return m.AppendTo(p, raw, now, acksAll)
}

// AppendTo is AppendWithAcks on a partition the caller already looked up.
// It is the producers' path: control batches are refused
// (INVALID_RECORD); the coordinators write theirs with AppendCommitted.
// Transactional batches are refused (INVALID_TXN_STATE, nothing stored):
// they come with a transactional_id and go through AppendTxnTo. Internal
// topics are refused (INVALID_TOPIC_EXCEPTION, CheckProducerTopic).
func (m *ReplicaManager) AppendTo(p *Replica, raw []byte, now time.Time, acksAll bool) (AppendResult, error) {
	if err := CheckProducerTopic(p.Topic); err != nil {
		return AppendResult{}, err
	}
	leader, epoch := p.Leadership()
	if leader != m.cfg.NodeID {
		return AppendResult{}, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "node %d is not the leader of %s (leader %d, epoch %d)", m.cfg.NodeID, p, leader, epoch)
	}
	b, h, err := producerBatch(p, raw, now)
	if err != nil {
		return AppendResult{}, err
	}
	switch {
	case h.IsTransactional():
		return AppendResult{}, errs.New(sluicev1.ErrorCode_INVALID_TXN_STATE, "a transactional batch must be sent in a produce request with the producer's transactional_id")
	}
	if acksAll {
		if err := p.checkAcksAll(); err != nil {
			return AppendResult{}, err
		}
	}
	sr, err := p.log.Append(b, epoch, now)
	res := appendResult(sr, epoch, p.Config().LogAppendTime)
	if err == nil {
		p.leaderAppended(res.LastOffset+1, now)
	}
	return res, m.appendError(p, err)
}

// canonicalBatch checks raw against p's max.message.bytes and returns it
// canonicalized, with its header. Both the batch as sent and its canonical
// form must fit: a simple batch grows when its offset deltas are filled,
// and batch.CanonicalizeMax refuses it from its scan, before copying it
// (issue 29).
func canonicalBatch(p *Replica, raw []byte) ([]byte, batch.Header, error) {
	max := p.Config().Storage.MaxMessageBytes
	if len(raw) > int(max) {
		return nil, batch.Header{}, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes exceeds max.message.bytes %d of topic %q", len(raw), max, p.Topic)
	}
	b, h, err := batch.CanonicalizeMax(raw, int(max))
	if errs.Code(err) == sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
		err = errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "%s of topic %q", errs.Message(err), p.Topic)
	}
	return b, h, err
}

// producerBatch is canonicalBatch for a batch a producer sent, whichever
// door it came through: control batches are the brokers' own
// (INVALID_RECORD); a compressed batch's records are checked here, once
// (batch.CheckCompressed: decompressed within 64 MiB, Kafka's record
// rules, max_timestamp computed; decision 67); a compacted topic takes
// only records with a key (INVALID_RECORD, as Kafka: the cleaner keeps
// the latest record per key, so a keyless one has no meaning there and
// the cleaner would remove it); and a topic whose compression.type names
// a codec gets the batch in that codec (converted here, as Kafka's
// broker recompresses), its size checked again; a topic with
// message.timestamp.type=LogAppendTime gets it stamped with now.
func producerBatch(p *Replica, raw []byte, now time.Time) ([]byte, batch.Header, error) {
	b, h, err := canonicalBatch(p, raw)
	if err == nil && h.IsControl() {
		err = errs.New(sluicev1.ErrorCode_INVALID_RECORD, "producers cannot write control batches")
	}
	if err != nil {
		return b, h, err
	}
	cfg := p.Config()
	var records []byte // b's records uncompressed, when b is compressed
	if h.IsCompressed() {
		c, err := batch.CheckCompressed(b)
		if err != nil {
			return nil, h, err
		}
		h, records = c.Header, c.Records
		if cfg.Storage.Compacted() && c.Scan.FirstKeyless >= 0 {
			return nil, h, keylessError(p, c.Scan.FirstKeyless)
		}
	} else if cfg.Storage.Compacted() {
		err = batch.ForEachRecord(b, func(r batch.Record) error {
			if len(r.Key) == 0 {
				return keylessError(p, int32(r.Offset-h.BaseOffset))
			}
			return nil
		})
		if err != nil {
			return nil, h, err
		}
	}
	if codec, ok := cfg.Codec(); ok && codec != h.Codec() {
		if b, err = batch.SetCodec(b, records, codec); err != nil {
			return nil, h, err
		}
		if len(b) > int(cfg.Storage.MaxMessageBytes) {
			return nil, h, errs.New(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, "batch of %d bytes once converted to compression.type %s exceeds max.message.bytes %d of topic %q",
				len(b), codec, cfg.Storage.MaxMessageBytes, p.Topic)
		}
		h, _ = batch.ParseHeader(b)
	}
	if cfg.LogAppendTime {
		batch.SetLogAppendTime(b, now.UnixMilli())
		h, _ = batch.ParseHeader(b)
	}
	return b, h, nil
}

// keylessError refuses a batch of compacted topic p whose record at
// offsetDelta has no key.
func keylessError(p *Replica, offsetDelta int32) error {
	return errs.New(sluicev1.ErrorCode_INVALID_RECORD, "topic %q is compacted (cleanup.policy=%s): every record needs a key, the record at offset delta %d has none",
		p.Topic, p.Config().Storage.CleanupPolicy, offsetDelta)
}

// appendError maps a storage append error to the partition's error code.
func (m *ReplicaManager) appendError(p *Replica, err error) error {
	if errors.Is(err, storage.ErrClosed) {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s is no longer hosted by node %d", p, m.cfg.NodeID)
	}
	if errs.Code(err) == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR {
		return errs.New(sluicev1.ErrorCode_KAFKA_STORAGE_ERROR, "append to %s: %w", p, err)
	}
	return err
}

// leaderAppended records the leader's new log end offset.
func (p *Replica) leaderAppended(leo int64, now time.Time) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker != nil && p.tracker.LeaderAppended(leo, now) {
		p.publishHWLocked()
	}
}

// checkAcksAll refuses an acks=all produce before append when the ISR is
// smaller than min.insync.replicas.
func (p *Replica) checkAcksAll() error {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	if p.tracker == nil {
		return errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "%s has no leader here", p)
	}
	if !p.tracker.EnoughReplicas() {
		return errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, "%s has %d in-sync replicas %v, fewer than min.insync.replicas %d",
			p, p.tracker.InSyncCount(), p.tracker.ISR(), p.Config().MinInsyncReplicas)
	}
	return nil
}

// WaitCommitted blocks until the batch ending at lastOffset is below the
// high watermark (replicated to the ISR), ctx ends (REQUEST_TIMED_OUT:
// the batch is in the leader's log and may or may not become committed),
// or leadership is lost (NOT_LEADER_OR_FOLLOWER, same uncertainty). Both
// uncertain outcomes wrap ErrCommitUnknown. leaderEpoch is the epoch the
// batch was appended in (AppendResult.LeaderEpoch): a new epoch, even of
// this same node, ends the wait as a lost leadership, since the batch's
// offsets may have been truncated and reused meanwhile (NoLeaderEpoch:
// any epoch).
func (p *Replica) WaitCommitted(ctx context.Context, lastOffset int64, leaderEpoch int32) error {
	return p.waitCommitted(ctx, lastOffset, leaderEpoch)
}

// ErrCommitUnknown is the cause of an append's error when the batch was
// appended to the leader's log but the wait for it to be committed ended
// first (timeout, leadership lost or moved to a new epoch): it may or may
// not be committed, and a retry may write it twice.
var ErrCommitUnknown = errors.New("it may or may not be committed")

// waitCommitted is WaitCommitted for a batch appended in leaderEpoch
// (NoLeaderEpoch: any): a new leader epoch, even on this node, ends the
// wait, since the batch's offsets may have been truncated and reused.
func (p *Replica) waitCommitted(ctx context.Context, lastOffset int64, leaderEpoch int32) error {
	for {
		p.roleMu.Lock()
		if p.tracker == nil || (leaderEpoch >= 0 && p.tracker.LeaderEpoch() != leaderEpoch) {
			p.roleMu.Unlock()
			return p.leadershipLostError(lastOffset)
		}
		done, err := p.tracker.AcksAllResult(lastOffset)
		ch := p.hwCh
		p.roleMu.Unlock()
		if done {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return p.commitTimeoutError(lastOffset)
		}
	}
}

// AppendCommitted appends a batch that this broker writes itself — an
// internal record batch (a coordinator's records for __transaction_state
// or __consumer_offsets) or a control batch (a COMMIT or ABORT marker) —
// to tp as its leader, and waits until it is committed: below the high
// watermark, replicated to every in-sync replica. It is the coordinators'
// append path (DESIGN §3, §10); producers' batches go through AppendTo,
// which refuses control batches.
//
// raw is a canonical batch (batch.Builder.Finish, batch.MarkerBatch); the
// leader sets its base offset and partition leader epoch. A control batch
// passes the marker rule (storage.Log.AppendControl), any other batch the
// idempotence rules. leaderEpoch, unless NoLeaderEpoch, is the epoch at
// which the caller believes this broker leads tp (the one its
// LeadershipListener heard in BecameLeader): any other epoch refuses the
// append, and a change of epoch while waiting ends the wait.
//
// Outcomes:
//   - nil: the batch is committed at the returned offsets.
//   - Nothing was appended: UNKNOWN_TOPIC_OR_PARTITION (not hosted),
//     NOT_LEADER_OR_FOLLOWER (not the leader), FENCED_LEADER_EPOCH or
//     UNKNOWN_LEADER_EPOCH (leaderEpoch is older or newer than the
//     leader's), NOT_ENOUGH_REPLICAS (fewer in-sync replicas than
//     min.insync.replicas), MESSAGE_TOO_LARGE, CORRUPT_RECORD,
//     INVALID_RECORD, INVALID_PRODUCER_EPOCH (a stale marker),
//     KAFKA_STORAGE_ERROR.
//   - The batch was appended but may or may not be committed (the error
//     wraps ErrCommitUnknown): REQUEST_TIMED_OUT (ctx ended first) and
//     NOT_LEADER_OR_FOLLOWER (leadership lost, or a new leader epoch,
//     while waiting).
//   - NOT_ENOUGH_REPLICAS_AFTER_APPEND: committed, but the ISR shrank
//     below min.insync.replicas while waiting (acks=all's answer).
//
// A control batch (a transaction marker) is checked by the TV2 marker
// rule; WriteTxnMarker picks the marker's own version.
//
// Safe for concurrent use, and from a LeadershipListener.
func (m *ReplicaManager) AppendCommitted(ctx context.Context, tp TopicPartition, raw []byte, leaderEpoch int32, now time.Time) (AppendResult, error) {
	return m.appendCommitted(ctx, tp, raw, leaderEpoch, storage.MarkerTV2, now)
}

// appendCommitted is AppendCommitted with the marker version v a control
// batch is checked by (storage.Log.AppendMarker).
func (m *ReplicaManager) appendCommitted(ctx context.Context, tp TopicPartition, raw []byte, leaderEpoch int32, v storage.MarkerVersion, now time.Time) (AppendResult, error) {
	p, err := m.Replica(tp.Topic, tp.Partition)
	if err != nil {
		return AppendResult{}, err
	}
	b, h, err := canonicalBatch(p, raw)
	if err != nil {
		return AppendResult{}, err
	}
	res, epoch, err := p.appendAsLeader(b, h.IsControl(), v, leaderEpoch, now)
	if err != nil {
		return res, m.appendError(p, err)
	}
	return res, p.waitCommitted(ctx, res.LastOffset, epoch)
}

// appendAsLeader appends b at the current leader epoch if this broker
// leads p at leaderEpoch (NoLeaderEpoch: any) with enough in-sync
// replicas, and returns the epoch it appended in. It holds roleMu across
// the checks and the append, so the leadership cannot change in between
// (lock order: roleMu before the log's locks). A control batch is a
// marker checked by the rule of version v.
func (p *Replica) appendAsLeader(b []byte, control bool, v storage.MarkerVersion, leaderEpoch int32, now time.Time) (AppendResult, int32, error) {
	p.roleMu.Lock()
	defer p.roleMu.Unlock()
	t := p.tracker
	if t == nil {
		return AppendResult{}, 0, errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "this broker does not lead %s", p)
	}
	epoch := t.LeaderEpoch()
	if err := checkLeaderEpoch(p.TopicPartition, leaderEpoch, epoch, false); err != nil {
		return AppendResult{}, 0, err
	}
	if !t.EnoughReplicas() {
		return AppendResult{}, 0, errs.New(sluicev1.ErrorCode_NOT_ENOUGH_REPLICAS, "%s has %d in-sync replicas %v, fewer than min.insync.replicas %d",
			p, t.InSyncCount(), t.ISR(), p.Config().MinInsyncReplicas)
	}
	var sr storage.AppendResult
	var err error
	if control {
		sr, err = p.log.AppendMarker(b, epoch, v, now)
	} else {
		sr, err = p.log.Append(b, epoch, now)
	}
	if err != nil {
		return AppendResult{}, 0, err
	}
	if t.LeaderAppended(sr.LastOffset+1, now) {
		p.publishHWLocked()
	}
	return appendResult(sr, epoch, false), epoch, nil
}
