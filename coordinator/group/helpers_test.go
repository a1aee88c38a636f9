package group

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Golden files in testdata (internal/golden) are regenerated with
//
//	go test ./coordinator/group/ -update
//
// and the diff reviewed.

var t0 = time.UnixMilli(1_794_026_921_817).UTC()

// counterIDs is a deterministic member id source: m1, m2, ...
func counterIDs() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("m%d", n) }
}

func newTestGroup(cfg Config) *Group {
	if cfg.NewMemberID == nil {
		cfg.NewMemberID = counterIDs()
	}
	return New("g", cfg)
}

// meta builds topic metadata: name, partitions, name, partitions, ...
func meta(kv ...any) map[string]TopicMetadata {
	out := map[string]TopicMetadata{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = TopicMetadata{Partitions: int32(kv[i+1].(int))}
	}
	return out
}

// parseAssignment reads Assignment.String's form ("t:0,1 u:2", "-").
func parseAssignment(s string) Assignment {
	out := Assignment{}
	if s == "-" || s == "" {
		return out
	}
	for _, part := range strings.Fields(s) {
		topic, ps, _ := strings.Cut(part, ":")
		for _, p := range strings.Split(ps, ",") {
			var n int32
			fmt.Sscan(p, &n)
			out[topic] = append(out[topic], n)
		}
	}
	return out.normalized()
}

func codeOf(err error) sluicev1.ErrorCode {
	var e *errs.Error
	if err != nil && !errors.As(err, &e) {
		return sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR
	}
	return errs.Code(err)
}

// client plays a well-behaved consumer: it adopts every assignment it is
// answered at once (releasing what is no longer listed) and reports what
// it owns on every heartbeat.
type client struct {
	id, instance string
	epoch        int32
	owned        Assignment
	topics       []string
	assignor     string
	rack         string
	// regex is sent on join; filter on every heartbeat (regex.go).
	regex  *string
	filter TopicFilter
}

// sim drives a group with clients and a clock, checking the invariants
// after every call.
type sim struct {
	t       testing.TB
	g       *Group
	now     time.Time
	topics  map[string]TopicMetadata
	clients map[string]*client // by name
	trace   *strings.Builder
}

func newSim(t testing.TB, cfg Config, topics map[string]TopicMetadata) *sim {
	return &sim{t: t, g: newTestGroup(cfg), now: t0, topics: topics, clients: map[string]*client{}}
}

func (s *sim) logf(format string, args ...any) {
	if s.trace != nil {
		fmt.Fprintf(s.trace, format+"\n", args...)
	}
}

// join makes a new client called name join; it fails the test on error.
func (s *sim) join(name string, c *client) HeartbeatResponse {
	s.t.Helper()
	s.clients[name] = c
	resp, err := s.send(name, 0)
	if err != nil {
		s.t.Fatalf("%s join: %v", name, err)
	}
	return resp
}

// hb sends a heartbeat of name at its epoch.
func (s *sim) hb(name string) HeartbeatResponse {
	s.t.Helper()
	c := s.clients[name]
	resp, err := s.send(name, c.epoch)
	if err != nil {
		s.t.Fatalf("%s heartbeat at epoch %d: %v", name, c.epoch, err)
	}
	return resp
}

// send sends one heartbeat of name with member epoch epoch and applies
// the answer to the client.
func (s *sim) send(name string, epoch int32) (HeartbeatResponse, error) {
	s.t.Helper()
	c := s.clients[name]
	req := HeartbeatRequest{MemberID: c.id, MemberEpoch: epoch, InstanceID: c.instance, RackID: c.rack,
		OwnedSet: true, Owned: c.owned.Clone(), Assignor: c.assignor, TopicFilter: c.filter}
	if epoch == 0 {
		req.SubscribedTopics = c.topics
		req.SubscribedTopicRegex = c.regex
		req.Owned = nil
	}
	resp, err := s.g.Heartbeat(s.now, req, s.topics)
	s.check()
	if err != nil {
		s.logf("%-4s hb epoch=%d owned=%s -> %v", name, epoch, c.owned, codeOf(err))
		return resp, err
	}
	c.id = resp.MemberID
	c.epoch = resp.MemberEpoch
	if epoch < 0 {
		c.owned = nil
	}
	if resp.AssignmentChanged {
		c.owned = resp.Assignment.Clone()
	}
	assign := "unchanged"
	if resp.AssignmentChanged {
		assign = resp.Assignment.String()
	}
	s.logf("%-4s hb epoch=%d -> id=%s epoch=%d assignment=%s | group epoch=%d state=%s", name, epoch, resp.MemberID, resp.MemberEpoch, assign, s.g.Epoch(), s.g.State())
	return resp, nil
}

