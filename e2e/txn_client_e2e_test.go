package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cmd/sluice/output"
)

// The Go transactional producer and the CLI against three sluiced
// processes: committed transactions are read exactly once under
// read_committed and aborted ones never, read_uncommitted sees both, a
// second producer with the same transactional id fences the first, and
// the CLI's transactional produce, consume isolation and txn commands
// agree with it.

const (
	txnClientTopic      = "txn-client"
	txnClientPartitions = 3
	txnClientTxns       = 24
	txnClientPerTxn     = 40
)

func TestTransactionalProducerAndCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs three sluiced processes")
	}
	c := startTestCluster(t, 3)
	all := c.ids()
	addrs := c.addrs(all)
	c.createTopic(20*time.Second, all, txnClientTopic, "--partitions", fmt.Sprint(txnClientPartitions), "--replication-factor", "3", "--config", "min.insync.replicas=2")

	cl, err := client.New(addrs, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	p, err := cl.NewProducer(client.WithTransactionalID("client-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatalf("InitTransactions: %v", err)
	}

	// Every third transaction aborts; the others commit.
	var committed, everything []string
	for i := range txnClientTxns {
		if err := p.BeginTransaction(); err != nil {
			t.Fatalf("txn %d: begin: %v", i, err)
		}
		var mu sync.Mutex
		var sendErr error
		var values []string
		for j := range txnClientPerTxn {
			v := fmt.Sprintf("%02d/%02d", i, j)
			values = append(values, v)
			p.Send(ctx, client.Record{Topic: txnClientTopic, Partition: -1, Key: []byte(v), Value: []byte(v)}, func(_ client.RecordMetadata, err error) {
				if err != nil {
					mu.Lock()
					sendErr = errors.Join(sendErr, err)
					mu.Unlock()
				}
			})
		}
		everything = append(everything, values...)
		if i%3 == 2 {
			// Flushed first, so the aborted records are in the log (an
			// abort drops the records not sent yet).
			if err := p.Flush(ctx); err != nil {
				t.Fatalf("txn %d: flush: %v", i, err)
			}
			if err := p.AbortTransaction(ctx); err != nil {
				t.Fatalf("txn %d: abort: %v", i, err)
			}
			continue
		}
		if err := p.CommitTransaction(ctx); err != nil {
			t.Fatalf("txn %d: commit: %v", i, err)
		}
		mu.Lock()
		if sendErr != nil {
			t.Fatalf("txn %d: committed with failed sends: %v", i, sendErr)
		}
		mu.Unlock()
		committed = append(committed, values...)
	}

	readAll := func(iso client.Isolation) []string {
		t.Helper()
		co, err := cl.NewConsumer(client.WithIsolation(iso), client.WithMaxWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer co.Close()
		for part := int32(0); part < txnClientPartitions; part++ {
			if err := co.Assign(txnClientTopic, part, client.OffsetEarliest); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		c.eventually(60*time.Second, fmt.Sprintf("%v read to the end", iso), func() error {
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			recs, _ := co.Poll(pctx) // errors are retried by the consumer; the condition says when it is done
			pcancel()
			for _, r := range recs {
				out = append(out, string(r.Value))
			}
			for part := int32(0); part < txnClientPartitions; part++ {
				pos, ok := co.Position(txnClientTopic, part)
				if hw := co.HighWatermark(txnClientTopic, part); !ok || hw < 0 || pos < hw {
					return fmt.Errorf("partition %d at %d of %d", part, pos, hw)
				}
			}
			return nil
		})
		sort.Strings(out)
		return out
	}
	sort.Strings(committed)
	sort.Strings(everything)
	if got := readAll(client.ReadCommitted); !slices.Equal(got, committed) {
		t.Errorf("read_committed: %d records, want the %d committed ones exactly once (first differences: %v)", len(got), len(committed), firstDiff(got, committed))
	}
	if got := readAll(client.ReadUncommitted); !slices.Equal(got, everything) {
		t.Errorf("read_uncommitted: %d records, want all %d exactly once (first differences: %v)", len(got), len(everything), firstDiff(got, everything))
	}

	// A second producer with the same id fences the first.
	p2, err := cl.NewProducer(client.WithTransactionalID("client-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := p2.InitTransactions(ctx); err != nil {
		t.Fatalf("second producer: InitTransactions: %v", err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatalf("zombie begin (local): %v", err)
	}
	p.Send(ctx, client.Record{Topic: txnClientTopic, Partition: 0, Value: []byte("zombie")}, nil)
	// Its record is refused INVALID_PRODUCER_EPOCH: abortable (KIP-588,
	// it might have been a timeout abort); the abort's EndTxn then tells
	// it was fenced.
	err = p.CommitTransaction(ctx)
	var abortable *client.TransactionAbortableError
	if errors.As(err, &abortable) {
		err = p.AbortTransaction(ctx)
	}
	if !errors.Is(err, client.ErrProducerFenced) {
		t.Errorf("zombie commit, then abort: %v, want ErrProducerFenced", err)
	}
	for _, v := range readAll(client.ReadUncommitted) {
		if v == "zombie" {
			t.Error("the fenced producer's record was written")
		}
	}

	t.Run("cli", func(t *testing.T) {
		const topic = "txn-cli"
		c.createTopic(20*time.Second, all, topic, "--partitions", "1", "--replication-factor", "3")
		brokers := "--brokers=" + strings.Join(addrs, ",")
		if _, stderr, err := runCLI(t, c.sluice, "a\nb\nc\nd\ne\n", brokers, "produce", topic, "--transactional-id", "cli-demo", "--commit-every", "2"); err != nil {
			t.Fatalf("transactional produce: %v: %s", err, stderr)
		}
		if _, stderr, err := runCLI(t, c.sluice, "x\ny\n", brokers, "produce", topic, "--transactional-id", "cli-demo", "--abort"); err != nil {
			t.Fatalf("transactional produce --abort: %v: %s", err, stderr)
		}
		for _, tc := range []struct {
			iso  string
			want string
		}{
			{"", "a\nb\nc\nd\ne\n"},
			{"read_uncommitted", "a\nb\nc\nd\ne\nx\ny\n"},
		} {
			args := []string{brokers, "consume", topic, "--from-beginning", "--max-messages", fmt.Sprint(strings.Count(tc.want, "\n")), "--timeout", "20s"}
			if tc.iso != "" {
				args = append(args, "--isolation", tc.iso)
			}
			out, stderr, err := runCLI(t, c.sluice, "", args...)
			if err != nil || out != tc.want {
				t.Errorf("consume (isolation %q): %q %v %s, want %q", tc.iso, out, err, stderr, tc.want)
			}
		}
		// Nothing more than the committed records under read_committed.
		out, _, _ := runCLI(t, c.sluice, "", brokers, "consume", topic, "--from-beginning", "--timeout", "2s")
		if out != "a\nb\nc\nd\ne\n" {
			t.Errorf("consume read_committed to the end: %q", out)
		}

		// The abort's answer comes once PrepareAbort is durable;
		// CompleteAbort follows the markers.
		c.eventually(30*time.Second, "txn describe cli-demo: CompleteAbort", func() error {
			out, stderr, err := runCLI(t, c.sluice, "", brokers, "--output", "json", "txn", "describe", "cli-demo")
			if err != nil {
				return fmt.Errorf("txn describe: %v: %s", err, stderr)
			}
			var d []output.Transaction
			if err := json.Unmarshal([]byte(out), &d); err != nil || len(d) != 1 {
				t.Fatalf("txn describe json: %v in %q", err, out)
			}
			if d[0].State != "CompleteAbort" || d[0].Error != "" {
				return fmt.Errorf("%+v", d[0])
			}
			return nil
		})
		out, stderr, err := runCLI(t, c.sluice, "", brokers, "--output", "json", "txn", "list")
		if err != nil {
			t.Fatalf("txn list: %v: %s", err, stderr)
		}
		var l []output.TransactionListing
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("txn list json: %v in %q", err, out)
		}
		var ids []string
		for _, e := range l {
			ids = append(ids, e.TransactionalID)
		}
		if !slices.Contains(ids, "cli-demo") || !slices.Contains(ids, "client-e2e") {
			t.Errorf("txn list: %v, want cli-demo and client-e2e", ids)
		}
	})
}

// firstDiff returns up to 5 values in one of got and want but not the
// other.
func firstDiff(got, want []string) []string {
	count := map[string]int{}
	for _, v := range got {
		count[v]++
	}
	for _, v := range want {
		count[v]--
	}
	var out []string
	for v, n := range count {
		if n != 0 {
			out = append(out, fmt.Sprintf("%s:%+d", v, n))
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = out[:5]
	}
	return out
}
