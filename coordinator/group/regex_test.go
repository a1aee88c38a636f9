package group

import (
	"reflect"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func strp(s string) *string { return &s }

// withTopics returns a copy of topics with kv (name, partitions, ...)
// added: a new map, as the coordinator's metadata cache hands out.
func withTopics(topics map[string]TopicMetadata, kv ...any) map[string]TopicMetadata {
	out := make(map[string]TopicMetadata, len(topics))
	for t, m := range topics {
		out[t] = m
	}
	for t, m := range meta(kv...) {
		out[t] = m
	}
	return out
}

// withoutTopics returns a copy of topics without names.
func withoutTopics(topics map[string]TopicMetadata, names ...string) map[string]TopicMetadata {
	out := withTopics(topics)
	for _, t := range names {
		delete(out, t)
	}
	return out
}

// assignedTopics is the topics of a, sorted, as one string.
func assignedTopics(a Assignment) string {
	return strings.Join(a.topics(), ",")
}

// KIP-848 (decision 73): a member may subscribe with a regex alone; it
// matches whole topic names (Kafka's RE2/J matches()), internal topics
// included, and the member is assigned the partitions of every match.
// Describe answers the regex and the names as given (none here).
func TestRegexJoinMatchesWholeTopicNames(t *testing.T) {
	topics := meta("orders", 2, "orders-v2", 1, "xorders", 1, "orders.bak", 1, "__consumer_offsets", 3)
	s := newSim(t, Config{}, topics)
	s.join("a", &client{regex: strp(`orders(-v\d+)?`)})
	s.settle(3)
	if got := assignedTopics(s.clients["a"].owned); got != "orders,orders-v2" {
		t.Fatalf("a owns %s, want orders,orders-v2 (a whole-name match)", got)
	}
	d := s.g.Describe().Members[0]
	if d.SubscribedTopicRegex != `orders(-v\d+)?` || len(d.SubscribedTopics) != 0 {
		t.Fatalf("described %+v", d)
	}
	// Kafka resolves against every topic of the metadata, internal ones
	// too (franz-go's Test848RegexBrokerResolves relies on it).
	s.join("b", &client{regex: strp(`__consumer_offsets`), topics: []string{"xorders"}})
	s.settle(5)
	if got := assignedTopics(s.clients["b"].owned); got != "__consumer_offsets,xorders" {
		t.Fatalf("b owns %s, want __consumer_offsets,xorders (names and regex)", got)
	}
	// (?m) cannot unanchor the match.
	s.join("c", &client{regex: strp(`(?m)orders`)})
	s.settle(5)
	if got := assignedTopics(s.g.target[s.clients["c"].id]); got != "orders" {
		t.Fatalf("c's target is %s, want orders", got)
	}
}

// A topic created after the member joined is matched: MetadataChanged
// resolves the regex again, the group epoch bumps and the target
// includes the new topic; a topic deleted leaves the subscription the
// same way. A heartbeat that brings new metadata first resolves it as
// well.
func TestRegexFollowsTopicsCreatedAndDeleted(t *testing.T) {
	s := newSim(t, Config{}, meta("in-a", 2, "out", 1))
	s.join("a", &client{regex: strp(`in-.*`)})
	s.join("b", &client{regex: strp(`in-.*`)})
	s.settle(5)
	if len(s.g.regexes) != 1 {
		t.Fatalf("two members with one regex: the group holds %d", len(s.g.regexes))
	}
	epoch := s.g.Epoch()

	// Unrelated topic: nothing moves.
	s.topics = withTopics(s.topics, "other", 3)
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != epoch {
		t.Fatalf("a topic the regex does not match bumped the epoch to %d", s.g.Epoch())
	}

	s.topics = withTopics(s.topics, "in-b", 2)
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != epoch+1 {
		t.Fatalf("in-b created: epoch %d, want %d", s.g.Epoch(), epoch+1)
	}
	s.settle(5)
	owned := s.clients["a"].owned.Clone()
	for tp, ps := range s.clients["b"].owned {
		owned[tp] = append(owned[tp], ps...)
	}
	if got := owned.normalized().String(); got != "in-a:0,1 in-b:0,1" {
		t.Fatalf("a and b own %s, want in-a:0,1 in-b:0,1", got)
	}

	// Through a heartbeat only: the first member to heartbeat with the
	// new metadata resolves the regex for every member using it.
	s.topics = withTopics(s.topics, "in-c", 1)
	epoch = s.g.Epoch()
	s.hb("a")
	if s.g.Epoch() != epoch+1 || !strings.Contains(assignedTopics(s.g.target[s.clients["a"].id])+","+assignedTopics(s.g.target[s.clients["b"].id]), "in-c") {
		t.Fatalf("in-c seen in a heartbeat: epoch %d (want %d), target %v", s.g.Epoch(), epoch+1, s.g.target)
	}
	s.settle(5)

	// Deleted: out of the subscription, and of the assignment.
	s.topics = withoutTopics(s.topics, "in-a")
	epoch = s.g.Epoch()
	s.g.MetadataChanged(s.now, s.topics)
	if s.g.Epoch() != epoch+1 {
		t.Fatalf("in-a deleted: epoch %d, want %d", s.g.Epoch(), epoch+1)
	}
	s.settle(5)
	for _, n := range []string{"a", "b"} {
		if _, ok := s.clients[n].owned["in-a"]; ok {
			t.Fatalf("%s still owns the deleted in-a: %s", n, s.clients[n].owned)
		}
		if m := s.g.members[s.clients[n].id]; slicesContain(m.topics, "in-a") {
			t.Fatalf("%s is still subscribed to in-a: %v", n, m.topics)
		}
	}
}

func slicesContain(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

// A heartbeat's regex: nil leaves it, "" clears it (the member keeps
// its names), another regex replaces it; each change of the resolved
// topics bumps the epoch, and the group drops a regex nobody uses.
func TestRegexClearedAndReplaced(t *testing.T) {
	s := newSim(t, Config{}, meta("a1", 1, "a2", 1, "b1", 1, "n", 1))
	s.join("m", &client{topics: []string{"n"}, regex: strp(`a.`)})
	s.settle(3)
	m := s.g.members[s.clients["m"].id]
	if !equalStrings(m.topics, []string{"a1", "a2", "n"}) {
		t.Fatalf("subscribed to %v", m.topics)
	}
	send := func(regex *string) {
		t.Helper()
		c := s.clients["m"]
		resp, err := s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, SubscribedTopicRegex: regex, OwnedSet: true, Owned: c.owned}, s.topics)
		if err != nil {
			t.Fatal(err)
		}
		c.epoch = resp.MemberEpoch
		if resp.AssignmentChanged {
			c.owned = resp.Assignment
		}
		checkInvariants(t, s.g)
	}
	epoch := s.g.Epoch()
	send(nil)
	if s.g.Epoch() != epoch || !equalStrings(m.topics, []string{"a1", "a2", "n"}) {
		t.Fatalf("a nil regex changed something: epoch %d, topics %v", s.g.Epoch(), m.topics)
	}
	send(strp(`b.`))
	if s.g.Epoch() != epoch+1 || !equalStrings(m.topics, []string{"b1", "n"}) || s.g.regexes[`a.`] != nil {
		t.Fatalf("replaced: epoch %d, topics %v, regexes %v", s.g.Epoch(), m.topics, s.g.regexes)
	}
	send(strp(""))
	if s.g.Epoch() != epoch+2 || !equalStrings(m.topics, []string{"n"}) || len(s.g.regexes) != 0 || s.g.Describe().Members[0].SubscribedTopicRegex != "" {
		t.Fatalf("cleared: epoch %d, topics %v, regexes %v", s.g.Epoch(), m.topics, s.g.regexes)
	}
	s.settle(5)
	if got := assignedTopics(s.clients["m"].owned); got != "n" {
		t.Fatalf("owns %s after the regex was cleared, want n", got)
	}
	// Leaving drops the member's regex from the group.
	s.clients["m"].regex = strp(`a.`)
	s.join("o", &client{regex: strp(`a.`)})
	s.leave("o", LeaveEpoch)
	if len(s.g.regexes) != 0 {
		t.Fatalf("a left member's regex stays: %v", s.g.regexes)
	}
}

