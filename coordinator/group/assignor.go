package group

import "sort"

// Names of the server-side assignors.
const (
	UniformAssignorName = "uniform"
	RangeAssignorName   = "range"
)

// MemberSubscription is one member as an assignor sees it.
type MemberSubscription struct {
	MemberID string
	// InstanceID is the static instance id ("" for a dynamic member).
	InstanceID string
	// RackID is the member's rack ("" for none).
	RackID string
	// Topics are the subscribed topics, sorted, without duplicates.
	Topics []string
	// Current is the member's previous target assignment: sticky
	// assignors keep what they can of it. It may name partitions that no
	// longer exist or topics no longer subscribed.
	Current Assignment
}

// Assignor computes a target assignment.
//
// Contract: members are sorted by MemberID with distinct ids; topics holds
// at least every subscribed topic that exists (a topic missing from it has
// no partitions). Assign returns an Assignment (possibly empty, never nil)
// for every member, gives each existing partition of a subscribed topic to
// exactly one member subscribed to it, and nothing else. It is a pure
// function of its input: the same input gives the same output. It does not
// modify its input.
type Assignor interface {
	Name() string
	Assign(members []MemberSubscription, topics map[string]TopicMetadata) map[string]Assignment
}

// AssignorByName returns the assignor called name ("uniform" or "range").
func AssignorByName(name string) (Assignor, bool) {
	switch name {
	case UniformAssignorName:
		return UniformAssignor{}, true
	case RangeAssignorName:
		return RangeAssignor{}, true
	}
	return nil, false
}

// subscribes reports whether sorted topics contains t.
func subscribes(topics []string, t string) bool {
	i := sort.SearchStrings(topics, t)
	return i < len(topics) && topics[i] == t
}

// subscribedUnion returns the sorted union of the members' topics.
func subscribedUnion(members []MemberSubscription) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range members {
		for _, t := range m.Topics {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return out
}
