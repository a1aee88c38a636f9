package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 29: a coordinator's load skips and reports (log with offset and
// reason, SkippedRecords) a record of its topic that it cannot decode,
// and loads the rest, instead of leaving the whole partition without a
// coordinator. The records go through a real one-node ReplicaManager and
// its committed-append path, the only way to write these topics.

// oneNodeReplicas is a ReplicaManager of node 1 leading partition 0 of
// topic, closed at the end of the test.
func oneNodeReplicas(t *testing.T, topic string) *cluster.ReplicaManager {
	t.Helper()
	rm, err := cluster.NewReplicaManager(cluster.ReplicaManagerConfig{DataDir: t.TempDir(), NodeID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rm.Close() })
	im := controller.NewImage()
	for i, r := range []controller.Record{
		controller.BootstrapCluster{ClusterID: "c1"},
		controller.RegisterBroker{BrokerID: 1, Address: "b:1", IncarnationID: "i"},
		controller.UnfenceBroker{BrokerID: 1, BrokerEpoch: 2},
		controller.CreateTopic{Name: topic, TopicID: "id-" + topic, Partitions: []controller.PartitionAssignment{{Replicas: []int32{1}}}},
	} {
		if _, err := controller.Apply(im, r, uint64(i+1)); err != nil {
			t.Fatalf("apply %T: %v", r, err)
		}
	}
	if err := rm.Apply(im.Clone(), time.Unix(5000, 0), true); err != nil {
		t.Fatal(err)
	}
	return rm
}

// appendRecords appends one plain batch of key/value pairs to partition 0
// of topic through the committed-append path, as a coordinator does.
func appendRecords(t *testing.T, rm *cluster.ReplicaManager, topic string, kv ...[]byte) {
	t.Helper()
	var b batch.Builder
	b.Reset(1000)
	for i := 0; i < len(kv); i += 2 {
		b.Add(1000, kv[i], kv[i+1], nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rm.AppendCommitted(ctx, cluster.TopicPartition{Topic: topic}, b.Finish(batch.PlainProducer, 0), cluster.NoLeaderEpoch, time.Unix(5000, 0)); err != nil {
		t.Fatal(err)
	}
}

// logBuffer is a logger's output, safe to read while the load logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func TestTxnLoadSkipsCorruptRecords(t *testing.T) {
	rm := oneNodeReplicas(t, txn.StateTopic)
	e := newTxnEnv()
	var logs logBuffer
	newCoordinator := func() (*txn.Coordinator, func()) {
		c := txn.NewCoordinator(txn.CoordinatorDeps{
			Log: ReplicaStateLog{Replicas: rm}, ProducerIDs: e.pids, Markers: e.markers, Now: e.now, Logger: logs.logger(),
		}, e.cfg)
		unregister := rm.RegisterLeadershipListener(txn.StateTopic, c)
		return c, func() {
			unregister()
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	a, stopA := newCoordinator()
	waitLoaded(t, a, 0)
	must[txn.ProducerIDAndEpoch](t, "init before")(initPID(a, "before", 60000)) // offset 0
	appendRecords(t, rm, txn.StateTopic,                                        // offsets 1 and 2
		[]byte("forged"), []byte("not a transaction record"),
		[]byte("bad\xffkey"), []byte(`{"version":1}`))
	must[txn.ProducerIDAndEpoch](t, "init after")(initPID(a, "after", 60000)) // offset 3
	stopA()

	b, stopB := newCoordinator()
	waitLoaded(t, b, 0)
	for _, id := range []string{"before", "after"} {
		if d, err := b.Describe(id); err != nil || d.State != txn.Empty {
			t.Errorf("%s after the load: %+v %v, want Empty", id, d.Metadata, err)
		}
	}
	if _, err := b.Describe("forged"); errs.Code(err) == sluicev1.ErrorCode_NONE {
		t.Error("the corrupt record was applied")
	}
	if n := b.SkippedRecords(); n != 2 {
		t.Errorf("SkippedRecords %d, want 2", n)
	}
	out := logs.String()
	for _, want := range []string{"offset=1 ", "offset=2 ", "corrupt transaction record"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}

	// A record of a newer version is an id's latest state: skipping it
	// would resume an older one, so the load still stops there.
	appendRecords(t, rm, txn.StateTopic, []byte("newer"), []byte(`{"version":99}`))
	stopB()
	c, stopC := newCoordinator()
	defer stopC()
	waitFor(t, "the load to stop at the newer record", func() error {
		if _, err := c.Describe("before"); errs.Code(err) != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE {
			return err
		}
		return nil
	})
}

func TestGroupLoadSkipsUndecodableRecords(t *testing.T) {
	rm := oneNodeReplicas(t, group.OffsetsTopic)
	var logs logBuffer
	newCoordinator := func() (*group.Coordinator, func()) {
		c := group.NewCoordinator(group.CoordinatorDeps{Log: ReplicaStateLog{Replicas: rm}, Txn: rm, Logger: logs.logger(),
			Topics: func() (map[string]group.TopicMetadata, int64) { return nil, 0 }},
			group.CoordinatorConfig{Partitions: 1})
		unregister := rm.RegisterLeadershipListener(group.OffsetsTopic, c)
		return c, func() {
			unregister()
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	loaded := func(c *group.Coordinator) {
		t.Helper()
		waitFor(t, "the partition loaded", func() error {
			_, err := c.FetchOffsets("g", "", -1, nil, false)
			return err
		})
	}
	in0, in1, in2 := group.TopicPartition{Topic: "in", Partition: 0}, group.TopicPartition{Topic: "in", Partition: 1}, group.TopicPartition{Topic: "in", Partition: 2}
	commit := func(c *group.Coordinator, tp group.TopicPartition, off int64) {
		t.Helper()
		res, err := c.CommitOffsets(context.Background(), "g", "", "", -1, []group.OffsetCommitEntry{{TP: tp, Offset: group.Offset{Offset: off}}})
		if err != nil || res[tp] != nil {
			t.Fatalf("commit %v: %v %v", tp, res, err)
		}
	}
	a, stopA := newCoordinator()
	loaded(a)
	commit(a, in0, 10)                       // offset 0
	appendRecords(t, rm, group.OffsetsTopic, // offsets 1..3
		group.OffsetKey("g", "in", 9), []byte("keyed, but not an offset"),
		[]byte{0, 9}, []byte("unknown key type"),
		group.OffsetKey("g", "in", 1), group.OffsetValue(group.Offset{Offset: 11}))
	commit(a, in2, 12) // offset 4
	stopA()

	b, stopB := newCoordinator()
	defer stopB()
	loaded(b)
	got, err := b.FetchOffsets("g", "", -1, []group.TopicPartition{in0, in1, in2, {Topic: "in", Partition: 9}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{10, 11, 12, -1}
	for i, f := range got {
		if f.Err != nil || f.Offset.Offset != want[i] {
			t.Errorf("%v after the load: %+v, want %d", f.TP, f, want[i])
		}
	}
	if n := b.SkippedRecords(); n != 2 {
		t.Errorf("SkippedRecords %d, want 2", n)
	}
	out := logs.String()
	for _, want := range []string{"offset=1 ", "offset=2 ", "unknown key type 9", "topic=__consumer_offsets"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