// leave sends a leave (-1) or static leave (-2).
func (s *sim) leave(name string, epoch int32) {
	s.t.Helper()
	if _, err := s.send(name, epoch); err != nil {
		s.t.Fatalf("%s leave %d: %v", name, epoch, err)
	}
}

// settle heartbeats every client, in name order, until the group is
// Stable; it returns the rounds it took.
func (s *sim) settle(maxRounds int) int {
	s.t.Helper()
	names := make([]string, 0, len(s.clients))
	for n := range s.clients {
		names = append(names, n)
	}
	sort.Strings(names)
	for round := 1; round <= maxRounds; round++ {
		for _, n := range names {
			if c := s.clients[n]; c.epoch > 0 {
				s.hb(n)
			}
		}
		if s.g.State() == Stable {
			return round
		}
	}
	s.t.Fatalf("not Stable after %d rounds: %s", maxRounds, s.g.State())
	return 0
}

// check asserts the group's invariants: the target is for the group
// epoch, target shares are disjoint, no partition is held by two
// members, and every member's epoch is at most the group epoch.
func (s *sim) check() {
	s.t.Helper()
	checkInvariants(s.t, s.g)
}

func checkInvariants(t testing.TB, g *Group) {
	t.Helper()
	if g.assignmentEpoch != g.epoch {
		t.Fatalf("assignment epoch %d != group epoch %d", g.assignmentEpoch, g.epoch)
	}
	held := map[topicPartition]string{}
	targeted := map[topicPartition]string{}
	for id, m := range g.members {
		if m.epoch > g.epoch {
			t.Fatalf("member %s epoch %d above group epoch %d", id, m.epoch, g.epoch)
		}
		for _, a := range []Assignment{m.assigned, m.pending} {
			for tp, ps := range a {
				for _, p := range ps {
					k := topicPartition{tp, p}
					if o, ok := held[k]; ok {
						t.Fatalf("%s:%d held by %s and %s", tp, p, o, id)
					}
					held[k] = id
					if g.ownerOf(tp, p) != id {
						t.Fatalf("owners index says %s:%d is %q's, member %s holds it", tp, p, g.ownerOf(tp, p), id)
					}
					// KIP-1251: every held partition has an assignment
					// epoch, at most the member's.
					if at, ok := m.assignedAt[tp][p]; !ok || (m.epoch >= 0 && at > m.epoch) {
						t.Fatalf("member %s (epoch %d) holds %s:%d with assignment epoch %d (%v)", id, m.epoch, tp, p, at, ok)
					}
				}
			}
		}
		if n := m.assignedAt.len(); n != m.assigned.Len()+m.pending.Len() {
			t.Fatalf("member %s has %d assignment epochs for %d partitions held", id, n, m.assigned.Len()+m.pending.Len())
		}
		for tp, ps := range g.target[id] {
			for _, p := range ps {
				k := topicPartition{tp, p}
				if o, ok := targeted[k]; ok {
					t.Fatalf("target gives %s:%d to %s and %s", tp, p, o, id)
				}
				targeted[k] = id
			}
		}
	}
	n := 0
	for _, o := range g.owners {
		n += len(o)
	}
	if n != len(held) {
		t.Fatalf("owners index has %d partitions, members hold %d", n, len(held))
	}
	if len(g.deadlines) != len(g.members) {
		t.Fatalf("%d deadlines for %d members", len(g.deadlines), len(g.members))
	}
	// Subscriptions (regex.go): each member's topics are its names and
	// its regex's topics; the subscriber counts and regex counts follow.
	subs, regexes := map[string]int{}, map[string]int{}
	for id, m := range g.members {
		if want := sortedUnique(append(append([]string(nil), m.names...), m.regexTopics...)); !equalStrings(want, m.topics) {
			t.Fatalf("member %s subscribes to %v, its names and regex give %v", id, m.topics, want)
		}
		for _, tp := range m.topics {
			subs[tp]++
		}
		if m.regex != "" {
			regexes[m.regex]++
		}
	}
	if len(subs) != len(g.subscribers) {
		t.Fatalf("subscribers %v, members subscribe to %v", g.subscribers, subs)
	}
	for tp, n := range subs {
		if g.subscribers[tp] != n {
			t.Fatalf("subscribers %v, members subscribe to %v", g.subscribers, subs)
		}
	}
	if len(regexes) != len(g.regexes) {
		t.Fatalf("the group holds %d regexes, its members use %v", len(g.regexes), regexes)
	}
	for s, n := range regexes {
		if r := g.regexes[s]; r == nil || r.members != n {
			t.Fatalf("regex %q: %d members use it, the group counts %+v", s, n, r)
		}
	}
}