// An invalid regex, or one longer than MaxRegexBytes, is
// INVALID_REGULAR_EXPRESSION and changes nothing; a join needs names or
// a regex.
func TestRegexInvalid(t *testing.T) {
	g := newTestGroup(Config{})
	topics := meta("t", 1)
	for _, re := range []string{`[`, `a(b`, `x**`, strings.Repeat("a", MaxRegexBytes+1), "\xff"} {
		_, err := g.Heartbeat(t0, HeartbeatRequest{MemberEpoch: JoinEpoch, SubscribedTopicRegex: strp(re)}, topics)
		if codeOf(err) != sluicev1.ErrorCode_INVALID_REGULAR_EXPRESSION {
			t.Fatalf("regex %.20q: %v, want INVALID_REGULAR_EXPRESSION", re, err)
		}
	}
	if _, err := g.Heartbeat(t0, HeartbeatRequest{MemberEpoch: JoinEpoch, SubscribedTopicRegex: strp(strings.Repeat("a", MaxRegexBytes))}, topics); err != nil {
		t.Fatalf("a regex of MaxRegexBytes: %v", err)
	}
	if _, err := g.Heartbeat(t0, HeartbeatRequest{MemberEpoch: JoinEpoch, SubscribedTopicRegex: strp("")}, topics); codeOf(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("a join with an empty regex and no names: %v, want INVALID_REQUEST", err)
	}
	// A member's later heartbeat with a bad regex: refused, the member
	// and its regex unchanged.
	g2 := newTestGroup(Config{})
	resp, err := g2.Heartbeat(t0, HeartbeatRequest{MemberEpoch: JoinEpoch, SubscribedTopicRegex: strp(`t`)}, topics)
	if err != nil {
		t.Fatal(err)
	}
	epoch := g2.Epoch()
	if _, err := g2.Heartbeat(t0, HeartbeatRequest{MemberID: resp.MemberID, MemberEpoch: resp.MemberEpoch, SubscribedTopicRegex: strp(`(`)}, topics); codeOf(err) != sluicev1.ErrorCode_INVALID_REGULAR_EXPRESSION {
		t.Fatalf("%v, want INVALID_REGULAR_EXPRESSION", err)
	}
	if d := g2.Describe(); g2.Epoch() != epoch || d.Members[0].SubscribedTopicRegex != "t" || len(g2.regexes) != 1 {
		t.Fatalf("a refused heartbeat changed the group: epoch %d, %+v", g2.Epoch(), d.Members[0])
	}
}

