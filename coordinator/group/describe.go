package group

// Description is what DescribeGroups answers for a group (proto
// DescribedGroup without the coordinator's own fields; names follow the
// proto's).
type Description struct {
	GroupID         string
	State           State // State.String() is the protocol's name
	GroupEpoch      int32
	AssignmentEpoch int32
	Assignor        string
	// Members sorted by member id, departed static members included
	// (epoch -2).
	Members []MemberDescription
	// Type is TypeConsumer (the fields above) or TypeClassic (Classic;
	// the fields above are zero but GroupID).
	Type string
	// Classic describes a classic group (decision 70).
	Classic *ClassicDescription
}

// MemberDescription is one member (proto GroupMember). Every slice and
// Assignment is a copy.
type MemberDescription struct {
	MemberID    string
	InstanceID  string
	RackID      string
	ClientID    string
	MemberEpoch int32
	// SubscribedTopics are the names the member gave (not what its regex
	// matched), as Kafka describes them.
	SubscribedTopics []string
	// SubscribedTopicRegex is the member's regex ("" none).
	SubscribedTopicRegex string
	// Assignment is what the member was last given (as Kafka describes
	// it: partitions it was asked to release are not listed).
	Assignment Assignment
	// TargetAssignment is the target assignment's share of the member.
	TargetAssignment Assignment
	// MemberState: Stable, UnrevokedPartitions or UnreleasedPartitions
	// (MemberState.String(), proto GroupMember.member_state).
	MemberState MemberState
}

// Describe returns the group's description.
func (g *Group) Describe() Description {
	d := Description{GroupID: g.id, Type: TypeConsumer, State: g.State(), GroupEpoch: g.epoch, AssignmentEpoch: g.assignmentEpoch, Assignor: g.assignor}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		held := m.assigned.Clone()
		if held == nil {
			held = Assignment{}
		}
		target := g.target[id].Clone()
		if target == nil {
			target = Assignment{}
		}
		d.Members = append(d.Members, MemberDescription{
			MemberID:             m.id,
			InstanceID:           m.instanceID,
			RackID:               m.rackID,
			ClientID:             m.clientID,
			MemberEpoch:          m.epoch,
			SubscribedTopics:     append([]string(nil), m.names...),
			SubscribedTopicRegex: m.regex,
			Assignment:           held,
			TargetAssignment:     target,
			MemberState:          m.state,
		})
	}
	return d
}
