package group

import (
	"container/heap"
	"time"
)

// Member epochs with a meaning of their own (KIP-848).
const (
	JoinEpoch        int32 = 0
	LeaveEpoch       int32 = -1
	StaticLeaveEpoch int32 = -2
)

// member is one member of the group, Kafka's ConsumerGroupMember.
type member struct {
	id, instanceID, rackID, clientID string
	// topics: subscribed — the union of names and regexTopics — sorted,
	// no duplicates: what the assignor sees.
	topics []string
	// names: the topic names the member subscribed to, sorted.
	names []string
	// regex: the member's regular-expression subscription ("" none;
	// regex.go); regexTopics: the topics it matches that filter allows,
	// sorted.
	regex       string
	regexTopics []string
	// filter is the TopicFilter of the member's last heartbeat on this
	// group; filterKnown is false for a member restored from the log
	// that has not heartbeated since. regexFilteredAt is when filter last
	// ran over the regex's matches.
	filter          TopicFilter
	filterKnown     bool
	regexFilteredAt time.Time
	assignor        string // "" when the member asked for none

	epoch, previousEpoch int32
	state                MemberState
	// assigned: what the member was last answered (and may own).
	// pending: partitions it was asked to release and has not yet
	// reported released; they stay its own until then.
	assigned, pending Assignment
	// assignedAt: the epoch each partition of assigned and pending was
	// given to the member at (KIP-1251; restamp keeps it in step).
	assignedAt AssignmentEpochs

	sessionTimeout, rebalanceTimeout time.Duration
	sessionDeadline                  time.Time
	// revokeDeadline: set while UnrevokedPartitions; zero otherwise.
	revokeDeadline time.Time

	heapIndex int // position in Group.deadlines
}

// departed reports a static member that left with -2 and may come back.
func (m *member) departed() bool { return m.epoch == StaticLeaveEpoch }

// reconciledTo reports Kafka's isReconciledTo.
func (m *member) reconciledTo(epoch int32) bool {
	return m.state == MemberStable && m.epoch == epoch
}

// deadline is the earliest time Expire fences m.
func (m *member) deadline() time.Time {
	if !m.revokeDeadline.IsZero() && m.revokeDeadline.Before(m.sessionDeadline) {
		return m.revokeDeadline
	}
	return m.sessionDeadline
}

// deadlineHeap orders members by deadline (ties: member id, so Expire is
// deterministic).
type deadlineHeap []*member

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	di, dj := h[i].deadline(), h[j].deadline()
	if !di.Equal(dj) {
		return di.Before(dj)
	}
	return h[i].id < h[j].id
}
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *deadlineHeap) Push(x any) {
	m := x.(*member)
	m.heapIndex = len(*h)
	*h = append(*h, m)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.heapIndex = -1
	return m
}

var _ heap.Interface = (*deadlineHeap)(nil)
