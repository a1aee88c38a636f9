package group

import (
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// offsetGroup: m1 (dynamic, epoch 2, previous 1), m2 (static "i2", epoch 2)
// and m3 (static "i3", departed with -2).
func offsetGroup(t *testing.T) *Group {
	g := newTestGroup(Config{})
	topics := meta("t", 3)
	mustHB(t, g, HeartbeatRequest{SubscribedTopics: []string{"t"}}, topics)
	mustHB(t, g, HeartbeatRequest{InstanceID: "i2", SubscribedTopics: []string{"t"}}, topics)
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: 1, OwnedSet: true, Owned: Assignment{"t": {0, 1}}}, topics)
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", MemberEpoch: 1, OwnedSet: true, Owned: Assignment{"t": {0}}}, topics)
	mustHB(t, g, HeartbeatRequest{InstanceID: "i3", SubscribedTopics: []string{"t"}}, topics)
	mustHB(t, g, HeartbeatRequest{MemberID: "m3", InstanceID: "i3", MemberEpoch: -2}, topics)
	if g.members["m1"].epoch != 2 || g.members["m2"].epoch != 2 {
		t.Fatalf("setup: %+v", g.Describe())
	}
	return g
}

func TestCheckOffsetCommit(t *testing.T) {
	tests := []struct {
		name     string
		memberID string
		epoch    int32
		empty    bool
		want     sluicev1.ErrorCode
	}{
		{"member at its epoch", "m1", 2, false, sluicev1.ErrorCode_NONE},
		{"older epoch: stale", "m1", 1, false, sluicev1.ErrorCode_STALE_MEMBER_EPOCH},
		{"newer epoch: fenced", "m1", 3, false, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH},
		{"unknown member", "m9", 2, false, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"outside the membership while members remain", "", -1, false, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"departed static member", "m3", 2, false, sluicev1.ErrorCode_FENCED_MEMBER_EPOCH},
		{"outside the membership of an empty group", "", -1, true, sluicev1.ErrorCode_NONE},
		{"any id with -1 on an empty group", "tool", -1, true, sluicev1.ErrorCode_NONE},
		{"a member epoch on an empty group", "m1", 2, true, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := offsetGroup(t)
			if tc.empty {
				g = newTestGroup(Config{})
			}
			if got := codeOf(g.CheckOffsetCommit(tc.memberID, tc.epoch)); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A departed static member keeps the group non-empty for tools.
	g := newTestGroup(Config{})
	mustHB(t, g, HeartbeatRequest{InstanceID: "i", SubscribedTopics: []string{"t"}}, nil)
	mustHB(t, g, HeartbeatRequest{MemberID: "m1", InstanceID: "i", MemberEpoch: -2}, nil)
	if g.Size() != 0 || g.State() == Empty || codeOf(g.CheckOffsetCommit("", -1)) != sluicev1.ErrorCode_UNKNOWN_MEMBER_ID {
		t.Fatalf("size %d state %s", g.Size(), g.State())
	}
}

func TestCheckTxnOffsetCommit(t *testing.T) {
	tests := []struct {
		name     string
		memberID string
		epoch    int32
		instance string
		want     sluicev1.ErrorCode
	}{
		{"no member check", "", -1, "", sluicev1.ErrorCode_NONE},
		{"member at its epoch", "m1", 2, "", sluicev1.ErrorCode_NONE},
		{"static member with its instance id", "m2", 2, "i2", sluicev1.ErrorCode_NONE},
		{"static member without instance id", "m2", 2, "", sluicev1.ErrorCode_NONE},
		{"older epoch: zombie", "m1", 1, "", sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"newer epoch", "m1", 3, "", sluicev1.ErrorCode_ILLEGAL_GENERATION},
		{"unknown member", "m9", 2, "", sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"empty member id with an epoch", "", 2, "", sluicev1.ErrorCode_UNKNOWN_MEMBER_ID},
		{"instance id of another", "m1", 2, "i2", sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"wrong instance id", "m2", 2, "i9", sluicev1.ErrorCode_FENCED_INSTANCE_ID},
		{"departed static member", "m3", 3, "i3", sluicev1.ErrorCode_ILLEGAL_GENERATION},
	}
	g := offsetGroup(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := codeOf(g.CheckTxnOffsetCommit(tc.memberID, tc.epoch, tc.instance)); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
