//go:build sluicetest

package node_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Issue 29: running out of file descriptors is not a disk failure. While
// every file operation of a partition's directory fails with EMFILE (the
// appends, rolls, the producer-state snapshot), the partition
// stays online: produce answers a retriable error, /readyz stays ready,
// no replica is reported offline, and sluice_storage_fd_exhausted_total
// counts the errors. Once descriptors are free again the node serves the
// partition with no restart, and a producer that was retrying meanwhile
// gets its record acknowledged.
func TestFileDescriptorExhaustionKeepsPartitionsOnline(t *testing.T) {
	const topic = "fds"
	faults := &storage.FaultSet{}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.FaultStorage = faults
		cfg.HTTPListen = "127.0.0.1:0"
	})
	s.CreateTopic(topic, 1, nil)
	cl, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := cl.NewProducer(client.WithLinger(0), client.WithDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acked := map[int64]string{}
	for i := 0; i < 5; i++ {
		v := fmt.Sprintf("before-%d", i)
		md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte(v)})
		if err != nil {
			t.Fatal(err)
		}
		acked[md.Offset] = v
	}

	dir := filepath.Join(s.Dir, "logs", topic+"-0")
	faults.Fail(dir+string(os.PathSeparator), syscall.EMFILE)

	// A produce hits it. (The high-watermark checkpoint is no longer in
	// the partition's directory: one file in logs/ for every partition,
	// written only when a value changed; issue 31.)
	pr, err := s.Log.Produce(ctx, &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 5000, Topics: []*sluicev1.TopicProduceData{
		{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, nodetest.Batch("direct", 1, time.Now().UnixMilli()))}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if ppr := pr.Topics[0].Partitions[0]; !errs.Retriable(ppr.ErrorCode) {
		t.Errorf("produce out of descriptors: %v %q, want a retriable error", ppr.ErrorCode, ppr.ErrorMessage)
	}
	wait.For(t, 15*time.Second, "the produce counted", func() error {
		if n := s.Node.Replicas().ResourceErrors(); n < 1 {
			return fmt.Errorf("%d resource errors", n)
		}
		return nil
	})
	if v := mustSample(t, scrape(t, s.Node.HTTPAddr()), "sluice_storage_fd_exhausted_total"); v < 1 {
		t.Errorf("sluice_storage_fd_exhausted_total = %v, want at least 1", v)
	}
	if off := s.Node.Replicas().OfflineReplicas(); len(off) != 0 {
		t.Fatalf("replicas offline after EMFILE: %+v", off)
	}
	if code, body := httpGet(t, s.Node.HTTPAddr(), "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz %d %q while out of descriptors, want ready", code, body)
	}

	// A producer retries through it and is acknowledged once descriptors
	// are free.
	type result struct {
		md  client.RecordMetadata
		err error
	}
	done := make(chan result, 1)
	seen := s.Node.Replicas().ResourceErrors()
	go func() {
		md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("during")})
		done <- result{md, err}
	}()
	wait.For(t, 10*time.Second, "the send failed at least once", func() error {
		if s.Node.Replicas().ResourceErrors() == seen {
			return fmt.Errorf("no new resource error")
		}
		return nil
	})
	faults.Clear()
	r := <-done
	if r.err != nil {
		t.Fatalf("send retried through the resource errors: %v", r.err)
	}
	acked[r.md.Offset] = "during"
	md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("after")})
	if err != nil {
		t.Fatal(err)
	}
	acked[md.Offset] = "after"
	checkAcked(t, ctx, cl, topic, acked)
	if !s.Node.Ready() {
		t.Errorf("not ready after descriptors came back: %v", s.Node.NotReadyReasons())
	}
	if off := s.Node.Replicas().OfflineReplicas(); len(off) != 0 {
		t.Errorf("replicas offline: %+v", off)
	}
}
