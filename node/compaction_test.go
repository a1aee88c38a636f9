package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Log compaction end to end (issue 17, decision 38): a topic created with
// cleanup.policy=compact through the admin API refuses keyless records,
// and once every replica has cleaned its copy a read_committed consumer
// reads the latest value of every key at the offset it was written at,
// no aborted value, and every replica holds the same records.
func TestCompactedTopicEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	const topic = "compacted"
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.CreateTopic(ctx, topic, 1, 3, map[string]string{
		"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01",
	}); err != nil {
		t.Fatal(err)
	}
	c.WaitTopic(topic, 1)

	p, err := cl.NewProducer(client.WithTransactionalID("compaction-test"), client.WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	plain, err := cl.NewProducer(client.WithLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte("no key")}); errs.Code(err) != sluicev1.ErrorCode_INVALID_RECORD {
		t.Fatalf("keyless record: %v, want INVALID_RECORD", err)
	}
	plain.Close()
	written := map[int64]string{} // offset -> "key=value" of committed records
	latest := map[string]string{}
	send := func(round int, commit bool) {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var sent []string
		for i := 0; i < 8; i++ {
			k, v := fmt.Sprintf("k%d", i%4), fmt.Sprintf("r%d-%d", round, i)
			md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Key: []byte(k), Value: []byte(v)})
			if err != nil {
				t.Fatal(err)
			}
			if commit {
				written[md.Offset] = k + "=" + v
				sent = append(sent, k, v)
			}
		}
		if !commit {
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := p.CommitTransaction(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(sent); i += 2 {
			latest[sent[i]] = sent[i+1]
		}
	}
	for round := 0; round < 12; round++ {
		send(round, round%5 != 3) // rounds 3 and 8 abort
	}

	// Every replica caught up: same end, high watermark at the end.
	var end int64
	wait.For(t, 20*time.Second, "replicas caught up", func() error {
		end = -1
		for _, id := range c.IDs() {
			r, err := c.Node(id).Replicas().Replica(topic, 0)
			if err != nil {
				return err
			}
			if end >= 0 && r.LogEndOffset() != end {
				return fmt.Errorf("node %d at %d, another at %d", id, r.LogEndOffset(), end)
			}
			end = r.LogEndOffset()
			if r.HighWatermark() != end || r.LastStableOffset() != end {
				return fmt.Errorf("node %d: hw %d lso %d end %d", id, r.HighWatermark(), r.LastStableOffset(), end)
			}
		}
		return nil
	})
	for _, id := range c.IDs() {
		c.Node(id).Replicas().CleanLogs(time.Now())
		if st := c.Node(id).Replicas().CleanerStats(); st.Runs == 0 || st.RecordsRemoved == 0 {
			t.Fatalf("node %d cleaner stats %+v", id, st)
		}
	}

	// Each replica holds the same records, offset for offset.
	var views [][]string
	for _, id := range c.IDs() {
		r, _ := c.Node(id).Replicas().Replica(topic, 0)
		var view []string
		for off := int64(0); off < end; {
			res, err := r.Read(off, 1<<20, end)
			if err != nil || len(res.Batches) == 0 {
				t.Fatalf("node %d read at %d: %v", id, off, err)
			}
			for _, b := range res.Batches {
				h, err := batch.Verify(b)
				if err != nil || h.BaseOffset != off {
					t.Fatalf("node %d batch at %d: base %d, %v", id, off, h.BaseOffset, err)
				}
				_ = batch.ForEachRecord(b, func(rec batch.Record) error {
					view = append(view, fmt.Sprintf("%d:%s=%s", rec.Offset, rec.Key, rec.Value))
					return nil
				})
				off = h.NextOffset()
			}
		}
		views = append(views, view)
	}
	for i := 1; i < len(views); i++ {
		if !slices.Equal(views[0], views[i]) {
			t.Fatalf("replica copies differ:\n%v\n%v", views[0], views[i])
		}
	}

	co, err := cl.NewConsumer(client.WithIsolation(client.ReadCommitted), client.WithMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign(topic, 0, 0); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	consumed := 0
	for {
		pos, _ := co.Position(topic, 0)
		if pos >= end {
			break
		}
		recs, err := co.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			kv := string(r.Key) + "=" + string(r.Value)
			if written[r.Offset] != kv {
				t.Fatalf("consumed %s at offset %d, which held %q", kv, r.Offset, written[r.Offset])
			}
			got[string(r.Key)] = string(r.Value)
			consumed++
		}
	}
	if !mapsEqual(got, latest) {
		t.Fatalf("latest per key %v, want %v", got, latest)
	}
	if consumed >= len(written) {
		t.Fatalf("consumed %d of %d committed records: nothing compacted", consumed, len(written))
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
