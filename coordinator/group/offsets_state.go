package group

import (
	"fmt"
	"slices"
	"sort"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/topic"
)

// TopicPartition names a partition of a consumed topic: topic.Partition, the name every layer shares.
type TopicPartition = topic.Partition

// OffsetsState is what one __consumer_offsets partition holds: per group, its
// committed offsets, epoch and KIP-848 members (decision 72); per producer, the offsets its open
// transaction left pending (TxnOffsetCommit), which its COMMIT marker
// applies and its ABORT marker drops (KIP-447).
//
// It changes only by applying what the log holds, in the log's order —
// ApplyBatch when loading, the single-record methods for what the
// coordinator has just written and seen committed — so a new coordinator
// replaying the log rebuilds exactly the same OffsetsState. Not safe for
// concurrent use: its owner serializes access.
type OffsetsState struct {
	groups  map[string]*groupState
	pending map[int64][]pendingOffset // by producer id, in record-offset order
	// markers remembers the last few markers of producers that have a
	// TxnOffsetCommit append in flight (inFlight), so that offsets whose
	// record committed before a marker but are added after it
	// (AddPending racing the marker's report) get that marker's outcome.
	markers  map[int64][]marker
	inFlight map[int64]int
}

type groupState struct {
	epoch   int32               // 0: no group record
	classic *ClassicGroupRecord // the last group record, if a classic group's
	// record is the last KIP-848 group record; members the KIP-848
	// members' records by member id (decision 72).
	record   GroupRecord
	members  map[string]MemberRecord
	offsets  map[TopicPartition]Offset
	pendings int // pending offsets of open transactions for this group
}

type pendingOffset struct {
	group string
	tp    TopicPartition
	o     Offset
}

type marker struct {
	offset int64
	commit bool
}

// markersKept bounds OffsetsState.markers per producer.
const markersKept = 4

// NewOffsetsState returns an empty OffsetsState.
func NewOffsetsState() *OffsetsState {
	return &OffsetsState{
		groups:   map[string]*groupState{},
		pending:  map[int64][]pendingOffset{},
		markers:  map[int64][]marker{},
		inFlight: map[int64]int{},
	}
}

func (s *OffsetsState) group(g string) *groupState {
	gs := s.groups[g]
	if gs == nil {
		gs = &groupState{offsets: map[TopicPartition]Offset{}}
		s.groups[g] = gs
	}
	return gs
}

// dropIfEmpty forgets a group with nothing left.
func (s *OffsetsState) dropIfEmpty(g string) {
	if gs := s.groups[g]; gs != nil && gs.epoch == 0 && gs.classic == nil && len(gs.members) == 0 && len(gs.offsets) == 0 && gs.pendings == 0 {
		delete(s.groups, g)
	}
}

// Commit applies a committed offset written by a plain record at
// o.RecordOffset (or made visible by a COMMIT marker): it replaces the
// group's offset of tp unless that was written by a later record.
func (s *OffsetsState) Commit(group string, tp TopicPartition, o Offset) {
	gs := s.group(group)
	if cur, ok := gs.offsets[tp]; ok && cur.RecordOffset > o.RecordOffset {
		return
	}
	gs.offsets[tp] = o
}

// DeleteOffset applies a tombstone of group's offset of tp written at
// recordOffset.
func (s *OffsetsState) DeleteOffset(group string, tp TopicPartition, recordOffset int64) {
	gs := s.groups[group]
	if gs == nil {
		return
	}
	if cur, ok := gs.offsets[tp]; ok && cur.RecordOffset < recordOffset {
		delete(gs.offsets, tp)
	}
	s.dropIfEmpty(group)
}

// SetGroupEpoch applies a KIP-848 group record of epoch alone
// (SetGroupRecord).
func (s *OffsetsState) SetGroupEpoch(group string, epoch int32) {
	s.SetGroupRecord(group, GroupRecord{Epoch: epoch})
}

// SetGroupRecord applies a KIP-848 group record (a classic group's
// record before it is forgotten: the group id changed protocol). The
// epoch never goes down.
func (s *OffsetsState) SetGroupRecord(group string, rec GroupRecord) {
	gs := s.group(group)
	rec.Classic = nil
	if rec.Epoch >= gs.epoch {
		gs.record = rec
	}
	gs.epoch = max(gs.epoch, rec.Epoch)
	gs.classic = nil
}

// SetClassicGroup applies a classic group's record. A classic group has
// no KIP-848 members (one group id, one protocol).
func (s *OffsetsState) SetClassicGroup(group string, rec ClassicGroupRecord) {
	gs := s.group(group)
	gs.epoch = max(gs.epoch, rec.Generation)
	gs.classic = &rec
	gs.record = GroupRecord{}
	gs.members = nil
}

