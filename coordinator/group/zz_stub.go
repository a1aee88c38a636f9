// Package group: TEMPORARY STUB until the real state machine lands.
package group

import (
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

type Assignment map[string][]int32
type TopicMetadata struct {
	Partitions int32
	Racks      [][]string
}
type Config struct {
	SessionTimeout, MinSessionTimeout, MaxSessionTimeout, HeartbeatInterval, RebalanceTimeout time.Duration
	MaxSize                                                                                   int
	DefaultAssignor                                                                           string
}

func (c Config) WithDefaults() Config { return c }

type HeartbeatRequest struct {
	MemberID                         string
	MemberEpoch                      int32
	InstanceID, RackID               string
	RebalanceTimeout, SessionTimeout time.Duration
	SubscribedTopics                 []string
	Assignor                         string
	OwnedSet                         bool
	Owned                            Assignment
	ClientID                         string
}
type HeartbeatResponse struct {
	MemberID          string
	MemberEpoch       int32
	HeartbeatInterval time.Duration
	Assignment        Assignment
	AssignmentChanged bool
}
type State int

const (
	Empty State = iota
	Stable
)

func (s State) String() string { return [...]string{"Empty", "Stable"}[s] }

type Member struct {
	MemberID, InstanceID, RackID, ClientID string
	MemberEpoch                            int32
	SubscribedTopics                       []string
	Assignment, TargetAssignment           Assignment
	State                                  string
}
type Description struct {
	GroupID                     string
	GroupEpoch, AssignmentEpoch int32
	Assignor                    string
	Members                     []Member
}
type Group struct {
	id    string
	epoch int32
}

func New(id string, cfg Config) *Group { return &Group{id: id} }
func (g *Group) ID() string            { return g.id }
func (g *Group) Heartbeat(now time.Time, req HeartbeatRequest, topics map[string]TopicMetadata) (HeartbeatResponse, error) {
	return HeartbeatResponse{}, errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "stub")
}
func (g *Group) Expire(now time.Time, topics map[string]TopicMetadata) []string { return nil }
func (g *Group) MetadataChanged(now time.Time, topics map[string]TopicMetadata) {}
func (g *Group) NextDeadline() time.Time                                        { return time.Time{} }
func (g *Group) Epoch() int32                                                   { return g.epoch }
func (g *Group) AssignmentEpoch() int32                                         { return g.epoch }
func (g *Group) RestoreEpoch(e int32)                                           { g.epoch = max(g.epoch, e) }
func (g *Group) State() State                                                   { return Empty }
func (g *Group) Size() int                                                      { return 0 }
func (g *Group) CheckOffsetCommit(memberID string, memberEpoch int32) error {
	if memberID == "" && memberEpoch == -1 {
		return nil
	}
	return errs.New(sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, "stub")
}
func (g *Group) CheckTxnOffsetCommit(memberID string, memberEpoch int32, instanceID string) error {
	return g.CheckOffsetCommit(memberID, memberEpoch)
}
func (g *Group) Describe() Description { return Description{GroupID: g.id, GroupEpoch: g.epoch} }
