package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/batch"
)

// appendHanging writes a transactional batch of producer pid at epoch
// (sequence 0) straight to tp as its leader, behind every coordinator's
// back: what a deposed leader that appends after its coordinator aborted
// leaves behind. Returns its offset.
func appendHanging(t *testing.T, s *nodetest.Single, tp cluster.TopicPartition, pid int64, epoch int32) int64 {
	t.Helper()
	var b batch.Builder
	now := time.Now()
	b.Reset(now.UnixMilli())
	b.Add(now.UnixMilli(), []byte("k"), []byte("hanging"), nil)
	raw := b.Finish(batch.Producer{ID: pid, Epoch: epoch, BaseSequence: 0}, batch.AttrTransactional)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Node.Replicas().AppendCommitted(ctx, tp, raw, cluster.NoLeaderEpoch, now)
	if err != nil {
		t.Fatalf("append the hanging batch: %v", err)
	}
	return res.BaseOffset
}

// KIP-664: a transactional batch no coordinator knows holds the LSO of its
// partition; find-hanging reports it, abort refuses a producer with
// nothing open, then writes the ABORT marker, and the LSO moves past it.
func TestHangingTransactionIsFoundAndAbortedAndTheLSOMovesOn(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.TransactionMaxTimeout = 200 * time.Millisecond // late soon
	})
	s.CreateTopic("h", 1, nil)
	brokers := "--brokers=" + s.Node.Addr()
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A committed plain record first, so the hanging one is not at 0.
	if _, err := s.Node.Replicas().AppendCommitted(ctx, cluster.TopicPartition{Topic: "h", Partition: 0}, nodetest.Batch("plain", 1, time.Now().UnixMilli()), cluster.NoLeaderEpoch, time.Now()); err != nil {
		t.Fatal(err)
	}
	const pid = 4242
	start := appendHanging(t, s, cluster.TopicPartition{Topic: "h", Partition: 0}, pid, 0)
	hw, lso, err := c.Watermarks(ctx, "h", 0)
	if err != nil || lso != start || hw != start+1 {
		t.Fatalf("watermarks: hw %d, lso %d, err %v; want hw %d, lso %d (held by the open transaction)", hw, lso, err, start+1, start)
	}

	// describe-producers shows the open transaction.
	out, _, err := runWithStdin(t, "", "txn", "describe-producers", "h", "0", "--output=json", brokers)
	if err != nil {
		t.Fatalf("describe-producers: %v", err)
	}
	var ps []output.Producer
	if err := json.Unmarshal([]byte(out), &ps); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(ps) != 1 || ps[0].ProducerID != pid || ps[0].ProducerEpoch != 0 || ps[0].LastSequence != 0 ||
		ps[0].CurrentTxnStartOffset != start || ps[0].CurrentTxnStartTimeMs <= 0 || ps[0].CoordinatorEpoch != -1 {
		t.Fatalf("describe-producers = %+v; want producer %d epoch 0, last sequence 0, open from %d, coordinator epoch -1", ps, pid, start)
	}

	// find-hanging reports it (and exits 1).
	out, _, err = runWithStdin(t, "", "txn", "find-hanging", "--output=json", brokers)
	if err == nil {
		t.Fatalf("find-hanging found nothing: %s", out)
	}
	var hs []output.HangingTransaction
	if err := json.Unmarshal([]byte(out), &hs); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if len(hs) != 1 || hs[0].Topic != "h" || hs[0].Partition != 0 || hs[0].ProducerID != pid || hs[0].StartOffset != start ||
		hs[0].TransactionalID != "" || !strings.Contains(hs[0].Reason, "no coordinator knows") {
		t.Fatalf("find-hanging = %+v; want producer %d on h/0 from %d, known to no coordinator", hs, pid, start)
	}
	// --min-duration filters it out; so does a broker that leads nothing.
	for _, args := range [][]string{{"--min-duration=1h"}, {"--broker=99"}} {
		out, _, err = runWithStdin(t, "", append([]string{"txn", "find-hanging", "--output=json", brokers}, args...)...)
		if err != nil || strings.TrimSpace(out) != "[]" {
			t.Errorf("find-hanging %v = %q, %v; want [] and success", args, out, err)
		}
	}

	// Past the maximum timeout it is late: the metrics and the log say so.
	wait.For(t, 10*time.Second, "late-transaction metrics", func() error {
		return metricsHave(s.Node.HTTPAddr(), `sluice_late_transactions{partition="0",topic="h"} 1`, "sluice_partitions_with_late_transactions 1")
	})
	if lts := s.Node.Replicas().LogLateTransactions(time.Now()); len(lts) != 1 || lts[0].ProducerID != pid || lts[0].StartOffset != start || !lts[0].Leader {
		t.Errorf("late transactions = %+v; want producer %d from %d, led here", lts, pid, start)
	}

	// abort refuses a producer with nothing open, and a stale epoch.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--producer-id=77", "--producer-epoch=0", "--coordinator-epoch=-1"}, "INVALID_TXN_STATE"},
		{[]string{"--producer-id=4242", "--producer-epoch=3", "--coordinator-epoch=-1", "--force"}, "INVALID_PRODUCER_EPOCH"},
		{[]string{"--producer-id=4242", "--producer-epoch=0"}, "--coordinator-epoch is required"},
	} {
		_, _, err := runWithStdin(t, "", append([]string{"txn", "abort", "h", "0", brokers}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("abort %v: %v; want an error with %q", tc.args, err, tc.want)
		}
	}

	out, _, err = runWithStdin(t, "", "txn", "abort", "h", "0", "--producer-id=4242", "--producer-epoch=0", "--coordinator-epoch=-1", "--output=json", brokers)
	if err != nil {
		t.Fatalf("abort: %v", err)
	}
	var ab output.AbortedTransaction
	if err := json.Unmarshal([]byte(out), &ab); err != nil || ab.MarkerOffset != start+1 {
		t.Fatalf("abort = %q (%v); want the marker at %d", out, err, start+1)
	}
	wait.For(t, 10*time.Second, "LSO past the aborted transaction", func() error {
		hw, lso, err := c.Watermarks(ctx, "h", 0)
		if err != nil {
			return err
		}
		if lso != start+2 || hw != start+2 {
			return fmt.Errorf("hw %d, lso %d; want both %d", hw, lso, start+2)
		}
		return nil
	})
	out, _, err = runWithStdin(t, "", "txn", "find-hanging", "--output=json", brokers)
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("find-hanging after the abort = %q, %v; want [] and success", out, err)
	}
	if err := metricsHave(s.Node.HTTPAddr(), `sluice_late_transactions{partition="0",topic="h"} 0`, "sluice_partitions_with_late_transactions 0"); err != nil {
		t.Error(err)
	}
	// The aborted record is invisible to read_committed.
	pd := s.Fetch("h", 0, 0, time.Second)
	if vs := nodetest.Values(pd, 0); strings.Join(vs, ",") != "plain-0" {
		t.Errorf("read_committed values = %v; want [plain-0]", vs)
	}
}