// SetMember applies a KIP-848 member's record.
func (s *OffsetsState) SetMember(group, memberID string, rec MemberRecord) {
	gs := s.group(group)
	if gs.members == nil {
		gs.members = map[string]MemberRecord{}
	}
	gs.members[memberID] = rec
}

// DeleteMember applies a member's tombstone.
func (s *OffsetsState) DeleteMember(group, memberID string) {
	if gs := s.groups[group]; gs != nil {
		delete(gs.members, memberID)
		s.dropIfEmpty(group)
	}
}

// KIP848Group returns group's last KIP-848 group record and its members'
// records (Restore's input; ok false when the group has no KIP-848
// group record, or its last group record is a classic group's). The
// map is shared: do not modify it.
func (s *OffsetsState) KIP848Group(group string) (rec GroupRecord, members map[string]MemberRecord, ok bool) {
	gs := s.groups[group]
	if gs == nil || gs.classic != nil || (gs.epoch == 0 && len(gs.members) == 0) {
		return GroupRecord{}, nil, false
	}
	rec = gs.record
	rec.Epoch = gs.epoch
	return rec, gs.members, true
}

// HasMembers reports whether group has KIP-848 member records.
func (s *OffsetsState) HasMembers(group string) bool {
	gs := s.groups[group]
	return gs != nil && len(gs.members) > 0
}

// ClassicGroup returns group's last classic record (nil: none, or the
// last group record is a KIP-848 group's). The record is shared: do not
// modify it.
func (s *OffsetsState) ClassicGroup(group string) *ClassicGroupRecord {
	if gs := s.groups[group]; gs != nil {
		return gs.classic
	}
	return nil
}

// DeleteGroup applies a group tombstone: the group's epoch is forgotten
// (its offsets go by their own tombstones).
func (s *OffsetsState) DeleteGroup(group string) {
	if gs := s.groups[group]; gs != nil {
		gs.epoch, gs.classic, gs.record, gs.members = 0, nil, GroupRecord{}, nil
		s.dropIfEmpty(group)
	}
}

// BeginTxnAppend marks a TxnOffsetCommit append of producerID in flight:
// from now until EndTxnAppend, markers of the producer are remembered so
// AddPending can resolve offsets a marker already ended.
func (s *OffsetsState) BeginTxnAppend(producerID int64) { s.inFlight[producerID]++ }

// EndTxnAppend ends what BeginTxnAppend began.
func (s *OffsetsState) EndTxnAppend(producerID int64) {
	if s.inFlight[producerID]--; s.inFlight[producerID] <= 0 {
		delete(s.inFlight, producerID)
		delete(s.markers, producerID)
	}
}

// AddPending adds an offset written at o.RecordOffset by a transactional
// batch of producerID: pending until the producer's next marker after it.
// If that marker has already been applied (it was reported before this
// call), the offset gets its outcome at once.
func (s *OffsetsState) AddPending(producerID int64, group string, tp TopicPartition, o Offset) {
	for _, m := range s.markers[producerID] {
		if m.offset > o.RecordOffset {
			if m.commit {
				s.Commit(group, tp, o)
			}
			return
		}
	}
	ps := s.pending[producerID]
	i := sort.Search(len(ps), func(i int) bool { return ps[i].o.RecordOffset > o.RecordOffset })
	s.pending[producerID] = slices.Insert(ps, i, pendingOffset{group: group, tp: tp, o: o})
	s.group(group).pendings++
}

// CompleteTxn applies a marker of producerID at markerOffset: the
// producer's pending offsets written before it are committed (commit) or
// dropped.
func (s *OffsetsState) CompleteTxn(producerID int64, commit bool, markerOffset int64) {
	if s.inFlight[producerID] > 0 {
		ms := append(s.markers[producerID], marker{offset: markerOffset, commit: commit})
		slices.SortFunc(ms, func(a, b marker) int { return int(min(max(a.offset-b.offset, -1), 1)) })
		if len(ms) > markersKept {
			ms = ms[len(ms)-markersKept:]
		}
		s.markers[producerID] = ms
	}
	ps := s.pending[producerID]
	n := 0
	for n < len(ps) && ps[n].o.RecordOffset < markerOffset {
		p := ps[n]
		if commit {
			s.Commit(p.group, p.tp, p.o)
		}
		if gs := s.groups[p.group]; gs != nil {
			gs.pendings--
			s.dropIfEmpty(p.group)
		}
		n++
	}
	if n == len(ps) {
		delete(s.pending, producerID)
	} else {
		s.pending[producerID] = ps[n:]
	}
}

// Offsets returns a copy of group's committed offsets.
func (s *OffsetsState) Offsets(group string) map[TopicPartition]Offset {
	gs := s.groups[group]
	out := make(map[TopicPartition]Offset, 0)
	if gs != nil {
		for tp, o := range gs.offsets {
			out[tp] = o
		}
	}
	return out
}