// KAFKA-18813: a member's regex resolves to the matches its caller may
// DESCRIBE (its TopicFilter): two members with one regex may subscribe
// to different topics. The filter runs again on new topics at once, and
// on the member's heartbeats every RegexRefreshInterval (an ACL
// granted later).
func TestRegexFilteredByMembersDescribe(t *testing.T) {
	granted := map[string]bool{"in-a": true}
	limited := func(topic string) bool { return granted[topic] }
	s := newSim(t, Config{}, meta("in-a", 1, "in-secret", 1))
	s.join("a", &client{regex: strp(`in-.*`), filter: limited})
	s.join("b", &client{regex: strp(`in-.*`)})
	s.settle(5)
	ma, mb := s.g.members[s.clients["a"].id], s.g.members[s.clients["b"].id]
	if !equalStrings(ma.topics, []string{"in-a"}) || !equalStrings(mb.topics, []string{"in-a", "in-secret"}) {
		t.Fatalf("a subscribes to %v (want in-a), b to %v", ma.topics, mb.topics)
	}
	if _, ok := s.g.target[ma.id]["in-secret"]; ok {
		t.Fatal("a is targeted a topic it may not describe")
	}
	// A new topic a may describe: a's filter runs on it at once.
	granted["in-new"] = true
	s.topics = withTopics(s.topics, "in-new", 1)
	s.g.MetadataChanged(s.now, s.topics)
	if !equalStrings(ma.topics, []string{"in-a", "in-new"}) {
		t.Fatalf("a subscribes to %v after in-new was created", ma.topics)
	}
	// DESCRIBE on in-secret granted: seen at a heartbeat once the
	// refresh interval has passed, not before.
	granted["in-secret"] = true
	s.now = s.now.Add(time.Second)
	s.hb("a")
	if slicesContain(ma.topics, "in-secret") {
		t.Fatal("the filter ran again before the refresh interval")
	}
	s.now = s.now.Add(DefaultRegexRefreshInterval)
	epoch := s.g.Epoch()
	s.hb("a")
	if !slicesContain(ma.topics, "in-secret") || s.g.Epoch() != epoch+1 {
		t.Fatalf("after the refresh interval a subscribes to %v, epoch %d (want %d)", ma.topics, s.g.Epoch(), epoch+1)
	}
}

