package group

import (
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// This file is what offsets need of a classic group: the member checks
// of OffsetCommit and TxnOffsetCommit (Kafka's
// ClassicGroup.validateOffsetCommit), the subscribed topics OffsetDelete
// refuses, and the description.

// CheckOffsetCommit applies OffsetCommit's member rules to a classic
// group, generation being the request's generation id:
//   - generation < 0 with no member id and no instance id (an admin or a
//     consumer outside group management): allowed only while Empty, else
//     UNKNOWN_MEMBER_ID;
//   - otherwise the member must be known (UNKNOWN_MEMBER_ID; a stale
//     member id of a static member: FENCED_INSTANCE_ID) and at the
//     group's generation (ILLEGAL_GENERATION);
//   - in CompletingRebalance: REBALANCE_IN_PROGRESS (the member has its
//     new generation but not yet its assignment);
//   - Dead: COORDINATOR_NOT_AVAILABLE.
//
// A successful commit restarts the member's session in Stable and
// PreparingRebalance, as Kafka's does.
func (g *ClassicGroup) CheckOffsetCommit(now time.Time, memberID, instanceID string, generation int32) error {
	if err := g.checkCommit(memberID, instanceID, generation, false); err != nil {
		return err
	}
	if m := g.members[memberID]; m != nil && (g.state == ClassicStable || g.state == PreparingRebalance) {
		g.resetSession(now, m)
	}
	return nil
}

// CheckTxnOffsetCommit applies TxnOffsetCommit's member rules to a
// classic group (Kafka's validateTransactionalOffsetCommit): as
// CheckOffsetCommit, except that a commit without member id, instance id
// and generation (-1) is allowed in any state (older TxnOffsetCommit
// versions carry none), and the group's state is not checked.
func (g *ClassicGroup) CheckTxnOffsetCommit(memberID, instanceID string, generation int32) error {
	return g.checkCommit(memberID, instanceID, generation, true)
}

func (g *ClassicGroup) checkCommit(memberID, instanceID string, generation int32, txn bool) error {
	if g.state == ClassicDead {
		return errs.New(sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, "group %s was just deleted; retry", g.id)
	}
	if generation < 0 && g.state == ClassicEmpty {
		return nil
	}
	switch {
	case generation >= 0 || memberID != "" || instanceID != "":
		if err := g.validateMember(memberID, instanceID, "offset-commit"); err != nil {
			return err
		}
		if generation != g.generation {
			return illegalGeneration(g.id, memberID, generation, g.generation)
		}
	case !txn:
		return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID,
			"group %s has members: commits from outside the membership are refused", g.id)
	}
	if !txn && g.state == CompletingRebalance {
		return rebalanceInProgress(g.id)
	}
	return nil
}

// SubscribedTopics returns the topics the members of a consumer-protocol
// group subscribe to, decoded from their metadata for the chosen protocol
// (Kafka's computeSubscribedTopics: the subscription's version 0 prefix,
// which every version keeps); known is false when they cannot be known
// (another protocol type, no protocol chosen yet, undecodable metadata).
func (g *ClassicGroup) SubscribedTopics() (topics map[string]bool, known bool) {
	if g.protocolType != ConsumerProtocolType {
		return nil, false
	}
	topics = map[string]bool{}
	if len(g.members) == 0 {
		return topics, true
	}
	if g.protocolName == "" {
		return nil, false
	}
	for _, m := range g.members {
		sub, err := DecodeSubscription(m.metadata(g.protocolName))
		if err != nil {
			return nil, false
		}
		for _, t := range sub {
			topics[t] = true
		}
	}
	return topics, true
}

// IsSubscribed reports whether OffsetDelete must refuse topic
// (GROUP_SUBSCRIBED_TO_TOPIC): a member subscribes to it, or the group
// uses the consumer protocol and its subscriptions cannot be known.
func (g *ClassicGroup) IsSubscribed(topic string) bool {
	topics, known := g.SubscribedTopics()
	if !known {
		return g.protocolType == ConsumerProtocolType
	}
	return topics[topic]
}

// DecodeSubscription decodes the topics of a consumer protocol
// subscription (Kafka's ConsumerProtocolSubscription, any version), as
// consumers put in their JoinGroup metadata.
func DecodeSubscription(b []byte) ([]string, error) {
	var m kmsg.ConsumerMemberMetadata
	if err := m.ReadFrom(b); err != nil {
		return nil, err
	}
	return m.Topics, nil
}

// DecodeAssignment decodes a consumer protocol assignment (Kafka's
// ConsumerProtocolAssignment), as leaders put in SyncGroup.
func DecodeAssignment(b []byte) (Assignment, error) {
	if len(b) == 0 {
		return Assignment{}, nil
	}
	var m kmsg.ConsumerMemberAssignment
	if err := m.ReadFrom(b); err != nil {
		return nil, err
	}
	out := Assignment{}
	for _, t := range m.Topics {
		out[t.Topic] = append(out[t.Topic], t.Partitions...)
	}
	return out.normalized(), nil
}

// ClassicDescription is what DescribeGroups answers for a classic group.
type ClassicDescription struct {
	GroupID      string
	State        ClassicState
	Generation   int32
	ProtocolType string
	// Protocol is the chosen protocol ("" outside a generation).
	Protocol string
	Leader   string
	// Members sorted by member id.
	Members []ClassicMemberDescription
}

// ClassicMemberDescription is one member of a ClassicDescription; slices
// are copies.
type ClassicMemberDescription struct {
	MemberID   string
	InstanceID string
	ClientID   string
	ClientHost string
	// Metadata is the member's metadata for the chosen protocol (Kafka's
	// DescribeGroups: empty unless the group is Stable).
	Metadata []byte
	// Assignment as the leader gave it (empty unless Stable).
	Assignment []byte
}

// Describe returns the group's description. As Kafka's, metadata and
// assignments are given only in Stable.
func (g *ClassicGroup) Describe() ClassicDescription {
	d := ClassicDescription{GroupID: g.id, State: g.state, Generation: g.generation, ProtocolType: g.protocolType,
		Protocol: g.protocolName, Leader: g.leader}
	ids := g.memberIDs()
	sort.Strings(ids)
	for _, id := range ids {
		m := g.members[id]
		md := ClassicMemberDescription{MemberID: id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost}
		if g.state == ClassicStable {
			md.Metadata = append([]byte(nil), m.metadata(g.protocolName)...)
			md.Assignment = append([]byte(nil), m.assignment...)
		}
		d.Members = append(d.Members, md)
	}
	return d
}
