package e2e

import (
	"slices"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestLateRequestsOfAnEndedTransactionAreRefused: the KAFKA-17754 class
// (a produce or EndTxn delayed in the network, arriving after its
// transaction ended and the producer's next one began — what hit
// Bufstream) on three real nodes, with raw gRPC. Transaction version 2
// bumps the epoch at every end, so the late requests carry an epoch the
// coordinator and the partitions have left behind: a late produce to a
// partition the first transaction already wrote to, and one to a
// partition it never reached (which would need the coordinator to add
// the partition), are both refused with nothing stored, and a late
// EndTxn does not end the running transaction.
func TestLateRequestsOfAnEndedTransactionAreRefused(t *testing.T) {
	c := startTestCluster(t, 3, "--transaction-state-partitions", "3")
	all := c.ids()
	const topic, id = "late", "late-producer"
	c.createTopic(20*time.Second, all, topic, "--partitions", "2", "--replication-factor", "3", "--config", "min.insync.replicas=2")
	r := newRawTxn(t, c)
	p0, code, _ := r.initPID(id, 60000)
	if code != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v", code)
	}
	if _, code := r.produce(id, topic, 0, txnBatch(p0, 0, "t1-a")); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("transaction 1 produce: %v", code)
	}
	p1, code := r.endTxn(id, p0, true)
	if code != sluicev1.ErrorCode_NONE || p1.Epoch <= p0.Epoch {
		t.Fatalf("EndTxn 1: %v, next epoch %d after %d", code, p1.Epoch, p0.Epoch)
	}
	if _, code := r.produce(id, topic, 0, txnBatch(p1, 0, "t2-a")); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("transaction 2 produce: %v", code)
	}

	// The delayed requests of transaction 1 arrive now.
	refused := []sluicev1.ErrorCode{sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH, sluicev1.ErrorCode_PRODUCER_FENCED, sluicev1.ErrorCode_INVALID_TXN_STATE}
	if _, code := r.produce(id, topic, 0, txnBatch(p0, 1, "late-a")); !slices.Contains(refused, code) {
		t.Errorf("late produce to a partition of transaction 1: %v, want one of %v", code, refused)
	}
	if _, code := r.produce(id, topic, 1, txnBatch(p0, 0, "late-b")); !slices.Contains(refused, code) {
		t.Errorf("late produce to a new partition: %v, want one of %v", code, refused)
	}
	if _, code := r.endTxn(id, p0, true); code == sluicev1.ErrorCode_NONE {
		// TV2: a retry of transaction 1's EndTxn may be answered as the
		// retry it is (its outcome is already commit), but it must not
		// end transaction 2 — checked below.
		t.Logf("the late EndTxn was answered as a retry of transaction 1's")
	}
	if st := r.describeTxn(id); st.State != "Ongoing" || st.ProducerEpoch != p1.Epoch {
		t.Fatalf("after the late requests transaction 2 is %s at epoch %d, want Ongoing at %d", st.State, st.ProducerEpoch, p1.Epoch)
	}
	if _, code := r.endTxn(id, p1, true); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("EndTxn 2: %v", code)
	}
	r.waitState(id, "CompleteCommit")

	for iso, want := range map[sluicev1.IsolationLevel][2][]string{
		sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:   {{"t1-a@0", "t2-a@2"}, nil},
		sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED: {{"t1-a@0", "t2-a@2"}, nil},
	} {
		for part := int32(0); part < 2; part++ {
			got := r.readAll(topic, part, iso)
			if !slices.Equal(got.Records, want[part]) {
				t.Errorf("%v partition %d: %v, want %v", iso, part, got.Records, want[part])
			}
		}
	}
}
