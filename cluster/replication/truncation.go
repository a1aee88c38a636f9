package replication

// EpochEndOffset is a leader's answer to OffsetForLeaderEpoch for one
// partition: the largest epoch <= the requested one that the leader has,
// and the end offset of that epoch in the leader's log (see
// EndOffsetForEpoch), or (UndefinedEpoch, UndefinedOffset).
type EpochEndOffset struct {
	LeaderEpoch int32
	EndOffset   int64
}

// TruncationInput is everything a follower knows when the leader's
// OffsetForLeaderEpoch answer arrives. The follower asked with
// LatestEpoch(Epochs).
type TruncationInput struct {
	// LogStartOffset and LogEndOffset bound the follower's log.
	LogStartOffset int64
	LogEndOffset   int64
	// HighWatermark is the follower's high watermark, as last learned
	// from a leader (<= LogEndOffset; a larger value is treated as
	// LogEndOffset).
	HighWatermark int64
	// Epochs is the follower's leader-epoch cache, oldest first (see
	// EpochEntry); it is not modified.
	Epochs []EpochEntry
	// Leader is the leader's answer.
	Leader EpochEndOffset
	// LeaderLogStartOffset is the leader's log start offset: nothing
	// below it can be fetched.
	LeaderLogStartOffset int64
}

// TruncationRule names the rule a TruncationDecision came from, for logs
// and tests.
type TruncationRule int

const (
	// RuleEpochMatch: the follower has the epoch the leader answered
	// with; both logs agree up to the end of that epoch on the shorter
	// side, so the follower truncates to min(its end offset for the
	// epoch, the leader's end offset, its LEO) and is done (KIP-101,
	// with KIP-279's use of the follower's own end offset).
	RuleEpochMatch TruncationRule = iota
	// RuleFollowerLacksEpoch: the leader answered with an epoch the
	// follower never had (its largest epoch <= the answer is smaller).
	// Everything the follower wrote in epochs after that one is
	// divergent; it truncates to the end of its own largest epoch below
	// the answer and asks again with its new latest epoch (KIP-279).
	RuleFollowerLacksEpoch
	// RuleLeaderEndOffset: the follower has no epoch <= the answer (only
	// possible if the leader answered with an epoch above what was asked)
	// or the leader answered an offset without an epoch (pre-KIP-279
	// protocol): truncate to min(leader end offset, LEO), as Kafka does.
	RuleLeaderEndOffset
	// RuleHighWatermark: no epoch information on one side (the follower
	// has no epoch entries, or the leader answered UNDEFINED): fall back
	// to the pre-KIP-101 rule and truncate to the follower's high
	// watermark. This is unsafe, which is why KIP-101 exists: a
	// follower's HW trails the leader's by a fetch round, so truncating
	// to it can drop messages the leader has already committed (KIP-101
	// scenario 1: the follower then becomes leader and they are lost),
	// and it keeps anything below the HW even where the logs diverge
	// after an unclean election (scenario 2). Callers should log it
	// loudly; with Sluice's epoch caches it means a missing cache.
	RuleHighWatermark
)

// String returns the rule's name.
func (r TruncationRule) String() string {
	switch r {
	case RuleEpochMatch:
		return "epoch-match"
	case RuleFollowerLacksEpoch:
		return "follower-lacks-epoch"
	case RuleLeaderEndOffset:
		return "leader-end-offset"
	case RuleHighWatermark:
		return "high-watermark"
	}
	return "unknown"
}

// TruncationDecision is what the follower must do with its log. Apply it
// in this order:
//
//  1. If Fully: discard the whole log (and epoch cache) and restart it
//     empty at FetchFrom (Kafka truncateFullyAndStartAt); skip step 2.
//  2. Else if Truncate: truncate to TruncateTo, both the log and the
//     epoch cache (drop every entry starting at or after TruncateTo).
//     The cache must be trimmed even when the log has nothing past
//     TruncateTo (Kafka UnifiedLog.truncateTo does the same): a replica
//     that was elected leader and wrote nothing before losing leadership
//     holds an entry for that epoch at its LEO; kept, it would be the
//     epoch asked for in every round, forever.
//  3. If NeedAnotherRound: send OffsetForLeaderEpoch again with the new
//     latest epoch and call TruncationOffset with the new answer; do not
//     fetch yet. Otherwise start fetching at FetchFrom.
type TruncationDecision struct {
	// Rule is the rule that decided.
	Rule TruncationRule
	// Truncate reports whether there is anything to cut at TruncateTo:
	// records (TruncateTo < LogEndOffset) or epoch-cache entries
	// starting at or after TruncateTo.
	Truncate bool
	// TruncateTo is the divergence point, the follower's new log end
	// offset; it equals LogEndOffset when nothing is to be cut.
	TruncateTo int64
	// Fully reports that truncating to TruncateTo is not enough: the
	// follower would have to fetch below the leader's log start offset
	// (the follower is behind the leader's retention, or diverges below
	// it), or TruncateTo is below the follower's own log start. The log
	// restarts empty at FetchFrom and no further round is needed: an
	// empty log cannot diverge.
	Fully bool
	// FetchFrom is the next fetch offset: TruncateTo, or the leader's log
	// start offset when Fully because of it. Meaningful only when
	// NeedAnotherRound is false.
	FetchFrom int64
	// NeedAnotherRound reports that divergence is not resolved yet
	// (RuleFollowerLacksEpoch).
	NeedAnotherRound bool
	// BelowHW reports TruncateTo < the follower's high watermark. Data
	// below a HW learned from a leader was committed, so it is on every
	// ISR member and cannot diverge; truncating it means an unclean
	// leader election (legitimate when enabled for the topic, and then it
	// is exactly the data that election loses) or a bug. The decision is
	// still the right one for the leader's log; the caller must log it
	// loudly. Kafka only warns in the same place.
	BelowHW bool
}

