package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// createTopics creates each topic with partitions partitions.
func createTopics(t *testing.T, ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) {
	t.Helper()
	res, err := adm.CreateTopics(ctx, partitions, 1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create %s: %v (%s)", r.Topic, r.Err, r.ErrMessage)
		}
	}
}

// consumeAll reads every record of topic at the given isolation level
// until want records arrived or ctx ends, and returns them by value.
func consumeAll(t *testing.T, ctx context.Context, addr, topic string, want int, iso kgo.IsolationLevel) map[string]int {
	t.Helper()
	cl := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]int{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records before the deadline", topic, n, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch %s: %v", topic, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Value)]++
			n++
		})
	}
	return got
}

// TestFranzGoTransactionalCopy: franz-go, unmodified, copies a topic
// exactly once through its GroupTransactSession — a consumer group, of
// KIP-848's protocol (ServerSideBalancer) or the classic one with a
// client-side balancer, reading read_committed and a transactional
// producer speaking KIP-890's transaction version 2 (the door finalizes
// transaction.version 2: no AddPartitionsToTxn, no AddOffsetsToTxn, EndTxn
// v5 bumping the epoch) — with one transaction aborted on purpose. The
// output holds every input record once at read_committed; the aborted
// batch is visible only at read_uncommitted; the group's committed
// offsets are the input's ends; and the transactional id is described
// and listed through the door. Capped at Kafka 3.7's versions, the same
// copy runs on transaction version 1.
func TestFranzGoTransactionalCopy(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"kip-848", []kgo.Opt{kgo.ServerSideBalancer(), kgo.Balancers(kgo.CooperativeStickyBalancer())}},
		{"classic-cooperative-sticky", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer())}},
		{"classic-range", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}},
		// Capped at Kafka 3.7's versions, franz-go speaks transaction
		// version 1: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v4,
		// Produce v10 (verified by the leaders), TxnOffsetCommit v4.
		{"classic-tv1", []kgo.Opt{kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.MaxVersions(kversion.V3_7_0())}},
	} {
		t.Run(tc.name, func(t *testing.T) { testTransactionalCopy(t, tc.name == "kip-848", tc.name == "classic-tv1", tc.opts) })
	}
}

// keysSent counts the requests a client wrote, by API key.
type keysSent struct {
	mu   sync.Mutex
	keys map[int16]int
}

func (k *keysSent) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = map[int16]int{}
	}
	k.keys[key]++
}

func (k *keysSent) count(key kmsg.Key) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.keys[int16(key)]
}

func testTransactionalCopy(t *testing.T, kip848, tv1Client bool, groupOpts []kgo.Opt) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 120*time.Second)
	adm := kadm.NewClient(newClient(t, addr))
	createTopics(t, ctx, adm, 3, "in", "out")

	const n = 2000
	prod := newClient(t, addr, kgo.DefaultProduceTopic("in"))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var sent keysSent
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RetryTimeout(20 * time.Second),
		kgo.TransactionalID("copier"), kgo.DefaultProduceTopic("out"),
		kgo.ConsumerGroup("copy"), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(&sent)}, groupOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	// One transaction that is aborted: its records are never committed.
	if err := sess.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := sess.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	copied := 0
	for copied < n {
		if ctx.Err() != nil {
			t.Fatalf("copied %d of %d before the deadline", copied, n)
		}
		fs := sess.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s-%d: %v", topic, p, err)
			}
		})
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		var out []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, &kgo.Record{Key: r.Key, Value: r.Value})
		})
		if err := sess.ProduceSync(ctx, out...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		committed, err := sess.End(ctx, kgo.TryCommit)
		if err != nil {
			t.Fatal(err)
		}
		if committed {
			copied += len(out)
		}
	}

	got := consumeAll(t, ctx, addr, "out", n, kgo.ReadCommitted())
	for i := range n {
		if v := "v" + strconv.Itoa(i); got[v] != 1 {
			t.Fatalf("%s copied %d times", v, got[v])
		}
	}
	if got["aborted"] != 0 {
		t.Fatal("read_committed sees the aborted record")
	}
	uncommitted := consumeAll(t, ctx, addr, "out", n+1, kgo.ReadUncommitted())
	if uncommitted["aborted"] != 1 {
		t.Fatalf("read_uncommitted sees the aborted record %d times", uncommitted["aborted"])
	}

	ends, err := adm.ListEndOffsets(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsets(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(e kadm.ListedOffset) {
		o, ok := offs.Lookup("in", e.Partition)
		if !ok || o.At != e.Offset {
			t.Errorf("group copy committed %+v for in-%d, want %d", o, e.Partition, e.Offset)
		}
	})

	described, err := adm.DescribeTransactions(ctx, "copier")
	if err != nil {
		t.Fatal(err)
	}
	d, ok := described["copier"]
	if !ok || d.Err != nil || d.State != "CompleteCommit" {
		t.Fatalf("described %+v", described)
	}
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["copier"]; !ok {
		t.Fatalf("listed %+v: no copier", listed)
	}

	// Transaction version 1 sends AddPartitionsToTxn and AddOffsetsToTxn;
	// version 2 never does.
	tv1 := sent.count(kmsg.AddPartitionsToTxn) > 0 && sent.count(kmsg.AddOffsetsToTxn) > 0
	if tv1 != tv1Client {
		t.Fatalf("AddPartitionsToTxn sent %d times, AddOffsetsToTxn %d: want transaction version 1 = %v",
			sent.count(kmsg.AddPartitionsToTxn), sent.count(kmsg.AddOffsetsToTxn), tv1Client)
	}

	// The group through the admin APIs, while its member is in it.
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantType := "classic"
	if kip848 {
		wantType = "consumer"
	}
	if g, ok := groups["copy"]; !ok || g.GroupType != wantType || g.ProtocolType != "consumer" || g.State != "Stable" {
		t.Fatalf("listed groups %+v, want copy %s, Stable", groups, wantType)
	}
	if kip848 {
		dg, err := adm.DescribeConsumerGroups(ctx, "copy")
		if err != nil {
			t.Fatal(err)
		}
		if g := dg["copy"]; g.Err != nil || len(g.Members) != 1 || g.State != "Stable" {
			t.Fatalf("ConsumerGroupDescribe: %+v", g)
		}
	} else {
		dg, err := adm.DescribeGroups(ctx, "copy")
		if err != nil {
			t.Fatal(err)
		}
		g := dg["copy"]
		if g.Err != nil || len(g.Members) != 1 || g.State != "Stable" || g.ProtocolType != "consumer" || g.Protocol == "" {
			t.Fatalf("DescribeGroups: %+v", g)
		}
		a, _ := g.Members[0].Assigned.AsConsumer()
		if a == nil || len(a.Topics) != 1 || a.Topics[0].Topic != "in" || len(a.Topics[0].Partitions) != 3 {
			t.Fatalf("the member's assignment: %+v", a)
		}
	}
	del, err := adm.DeleteGroups(ctx, "copy")
	if err != nil {
		t.Fatal(err)
	}
	if r := del["copy"]; !errors.Is(r.Err, kerr.NonEmptyGroup) {
		t.Fatalf("DeleteGroups of a group with a member: %v, want NON_EMPTY_GROUP", r.Err)
	}
}
