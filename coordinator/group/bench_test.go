package group

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// stableGroup returns a sim with n members subscribed to topics, Stable.
func stableGroup(b *testing.B, n int, topics map[string]TopicMetadata) *sim {
	s := newSim(b, Config{}, topics)
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	for i := 0; i < n; i++ {
		s.join(fmt.Sprintf("c%04d", i), &client{topics: sortedUnique(names)})
	}
	s.settle(10)
	return s
}

// Steady state: a Stable group of 1,000 members on 2,000 partitions; each
// op is one member's heartbeat reporting its 2 partitions, with the
// metadata check and the answer.
func BenchmarkHeartbeat1000Members(b *testing.B) {
	for _, tc := range []struct {
		name   string
		topics map[string]TopicMetadata
	}{
		{"no-racks", meta("t", 2000)},
		{"racks", map[string]TopicMetadata{"t": withRacks(2000, 3)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := stableGroup(b, 1000, tc.topics)
			var reqs []HeartbeatRequest
			for _, c := range s.clients {
				reqs = append(reqs, HeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, OwnedSet: true, Owned: c.owned})
			}
			now := s.now
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Millisecond)
				resp, err := s.g.Heartbeat(now, reqs[i%len(reqs)], s.topics)
				if err != nil || resp.AssignmentChanged {
					b.Fatalf("%+v %v", resp, err)
				}
			}
		})
	}
}

func withRacks(partitions, replicas int) TopicMetadata {
	md := TopicMetadata{Partitions: int32(partitions)}
	for p := 0; p < partitions; p++ {
		var rs []string
		for r := 0; r < replicas; r++ {
			rs = append(rs, fmt.Sprintf("rack-%d", (p+r)%3))
		}
		md.Racks = append(md.Racks, rs)
	}
	return md
}

// From one member of 10 leaving (100 partitions, uniform) to every member
// Stable, driving the remaining members' heartbeats round-robin as
// well-behaved clients (each adopts its answer and reports what it owns);
// the member then joins again and the group settles, outside the timer.
// Reports the heartbeats a rebalance takes, the leave included.
func BenchmarkRebalance10MembersOneLeaves(b *testing.B) {
	s := stableGroup(b, 10, meta("t", 100))
	g, topics, now := s.g, s.topics, s.now
	clients := make([]*client, 10)
	for i := range clients {
		clients[i] = s.clients[fmt.Sprintf("c%04d", i)]
	}
	send := func(c *client, epoch int32) {
		now = now.Add(time.Millisecond)
		req := HeartbeatRequest{MemberID: c.id, MemberEpoch: epoch, OwnedSet: true, Owned: c.owned}
		if epoch == 0 {
			req = HeartbeatRequest{MemberID: c.id, SubscribedTopics: c.topics}
		}
		resp, err := g.Heartbeat(now, req, topics)
		if err != nil {
			b.Fatal(err)
		}
		c.id, c.epoch = resp.MemberID, resp.MemberEpoch
		if resp.AssignmentChanged {
			c.owned = resp.Assignment
		}
	}
	heartbeats := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		leaver := clients[i%len(clients)]
		send(leaver, LeaveEpoch)
		heartbeats++
		for k := 0; g.State() != Stable; k++ {
			if c := clients[k%len(clients)]; c != leaver {
				send(c, c.epoch)
				heartbeats++
			}
		}
		b.StopTimer()
		leaver.id, leaver.owned = "", nil
		send(leaver, 0)
		for k := 0; g.State() != Stable; k++ {
			c := clients[k%len(clients)]
			send(c, c.epoch)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(heartbeats)/float64(b.N), "heartbeats/rebalance")
}

// The uniform assignor on a large group: 1,000 members, 10 topics of
// 1,000 partitions. "fresh": no previous assignment; "sticky": the
// previous target with one member gone and one new.
func BenchmarkUniformAssign(b *testing.B) {
	topics := map[string]TopicMetadata{}
	var names []string
	for t := 0; t < 10; t++ {
		name := fmt.Sprintf("topic-%d", t)
		topics[name] = TopicMetadata{Partitions: 1000}
		names = append(names, name)
	}
	members := make([]MemberSubscription, 1000)
	for i := range members {
		members[i] = MemberSubscription{MemberID: fmt.Sprintf("member-%04d", i), Topics: names}
	}
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			UniformAssignor{}.Assign(members, topics)
		}
	})
	b.Run("sticky", func(b *testing.B) {
		prev := UniformAssignor{}.Assign(members, topics)
		sticky := make([]MemberSubscription, len(members))
		copy(sticky, members)
		for i := range sticky {
			sticky[i].Current = prev[sticky[i].MemberID]
		}
		sticky[0] = MemberSubscription{MemberID: "member-0000-new", Topics: names}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			UniformAssignor{}.Assign(sticky, topics)
		}
	})
	b.Run("heterogeneous", func(b *testing.B) {
		// Member i subscribes to 5 of the 10 topics, starting at i mod 10.
		het := make([]MemberSubscription, len(members))
		for i := range het {
			var ts []string
			for k := 0; k < 5; k++ {
				ts = append(ts, names[(i+k)%10])
			}
			het[i] = MemberSubscription{MemberID: members[i].MemberID, Topics: sortedUnique(ts)}
		}
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			UniformAssignor{}.Assign(het, topics)
		}
	})
	b.Run("range", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			RangeAssignor{}.Assign(members, topics)
		}
	})
	b.Run("range-sticky", func(b *testing.B) {
		// The previous range target, one member gone and one new.
		prev := RangeAssignor{}.Assign(members, topics)
		sticky := make([]MemberSubscription, len(members))
		for i := range sticky {
			sticky[i] = members[i]
			sticky[i].Current = prev[members[i].MemberID]
		}
		sticky[0] = MemberSubscription{MemberID: "member-new", Topics: names}
		sort.Slice(sticky, func(i, j int) bool { return sticky[i].MemberID < sticky[j].MemberID })
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			RangeAssignor{}.Assign(sticky, topics)
		}
	})
}
