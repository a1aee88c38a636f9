package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// limitImage registers brokers 1..3, each accepting max replicas with
// open-files limit nofile, unfenced, then applies recs.
func limitImage(t *testing.T, max int32, nofile int64, recs ...Record) *Image {
	t.Helper()
	base := []Record{}
	for id := int32(1); id <= 3; id++ {
		r := reg(id, "")
		r.MaxReplicas, r.OpenFilesLimit = max, nofile
		base = append(base, r)
	}
	base = append(base, UnfenceBroker{BrokerID: 1, BrokerEpoch: 1}, UnfenceBroker{BrokerID: 2, BrokerEpoch: 2}, UnfenceBroker{BrokerID: 3, BrokerEpoch: 3})
	return build(t, append(base, recs...)...)
}

// Issue 29: a topic creation that would put more replicas on a broker
// than it registered it accepts is refused with INVALID_PARTITIONS naming
// the broker, the count, its limit and where the limit comes from;
// brokers that registered none accept any number.
func TestCheckReplicaLimits(t *testing.T) {
	existing := CreateTopic{Name: "old", TopicID: "id-old"}
	for i := 0; i < 6; i++ {
		existing.Partitions = append(existing.Partitions, PartitionAssignment{Replicas: []int32{1, 2}})
	}
	cases := []struct {
		name   string
		im     *Image
		added  map[int32]int
		want   sluicev1.ErrorCode
		substr []string
	}{
		{name: "within the limit", im: limitImage(t, 10, 20, existing), added: map[int32]int{1: 4, 2: 4, 3: 10}},
		{name: "existing replicas count", im: limitImage(t, 10, 20, existing), added: map[int32]int{1: 5},
			want: sluicev1.ErrorCode_INVALID_PARTITIONS,
			substr: []string{"would put 11 replicas on broker 1, above its limit of 10",
				"(set on the broker; its open-files limit is 20)", "ulimit -Hn"}},
		{name: "lowest broker id named, others counted", im: limitImage(t, 10, 0, existing), added: map[int32]int{1: 5, 2: 5, 3: 11},
			want:   sluicev1.ErrorCode_INVALID_PARTITIONS,
			substr: []string{"on broker 1,", "(as the broker is configured) (and 2 other brokers above their own)"}},
		{name: "configured limit told apart from a derived one", im: limitImage(t, 5000, 20_000), added: map[int32]int{2: 6000},
			want:   sluicev1.ErrorCode_INVALID_PARTITIONS,
			substr: []string{"6,000 replicas on broker 2, above its limit of 5,000 (set on the broker; its open-files limit is 20,000)"}},
		{name: "derived default at 20,000", im: limitImage(t, 10_000, 20_000), added: map[int32]int{2: 12_345},
			want:   sluicev1.ErrorCode_INVALID_PARTITIONS,
			substr: []string{"12,345 replicas on broker 2, above its limit of 10,000 (derived from its open-files limit 20,000: half of it)"}},
		{name: "no limit registered", im: limitImage(t, 0, 0, existing), added: map[int32]int{1: 1 << 20}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckReplicaLimits(tc.im, "creating topic \"t\"", tc.added)
			if errs.Code(err) != tc.want {
				t.Fatalf("err %v, want code %v", err, tc.want)
			}
			for _, s := range tc.substr {
				if !strings.Contains(errs.Message(err), s) {
					t.Errorf("message %q lacks %q", errs.Message(err), s)
				}
			}
		})
	}
}

