package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
)

// A copier member's history, reported as JSON lines by its recorder's
// emit hook, replays into the harness's recorder with the member's
// indexes mapped to the harness's, and a line cut by SIGKILL ends the
// replay without harm: writes it left in flight stay unknown.
func TestCopierMemberHistoryReplays(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	member := &recorder{emit: func(ev memberEvent) { _ = enc.Encode(ev) }}
	now := time.Unix(1_800_000_000, 0)
	ti := member.beginTxn(checker.Txn{ID: "g1.1/1", Producer: "g1.1", Begin: now})
	w0 := member.invoke(checker.Write{Producer: "g1.1", Partition: 3, Value: "copy/g1.1/1/a", Txn: "g1.1/1", CopyOf: "a", Invoke: now})
	member.invoke(checker.Write{Producer: "g1.1", Partition: 3, Value: "copy/g1.1/1/b", Txn: "g1.1/1", CopyOf: "b", Invoke: now})
	member.complete(w0, now.Add(time.Millisecond), client.RecordMetadata{Offset: 41}, nil)
	member.commitInvoked(ti, now.Add(2*time.Millisecond))
	member.endTxn(ti, now.Add(3*time.Millisecond), checker.TxnCommitted, nil)
	member.fence("g1.1", now, errors.New("fenced"))
	caught := &caughtUp{at: map[int32]int64{}, emit: member.emit}
	caught.set(2, 99)
	buf.WriteString(`{"e":"complete","i":1,"o":`) // cut by a SIGKILL

	// The harness already has history of its own: indexes differ.
	w := &workload{rec: &recorder{}}
	w.rec.invoke(checker.Write{Producer: "p1", Value: "x"})
	w.rec.beginTxn(checker.Txn{ID: "t1/1"})
	got := &caughtUp{at: map[int32]int64{}}
	w.replayMember(&buf, got)

	h := w.rec.history()
	if len(h.Writes) != 3 || len(h.Txns) != 2 {
		t.Fatalf("replayed %d writes, %d txns; want 3, 2", len(h.Writes), len(h.Txns))
	}
	if a := h.Writes[1]; a.Value != "copy/g1.1/1/a" || a.Outcome != checker.OK || a.Offset != 41 || a.CopyOf != "a" || a.Complete.IsZero() {
		t.Errorf("first copy: %+v", a)
	}
	if b := h.Writes[2]; b.Value != "copy/g1.1/1/b" || b.Outcome != checker.Unknown || !b.Complete.IsZero() {
		t.Errorf("the copy in flight at the kill: %+v, want unknown and not complete", b)
	}
	if tx := h.Txns[1]; tx.ID != "g1.1/1" || tx.Outcome != checker.TxnCommitted || tx.CommitInvoke.IsZero() || tx.Complete.IsZero() {
		t.Errorf("transaction: %+v", tx)
	}
	if len(w.rec.fences) != 1 || got.at[2] != 99 {
		t.Errorf("fences %v, caught %v", w.rec.fences, got.at)
	}
}

// A group copier instance fenced from its group (OnLost) must forget the
// positions it committed for the lost partitions, and only once its
// transaction in flight has ended: seed 1703 (docs/chaos.md) showed what
// happens otherwise. Without a Lost callback, the member rejoined at once,
// got partition 1 back at the group's committed offset (1054, committed
// meanwhile by another member), and the abort of its transaction in flight
// (refused under the old membership) rewound the partition to its own old
// position (1042): 11 input records copied twice.
func TestCopierListenerForgetsLostPartitionsAfterTheTransactionInFlight(t *testing.T) {
	var mu sync.Mutex
	p1, p2 := client.TopicPartition{Topic: "chaos", Partition: 1}, client.TopicPartition{Topic: "chaos", Partition: 2}
	committed := map[client.TopicPartition]int64{p1: 1042, p2: 7}
	l := copierListener(&mu, committed)
	mu.Lock() // a transaction in flight
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.OnLost([]client.TopicPartition{p1})
	}()
	select {
	case <-done:
		t.Fatal("OnLost returned while a transaction was in flight: the member would rejoin under it")
	case <-time.After(100 * time.Millisecond): // still waiting for the transaction, as it must
	}
	if _, ok := committed[p1]; !ok {
		t.Fatal("lost partition forgotten while the transaction in flight may still rewind to it")
	}
	mu.Unlock() // the transaction ends
	wait.Until(t, 5*time.Second, "OnLost to return", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if _, ok := committed[p1]; ok {
		t.Errorf("lost partition 1 still has its old position: an abort would seek it back below the group's offset")
	}
	if committed[p2] != 7 {
		t.Errorf("partition 2 (not lost) forgotten: %v", committed)
	}
}
