package group

import (
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// AssignmentEpochs are KIP-1251's assignment epochs: for each partition
// a member holds (assigned, or pending its release), the member epoch at
// which the partition was given to it. An offset commit from a member at
// an epoch below its current one (its heartbeat moved it on, the answer
// not yet seen when it committed) is accepted for a partition the member
// has held since that epoch or before: nobody else can have committed it
// in between. Topic -> partition -> epoch.
type AssignmentEpochs map[string]map[int32]int32

// Equal reports whether a and b stamp the same partitions alike.
func (a AssignmentEpochs) Equal(b AssignmentEpochs) bool {
	if a.len() != b.len() {
		return false
	}
	for t, ps := range a {
		for p, e := range ps {
			if f, ok := b[t][p]; !ok || f != e {
				return false
			}
		}
	}
	return true
}

func (a AssignmentEpochs) len() int {
	n := 0
	for _, ps := range a {
		n += len(ps)
	}
	return n
}

// Clone deep-copies a (nil stays nil).
func (a AssignmentEpochs) Clone() AssignmentEpochs {
	if a == nil {
		return nil
	}
	c := make(AssignmentEpochs, len(a))
	for t, ps := range a {
		cp := make(map[int32]int32, len(ps))
		for p, e := range ps {
			cp[p] = e
		}
		c[t] = cp
	}
	return c
}

// restamp makes m.assignedAt cover exactly the partitions m holds:
// those it no longer holds are dropped, those new to it are stamped with
// its epoch (0 while it is below: a departed static member's -2). The
// callers that give a member partitions move it to its new epoch first
// (nextAssignment).
func (m *member) restamp() {
	held := map[string]map[int32]bool{}
	for _, a := range []Assignment{m.assigned, m.pending} {
		for t, ps := range a {
			if held[t] == nil {
				held[t] = map[int32]bool{}
			}
			for _, p := range ps {
				held[t][p] = true
			}
		}
	}
	for t, ps := range m.assignedAt {
		for p := range ps {
			if !held[t][p] {
				delete(ps, p)
			}
		}
		if len(ps) == 0 {
			delete(m.assignedAt, t)
		}
	}
	epoch := max(m.epoch, 0)
	for t, ps := range held {
		for p := range ps {
			if _, ok := m.assignedAt[t][p]; ok {
				continue
			}
			if m.assignedAt == nil {
				m.assignedAt = AssignmentEpochs{}
			}
			if m.assignedAt[t] == nil {
				m.assignedAt[t] = map[int32]int32{}
			}
			m.assignedAt[t][p] = epoch
		}
	}
}

// restore takes the stamps a member record kept for the partitions m
// holds (restamp gave each m's epoch: what a record from before keeps).
func (m *member) restore(logged AssignmentEpochs) {
	for t, ps := range m.assignedAt {
		for p := range ps {
			if e, ok := logged[t][p]; ok && e <= m.epoch {
				ps[p] = e
			}
		}
	}
}

// CheckOffsetCommitPartitions applies OffsetCommit's member rules as
// CheckOffsetCommit does, with KIP-1251's relaxation: a member committing
// at an epoch below its own is not refused as a whole but per partition —
// each partition it holds since that epoch or an earlier one is accepted,
// any other is STALE_MEMBER_EPOCH (refused, in the returned map). A
// request-level refusal is the error.
func (g *Group) CheckOffsetCommitPartitions(memberID string, memberEpoch int32, tps []TopicPartition) (map[TopicPartition]error, error) {
	err := g.CheckOffsetCommit(memberID, memberEpoch)
	if err == nil || errs.Code(err) != sluicev1.ErrorCode_STALE_MEMBER_EPOCH {
		return nil, err
	}
	m := g.members[memberID]
	var refused map[TopicPartition]error
	for _, tp := range tps {
		if at, ok := m.assignedAt[tp.Topic][tp.Partition]; ok && at <= memberEpoch {
			continue
		}
		if refused == nil {
			refused = map[TopicPartition]error{}
		}
		refused[tp] = errs.New(sluicev1.ErrorCode_STALE_MEMBER_EPOCH,
			"member %s committed %s-%d with epoch %d, below its epoch %d, and did not hold the partition since then", errs.Echo(memberID), tp.Topic, tp.Partition, memberEpoch, m.epoch)
	}
	return refused, nil
}
