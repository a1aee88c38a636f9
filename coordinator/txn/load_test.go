package txn

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A new leader rebuilds the same state by replaying the records: the
// vectors' traces, interleaved, and cut after a Prepare* (markers owed).
func TestReplayRebuildsTheState(t *testing.T) {
	var records [][2][]byte
	for _, name := range []string{"trace-commit_abort_commit.golden", "trace-fencing.golden"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
			k, v, ok := bytes.Cut(line, []byte("\t"))
			if !ok {
				t.Fatalf("bad line %q", line)
			}
			records = append(records, [2][]byte{k, v})
		}
	}
	txns := map[string]*Metadata{}
	for _, r := range records {
		if err := Replay(txns, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(txns) != 2 || txns["u12-txn"].State != CompleteCommit || txns["u12-txn"].ProducerEpoch != 3 ||
		txns["u12-fence"].State != CompleteCommit || txns["u12-fence"].ProducerEpoch != 3 {
		t.Fatalf("replayed %+v %+v", txns["u12-txn"], txns["u12-fence"])
	}

	// Cut after u12-txn's third record (PrepareCommit, epoch 1).
	cut := map[string]*Metadata{}
	for _, r := range records[:3] {
		if err := Replay(cut, r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	if m := cut["u12-txn"]; !m.PendingMarkers() || !m.Commit() || m.ProducerEpoch != 1 || len(m.Partitions) != 1 {
		t.Fatalf("after the cut: %+v", m)
	}

	// A tombstone removes the id; a bad record changes nothing.
	if err := Replay(txns, []byte("u12-txn"), nil); err != nil || txns["u12-txn"] != nil {
		t.Fatalf("tombstone: %v, %+v", err, txns["u12-txn"])
	}
	before := *txns["u12-fence"]
	if err := Replay(txns, []byte("u12-fence"), []byte(`{"version":9}`)); !errors.Is(err, ErrNewerRecordVersion) {
		t.Fatalf("newer record: %v", err)
	}
	if txns["u12-fence"].State != before.State || txns["u12-fence"].ProducerEpoch != before.ProducerEpoch {
		t.Fatal("a refused record changed the state")
	}
}
