package group

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
)

// The coordinator's own cost per request on an in-memory log (every append
// commits at once), so that a change to its locking or the runtime shows:
// docs/benchmarks.md, issue 30.

// BenchmarkGroupHeartbeat: one heartbeat of a member of a Stable group of
// 10 members on 100 partitions, round robin.
func BenchmarkGroupHeartbeat(b *testing.B) {
	l := newFakeOffsetsLog()
	l.epochs[0] = 1
	topics := map[string]TopicMetadata{"in": {Partitions: 100}}
	c := NewCoordinator(CoordinatorDeps{Log: l, Txn: l,
		Topics: func() (map[string]TopicMetadata, int64) { return topics, 1 }},
		CoordinatorConfig{Partitions: 1})
	defer func() { _ = c.Close() }()
	c.BecameLeader(offsetsTP0, 1)
	ctx := context.Background()
	type member struct {
		id    string
		epoch int32
		owned Assignment
	}
	wait.For(b, 10*time.Second, "the partition loaded", func() error {
		_, err := c.FetchOffsets("g", "", -1, nil, false)
		return err
	})
	var ms []*member
	for len(ms) < 10 {
		resp, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberEpoch: 0, SubscribedTopics: []string{"in"}})
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, &member{id: resp.MemberID, epoch: resp.MemberEpoch, owned: resp.Assignment})
	}
	beat := func(m *member) {
		resp, err := c.Heartbeat(ctx, "g", HeartbeatRequest{MemberID: m.id, MemberEpoch: m.epoch, OwnedSet: true, Owned: m.owned})
		if err != nil {
			b.Fatal(err)
		}
		m.epoch = resp.MemberEpoch
		if resp.AssignmentChanged {
			m.owned = resp.Assignment
		}
	}
	for range 50 { // settle: every member Stable
		for _, m := range ms {
			beat(m)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		beat(ms[i%len(ms)])
	}
}
