package node_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

	// A linger long enough for a round's eight records to share a batch:
	// the cleaner then removes records from inside batches.
	p, err := cl.NewProducer(client.WithTransactionalID("compaction-test"), client.WithLinger(20*time.Millisecond))
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
	var mu sync.Mutex
	written := map[int64]string{} // offset -> "key=value" of committed records
	latest := map[string]string{}
	send := func(round int, commit bool) {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		sent := map[int64]string{}
		for i := 0; i < 8; i++ {
			k, v := fmt.Sprintf("k%d", i%4), fmt.Sprintf("r%d-%d", round, i)
			wg.Add(1)
			p.Send(ctx, client.Record{Topic: topic, Partition: 0, Key: []byte(k), Value: []byte(v)}, func(md client.RecordMetadata, err error) {
				defer wg.Done()
				if err != nil {
					if commit {
						t.Errorf("send: %v", err)
					}
					return // an aborted round's records fail with the abort
				}
				mu.Lock()
				sent[md.Offset] = k + "=" + v
				mu.Unlock()
			})
		}
		var err error
		if commit {
			err = p.CommitTransaction(ctx)
		} else {
			err = p.AbortTransaction(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if !commit {
			return
		}
		offs := slices.Sorted(maps.Keys(sent))
		for _, off := range offs {
			written[off] = sent[off]
			k, v, _ := strings.Cut(sent[off], "=")
			latest[k] = v
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
	thinned := 0 // batches the cleaner removed records from, keeping some
	view := func(id int32) []string {
		t.Helper()
		r, err := c.Node(id).Replicas().Replica(topic, 0)
		if err != nil {
			t.Fatal(err)
		}
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
				if h.RecordCount > 0 && h.RecordCount <= h.LastOffsetDelta {
					thinned++
				}
				_ = batch.ForEachRecord(b, func(rec batch.Record) error {
					view = append(view, fmt.Sprintf("%d:%s=%s", rec.Offset, rec.Key, rec.Value))
					return nil
				})
				off = h.NextOffset()
			}
		}
		return view
	}
	leaderID := c.Node(c.IDs()[0]).Metadata().Image().Topics[topic].Partitions[0].Leader
	want := view(leaderID)
	if thinned == 0 {
		t.Fatal("no batch lost records from inside: the consumer never reads offset gaps inside a batch")
	}
	for _, id := range c.IDs() {
		if got := view(id); !slices.Equal(got, want) {
			t.Fatalf("replica copies differ: node %d\n%v\nleader %d\n%v", id, got, leaderID, want)
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
		// Poll returns only with records: a last fetch that holds none
		// (the commit marker alone, when the segment rolled before it)
		// moves the position to the end inside a Poll that would then
		// wait for ever. Each Poll is bounded; the loop looks again.
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		recs, err := co.Poll(pctx)
		pcancel()
		if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
			t.Fatalf("poll at %d of %d: %v", pos, end, err)
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

	// A follower that lost its copy fetches the leader's cleaned log
	// (filtered batches, fillers, empty last batches) through the
	// replication fetcher and ends with the same records.
	follower := c.IDs()[0]
	if follower == leaderID {
		follower = c.IDs()[1]
	}
	if err := c.Stop(follower); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(c.Config(follower).DataDir, "logs", topic+"-0")); err != nil {
		t.Fatal(err)
	}
	c.Restart(follower)
	wait.For(t, 30*time.Second, "the follower copied the cleaned log", func() error {
		r, err := c.Node(follower).Replicas().Replica(topic, 0)
		if err != nil {
			return err
		}
		if r.LogEndOffset() != end || r.HighWatermark() != end {
			return fmt.Errorf("follower at %d, high watermark %d, want %d", r.LogEndOffset(), r.HighWatermark(), end)
		}
		return nil
	})
	if got := view(follower); !slices.Equal(got, want) {
		t.Fatalf("follower's fetched copy differs:\n%v\nleader\n%v", got, want)
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
