package group

import (
	"reflect"
	"testing"
	"time"
)

// Decision 72: a member record round-trips through its key and value,
// and a group value written before the assignment epoch and metadata
// hash existed still reads (the assignment epoch is then the epoch).
func TestMemberRecordRoundTrip(t *testing.T) {
	k, err := DecodeKey(MemberKey("g", "m-1"))
	if err != nil || k != (RecordKey{Type: KeyMember, Group: "g", Member: "m-1"}) {
		t.Fatalf("key: %+v %v", k, err)
	}
	if _, err := DecodeKey(MemberKey("g", "m-1")[:7]); err == nil {
		t.Fatal("a truncated member key decoded")
	}
	rec := MemberRecord{InstanceID: "i", RackID: "r", ClientID: "c", Topics: []string{"a", "b"}, Assignor: "range",
		RebalanceTimeoutMs: 60000, SessionTimeoutMs: 45000, Epoch: 7, PreviousEpoch: 6, State: MemberUnrevokedPartitions,
		Assigned: Assignment{"a": {0, 1}}, Pending: Assignment{"b": {2}}, Target: Assignment{"a": {0}}}
	got, err := DecodeMemberValue(MemberValue(rec))
	if err != nil || !equalRecord(&got, &rec) || !reflect.DeepEqual(got.Topics, rec.Topics) {
		t.Fatalf("member value: %+v %v", got, err)
	}
	if _, err := DecodeMemberValue([]byte(`{"version":1,"state":9}`)); err == nil {
		t.Fatal("a member state out of range decoded")
	}
	if _, err := DecodeMemberValue([]byte(`{"version":3}`)); err == nil {
		t.Fatal("a newer member value version decoded")
	}
	g, err := DecodeGroupValue(GroupValue(GroupRecord{Epoch: 7, AssignmentEpoch: 6, MetadataHash: 1 << 63}))
	if err != nil || g.Epoch != 7 || g.AssignmentEpoch != 6 || g.MetadataHash != 1<<63 {
		t.Fatalf("group value: %+v %v", g, err)
	}
	old, err := DecodeGroupValue([]byte(`{"version":1,"epoch":7,"time_ms":1}`))
	if err != nil || old.Epoch != 7 || old.AssignmentEpoch != 0 {
		t.Fatalf("old group value: %+v %v", old, err)
	}
	st := NewOffsetsState()
	if _, err := st.ApplyBatch(recordsBatch(t0, [][2][]byte{{GroupKey("g"), []byte(`{"version":1,"epoch":7,"time_ms":1}`)}})); err != nil {
		t.Fatal(err)
	}
	r := Restore(t0, "g", Config{}, mustKIP848(t, st, "g"), nil, nil)
	if r.Epoch() != 7 || r.AssignmentEpoch() != 7 || r.State() != Empty {
		t.Fatalf("restored from an old record: %d/%d %s", r.Epoch(), r.AssignmentEpoch(), r.State())
	}
}

func mustKIP848(t *testing.T, st *OffsetsState, g string) GroupRecord {
	t.Helper()
	rec, _, ok := st.KIP848Group(g)
	if !ok {
		t.Fatalf("no KIP-848 group %s in the state", g)
	}
	return rec
}

// recordLog is the log side of a core test: it writes what a group's
// calls changed (PendingRecords) as one batch, replays it into an
// OffsetsState as a load would, and counts the batches.
type recordLog struct {
	t       *testing.T
	st      *OffsetsState
	batches int
}

func (l *recordLog) persist(g *Group) {
	l.t.Helper()
	grec, ups := g.PendingRecords()
	if grec == nil && len(ups) == 0 {
		return
	}
	var kvs [][2][]byte
	if grec != nil {
		kvs = append(kvs, [2][]byte{GroupKey(g.ID()), GroupValue(*grec)})
	}
	for _, u := range ups {
		var v []byte
		if u.Record != nil {
			v = MemberValue(*u.Record)
		}
		kvs = append(kvs, [2][]byte{MemberKey(g.ID(), u.MemberID), v})
	}
	skipped, err := l.st.ApplyBatch(recordsBatch(t0, kvs))
	if err != nil || len(skipped) > 0 {
		l.t.Fatalf("replay: %v %v", skipped, err)
	}
	g.RecordsWritten(grec, ups)
	l.batches++
}

func (l *recordLog) restore(now time.Time, topics map[string]TopicMetadata) *Group {
	l.t.Helper()
	rec, members, ok := l.st.KIP848Group("g")
	if !ok {
		l.t.Fatal("no group in the log")
	}
	return Restore(now, "g", Config{NewMemberID: counterIDs()}, rec, members, topics)
}

