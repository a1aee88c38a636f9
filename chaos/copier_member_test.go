package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/sluice-io/sluice/chaos/checker"
	"github.com/sluice-io/sluice/client"
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
