package group

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/golden"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Random runs of the protocol: clients join, leave, leave statically and
// come back, change subscriptions, lose answers, miss sessions; topics
// grow and shrink. After every call the group's invariants hold and no
// two clients believe they own the same partition; once the chaos stops,
// heartbeats alone bring every member to its target (Stable).
func TestRandomMembership(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		randomRun(t, seed)
	}
}

func randomRun(t *testing.T, seed int64) {
	r := rand.New(rand.NewSource(seed))
	s := newSim(t, Config{SessionTimeout: 30 * time.Second, RebalanceTimeout: 20 * time.Second},
		meta("a", 1+r.Intn(9), "b", r.Intn(9), "c", 1+r.Intn(4)))
	names := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	topicSets := [][]string{{"a"}, {"b"}, {"a", "b"}, {"a", "c"}, {"a", "b", "c"}}
	for i, n := range names {
		c := &client{topics: topicSets[r.Intn(len(topicSets))], assignor: []string{"", "uniform", "range"}[r.Intn(3)]}
		if i%2 == 0 {
			c.instance = "inst-" + n
		}
		if r.Intn(2) == 0 {
			c.rack = []string{"r1", "r2"}[r.Intn(2)]
		}
		c.epoch = LeaveEpoch // not a member yet
		s.clients[n] = c
	}
	// fenced: the client drops its partitions and must join again with
	// epoch 0 under the same member id (groups.proto).
	fenced := func(c *client) { c.epoch, c.owned = 0, nil }
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	checkClients := func() {
		seen := map[topicPartition]string{}
		for _, n := range names {
			for tp, ps := range s.clients[n].owned {
				for _, p := range ps {
					if o, ok := seen[topicPartition{tp, p}]; ok {
						fail("%s:%d owned by clients %s and %s", tp, p, o, n)
					}
					seen[topicPartition{tp, p}] = n
				}
			}
		}
	}
	for step := 0; step < 300; step++ {
		s.now = s.now.Add(time.Duration(r.Intn(2000)) * time.Millisecond)
		n := names[r.Intn(len(names))]
		c := s.clients[n]
		var err error
		switch op := r.Intn(12); {
		case op < 2 && c.epoch <= 0:
			if c.epoch == LeaveEpoch || (c.epoch == StaticLeaveEpoch && r.Intn(2) == 0) {
				c.id = "" // a new incarnation
			}
			_, err = s.send(n, 0)
		case op == 2 && c.epoch > 0:
			_, err = s.send(n, LeaveEpoch)
			c.epoch, c.owned = LeaveEpoch, nil
		case op == 3 && c.epoch > 0 && c.instance != "":
			_, err = s.send(n, StaticLeaveEpoch)
			c.epoch, c.owned = StaticLeaveEpoch, nil
		case op == 4 && c.epoch > 0:
			c.topics = topicSets[r.Intn(len(topicSets))]
			var resp HeartbeatResponse
			resp, err = s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, InstanceID: c.instance, SubscribedTopics: c.topics, OwnedSet: true, Owned: c.owned}, s.topics)
			if err == nil {
				c.epoch = resp.MemberEpoch
				if resp.AssignmentChanged {
					c.owned = resp.Assignment
				}
			}
		case op == 5:
			tp := []string{"a", "b", "c"}[r.Intn(3)]
			s.topics[tp] = TopicMetadata{Partitions: int32(r.Intn(10))}
			s.g.MetadataChanged(s.now, s.topics)
		case op == 6:
			s.now = s.now.Add(time.Duration(r.Intn(40)) * time.Second)
			for _, id := range s.g.Expire(s.now, s.topics) {
				for _, m := range names {
					if s.clients[m].id == id {
						fenced(s.clients[m])
					}
				}
			}
		case op == 7 && c.epoch > 0:
			// The answer is lost: the client keeps what it had.
			_, err = s.g.Heartbeat(s.now, HeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, InstanceID: c.instance, OwnedSet: true, Owned: c.owned}, s.topics)
		case c.epoch > 0:
			_, err = s.send(n, c.epoch)
		}
		checkInvariants(t, s.g)
		switch codeOf(err) {
		case sluicev1.ErrorCode_NONE:
		case sluicev1.ErrorCode_FENCED_MEMBER_EPOCH, sluicev1.ErrorCode_UNKNOWN_MEMBER_ID:
			fenced(c)
		default:
			fail("step %d %s: %v", step, n, err)
		}
		checkClients()
	}
	// Calm: departed static members come back, then every member
	// heartbeats until the group is Stable.
	for _, n := range names {
		if c := s.clients[n]; c.epoch == StaticLeaveEpoch || c.epoch == 0 {
			if _, err := s.send(n, 0); err != nil {
				fail("return of %s: %v", n, err)
			}
		}
	}
	for round := 0; ; round++ {
		if round > 10 {
			var cs strings.Builder
			for _, n := range names {
				c := s.clients[n]
				fmt.Fprintf(&cs, "  client %s id=%s epoch=%d owned=%s\n", n, c.id, c.epoch, c.owned)
			}
			fail("not Stable after 10 rounds: %s\n%s%s", s.g.State(), describe(s.g), cs.String())
		}
		if st := s.g.State(); st == Stable || st == Empty {
			break
		}
		for _, n := range names {
			if c := s.clients[n]; c.epoch > 0 {
				if _, err := s.send(n, c.epoch); err != nil {
					if codeOf(err) != sluicev1.ErrorCode_FENCED_MEMBER_EPOCH {
						fail("calm heartbeat %s: %v", n, err)
					}
					// Fenced after lost answers: drop everything, join again.
					c.owned = nil
					if _, err := s.send(n, 0); err != nil {
						fail("rejoin %s: %v", n, err)
					}
				}
				checkClients()
			}
		}
	}
	for _, n := range names {
		c := s.clients[n]
		if c.epoch <= 0 {
			continue
		}
		m := s.g.members[c.id]
		if !c.owned.Equal(m.assigned) || !m.assigned.Equal(s.g.target[c.id]) || m.epoch != s.g.Epoch() {
			fail("%s owns %s, assigned %s, target %s, epoch %d/%d", n, c.owned, m.assigned, s.g.target[c.id], m.epoch, s.g.Epoch())
		}
	}
}

