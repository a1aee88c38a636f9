package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/proccluster"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Transactions across SIGKILLs and timeouts, against three sluiced
// processes, with the raw protocol (rawTxn): a coordinator killed between
// PrepareCommit and its markers, a partition leader killed with a
// transaction open, and a transaction left open past its timeout.

// txnFailoverAbortInterval is the coordinators' timeout scan period in
// these tests (10 s by default).
const txnFailoverAbortInterval = "200ms"

func TestTransactionFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs three sluiced processes")
	}
	c := startTestCluster(t, 3, "--fault-injection", "--transaction-abort-timed-out-interval", txnFailoverAbortInterval)
	all := c.ids()
	r := newRawTxn(t, c)
	const topic = "txn-failover"
	c.createTopic(20*time.Second, all, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	waitFullISR := func(t *testing.T) {
		c.eventually(60*time.Second, "a full ISR of "+topic, func() error {
			d, err := c.describe(all, topic)
			if err != nil {
				return err
			}
			return isrFull(d.Partitions[0])
		})
	}
	waitFullISR(t)

	t.Run("coordinator killed after PrepareCommit, before the markers", func(t *testing.T) {
		r.t = t
		leader := r.nodeOf(r.leaderAddr(topic, 0))
		id := r.idCoordinatedAwayFrom(leader, "fo-coord")
		coord := r.nodeOf(r.coordinator(id))
		t.Logf("partition leader %d, coordinator of %s: %d", leader, id, coord)
		// The leader refuses every marker: PrepareCommit is written and
		// answered, the markers cannot land.
		r.putFaults(leader, []proccluster.FaultRule{{Method: "/sluice.internal.v1.TxnBroker/WriteTxnMarkers", FailRequest: 1}})

		p, code, _ := r.initPID(id, 60_000)
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("InitProducerId: %v", code)
		}
		base0, code := r.produce(id, topic, 0, txnBatch(p, 0, "k1", "k2", "k3"))
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("produce: %v", code)
		}
		r.mustEnd(id, p, true, pidEpoch{p.ID, p.Epoch + 1})
		if st := r.describeTxn(id); st.State != "PrepareCommit" {
			t.Fatalf("state after EndTxn with the markers refused: %s, want PrepareCommit", st.State)
		}
		if got := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED); got.LSO != base0 || got.HighWatermark != base0+3 {
			t.Fatalf("with the markers refused: HW %d LSO %d, want HW %d LSO %d", got.HighWatermark, got.LSO, base0+3, base0)
		}

		c.kill(coord)
		r.putFaults(leader, nil)
		t.Logf("SIGKILLed coordinator %d; markers allowed again", coord)
		// The new leader of the id's __transaction_state partition loads
		// PrepareCommit and writes the markers: k1..k3 visible exactly once.
		c.eventually(60*time.Second, "the commit finished by the new coordinator", func() error {
			got := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
			if got.LSO != base0+4 || got.HighWatermark != base0+4 {
				return fmt.Errorf("HW %d LSO %d, want both %d", got.HighWatermark, got.LSO, base0+4)
			}
			var ks []string
			for _, rec := range got.Records {
				if strings.HasPrefix(rec, "k") {
					ks = append(ks, rec)
				}
			}
			want := []string{fmt.Sprintf("k1@%d", base0), fmt.Sprintf("k2@%d", base0+1), fmt.Sprintf("k3@%d", base0+2)}
			if !slices.Equal(ks, want) {
				return fmt.Errorf("read %v, want %v", ks, want)
			}
			return nil
		})
		// CompleteCommit is written after the last marker is: wait for it.
		if st := r.waitState(id, "CompleteCommit"); st.ProducerEpoch != p.Epoch+1 {
			t.Errorf("CompleteCommit on the new coordinator at epoch %d, want %d", st.ProducerEpoch, p.Epoch+1)
		}
		c.restart(coord)
		waitFullISR(t)
	})

	t.Run("partition leader killed with a transaction open", func(t *testing.T) {
		r.t = t
		leader := r.nodeOf(r.leaderAddr(topic, 0))
		id := r.idCoordinatedAwayFrom(leader, "fo-leader")
		p, code, _ := r.initPID(id, 60_000)
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("InitProducerId: %v", code)
		}
		base, code := r.produce(id, topic, 0, txnBatch(p, 0, "m1", "m2"))
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("produce: %v", code)
		}
		before := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
		if before.LSO != base || before.HighWatermark != base+2 {
			t.Fatalf("with the transaction open: HW %d LSO %d, want HW %d LSO %d", before.HighWatermark, before.LSO, base+2, base)
		}
		c.kill(leader)
		t.Logf("SIGKILLed partition leader %d with the transaction open at offset %d", leader, base)
		c.eventually(30*time.Second, "a new leader", func() error {
			if l := r.nodeOf(r.leaderAddr(topic, 0)); l == leader {
				return fmt.Errorf("leader still %d", l)
			}
			return nil
		})
		// The new leader built the same producer state from the batches
		// it replicated: same LSO, and the transaction goes on there.
		// A new leader's high watermark can lag the old one's until its
		// followers fetch (Kafka's too); the LSO is held by the open
		// transaction all along.
		c.eventually(30*time.Second, "the new leader's HW past the transaction's batch", func() error {
			after := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
			if after.LSO > base {
				t.Fatalf("new leader: LSO %d above the open transaction's first offset %d", after.LSO, base)
			}
			if after.LSO != base || after.HighWatermark != base+2 {
				return fmt.Errorf("HW %d LSO %d, want HW %d LSO %d", after.HighWatermark, after.LSO, base+2, base)
			}
			return nil
		})
		if got, code := r.produce(id, topic, 0, txnBatch(p, 2, "m3")); code != sluicev1.ErrorCode_NONE || got != base+2 {
			t.Fatalf("produce to the new leader: base %d %v, want %d", got, code, base+2)
		}
		r.mustEnd(id, p, true, pidEpoch{p.ID, p.Epoch + 1})
		r.waitLSO(topic, base+4, base+4)
		got := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
		want := []string{fmt.Sprintf("m1@%d", base), fmt.Sprintf("m2@%d", base+1), fmt.Sprintf("m3@%d", base+2)}
		if !slices.Equal(got.Records[len(got.Records)-3:], want) {
			t.Errorf("read_committed ends with %v, want %v", got.Records, want)
		}
		c.restart(leader)
		waitFullISR(t)
	})

	t.Run("transaction open past its timeout is aborted and fenced", func(t *testing.T) {
		r.t = t
		const id = "fo-timeout"
		p, code, _ := r.initPID(id, 1000)
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("InitProducerId: %v", code)
		}
		base, code := r.produce(id, topic, 0, txnBatch(p, 0, "t1"))
		if code != sluicev1.ErrorCode_NONE {
			t.Fatalf("produce: %v", code)
		}
		// The producer goes silent; the coordinator's scan aborts the
		// transaction with an epoch bump.
		c.eventually(30*time.Second, "the timed-out transaction aborted", func() error {
			if st := r.describeTxn(id); st.State != "CompleteAbort" {
				return fmt.Errorf("state %s epoch %d", st.State, st.ProducerEpoch)
			}
			return nil
		})
		if st := r.describeTxn(id); st.ProducerEpoch <= p.Epoch {
			t.Errorf("epoch after the timeout abort %d, want above %d", st.ProducerEpoch, p.Epoch)
		}
		// Its late sends and its commit are refused.
		if _, code := r.produce(id, topic, 0, txnBatch(p, 1, "t2")); code != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
			t.Errorf("late send: %v, want INVALID_PRODUCER_EPOCH", code)
		}
		if _, code := r.endTxn(id, p, true); code != sluicev1.ErrorCode_PRODUCER_FENCED {
			t.Errorf("late commit: %v, want PRODUCER_FENCED", code)
		}
		got := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
		for _, rec := range got.Records {
			if strings.HasPrefix(rec, "t") {
				t.Errorf("read_committed returned %s of the aborted transaction (first offset %d)", rec, base)
			}
		}
		if got.LSO != got.HighWatermark {
			t.Errorf("HW %d LSO %d after the abort", got.HighWatermark, got.LSO)
		}
	})
}

// nodeOf returns the id of the node listening on addr.
func (r *rawTxn) nodeOf(addr string) int32 {
	r.t.Helper()
	for _, id := range r.c.ids() {
		if r.c.addrs([]int32{id})[0] == addr {
			return id
		}
	}
	r.t.Fatalf("no node listens on %s", addr)
	return 0
}

// idCoordinatedAwayFrom returns a transactional id with prefix whose
// coordinator is not node avoid.
func (r *rawTxn) idCoordinatedAwayFrom(avoid int32, prefix string) string {
	r.t.Helper()
	for i := range 200 {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if r.nodeOf(r.coordinator(id)) != avoid {
			return id
		}
	}
	r.t.Fatalf("every id %s-0..199 is coordinated by node %d", prefix, avoid)
	return ""
}

// putFaults replaces node id's fault rules (sluiced --fault-injection);
// nil clears them.
func (r *rawTxn) putFaults(id int32, rules []proccluster.FaultRule) {
	r.t.Helper()
	if err := proccluster.PutFaultRules(r.c.node(id).HTTP, rules); err != nil {
		r.t.Fatal(err)
	}
}