// TruncationOffset decides where a follower truncates given the leader's
// OffsetForLeaderEpoch answer, following Kafka's
// AbstractFetcherThread.getOffsetTruncationState (KIP-101, KIP-279) and,
// for a follower behind the leader's log start, its
// fetchOffsetAndTruncate. Let E = LatestEpoch(in.Epochs) (what the
// follower asked with) and (e, L) = in.Leader:
//
//   - The follower has no epochs, or L is UndefinedOffset:
//     RuleHighWatermark, truncate to the follower's HW.
//   - e is UndefinedEpoch but L is defined: RuleLeaderEndOffset,
//     truncate to min(L, LEO).
//   - Otherwise look e up in the follower's own cache with
//     EndOffsetForEpoch, giving (f, F):
//   - F undefined: RuleLeaderEndOffset, min(L, LEO).
//   - f != e (the follower never had epoch e; f < e):
//     RuleFollowerLacksEpoch, truncate to min(F, LEO), another round.
//   - f == e: RuleEpochMatch, truncate to min(F, L, LEO). When e == E
//     this is min(L, LEO): a follower ahead of its new leader in the
//     same epoch loses exactly its extra, uncommitted tail.
//
// The truncation offset never exceeds LEO: truncation only cuts.
// Afterwards, a FetchFrom below the leader's log start offset, or a
// TruncateTo below the follower's log start, makes the truncation Fully.
// The input is not modified; inconsistent input (unsorted epochs, HW
// above LEO) gives a defined but meaningless decision, never a panic.
func TruncationOffset(in TruncationInput) TruncationDecision {
	leo := max(in.LogEndOffset, 0)
	hw := min(max(in.HighWatermark, 0), leo)

	var d TruncationDecision
	var to int64
	switch {
	case len(in.Epochs) == 0 || in.Leader.EndOffset == UndefinedOffset:
		d.Rule, to = RuleHighWatermark, hw
	case in.Leader.LeaderEpoch == UndefinedEpoch:
		d.Rule, to = RuleLeaderEndOffset, min(in.Leader.EndOffset, leo)
	default:
		f, end := EndOffsetForEpoch(in.Epochs, leo, in.Leader.LeaderEpoch)
		switch {
		case end == UndefinedOffset:
			d.Rule, to = RuleLeaderEndOffset, min(in.Leader.EndOffset, leo)
		case f != in.Leader.LeaderEpoch:
			d.Rule, to = RuleFollowerLacksEpoch, min(end, leo)
			d.NeedAnotherRound = true
		default:
			d.Rule, to = RuleEpochMatch, min(end, in.Leader.EndOffset, leo)
		}
	}
	to = max(to, 0)

	d.TruncateTo = to
	d.Truncate = to < leo || (len(in.Epochs) > 0 && in.Epochs[len(in.Epochs)-1].StartOffset >= to)
	d.FetchFrom = to
	d.BelowHW = to < hw
	switch {
	case to < in.LeaderLogStartOffset:
		// Offsets in [to, leader log start) are gone on the leader, and a
		// log must be contiguous: the follower starts over where the
		// leader's log starts (Kafka: OFFSET_OUT_OF_RANGE, then
		// fetchOffsetAndTruncate → truncateFullyAndStartAt).
		d.Fully, d.FetchFrom, d.NeedAnotherRound = true, in.LeaderLogStartOffset, false
	case to < in.LogStartOffset:
		// Cutting below our own log start empties the log; Kafka's
		// UnifiedLog.truncateTo does truncateFullyAndStartAt(to) then.
		d.Fully, d.NeedAnotherRound = true, false
	}
	return d
}