func describe(g *Group) string {
	var b strings.Builder
	d := g.Describe()
	fmt.Fprintf(&b, "group %s epoch %d/%d %s %s\n", d.GroupID, d.GroupEpoch, d.AssignmentEpoch, d.State, d.Assignor)
	for _, m := range d.Members {
		inst := m.InstanceID
		if inst == "" {
			inst = "-"
		}
		fmt.Fprintf(&b, "  %s inst=%s rack=%s epoch=%d %s topics=%s assigned=%s target=%s\n", m.MemberID, inst, m.RackID, m.MemberEpoch, m.MemberState,
			strings.Join(m.SubscribedTopics, ","), m.Assignment, m.TargetAssignment)
	}
	return b.String()
}

// The same calls give the same group: member ids, epochs, assignments.
func TestDeterminism(t *testing.T) {
	run := func() string {
		var b strings.Builder
		for seed := int64(0); seed < 20; seed++ {
			s := newSim(t, Config{}, meta("a", 7, "b", 5))
			for i := 0; i < 5; i++ {
				s.join(fmt.Sprintf("c%d", i), &client{topics: [][]string{{"a"}, {"a", "b"}}[i%2], rack: []string{"", "r1"}[i%2]})
			}
			s.settle(10)
			b.WriteString(describe(s.g))
		}
		return b.String()
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
}

// A golden trace of a whole life: joins, a rebalance with revocation, a
// static member leaving and coming back, a session expiry, a leave.
func TestTraceGolden(t *testing.T) {
	var trace strings.Builder
	s := newSim(t, Config{SessionTimeout: 20 * time.Second}, meta("orders", 6))
	s.trace = &trace
	s.logf("# A joins, then B and static S; everyone converges")
	s.join("A", &client{topics: []string{"orders"}})
	s.join("B", &client{topics: []string{"orders"}})
	s.join("S", &client{topics: []string{"orders"}, instance: "s-1"})
	rounds := s.settle(10)
	s.logf("# stable after %d rounds\n%s", rounds, describe(s.g))
	s.logf("# S leaves statically and comes back as a new process within its session")
	s.now = s.now.Add(5 * time.Second)
	s.leave("S", StaticLeaveEpoch)
	s.hb("A")
	s.clients["S"] = &client{topics: []string{"orders"}, instance: "s-1"}
	s.join("S", s.clients["S"])
	s.logf("%s", describe(s.g))
	s.logf("# B goes silent; its session runs out")
	s.now = s.now.Add(15 * time.Second)
	s.hb("A")
	s.hb("S")
	s.now = s.now.Add(6 * time.Second)
	s.logf("expire at +%v: %v", s.now.Sub(t0), s.g.Expire(s.now, s.topics))
	delete(s.clients, "B")
	rounds = s.settle(10)
	s.logf("# stable after %d rounds\n%s", rounds, describe(s.g))
	s.logf("# A leaves")
	s.leave("A", LeaveEpoch)
	delete(s.clients, "A")
	s.settle(10)
	s.logf("%s", describe(s.g))
	golden.Check(t, "testdata/trace-life.golden", []byte(trace.String()))
}
