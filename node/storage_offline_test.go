//go:build sluicetest

package node_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// offlineBound is how long a client may take to report a partition offline
// after a disk failure: the broker's heartbeat (250 ms), the controller's
// decision, client.OfflineRetry and the retries' backoff, with room for a
// loaded machine; the point is that it is well under the 30 s of the CLI's
// delivery timeout (issue 28: a full disk looked like "no leader" for
// 30 s).
const offlineBound = 15 * time.Second

// Decision 42 with no failover possible (issue 28): when the only
// in-sync replica of a partition goes offline after a disk failure, the
// partition has no leader and nothing changes until an operator fixes the
// disk and restarts the broker. Metadata then answers KAFKA_STORAGE_ERROR
// for the partition, naming the broker, its log directory and the OS error
// (not LEADER_NOT_AVAILABLE), with the replica offline; every broker's
// produce and fetch answer the same; and the Go client's producer and
// consumer report it (client.ErrPartitionOffline) within a few seconds
// instead of retrying until the delivery timeout.
func TestOnlyReplicaDiskFailureAnswersStorageErrorFast(t *testing.T) {
	const topic = "orders"
	faults := &storage.FaultSet{}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { cfg.FaultStorage = faults })
	s.CreateTopic(topic, 1, nil)
	cl, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The CLI's delivery timeout: the 30 s of retrying.
	p, err := cl.NewProducer(client.WithLinger(0), client.WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(s.Dir, "logs", topic+"-0")
	faults.Fail(dir+string(os.PathSeparator), syscall.ENOSPC)
	const node1 = "broker 1's log directory "
	checkMessage := func(what string, err error) {
		t.Helper()
		if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !strings.Contains(err.Error(), node1+dir) ||
			!strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("%s: %v; want KAFKA_STORAGE_ERROR naming %q and the OS error", what, err, node1+dir)
		}
	}

	// The producer: the write fails, the controller finds no replica to
	// elect, and the record fails with the storage error soon.
	start := time.Now()
	_, err = p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("after")})
	took := time.Since(start)
	if !errors.Is(err, client.ErrPartitionOffline) {
		t.Errorf("send to the offline partition: %v; want client.ErrPartitionOffline", err)
	}
	checkMessage("send to the offline partition", err)
	t.Logf("send failed after %v: %v", took, err)
	if took > offlineBound {
		t.Errorf("send to the offline partition took %v, want at most %v", took, offlineBound)
	}

	// Metadata: no leader, the replica offline, KAFKA_STORAGE_ERROR with
	// the broker, the directory and the OS error.
	admin := sluicev1.NewAdminClient(s.Conn)
	wait.For(t, 10*time.Second, "metadata reports the partition offline for storage", func() error {
		md, err := admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return err
		}
		pm := md.Topics[0].Partitions[0]
		if pm.ErrorCode != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || pm.LeaderId != controller.NoLeader ||
			!slices.Contains(pm.OfflineReplicas, 1) || !strings.Contains(pm.ErrorMessage, node1+dir) ||
			!strings.Contains(pm.ErrorMessage, "no space left on device") {
			return fmt.Errorf("partition metadata %v", pm)
		}
		return nil
	})

	// A produce sent to the broker directly answers the same (once the
	// broker no longer counts itself the leader, the image's account).
	logc := sluicev1.NewLogClient(s.Conn)
	pr, err := logc.Produce(ctx, &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 5000, Topics: []*sluicev1.TopicProduceData{
		{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, nodetest.Batch("direct", 1, time.Now().UnixMilli()))}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ppr := pr.Topics[0].Partitions[0]
	if ppr.ErrorCode != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !strings.Contains(ppr.ErrorMessage, dir) {
		t.Errorf("direct produce: %v %q, want KAFKA_STORAGE_ERROR naming %s", ppr.ErrorCode, ppr.ErrorMessage, dir)
	}

	// A consumer: Poll reports the partition offline instead of waiting.
	co, err := cl.NewConsumer(client.WithMaxWait(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	recs, err := co.Poll(pctx)
	pcancel()
	took = time.Since(start)
	if len(recs) > 0 || !errors.Is(err, client.ErrPartitionOffline) {
		t.Errorf("poll of the offline partition: %d records, %v; want client.ErrPartitionOffline", len(recs), err)
	}
	checkMessage("poll of the offline partition", err)
	t.Logf("poll failed after %v: %v", took, err)
	if took > offlineBound {
		t.Errorf("poll of the offline partition took %v, want at most %v", took, offlineBound)
	}
}

// The same with three brokers and a partition whose only replica fails:
// every broker (not only the failed one) answers KAFKA_STORAGE_ERROR for
// it in Metadata, produce and fetch, naming the failed broker; the
// producer fails fast; a replicated topic of the same cluster goes on,
// with its leadership moved off the failed broker if it had it.
func TestOnlyReplicaDiskFailureIsStorageErrorOnEveryBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	const solo, shared = "solo", "shared"
	faults := map[int32]*storage.FaultSet{1: {}, 2: {}, 3: {}}
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(id int32, cfg *node.Config) { cfg.FaultStorage = faults[id] })
	c.StartAll()
	var addrs []string
	for _, id := range c.IDs() {
		addrs = append(addrs, c.Node(id).Addr())
	}
	cl, err := client.New(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := cl.CreateTopic(ctx, solo, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := cl.CreateTopic(ctx, shared, 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	c.WaitTopic(solo, 1)
	c.WaitTopic(shared, 1)
	p, err := cl.NewProducer(client.WithAcks(client.AcksAll), client.WithLinger(0), client.WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, topic := range []string{solo, shared} {
		if _, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("before")}); err != nil {
			t.Fatal(err)
		}
	}

	// The broker of solo's only replica loses that partition's directory.
	failed := c.Node(c.IDs()[0]).Metadata().Image().Partition(solo, 0).Leader
	dir := filepath.Join(c.Config(failed).DataDir, "logs", solo+"-0")
	faults[failed].Fail(dir+string(os.PathSeparator), syscall.ENOSPC)
	who := fmt.Sprintf("broker %d's log directory %s", failed, dir)
	storageErr := func(code sluicev1.ErrorCode, msg string) error {
		if code != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !strings.Contains(msg, who) || !strings.Contains(msg, "no space left on device") {
			return fmt.Errorf("%v %q, want KAFKA_STORAGE_ERROR naming %q and the OS error", code, msg, who)
		}
		return nil
	}

	start := time.Now()
	_, err = p.SendSync(ctx, client.Record{Topic: solo, Partition: 0, Value: []byte("after")})
	took := time.Since(start)
	if !errors.Is(err, client.ErrPartitionOffline) || storageErr(errs.Code(err), errs.Message(err)) != nil {
		t.Errorf("send to the offline partition: %v; want client.ErrPartitionOffline naming %q", err, who)
	}
	if took > offlineBound {
		t.Errorf("send to the offline partition took %v, want at most %v", took, offlineBound)
	}

	for _, id := range c.IDs() {
		conn := c.Dial(id)
		wait.For(t, 10*time.Second, fmt.Sprintf("broker %d's metadata reports %s-0 offline for storage", id, solo), func() error {
			md, err := sluicev1.NewAdminClient(conn).Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{solo}})
			if err != nil {
				return err
			}
			pm := md.Topics[0].Partitions[0]
			if pm.LeaderId != controller.NoLeader || !slices.Contains(pm.OfflineReplicas, failed) {
				return fmt.Errorf("leader %d, offline replicas %v", pm.LeaderId, pm.OfflineReplicas)
			}
			return storageErr(pm.ErrorCode, pm.ErrorMessage)
		})
		if id == failed {
			continue // its own answers: TestDiskFailureMovesLeadershipAndIsVisible
		}
		logc := sluicev1.NewLogClient(conn)
		pr, err := logc.Produce(ctx, &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 5000, Topics: []*sluicev1.TopicProduceData{
			{Name: solo, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, nodetest.Batch("direct", 1, time.Now().UnixMilli()))}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if ppr := pr.Topics[0].Partitions[0]; storageErr(ppr.ErrorCode, ppr.ErrorMessage) != nil {
			t.Errorf("produce to broker %d: %v", id, storageErr(ppr.ErrorCode, ppr.ErrorMessage))
		}
		fr, err := logc.Fetch(ctx, &sluicev1.FetchRequest{MaxBytes: 1 << 20, Topics: []*sluicev1.FetchTopic{
			{Name: solo, Partitions: []*sluicev1.FetchPartition{{Partition: 0, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if fpr := fr.Topics[0].Partitions[0]; storageErr(fpr.ErrorCode, fpr.ErrorMessage) != nil {
			t.Errorf("fetch from broker %d: %v", id, storageErr(fpr.ErrorCode, fpr.ErrorMessage))
		}
	}

	// The replicated topic is unaffected.
	if _, err := p.SendSync(ctx, client.Record{Topic: shared, Partition: 0, Value: []byte("after")}); err != nil {
		t.Errorf("send to the replicated topic: %v", err)
	}
}
