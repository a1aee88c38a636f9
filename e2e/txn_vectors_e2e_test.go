package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The worked examples of Kafka's transactions (the vectors in
// coordinator/txn/testdata/kafka-examples.json, copied from Kafka 4.x runs)
// reproduced against three sluiced processes with the raw protocol
// (rawTxn): the same offsets, producer epochs, markers, high watermark and
// last stable offset, aborted-transaction index entry, reads under both
// isolation levels and __transaction_state history. Producer ids may be
// shifted (each broker hands out its own block); nothing else may differ.

func unmarshalBatch(b []byte, pb *sluicev1.RecordBatch) error { return proto.Unmarshal(b, pb) }

// kafkaVectors is the part of kafka-examples.json these tests use.
type kafkaVectors struct {
	CommitAbortCommit struct {
		InitProducerID struct {
			Epoch int32 `json:"epoch"`
		} `json:"init_producer_id"`
		WhileBOpen struct {
			HW  int64 `json:"high_watermark"`
			LSO int64 `json:"last_stable_offset"`
		} `json:"while_B_open"`
		AfterAll struct {
			HW  int64 `json:"high_watermark"`
			LSO int64 `json:"last_stable_offset"`
		} `json:"after_all"`
		Log []struct {
			Offsets    [2]int64 `json:"offsets"`
			Kind       string   `json:"kind"`
			Values     []string `json:"values"`
			Marker     string   `json:"marker"`
			Epoch      int16    `json:"producer_epoch"`
			CoordEpoch *int32   `json:"coordinator_epoch"`
		} `json:"log"`
		AbortedIndex []struct {
			First int64 `json:"first_offset"`
			Last  int64 `json:"last_offset"`
			LSO   int64 `json:"last_stable_offset"`
		} `json:"aborted_txn_index"`
		ReadUncommitted vectorRead `json:"read_uncommitted"`
		ReadCommitted   vectorRead `json:"read_committed"`
		StateLog        [][2]any   `json:"transaction_state_log"`
		FinalDescribe   struct {
			Epoch      int32    `json:"producer_epoch"`
			State      string   `json:"state"`
			Partitions []string `json:"partitions"`
		} `json:"final_describe"`
	} `json:"commit_abort_commit"`
	Fencing struct {
		ReadUncommitted vectorRead `json:"read_uncommitted"`
		ReadCommitted   vectorRead `json:"read_committed"`
		StateLog        [][2]any   `json:"transaction_state_log"`
	} `json:"fencing"`
}

type vectorRead struct {
	Records []string `json:"records"`
	Next    int64    `json:"next_position"`
}