// Decision 72: replaying the records a group wrote rebuilds it as it
// was — members, epochs, assignments, partitions pending revocation,
// targets, a departed static member — with sessions restarting at the
// load; the members go on at their epochs without a rebalance, and
// those that do not come back expire by their session timeout.
func TestRestoreRebuildsMembership(t *testing.T) {
	topics := meta("t", 6)
	s := newSim(t, Config{}, topics)
	l := &recordLog{t: t, st: NewOffsetsState()}
	step := func(f func()) { f(); l.persist(s.g) }
	step(func() { s.join("a", &client{topics: []string{"t"}}) })
	step(func() { s.join("b", &client{topics: []string{"t"}, instance: "ib"}) })
	for range 4 {
		for _, n := range []string{"a", "b"} {
			step(func() { s.hb(n) })
		}
	}
	if s.g.State() != Stable {
		t.Fatalf("not stable: %s", s.g.State())
	}
	// A plain heartbeat of a stable member writes nothing.
	before := l.batches
	step(func() { s.hb("a") })
	if l.batches != before {
		t.Fatal("a heartbeat that changed nothing wrote a batch")
	}
	// c joins: a and b must give up partitions; a is mid-revocation when
	// the coordinator fails over, b left statically.
	step(func() { s.join("c", &client{topics: []string{"t"}}) })
	a := s.clients["a"]
	step(func() {
		if _, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: a.id, MemberEpoch: a.epoch}, topics); err != nil {
			t.Fatal(err)
		}
	})
	step(func() { s.leave("b", StaticLeaveEpoch) })
	want := s.g.Describe()
	if want.Members[0].MemberState != MemberUnrevokedPartitions {
		t.Fatalf("a is not revoking: %+v", want.Members[0])
	}

	t1 := t0.Add(10 * time.Second)
	r := l.restore(t1, topics)
	if got := r.Describe(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored:\n%+v\nwant\n%+v", got, want)
	}
	if grec, ups := r.PendingRecords(); grec != nil || len(ups) > 0 {
		t.Fatalf("a restored group has records to write: %+v %+v", grec, ups)
	}
	// Sessions restart at the load; a's rebalance timeout too.
	if d := r.NextDeadline(); !d.Equal(t1.Add(DefaultSessionTimeout)) {
		t.Fatalf("next deadline %v, want %v", d, t1.Add(DefaultSessionTimeout))
	}
	checkInvariants(t, r)

	// The members go on at their epochs, b's instance takes its
	// assignment back: same group epoch, no rebalance.
	epoch := r.Epoch()
	s.g, s.now = r, t1
	step(func() { s.join("b", &client{topics: []string{"t"}, instance: "ib"}) })
	step(func() { s.settle(5) })
	if r.Epoch() != epoch {
		t.Fatalf("the group epoch moved from %d to %d after the failover", epoch, r.Epoch())
	}
	// A second failover rebuilds the reconciled group, too.
	if got, want := l.restore(t1, topics).Describe(), r.Describe(); !reflect.DeepEqual(got, want) {
		t.Fatalf("second restore:\n%+v\nwant\n%+v", got, want)
	}
	// Nobody heartbeats: every member expires by its session, b's too.
	r2 := l.restore(t1, topics)
	if fenced := r2.Expire(t1.Add(DefaultSessionTimeout), topics); len(fenced) != 3 || r2.State() != Empty {
		t.Fatalf("fenced %v, state %s", fenced, r2.State())
	}
}

// Decision 72: if the subscribed topics' metadata changed while no
// coordinator served the group, the restored target is recomputed at
// the next heartbeat (a new group epoch).
func TestRestoreRecomputesTargetOnMetadataChange(t *testing.T) {
	s := newSim(t, Config{}, meta("t", 2))
	l := &recordLog{t: t, st: NewOffsetsState()}
	s.join("a", &client{topics: []string{"t"}})
	l.persist(s.g)
	r := l.restore(t0, meta("t", 4))
	epoch := r.Epoch()
	a := s.clients["a"]
	resp, err := r.Heartbeat(t0, HeartbeatRequest{MemberID: a.id, MemberEpoch: a.epoch, OwnedSet: true, Owned: a.owned}, meta("t", 4))
	if err != nil || resp.MemberEpoch != epoch+1 || resp.Assignment.Len() != 4 {
		t.Fatalf("%+v %v (want epoch %d and 4 partitions)", resp, err, epoch+1)
	}
}