// KIP-664: abort refuses, without --force, a transaction its coordinator
// still owns, naming the transactional id; find-hanging does not report it.
func TestAbortRefusesATransactionItsCoordinatorOwns(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("o", 1, nil)
	brokers := "--brokers=" + s.Node.Addr()
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(client.WithTransactionalID("owned"), client.WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(ctx, client.Record{Topic: "o", Partition: 0, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	ps, err := c.DescribeProducers(ctx, "o", 0)
	if err != nil || len(ps) != 1 || ps[0].CurrentTxnStartOffset != 0 {
		t.Fatalf("describe producers = %v, %v; want one open transaction from 0", ps, err)
	}
	out, _, err := runWithStdin(t, "", "txn", "find-hanging", "--output=json", brokers)
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("find-hanging = %q, %v; want [] (the coordinator owns it)", out, err)
	}
	_, err = c.AbortTransaction(ctx, client.AbortSpec{Topic: "o", Partition: 0, ProducerID: ps[0].ProducerId, ProducerEpoch: ps[0].ProducerEpoch, CoordinatorEpoch: ps[0].CoordinatorEpoch})
	if !errors.Is(err, client.ErrTransactionOwned) || !strings.Contains(err.Error(), `"owned" is Ongoing`) {
		t.Fatalf("abort without --force: %v; want ErrTransactionOwned naming \"owned\" Ongoing", err)
	}
	// The transaction is intact: it commits.
	if err := p.CommitTransaction(ctx); err != nil {
		t.Fatalf("commit after the refused abort: %v", err)
	}

	// A batch of the id's producer at its new epoch, appended after the
	// commit behind the coordinator's back (CompleteCommit: nothing open),
	// is hanging, named after the id; abort needs no --force for it.
	var epoch int32
	wait.For(t, 10*time.Second, "CompleteCommit", func() error {
		sts, err := c.DescribeTransactions(ctx, "owned")
		if err != nil {
			return err
		}
		if sts[0].State != "CompleteCommit" {
			return fmt.Errorf("state %s", sts[0].State)
		}
		epoch = sts[0].ProducerEpoch
		return nil
	})
	start := appendHanging(t, s, cluster.TopicPartition{Topic: "o", Partition: 0}, ps[0].ProducerId, epoch)
	out, _, err = runWithStdin(t, "", "txn", "find-hanging", "--output=json", brokers)
	var hs []output.HangingTransaction
	if jerr := json.Unmarshal([]byte(out), &hs); err == nil || jerr != nil || len(hs) != 1 || hs[0].TransactionalID != "owned" ||
		hs[0].StartOffset != start || !strings.Contains(hs[0].Reason, "CompleteCommit") {
		t.Fatalf("find-hanging = %q (%v); want the batch at %d, of \"owned\" in CompleteCommit", out, err, start)
	}
	if _, err := c.AbortTransaction(ctx, client.AbortSpec{Topic: "o", Partition: 0, ProducerID: hs[0].ProducerID, ProducerEpoch: hs[0].ProducerEpoch, CoordinatorEpoch: hs[0].CoordinatorEpoch}); err != nil {
		t.Fatalf("abort of the hanging batch: %v", err)
	}
	wait.For(t, 10*time.Second, "LSO at the high watermark", func() error {
		hw, lso, err := c.Watermarks(ctx, "o", 0)
		if err != nil || lso != hw {
			return fmt.Errorf("hw %d, lso %d, %v", hw, lso, err)
		}
		return nil
	})
}

// describe --history shows every state the id went through, from its
// __transaction_state records: InitProducerId's Empty, then per
// transaction Ongoing (with its partition), Prepare* and Complete* (TV2:
// the epoch bumps at every end).
func TestDescribeHistoryReadsEveryStateOfTheID(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	s.CreateTopic("hist", 2, nil)
	brokers := "--brokers=" + s.Node.Addr()
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := c.NewProducer(client.WithTransactionalID("storied"), client.WithLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	for i, commit := range []bool{true, false} {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.SendSync(ctx, client.Record{Topic: "hist", Partition: int32(i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		end := p.CommitTransaction
		if !commit {
			end = p.AbortTransaction
		}
		if err := end(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := "Empty/0 Ongoing/0[hist:0] PrepareCommit/1[hist:0] CompleteCommit/1 Ongoing/1[hist:1] PrepareAbort/2[hist:1] CompleteAbort/2"
	var got string
	wait.For(t, 10*time.Second, "the history up to CompleteAbort", func() error {
		out, _, err := runWithStdin(t, "", "txn", "describe", "storied", "--history", "--output=json", brokers)
		if err != nil {
			return err
		}
		var ts []output.Transaction
		if err := json.Unmarshal([]byte(out), &ts); err != nil {
			return err
		}
		var parts []string
		for _, h := range ts[0].History {
			e := fmt.Sprintf("%s/%d", h.State, h.ProducerEpoch)
			for _, tp := range h.Topics {
				e += fmt.Sprintf("[%s:%d]", tp.Name, tp.Partitions[0])
			}
			if h.ProducerID != ts[0].ProducerID || h.TimeoutMs <= 0 || h.UpdateTimeMs <= 0 {
				return fmt.Errorf("entry %+v: producer id, timeout or update time missing", h)
			}
			parts = append(parts, e)
		}
		if got = strings.Join(parts, " "); got != want {
			return fmt.Errorf("history %q, want %q", got, want)
		}
		// The abort's marker on hist-1 follows its one record (offset 0).
		if len(ts[0].Markers) != 1 || ts[0].Markers[0] != (output.TxnMarker{Topic: "hist", Partition: 1, Offset: 1}) {
			return fmt.Errorf("markers %+v, want hist-1 at offset 1", ts[0].Markers)
		}
		return nil
	})
	out, _, err := runWithStdin(t, "", "txn", "describe", "storied", "--history", brokers)
	if err != nil || !strings.Contains(out, "History (__transaction_state):") || !strings.Contains(out, "PrepareAbort") ||
		!strings.Contains(out, "  hist-1: offset 1\n") {
		t.Errorf("text describe --history = %q, %v", out, err)
	}
}

// metricsHave checks that the node's /metrics at addr has every line of want.
func metricsHave(addr string, want ...string) error {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	lines := strings.Split(string(body), "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			return fmt.Errorf("/metrics lacks %q", w)
		}
	}
	return nil
}
