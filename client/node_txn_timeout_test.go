package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The transactional producer against a real coordinator (one node,
// nodetest.StartSingle), on the rule of docs/transactions.md protocol
// step 4: a commit answered PRODUCER_FENCED is followed by an abort at the
// same epoch, which tells a coordinator's timeout abort (NONE: the
// producer is healthy, the transaction abortable) from a newer producer
// (PRODUCER_FENCED again: fatal).
func TestTxnCommitAfterTheCoordinatorsTimeoutAbort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node")
	}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.TransactionStatePartitions = 1
		cfg.TransactionAbortTimedOutInterval = 50 * time.Millisecond
	})
	c, err := client.New([]string{s.Node.Addr()}, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)

	t.Run("timed out: abortable, then the next transaction commits", func(t *testing.T) {
		const id, topic = "timed-out", "timeout"
		s.CreateTopic(topic, 1, nil)
		// Long enough for the second transaction to commit in time on a
		// loaded machine, short enough to wait for the first one's abort.
		p := newNodeTxnProducer(t, c, id, client.WithTransactionTimeout(2*time.Second))
		if err := p.InitTransactions(ctx); err != nil {
			t.Fatalf("InitTransactions: %v", err)
		}
		epoch := describeTxn(t, ctx, c, id).ProducerEpoch

		mustNode(t, "BeginTransaction", p.BeginTransaction())
		lost := sendNode(t, ctx, p, topic, "lost", 3)
		wait.For(t, 20*time.Second, "the coordinator aborts the transaction on its timeout", func() error {
			st := describeTxn(t, ctx, c, id)
			if st.State != "CompleteAbort" || st.ProducerEpoch != epoch+1 {
				return fmt.Errorf("%s at epoch %d", st.State, st.ProducerEpoch)
			}
			return nil
		})

		err := p.CommitTransaction(ctx)
		var abortable *client.TransactionAbortableError
		var fatal *client.TransactionFatalError
		if !errors.As(err, &abortable) || errors.Is(err, client.ErrProducerFenced) || errors.As(err, &fatal) ||
			!strings.Contains(err.Error(), "transaction timeout") {
			t.Fatalf("commit after the timeout abort: %v, want a *TransactionAbortableError naming the timeout", err)
		}
		mustNode(t, "AbortTransaction", p.AbortTransaction(ctx))
		// The abort sent nothing: the coordinator still has its own
		// abort's epoch (an EndTxn at the new epoch would have bumped it).
		if st := describeTxn(t, ctx, c, id); st.State != "CompleteAbort" || st.ProducerEpoch != epoch+1 {
			t.Errorf("after AbortTransaction: %s at epoch %d, want CompleteAbort at %d", st.State, st.ProducerEpoch, epoch+1)
		}

		// The producer goes on at the answered epoch, its sequences from 0.
		mustNode(t, "BeginTransaction", p.BeginTransaction())
		kept := sendNode(t, ctx, p, topic, "kept", 3)
		mustNode(t, "CommitTransaction", p.CommitTransaction(ctx))
		if st := describeTxn(t, ctx, c, id); st.ProducerEpoch != epoch+2 || (st.State != "PrepareCommit" && st.State != "CompleteCommit") {
			t.Errorf("after the second commit: %s at epoch %d, want a commit at %d", st.State, st.ProducerEpoch, epoch+2)
		}
		if got := readNode(t, ctx, c, topic, client.ReadCommitted); !slices.Equal(got, kept) {
			t.Errorf("read_committed: %v, want only the committed %v", got, kept)
		}
		if got, want := readNode(t, ctx, c, topic, client.ReadUncommitted), append(lost, kept...); !slices.Equal(got, want) {
			t.Errorf("read_uncommitted: %v, want %v (the aborted records are in the log)", got, want)
		}
	})

	t.Run("fenced by a newer producer: fatal", func(t *testing.T) {
		const id, topic = "fenced", "fence"
		s.CreateTopic(topic, 1, nil)
		zombie := newNodeTxnProducer(t, c, id)
		if err := zombie.InitTransactions(ctx); err != nil {
			t.Fatalf("InitTransactions: %v", err)
		}
		mustNode(t, "BeginTransaction", zombie.BeginTransaction())
		sendNode(t, ctx, zombie, topic, "zombie", 2) // acknowledged: the commit's EndTxn is what is refused

		p := newNodeTxnProducer(t, c, id)
		if err := p.InitTransactions(ctx); err != nil {
			t.Fatalf("second producer: InitTransactions: %v", err)
		}
		err := zombie.CommitTransaction(ctx)
		var fatal *client.TransactionFatalError
		if !errors.Is(err, client.ErrProducerFenced) || !errors.As(err, &fatal) {
			t.Fatalf("zombie commit: %v, want a fatal ErrProducerFenced", err)
		}
		if err := zombie.BeginTransaction(); !errors.Is(err, client.ErrProducerFenced) {
			t.Errorf("zombie begin: %v, want ErrProducerFenced", err)
		}

		// The zombie's abort changed nothing for the new producer.
		mustNode(t, "BeginTransaction", p.BeginTransaction())
		kept := sendNode(t, ctx, p, topic, "new", 2)
		mustNode(t, "CommitTransaction", p.CommitTransaction(ctx))
		if got := readNode(t, ctx, c, topic, client.ReadCommitted); !slices.Equal(got, kept) {
			t.Errorf("read_committed: %v, want only the new producer's %v", got, kept)
		}
	})
}

