//go:build sluicetest

package node_test

import (
	"context"
	"fmt"
	"net/http"
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
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Decision 42 (issue 18, "Storage failures visible"): when the directory
// of a partition's leader starts failing with EIO, the replica goes
// offline on that broker; the controller moves the leadership to another
// ISR member and drops the failed replica from the ISR; acks=all
// producers keep going with nothing acknowledged lost; metadata and
// DescribeCluster show the offline replica with its path; /readyz says
// why the broker is not ready while /healthz stays OK; requests to the
// failed broker answer KAFKA_STORAGE_ERROR naming the path and the OS
// error; and a restart with a healthy disk brings the replica back into
// the ISR.
func TestDiskFailureMovesLeadershipAndIsVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	const topic = "disk"
	faults := map[int32]*storage.FaultSet{1: {}, 2: {}, 3: {}}
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(id int32, cfg *node.Config) {
		cfg.FaultStorage = faults[id]
		cfg.HTTPListen = "127.0.0.1:0"
	})
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
	if err := cl.CreateTopic(ctx, topic, 1, 3, map[string]string{"min.insync.replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	c.WaitTopic(topic, 1)
	p, err := cl.NewProducer(client.WithAcks(client.AcksAll), client.WithLinger(0), client.WithDeliveryTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acked := map[int64]string{} // offset -> value of every acknowledged record
	send := func(v string) {
		t.Helper()
		md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte(v)})
		if err != nil {
			t.Fatalf("send %s: %v", v, err)
		}
		acked[md.Offset] = v
	}
	for i := 0; i < 20; i++ {
		send(fmt.Sprintf("before-%d", i))
	}

	// The leader's partition directory fails: every file operation in it
	// answers EIO from now on.
	failed := c.Node(c.IDs()[0]).Metadata().Image().Partition(topic, 0).Leader
	dir := filepath.Join(c.Config(failed).DataDir, "logs", topic+"-0")
	faults[failed].Fail(dir+string(os.PathSeparator), syscall.EIO)
	var other int32
	for _, id := range c.IDs() {
		if id != failed {
			other = id
			break
		}
	}

	// Producers keep going: the first write fails, the client refreshes
	// its metadata and retries on the new leader.
	for i := 0; i < 20; i++ {
		send(fmt.Sprintf("after-%d", i))
	}
	wait.For(t, 20*time.Second, "leadership moved off the failed replica and it left the ISR", func() error {
		ps := c.Node(other).Metadata().Image().Partition(topic, 0)
		if ps.Leader == failed || ps.Leader == controller.NoLeader || slices.Contains(ps.ISR, failed) {
			return fmt.Errorf("leader %d, ISR %v", ps.Leader, ps.ISR)
		}
		return nil
	})

	// Metadata lists the replica offline; DescribeCluster names its path
	// and error.
	md, err := sluicev1.NewAdminClient(c.Dial(other)).Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		t.Fatal(err)
	}
	if pm := md.Topics[0].Partitions[0]; !slices.Contains(pm.OfflineReplicas, failed) || slices.Contains(pm.Isr, failed) {
		t.Errorf("metadata of %s-0: offline replicas %v, ISR %v; want %d offline and out of the ISR", topic, pm.OfflineReplicas, pm.Isr, failed)
	}
	dc, err := cl.DescribeCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var shown bool
	for _, b := range dc.Brokers {
		for _, r := range b.OfflineReplicas {
			if b.NodeId == failed && r.Topic == topic && r.Partition == 0 && r.Path == dir && strings.Contains(r.Error, "input/output error") {
				shown = true
			}
		}
	}
	if !shown {
		t.Errorf("cluster status does not show node %d's offline replica %s-0 at %s: %v", failed, topic, dir, dc.Brokers)
	}

	// The failed broker answers KAFKA_STORAGE_ERROR for the partition,
	// naming the path and the OS error, on produce, fetch and list
	// offsets.
	checkStorageError := func(what string, code sluicev1.ErrorCode, msg string) {
		t.Helper()
		if code != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR || !strings.Contains(msg, dir) || !strings.Contains(msg, "input/output error") {
			t.Errorf("%s on the failed broker: %v %q, want KAFKA_STORAGE_ERROR naming %s and the OS error", what, code, msg, dir)
		}
	}
	logc := sluicev1.NewLogClient(c.Dial(failed))
	raw := nodetest.Batch("direct", 1, time.Now().UnixMilli())
	pr, err := logc.Produce(ctx, &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 5000, Topics: []*sluicev1.TopicProduceData{
		{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, raw)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	ppr := pr.Topics[0].Partitions[0]
	checkStorageError("produce", ppr.ErrorCode, ppr.ErrorMessage)
	fr, err := logc.Fetch(ctx, &sluicev1.FetchRequest{MaxWaitMs: 0, MaxBytes: 1 << 20, Topics: []*sluicev1.FetchTopic{
		{Name: topic, Partitions: []*sluicev1.FetchPartition{{Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 20}}}}})
	if err != nil {
		t.Fatal(err)
	}
	fpr := fr.Topics[0].Partitions[0]
	checkStorageError("fetch", fpr.ErrorCode, fpr.ErrorMessage)
	lr, err := logc.ListOffsets(ctx, &sluicev1.ListOffsetsRequest{Topics: []*sluicev1.ListOffsetsTopic{
		{Name: topic, Partitions: []*sluicev1.ListOffsetsPartition{{Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}}}}})
	if err != nil {
		t.Fatal(err)
	}
	lpr := lr.Topics[0].Partitions[0]
	checkStorageError("list offsets", lpr.ErrorCode, lpr.ErrorMessage)

	// /readyz says why the broker is not ready; liveness stays OK; the
	// gauge counts the replica.
	httpAddr := c.Node(failed).HTTPAddr()
	wait.For(t, 10*time.Second, "readyz of the failed broker names the storage failure", func() error {
		code, body := httpGet(t, httpAddr, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "storage: partition "+topic+"-0 at "+dir) || !strings.Contains(body, "input/output error") {
			return fmt.Errorf("readyz: %d %q", code, body)
		}
		return nil
	})
	if code, body := httpGet(t, httpAddr, "/healthz"); code != http.StatusOK {
		t.Errorf("healthz of the failed broker: %d %q, want 200", code, body)
	}
	if _, body := httpGet(t, httpAddr, "/metrics"); !strings.Contains(body, "\nsluice_storage_failed_partitions 1\n") {
		t.Errorf("metrics of the failed broker lack sluice_storage_failed_partitions 1")
	}
	if _, body := httpGet(t, c.Node(other).HTTPAddr(), "/metrics"); !strings.Contains(body, "\nsluice_storage_failed_partitions 0\n") {
		t.Errorf("metrics of a healthy broker lack sluice_storage_failed_partitions 0")
	}

	// Nothing acknowledged was lost: the new leader has every record.
	checkAcked(t, ctx, cl, topic, acked)

	// A restart on a disk that still fails: the log cannot be opened, the
	// broker reports the replica offline again, stays not ready and
	// leads nothing; producers go on.
	if err := c.Stop(failed); err != nil {
		t.Errorf("stopping the broker with a failed disk: %v", err)
	}
	faults[failed].Fail(dir, syscall.EIO, storage.OpOpen)
	restarted := c.Start(failed)
	topicID := c.Node(other).Metadata().Image().Topics[topic].ID
	wait.For(t, 20*time.Second, "the restarted broker reports the replica offline again", func() error {
		reasons := restarted.NotReadyReasons()
		if !slices.ContainsFunc(reasons, func(r string) bool {
			return strings.HasPrefix(r, "storage: partition "+topic+"-0 at "+dir+": open "+dir) && strings.Contains(r, "input/output error")
		}) {
			return fmt.Errorf("not-ready reasons %q", reasons)
		}
		b := c.Node(other).Metadata().Image().Brokers[failed]
		if b == nil || b.Fenced || !b.ReplicaOffline(topicID, 0) {
			return fmt.Errorf("broker %+v in the metadata", b)
		}
		return nil
	})
	send("during-bad-restart")
	if ps := c.Node(other).Metadata().Image().Partition(topic, 0); ps.Leader == failed || slices.Contains(ps.ISR, failed) {
		t.Errorf("a replica that cannot be opened leads or is in sync: leader %d, ISR %v", ps.Leader, ps.ISR)
	}

	// The disk is replaced: a restart recovers the log, the replica
	// catches up and rejoins the ISR, and the broker is ready again.
	if err := c.Stop(failed); err != nil {
		t.Errorf("stopping the broker with a failed disk: %v", err)
	}
	faults[failed].Clear()
	c.Restart(failed)
	send("after-restart")
	wait.For(t, 30*time.Second, "the restarted replica back in the ISR", func() error {
		ps := c.Node(other).Metadata().Image().Partition(topic, 0)
		if !slices.Contains(ps.ISR, failed) {
			return fmt.Errorf("ISR %v", ps.ISR)
		}
		return nil
	})
	if !c.Node(failed).Ready() {
		t.Errorf("restarted broker not ready: %v", c.Node(failed).NotReadyReasons())
	}
	checkAcked(t, ctx, cl, topic, acked)

	// A follower's disk fails: it leaves the ISR, the leader stays, and
	// acks=all producers go on (two in-sync replicas remain).
	ps := c.Node(other).Metadata().Image().Partition(topic, 0)
	leader := ps.Leader
	follower := failed
	if follower == leader {
		follower = other
	}
	fdir := filepath.Join(c.Config(follower).DataDir, "logs", topic+"-0")
	faults[follower].Fail(fdir+string(os.PathSeparator), syscall.ENOSPC)
	for i := 0; i < 10; i++ {
		send(fmt.Sprintf("follower-failed-%d", i))
	}
	wait.For(t, 20*time.Second, "the failed follower out of the ISR, the leader kept", func() error {
		ps := c.Node(leader).Metadata().Image().Partition(topic, 0)
		if ps.Leader != leader || slices.Contains(ps.ISR, follower) {
			return fmt.Errorf("leader %d, ISR %v", ps.Leader, ps.ISR)
		}
		return nil
	})
	if fs := c.Node(follower).Replicas().OfflineReplicas(); len(fs) != 1 || !strings.Contains(fs[0].Reason(), "no space left on device") {
		t.Errorf("offline replicas of the failed follower: %+v", fs)
	}
	send("after-follower-failed")
	checkAcked(t, ctx, cl, topic, acked)
}
