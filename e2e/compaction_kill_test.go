package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// TestCompactionSurvivesKill9: a real sluiced cleaning a compacted topic
// every 10 ms is SIGKILLed right after each round of writes (the new
// segments are being cleaned then) and restarted, six times. After every
// restart the partition holds every offset once, each record it serves is
// the one acknowledged at that offset, and the latest value of every key
// is there; the cleaner has run and removed records. A kill that lands
// inside a pass leaves .cleaned or .swap files (logged), which the
// restart removes or completes.
func TestCompactionSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sluiced")
	}
	const topic = "compacted"
	c := startTestCluster(t, 1, "--log-cleaner-backoff=10ms")
	ids := c.ids()
	c.createTopic(30*time.Second, ids, topic, "--partitions", "1", "--replication-factor", "1",
		"--config", "cleanup.policy=compact", "--config", "segment.bytes=1024", "--config", "min.cleanable.dirty.ratio=0.01")

	written := map[int64]string{} // offset -> key=value acknowledged there
	latest := map[string]string{}
	var end int64
	check := func(what string) {
		t.Helper()
		cl, err := client.New(c.addrs(ids), client.WithRequestTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		co, err := cl.NewConsumer(client.WithIsolation(client.ReadUncommitted), client.WithMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		if err := co.Assign(topic, 0, 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		got := map[string]string{}
		last := int64(-1)
		for {
			if pos, _ := co.Position(topic, 0); pos >= end {
				break
			}
			// Bounded: Poll returns only with records, and a fetch of
			// nothing but removed records could move the position to the
			// end inside it.
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			recs, err := co.Poll(pctx)
			pcancel()
			if err != nil && !(errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil) {
				t.Fatalf("%s: poll: %v", what, err)
			}
			for _, r := range recs {
				kv := string(r.Key) + "=" + string(r.Value)
				if r.Offset <= last || written[r.Offset] != kv {
					t.Fatalf("%s: %s at offset %d (after %d), acknowledged there: %q", what, kv, r.Offset, last, written[r.Offset])
				}
				last = r.Offset
				got[string(r.Key)] = string(r.Value)
			}
		}
		for k, v := range latest {
			if got[k] != v {
				t.Fatalf("%s: key %s reads %q, latest written %q", what, k, got[k], v)
			}
		}
	}

	for round := 0; round < 6; round++ {
		cl, err := client.New(c.addrs(ids), client.WithRequestTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p, err := cl.NewProducer(client.WithLinger(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for i := 0; i < 120; i++ {
			k, v := fmt.Sprintf("k%02d", i%15), fmt.Sprintf("r%d-%d", round, i)
			md, err := p.SendSync(ctx, client.Record{Topic: topic, Partition: 0, Key: []byte(k), Value: []byte(v)})
			if err != nil {
				t.Fatalf("round %d: send: %v", round, err)
			}
			written[md.Offset] = k + "=" + v
			latest[k] = v
			end = md.Offset + 1
		}
		cancel()
		if round == 5 {
			// Let the cleaner finish a pass over this round to see its
			// metrics before the last kill.
			c.eventually(20*time.Second, "the log cleaner removed records", func() error {
				return cleanerRemoved(c.node(1).HTTP)
			})
		}
		p.Close()
		cl.Close()
		c.kill(1)
		ents, err := os.ReadDir(filepath.Join(c.node(1).DataDir, "logs", topic+"-0"))
		if err != nil {
			t.Fatal(err)
		}
		var leftovers []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".cleaned") || strings.HasSuffix(e.Name(), ".swap") {
				leftovers = append(leftovers, e.Name())
			}
		}
		if len(leftovers) > 0 {
			t.Logf("round %d: killed during a clean, leaving %v", round, leftovers)
		}
		c.restart(1)
		check(fmt.Sprintf("after kill %d", round))
	}
}

// cleanerRemoved reads the node's /metrics and reports whether its log
// cleaner has run and removed records.
func cleanerRemoved(httpAddr string) error {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`(?m)^sluice_log_cleaner_records_removed_total (\d+)$`).FindSubmatch(body)
	if m == nil || string(m[1]) == "0" {
		return fmt.Errorf("sluice_log_cleaner_records_removed_total: %q", m)
	}
	return nil
}