func newNodeTxnProducer(t *testing.T, c *client.Client, id string, opts ...client.ProducerOption) *client.Producer {
	t.Helper()
	p, err := c.NewProducer(append([]client.ProducerOption{client.WithTransactionalID(id), client.WithLinger(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mustNode(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// sendNode sends n records "<prefix>-<i>" to partition 0 of topic in the
// open transaction, flushes, fails the test if any failed, and returns
// their values.
func sendNode(t *testing.T, ctx context.Context, p *client.Producer, topic, prefix string, n int) []string {
	t.Helper()
	var values []string
	errc := make(chan error, n)
	for i := range n {
		v := fmt.Sprintf("%s-%d", prefix, i)
		values = append(values, v)
		p.Send(ctx, client.Record{Topic: topic, Partition: 0, Value: []byte(v)}, func(_ client.RecordMetadata, err error) { errc <- err })
	}
	mustNode(t, "Flush", p.Flush(ctx))
	for range n {
		if err := <-errc; err != nil {
			t.Fatalf("send %s: %v", prefix, err)
		}
	}
	return values
}

// describeTxn is the coordinator's state of id.
func describeTxn(t *testing.T, ctx context.Context, c *client.Client, id string) *sluicev1.TransactionState {
	t.Helper()
	sts, err := c.DescribeTransactions(ctx, id)
	if err != nil || len(sts) != 1 || sts[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("describe %s: %v %v", id, sts, err)
	}
	return sts[0]
}

// readNode reads partition 0 of topic to its high watermark with
// isolation iso and returns the values in offset order.
func readNode(t *testing.T, ctx context.Context, c *client.Client, topic string, iso client.Isolation) []string {
	t.Helper()
	co, err := c.NewConsumer(client.WithIsolation(iso), client.WithMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	mustNode(t, "Assign", co.Assign(topic, 0, client.OffsetEarliest))
	var out []string
	wait.For(t, 20*time.Second, fmt.Sprintf("%s read to its end (%v)", topic, iso), func() error {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		recs, _ := co.Poll(pctx) // the consumer retries; the condition says when it is done
		cancel()
		for _, r := range recs {
			out = append(out, string(r.Value))
		}
		pos, ok := co.Position(topic, 0)
		if hw := co.HighWatermark(topic, 0); !ok || hw <= 0 || pos < hw {
			return fmt.Errorf("at %d of %d", pos, hw)
		}
		return nil
	})
	return out
}