func loadKafkaVectors(t *testing.T) kafkaVectors {
	t.Helper()
	data, err := os.ReadFile("../coordinator/txn/testdata/kafka-examples.json")
	if err != nil {
		t.Fatal(err)
	}
	var v kafkaVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// wantStates converts a vector's transaction_state_log.
func wantStates(t *testing.T, log [][2]any) []stateEntry {
	t.Helper()
	var out []stateEntry
	for _, e := range log {
		s, ok1 := e[0].(string)
		ep, ok2 := e[1].(float64)
		if !ok1 || !ok2 {
			t.Fatalf("bad transaction_state_log entry %v", e)
		}
		out = append(out, stateEntry{s, int16(ep)})
	}
	return out
}

// TestTransactionVectorsOnThreeNodes runs both examples on one 3-node
// cluster, each on its own single-partition topic of replication factor 3.
func TestTransactionVectorsOnThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test builds and runs three sluiced processes")
	}
	v := loadKafkaVectors(t)
	c := startTestCluster(t, 3)
	all := c.ids()
	r := newRawTxn(t, c)

	t.Run("commit_abort_commit", func(t *testing.T) {
		r.t = t
		const topic, id = "u12-txn", "u12-txn"
		c.createTopic(20*time.Second, all, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
		want := v.CommitAbortCommit

		p, code, _ := r.initPID(id, 60_000)
		if code != sluicev1.ErrorCode_NONE || p.Epoch != want.InitProducerID.Epoch {
			t.Fatalf("InitProducerId: %+v %v, want epoch %d", p, code, want.InitProducerID.Epoch)
		}
		pid := p.ID

		// Transaction A: c1 c2 c3, commit.
		if base, code := r.produce(id, topic, 0, txnBatch(p, 0, "c1", "c2", "c3")); code != sluicev1.ErrorCode_NONE || base != 0 {
			t.Fatalf("txn A produce: base %d %v", base, code)
		}
		p = r.mustEnd(id, p, true, pidEpoch{pid, 1})
		r.waitLSO(topic, 4, 4)

		// Transaction B: a1 a2 a3 flushed; while open, HW 7 and LSO 4.
		if base, code := r.produce(id, topic, 0, txnBatch(p, 0, "a1", "a2", "a3")); code != sluicev1.ErrorCode_NONE || base != 4 {
			t.Fatalf("txn B produce: base %d %v", base, code)
		}
		r.waitLSO(topic, want.WhileBOpen.HW, want.WhileBOpen.LSO)
		p = r.mustEnd(id, p, false, pidEpoch{pid, 2})
		r.waitLSO(topic, 8, 8)

		// Transaction C: c4 c5, commit.
		if base, code := r.produce(id, topic, 0, txnBatch(p, 0, "c4", "c5")); code != sluicev1.ErrorCode_NONE || base != 8 {
			t.Fatalf("txn C produce: base %d %v", base, code)
		}
		p = r.mustEnd(id, p, true, pidEpoch{pid, 3})
		r.waitLSO(topic, want.AfterAll.HW, want.AfterAll.LSO)

		// Reads under both isolation levels.
		for _, tc := range []struct {
			iso  sluicev1.IsolationLevel
			want vectorRead
		}{
			{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, want.ReadUncommitted},
			{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, want.ReadCommitted},
		} {
			got := r.readAll(topic, 0, tc.iso)
			if !slices.Equal(got.Records, tc.want.Records) || got.Next != tc.want.Next {
				t.Errorf("%v: read %v next %d, want %v next %d", tc.iso, got.Records, got.Next, tc.want.Records, tc.want.Next)
			}
		}

		// Every replica's log: the same batches, markers and aborted index.
		// The markers carry the coordinator epoch: the leader epoch of the
		// id's __transaction_state partition, 0 in Kafka's run and here
		// unless that partition changed leader since it was created.
		ce := r.describeTxn(id).CoordinatorEpoch
		if ce != 0 {
			t.Logf("coordinator epoch %d (the __transaction_state partition changed leader)", ce)
		}
		for _, node := range all {
			batches, aborted := r.segmentBatches(node, topic, 0)
			var gotLog []string
			for _, b := range batches {
				if b.Control {
					gotLog = append(gotLog, fmt.Sprintf("%d-%d %s e%d ce%d", b.First, b.Last, b.Marker, b.Epoch, b.CoordEpoch))
				} else {
					gotLog = append(gotLog, fmt.Sprintf("%d-%d data e%d %v", b.First, b.Last, b.Epoch, b.Values))
				}
			}
			var wantLog []string
			for _, e := range want.Log {
				if e.Kind == "control" {
					wantLog = append(wantLog, fmt.Sprintf("%d-%d %s e%d ce%d", e.Offsets[0], e.Offsets[1], e.Marker, e.Epoch, *e.CoordEpoch+ce))
				} else {
					wantLog = append(wantLog, fmt.Sprintf("%d-%d data e%d %v", e.Offsets[0], e.Offsets[1], e.Epoch, e.Values))
				}
			}
			t.Logf("node %d: log %q, aborted index %+v", node, gotLog, aborted)
			if !slices.Equal(gotLog, wantLog) {
				t.Errorf("node %d log:\n got %q\nwant %q", node, gotLog, wantLog)
			}
			if len(aborted) != len(want.AbortedIndex) {
				t.Errorf("node %d aborted index %+v, want %+v", node, aborted, want.AbortedIndex)
				continue
			}
			for i, a := range aborted {
				w := want.AbortedIndex[i]
				if a.ProducerID != pid || a.FirstOffset != w.First || a.LastOffset != w.Last || a.LastStableOffset != w.LSO {
					t.Errorf("node %d aborted index entry %+v, want producer %d %+v", node, a, pid, w)
				}
			}
		}

		r.waitState(id, want.FinalDescribe.State)
		hist := r.stateHistory(id)
		t.Logf("__transaction_state history of %s: %v", id, hist)
		if want := wantStates(t, want.StateLog); !slices.Equal(hist, want) {
			t.Errorf("__transaction_state history of %s:\n got %v\nwant %v", id, hist, want)
		}
		d := r.describeTxn(id)
		if d.ProducerId != pid || d.ProducerEpoch != want.FinalDescribe.Epoch || d.State != want.FinalDescribe.State || len(d.Topics) != len(want.FinalDescribe.Partitions) {
			t.Errorf("describe: %v, want producer %d %+v", d, pid, want.FinalDescribe)
		}
	})

	t.Run("fencing", func(t *testing.T) {
		r.t = t
		const topic, id = "u12-fence", "u12-fence"
		c.createTopic(20*time.Second, all, topic, "--partitions", "1", "--replication-factor", "3", "--config", "min.insync.replicas=2")
		want := v.Fencing

		p1, code, _ := r.initPID(id, 60_000)
		if code != sluicev1.ErrorCode_NONE || p1.Epoch != 0 {
			t.Fatalf("p1 InitProducerId: %+v %v", p1, code)
		}
		pid := p1.ID
		if base, code := r.produce(id, topic, 0, txnBatch(p1, 0, "z1")); code != sluicev1.ErrorCode_NONE || base != 0 {
			t.Fatalf("p1 z1: base %d %v", base, code)
		}
		// p2 with the same id: the open transaction is fenced and aborted
		// (ABORT at offset 1, epoch 1); the first answer is
		// CONCURRENT_TRANSACTIONS, the retry gets epoch 2.
		p2, code, seen := r.initPID(id, 60_000)
		if code != sluicev1.ErrorCode_NONE || p2 != (pidEpoch{pid, 2}) {
			t.Fatalf("p2 InitProducerId: %+v %v, want producer %d epoch 2", p2, code, pid)
		}
		if !slices.Contains(seen, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS) {
			t.Errorf("p2's InitProducerId saw %v before its answer; want CONCURRENT_TRANSACTIONS while p1's transaction was aborted", seen)
		}
		// p1 is fenced: z2 is refused and not written, its commit fails.
		if base, code := r.produce(id, topic, 0, txnBatch(p1, 1, "z2")); code != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
			t.Errorf("p1 z2 after fencing: base %d %v, want INVALID_PRODUCER_EPOCH", base, code)
		}
		if _, code := r.endTxn(id, p1, true); code != sluicev1.ErrorCode_PRODUCER_FENCED && code != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
			t.Errorf("p1 commit after fencing: %v, want PRODUCER_FENCED", code)
		}
		// p2: y1 at offset 2, COMMIT at 3 with epoch 3.
		if base, code := r.produce(id, topic, 0, txnBatch(p2, 0, "y1")); code != sluicev1.ErrorCode_NONE || base != 2 {
			t.Fatalf("p2 y1: base %d %v", base, code)
		}
		r.mustEnd(id, p2, true, pidEpoch{pid, 3})
		r.waitLSO(topic, 4, 4)

		for _, tc := range []struct {
			iso  sluicev1.IsolationLevel
			want vectorRead
		}{
			{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, want.ReadUncommitted},
			{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, want.ReadCommitted},
		} {
			if got := r.readAll(topic, 0, tc.iso); !slices.Equal(got.Records, tc.want.Records) {
				t.Errorf("%v: read %v, want %v", tc.iso, got.Records, tc.want.Records)
			}
		}
		r.waitState(id, "CompleteCommit")
		if got, want := r.stateHistory(id), wantStates(t, want.StateLog); !slices.Equal(got, want) {
			t.Errorf("__transaction_state history of %s:\n got %v\nwant %v", id, got, want)
		}
	})
}

// mustEnd ends the transaction of p and checks the answer is want.
func (r *rawTxn) mustEnd(id string, p pidEpoch, commit bool, want pidEpoch) pidEpoch {
	r.t.Helper()
	got, code := r.endTxn(id, p, commit)
	if code != sluicev1.ErrorCode_NONE || got != want {
		r.t.Fatalf("EndTxn(commit=%t) of %+v: %+v %v, want %+v", commit, p, got, code, want)
	}
	return got
}

// waitLSO waits until partition 0 of topic has high watermark hw and last
// stable offset lso (the markers are written after EndTxn answers).
func (r *rawTxn) waitLSO(topic string, hw, lso int64) {
	r.t.Helper()
	r.c.eventually(30*time.Second, fmt.Sprintf("%s HW %d LSO %d", topic, hw, lso), func() error {
		got := r.readAll(topic, 0, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
		if got.HighWatermark != hw || got.LSO != lso {
			return fmt.Errorf("HW %d LSO %d", got.HighWatermark, got.LSO)
		}
		return nil
	})
}