// Decision 73: the member record keeps the regex and the topics it
// resolved to (version 2); a record without them (version 1, from
// before) loads as no regex.
func TestRegexMemberRecord(t *testing.T) {
	rec := MemberRecord{ClientID: "c", Topics: []string{"n"}, Regex: "in-.*", RegexTopics: []string{"in-a", "in-b"},
		Epoch: 3, Assigned: Assignment{"in-a": {0}}, Pending: Assignment{}, Target: Assignment{"in-a": {0}}}
	v := MemberValue(rec)
	if !strings.Contains(string(v), `"version":2`) || !strings.Contains(string(v), `"regex":"in-.*"`) {
		t.Fatalf("value %s", v)
	}
	got, err := DecodeMemberValue(v)
	if err != nil || !equalRecord(&got, &rec) {
		t.Fatalf("decoded %+v %v", got, err)
	}
	if v1 := MemberValue(MemberRecord{Topics: []string{"n"}}); !strings.Contains(string(v1), `"version":1`) || strings.Contains(string(v1), "regex") {
		t.Fatalf("a record without a regex: %s", v1)
	}
	old, err := DecodeMemberValue([]byte(`{"version":1,"topics":["n"],"epoch":3,"state":0}`))
	if err != nil || old.Regex != "" || old.RegexTopics != nil {
		t.Fatalf("old record: %+v %v", old, err)
	}
}

// Decision 73: a coordinator failover keeps a regex member's regex and
// resolved topics (the target stands, no rebalance). Until the member
// heartbeats again its filter is unknown: a topic created meanwhile is
// not added (it might not be the caller's to describe), one deleted is
// removed; its next heartbeat brings the filter and the new topic.
func TestRegexSurvivesFailover(t *testing.T) {
	topics := meta("in-a", 2, "in-b", 1, "out", 1)
	s := newSim(t, Config{}, topics)
	l := &recordLog{t: t, st: NewOffsetsState()}
	step := func(f func()) { f(); l.persist(s.g) }
	step(func() { s.join("a", &client{regex: strp(`in-.*`), topics: []string{"out"}}) })
	step(func() { s.join("b", &client{topics: []string{"in-a"}}) })
	step(func() { s.settle(5) })
	want := s.g.Describe()

	r := l.restore(t0, topics)
	if got := r.Describe(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored:\n%+v\nwant\n%+v", got, want)
	}
	checkInvariants(t, r)
	if grec, ups := r.PendingRecords(); grec != nil || len(ups) > 0 {
		t.Fatalf("a restored group has records to write: %+v %+v", grec, ups)
	}
	ma := r.members[s.clients["a"].id]
	if !equalStrings(ma.topics, []string{"in-a", "in-b", "out"}) || ma.filterKnown {
		t.Fatalf("restored a: topics %v, filter known %v", ma.topics, ma.filterKnown)
	}
	epoch := r.Epoch()
	s.g = r
	before := l.batches
	step(func() { s.settle(3) })
	if r.Epoch() != epoch || l.batches != before {
		t.Fatalf("the failover moved the epoch %d → %d, or the members' heartbeats wrote %d batches", epoch, r.Epoch(), l.batches-before)
	}

	// Another failover; before a's next heartbeat in-c is created and
	// in-b deleted.
	r = l.restore(t0, topics)
	s.g = r
	ma = r.members[s.clients["a"].id]
	s.topics = withTopics(withoutTopics(topics, "in-b"), "in-c", 1)
	step(func() { s.g.MetadataChanged(s.now, s.topics) })
	if !equalStrings(ma.topics, []string{"in-a", "out"}) || r.Epoch() != epoch+1 {
		t.Fatalf("a restored member without its filter subscribes to %v at epoch %d (want in-a,out at %d)", ma.topics, r.Epoch(), epoch+1)
	}
	step(func() { s.hb("a") })
	if !equalStrings(ma.topics, []string{"in-a", "in-c", "out"}) || r.Epoch() != epoch+2 {
		t.Fatalf("after its heartbeat a subscribes to %v at epoch %d (want in-a,in-c,out at %d)", ma.topics, r.Epoch(), epoch+2)
	}
	step(func() { s.settle(5) })
	// A second failover brings the resolved topics back as they are now.
	if got, want := l.restore(t0, s.topics).Describe(), r.Describe(); !reflect.DeepEqual(got, want) {
		t.Fatalf("second restore:\n%+v\nwant\n%+v", got, want)
	}
	if m := l.restore(t0, s.topics).members[ma.id]; !equalStrings(m.regexTopics, []string{"in-a", "in-c"}) {
		t.Fatalf("restored regex topics %v", m.regexTopics)
	}
}
