package group

import "fmt"

// State is a group's state, as Kafka's ConsumerGroupState names them.
type State int8

const (
	// Empty: no members (and no departed static member holding partitions).
	Empty State = iota
	// Assigning: the group epoch is above the target assignment's epoch.
	// This package computes the target in the same call that bumps the
	// epoch, so no call returns with the group in Assigning; the state is
	// kept for the protocol's vocabulary (ListGroups filters).
	Assigning
	// Reconciling: some member is not yet at the target assignment.
	Reconciling
	// Stable: every member is at the target assignment.
	Stable
	// Dead: the group was deleted (Delete).
	Dead
)

var stateNames = [...]string{Empty: "Empty", Assigning: "Assigning", Reconciling: "Reconciling", Stable: "Stable", Dead: "Dead"}

// String returns the state's name as the protocol writes it ("Stable").
func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("State(%d)", int8(s))
	}
	return stateNames[s]
}

// MemberState is where a member is in its reconciliation (Kafka's
// MemberState).
type MemberState int8

const (
	// MemberStable: the member has its target assignment at the target
	// epoch (or waits for a new target).
	MemberStable MemberState = iota
	// MemberUnrevokedPartitions: the member must release partitions first;
	// it keeps its epoch until a heartbeat reports them released.
	MemberUnrevokedPartitions
	// MemberUnreleasedPartitions: the member is at the target epoch but
	// some of its target partitions are still held by others.
	MemberUnreleasedPartitions
)

var memberStateNames = [...]string{
	MemberStable:               "Stable",
	MemberUnrevokedPartitions:  "UnrevokedPartitions",
	MemberUnreleasedPartitions: "UnreleasedPartitions",
}

// String returns the name DescribeGroups answers ("UnrevokedPartitions").
func (s MemberState) String() string {
	if s < 0 || int(s) >= len(memberStateNames) {
		return fmt.Sprintf("MemberState(%d)", int8(s))
	}
	return memberStateNames[s]
}
