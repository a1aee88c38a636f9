package group

import (
	"fmt"
	"testing"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// stale is what CheckOffsetCommitPartitions answers for tps: the request
// error's code, or the partitions refused.
func stale(g *Group, memberID string, epoch int32, tps ...TopicPartition) string {
	refused, err := g.CheckOffsetCommitPartitions(memberID, epoch, tps)
	if err != nil {
		return codeOf(err).String()
	}
	out := ""
	for _, tp := range tps {
		if e, ok := refused[tp]; ok {
			if codeOf(e) != sluicev1.ErrorCode_STALE_MEMBER_EPOCH {
				return "unexpected " + codeOf(e).String()
			}
			out += fmt.Sprintf(" %s-%d", tp.Topic, tp.Partition)
		}
	}
	if out == "" {
		return "ok"
	}
	return "stale" + out
}

// KIP-1251: a member that commits at an epoch below its own (its
// heartbeat moved it on before it saw the answer) has each partition it
// held since that epoch or before committed, and any other refused with
// STALE_MEMBER_EPOCH; the stamps follow the partitions through
// revocations and a partition given back later is stamped anew; they
// survive a coordinator failover (the member record), and a record from
// before stamps each partition with the member's epoch.
func TestAssignmentEpochsRelaxOffsetCommits(t *testing.T) {
	topics := meta("t", 4)
	g := newTestGroup(Config{})
	l := &recordLog{t: t, st: NewOffsetsState()}
	hb := func(req HeartbeatRequest) HeartbeatResponse {
		t.Helper()
		resp := mustHB(t, g, req, topics)
		l.persist(g)
		return resp
	}
	tp := func(p int32) TopicPartition { return TopicPartition{Topic: "t", Partition: p} }
	all := []TopicPartition{tp(0), tp(1), tp(2), tp(3)}

	// m1 alone: epoch 1, all four partitions given at 1.
	r := hb(HeartbeatRequest{SubscribedTopics: []string{"t"}})
	if r.MemberID != "m1" || r.MemberEpoch != 1 || r.Assignment.Len() != 4 {
		t.Fatalf("m1 joined: %+v", r)
	}
	// m2 joins (group epoch 2); m1 revokes two partitions, then moves to
	// epoch 2 with the two it keeps, still stamped 1; m2 gets the others
	// at 2.
	hb(HeartbeatRequest{SubscribedTopics: []string{"t"}})
	r = hb(HeartbeatRequest{MemberID: "m1", MemberEpoch: 1, OwnedSet: true, Owned: Assignment{"t": {0, 1, 2, 3}}})
	kept := r.Assignment
	if r.MemberEpoch != 1 || kept.Len() != 2 {
		t.Fatalf("m1 asked to revoke: %+v", r)
	}
	r = hb(HeartbeatRequest{MemberID: "m1", MemberEpoch: 1, OwnedSet: true, Owned: kept})
	if r.MemberEpoch != 2 {
		t.Fatalf("m1 after revoking: %+v", r)
	}
	hb(HeartbeatRequest{MemberID: "m2", MemberEpoch: 2, OwnedSet: true, Owned: Assignment{}})
	var mine, theirs []TopicPartition
	for _, p := range all {
		if kept.Contains("t", p.Partition) {
			mine = append(mine, p)
		} else {
			theirs = append(theirs, p)
		}
	}
	if got := g.members["m2"].assigned.Len(); got != 2 {
		t.Fatalf("m2 holds %d partitions", got)
	}

	check := func(g *Group, when string) {
		t.Helper()
		for _, c := range []struct {
			epoch int32
			tps   []TopicPartition
			want  string
		}{
			{2, all, "ok"}, // its epoch: no partition check
			{1, mine, "ok"},
			{1, append(mine[:1:1], theirs[0]), fmt.Sprintf("stale t-%d", theirs[0].Partition)},
			{0, mine, fmt.Sprintf("stale t-%d t-%d", mine[0].Partition, mine[1].Partition)},
			{3, mine, "FENCED_MEMBER_EPOCH"},
		} {
			if got := stale(g, "m1", c.epoch, c.tps...); got != c.want {
				t.Errorf("%s: m1 commits %v at epoch %d: %s, want %s", when, c.tps, c.epoch, got, c.want)
			}
		}
		if got := stale(g, "m2", 1, theirs...); got != fmt.Sprintf("stale t-%d t-%d", theirs[0].Partition, theirs[1].Partition) {
			t.Errorf("%s: m2 commits its partitions at epoch 1, before it had them: %s", when, got)
		}
	}
	check(g, "live")
	check(l.restore(t0, topics), "after a failover")

	// A record from before assignment epochs: each partition stamped
	// with the member's epoch.
	rec, members, _ := l.st.KIP848Group("g")
	old := members["m1"]
	old.AssignmentEpochs = nil
	members["m1"] = old
	g2 := Restore(t0, "g", Config{NewMemberID: counterIDs()}, rec, members, topics)
	if got := stale(g2, "m1", 1, mine...); got != fmt.Sprintf("stale t-%d t-%d", mine[0].Partition, mine[1].Partition) {
		t.Errorf("old record: m1 commits at epoch 1: %s", got)
	}

	// m2 leaves (epoch 3): m1 gets its partitions back, stamped 3. A
	// commit of them at epoch 2 — from before it had them again — is
	// stale; its old partitions keep stamp 1.
	hb(HeartbeatRequest{MemberID: "m2", MemberEpoch: LeaveEpoch})
	r = hb(HeartbeatRequest{MemberID: "m1", MemberEpoch: 2, OwnedSet: true, Owned: kept})
	if r.MemberEpoch != 3 || r.Assignment.Len() != 4 {
		t.Fatalf("m1 after m2 left: %+v", r)
	}
	if got := stale(g, "m1", 2, all...); got != fmt.Sprintf("stale t-%d t-%d", theirs[0].Partition, theirs[1].Partition) {
		t.Errorf("m1 commits everything at epoch 2: %s", got)
	}
	if got := stale(g, "m1", 1, mine...); got != "ok" {
		t.Errorf("m1 commits its old partitions at epoch 1: %s", got)
	}
}