// Offset returns group's committed offset of tp.
func (s *OffsetsState) Offset(group string, tp TopicPartition) (Offset, bool) {
	if gs := s.groups[group]; gs != nil {
		o, ok := gs.offsets[tp]
		return o, ok
	}
	return Offset{}, false
}

// HasPending reports whether an open transaction holds offsets of group
// for tp (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT).
func (s *OffsetsState) HasPending(group string, tp TopicPartition) bool {
	gs := s.groups[group]
	if gs == nil || gs.pendings == 0 {
		return false
	}
	for _, ps := range s.pending {
		for _, p := range ps {
			if p.group == group && p.tp == tp {
				return true
			}
		}
	}
	return false
}

// PendingCount is the number of pending offsets of group.
func (s *OffsetsState) PendingCount(group string) int {
	if gs := s.groups[group]; gs != nil {
		return gs.pendings
	}
	return 0
}

// GroupEpoch returns group's epoch from its last group record (0: none).
func (s *OffsetsState) GroupEpoch(group string) int32 {
	if gs := s.groups[group]; gs != nil {
		return gs.epoch
	}
	return 0
}

// Groups returns the groups with an epoch, offsets or pending offsets,
// sorted.
func (s *OffsetsState) Groups() []string {
	out := make([]string, 0, len(s.groups))
	for g := range s.groups {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// Undecodable is a record of __consumer_offsets that ApplyBatch left out
// because it cannot be decoded.
type Undecodable struct {
	Offset int64
	Err    error // wraps ErrCorruptRecord, or batch.ParseMarker's error for a marker
}

// ApplyBatch applies one batch of __consumer_offsets as read from the log
// (loading): plain records are committed offsets and group records,
// a transactional batch's records are pending offsets of its producer,
// and a control batch is a marker completing them.
//
// A record that cannot be decoded is left out and returned, with its
// offset and the reason, and the rest of the batch is applied (issue 29):
// one bad record costs at most the offset or group epoch it held (its
// group's consumers resume from the offset committed before it), where
// stopping the load would leave every group of the partition without a
// coordinator. The error is for a batch that is not canonical (never what
// the log returns: it verifies what it stores); nothing is applied then.
func (s *OffsetsState) ApplyBatch(raw []byte) ([]Undecodable, error) {
	h, err := batch.ParseHeader(raw)
	if err != nil {
		return nil, err
	}
	var skipped []Undecodable
	skip := func(offset int64, err error) {
		skipped = append(skipped, Undecodable{Offset: offset, Err: err})
	}
	if h.IsControl() {
		var commit, parsed bool
		err := batch.ForEachRecord(raw, func(r batch.Record) error {
			t, _, err := batch.ParseMarker(r.Key, r.Value)
			if err != nil {
				skip(r.Offset, fmt.Errorf("marker: %w", err))
				return nil
			}
			commit, parsed = t == batch.ControlCommit, true
			return nil
		})
		if err == nil && parsed {
			s.CompleteTxn(h.ProducerID, commit, h.BaseOffset)
		}
		return skipped, err
	}
	txnl := h.IsTransactional()
	err = batch.ForEachRecord(raw, func(r batch.Record) error {
		k, err := DecodeKey(r.Key)
		if err != nil {
			skip(r.Offset, err)
			return nil
		}
		switch k.Type {
		case KeyGroup:
			if txnl {
				skip(r.Offset, fmt.Errorf("%w: a group record in a transaction", ErrCorruptRecord))
				return nil
			}
			if r.Value == nil {
				s.DeleteGroup(k.Group)
				return nil
			}
			g, err := DecodeGroupValue(r.Value)
			if err != nil {
				skip(r.Offset, err)
				return nil
			}
			if g.Classic != nil {
				s.SetClassicGroup(k.Group, *g.Classic)
			} else {
				s.SetGroupRecord(k.Group, g)
			}
		case KeyMember:
			if txnl {
				skip(r.Offset, fmt.Errorf("%w: a member record in a transaction", ErrCorruptRecord))
				return nil
			}
			if r.Value == nil {
				s.DeleteMember(k.Group, k.Member)
				return nil
			}
			m, err := DecodeMemberValue(r.Value)
			if err != nil {
				skip(r.Offset, err)
				return nil
			}
			s.SetMember(k.Group, k.Member, m)
		case KeyOffset:
			tp := TopicPartition{Topic: k.Topic, Partition: k.Partition}
			if r.Value == nil {
				if !txnl {
					s.DeleteOffset(k.Group, tp, r.Offset)
				}
				return nil
			}
			o, err := DecodeOffsetValue(r.Value)
			if err != nil {
				skip(r.Offset, err)
				return nil
			}
			o.RecordOffset = r.Offset
			if txnl {
				s.AddPending(h.ProducerID, k.Group, tp, o)
			} else {
				s.Commit(k.Group, tp, o)
			}
		}
		return nil
	})
	return skipped, err
}