// The active controller refuses the creation and the reassignment that
// would exceed a broker's limit, and nothing is created; what fits is
// created.
func TestCreateTopicRefusedAboveBrokerReplicaLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	for id := int32(1); id <= 3; id++ {
		max := int32(200)
		if id == 3 {
			max = 0 // registers no limit
		}
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), IncarnationID: "first",
			MaxReplicas: max, OpenFilesLimit: 400})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
	}
	if b := c.Image().Brokers[1]; b.MaxReplicas != 200 || b.OpenFilesLimit != 400 {
		t.Fatalf("registered broker 1 limits %d, %d", b.MaxReplicas, b.OpenFilesLimit)
	}
	// 300 partitions of replication factor 2 over 3 brokers: 200 each.
	if _, err := c.CreateTopic(ctx, "fits", 300, 2, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateTopic(ctx, "big", 30, 2, nil)
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_PARTITIONS ||
		!strings.Contains(errs.Message(err), `creating topic "big" with 30 partitions (replication factor 2) would put`) ||
		!strings.Contains(errs.Message(err), "above its limit of 200 (derived from its open-files limit 400: half of it) (and 1 other broker above its own)") {
		t.Fatalf("creation above the limit: %v", err)
	}
	if c.Image().Topics["big"] != nil {
		t.Fatal("the refused topic was created")
	}
	// A reassignment adding a replica on broker 1 (full) is refused; one
	// adding it on broker 3 (no limit) starts.
	reassignAdding := func(id int32) error {
		for i, q := range c.Image().Topics["fits"].Partitions {
			if !slices.Contains(q.Replicas, id) && !q.Reassigning() {
				_, err := c.ReassignPartition(ctx, "fits", int32(i), append(slices.Clone(q.Replicas), id))
				return err
			}
		}
		t.Fatalf("every partition has a replica on broker %d", id)
		return nil
	}
	if err := reassignAdding(1); errs.Code(err) != sluicev1.ErrorCode_INVALID_PARTITIONS ||
		!strings.Contains(errs.Message(err), "would put 201 replicas on broker 1, above its limit of 200") {
		t.Fatalf("reassignment onto full broker 1: %v", err)
	}
	if err := reassignAdding(3); err != nil {
		t.Fatalf("reassignment onto broker 3, without a limit: %v", err)
	}
}

// CreateTopics creates several topics in one call with an outcome each:
// an existing or repeated name, an invalid one and a topic that would
// pass a broker's limit only counting the topics before it in the same
// call are refused; the rest are created.
func TestCreateTopicsInOneCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads", func() error {
		if !c.IsLeader() {
			return fmt.Errorf("not leader yet")
		}
		return nil
	})
	for id := int32(1); id <= 3; id++ {
		e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: id, Address: fmt.Sprintf("h%d:1", id), IncarnationID: "first",
			MaxReplicas: 200, OpenFilesLimit: 400})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UnfenceBroker(ctx, id, e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CreateTopic(ctx, "old", 3, 3, nil); err != nil {
		t.Fatal(err)
	}
	recs, perTopic, err := c.CreateTopics(ctx, []TopicToCreate{
		{Name: "a", Partitions: 150, ReplicationFactor: 3}, // 150 per broker: with old's 3, 153
		{Name: "old", Partitions: 1, ReplicationFactor: 3}, // exists
		{Name: "b", Partitions: 2, ReplicationFactor: 3, Configs: map[string]string{"cleanup.policy": "compact"}},
		{Name: "bad name!", Partitions: 1, ReplicationFactor: 1},
		{Name: "b", Partitions: 1, ReplicationFactor: 1},  // repeated in the call
		{Name: "c", Partitions: 50, ReplicationFactor: 3}, // 155 + 50 > 200 only with a's
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []sluicev1.ErrorCode{sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, sluicev1.ErrorCode_NONE,
		sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, sluicev1.ErrorCode_TOPIC_ALREADY_EXISTS, sluicev1.ErrorCode_INVALID_PARTITIONS}
	for i, w := range want {
		if got := errs.Code(perTopic[i]); got != w {
			t.Errorf("topic %d: %v, want %v", i, perTopic[i], w)
		}
	}
	im := c.Image()
	for _, name := range []string{"a", "b"} {
		if tp := im.Topics[name]; tp == nil || tp.ID != recs[slices.IndexFunc(recs, func(r CreateTopic) bool { return r.Name == name })].TopicID {
			t.Errorf("topic %s not created as its record says", name)
		}
	}
	if im.Topics["c"] != nil || im.Topics["bad name!"] != nil || len(im.Topics["b"].Partitions) != 2 || im.Topics["b"].Configs["cleanup.policy"] != "compact" {
		t.Fatalf("image topics after the call: %v", im.TopicNames())
	}
}
