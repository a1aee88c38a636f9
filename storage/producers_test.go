package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func idempotentBatch(id int64, seq int32, n int) []byte {
	var bl batch.Builder
	bl.Reset(t0.UnixMilli())
	for i := 0; i < n; i++ {
		bl.Add(t0.UnixMilli(), nil, []byte(fmt.Sprintf("p%d-%d-payload-payload-payload", id, int(seq)+i)), nil)
	}
	return bl.Finish(batch.Producer{ID: id, Epoch: 0, BaseSequence: seq}, 0)
}

// TestProducerStateSurvivesReopen: after a clean close, after a crash (no
// snapshot at close: rebuilt from the roll snapshots plus the log), and
// with every snapshot deleted or corrupt (a full scan), a retried batch is
// still a duplicate and the next sequence is still expected.
func TestProducerStateSurvivesReopen(t *testing.T) {
	cases := []struct {
		name  string
		after func(t *testing.T, dir string, l *Log)
	}{
		{"clean close", func(t *testing.T, dir string, l *Log) {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"crash", func(t *testing.T, dir string, l *Log) {
			crash(t, l)
			// The crash happened before the close-time snapshot.
			snaps := l.snapshotOffsets()
			if len(snaps) > 0 {
				os.Remove(filepath.Join(dir, SnapshotFileName(snaps[len(snaps)-1])))
			}
		}},
		{"snapshots gone", func(t *testing.T, dir string, l *Log) {
			crash(t, l)
			for _, off := range l.snapshotOffsets() {
				os.Remove(filepath.Join(dir, SnapshotFileName(off)))
			}
		}},
		{"snapshots corrupt", func(t *testing.T, dir string, l *Log) {
			crash(t, l)
			for _, off := range l.snapshotOffsets() {
				os.WriteFile(filepath.Join(dir, SnapshotFileName(off)), []byte("garbage"), 0o644)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, testConfig())
			var last AppendResult
			for seq := int32(0); seq < 300; seq += 3 {
				res, err := l.Append(idempotentBatch(1000, seq, 3), 0, t0)
				if err != nil {
					t.Fatal(err)
				}
				last = res
			}
			if len(l.Segments()) < 3 {
				t.Fatalf("want several segments (rolls write snapshots), got %d", len(l.Segments()))
			}
			if got := l.ProducerCount(); got != 1 {
				t.Fatalf("producer count %d", got)
			}
			tc.after(t, dir, l)
			l2 := openLog(t, dir, testConfig())
			defer l2.Close()
			res, err := l2.Append(idempotentBatch(1000, 297, 3), 0, t0)
			if err != nil || !res.Duplicate || res.BaseOffset != last.BaseOffset {
				t.Fatalf("retry after reopen: %+v %v, want a duplicate at %d", res, err, last.BaseOffset)
			}
			if _, err := l2.Append(idempotentBatch(1000, 301, 1), 0, t0); err == nil {
				t.Fatal("gap accepted after reopen")
			} else {
				wantCode(t, err, sluicev1.ErrorCode_OUT_OF_ORDER_SEQUENCE_NUMBER)
			}
			if res, err := l2.Append(idempotentBatch(1000, 300, 2), 0, t0); err != nil || res.BaseOffset != last.LastOffset+1 {
				t.Fatalf("next batch: %+v %v", res, err)
			}
		})
	}
}

// TestProducerStateFollowsTruncation: truncating the log forgets the
// batches cut, so the producer may send them again.
func TestProducerStateFollowsTruncation(t *testing.T) {
	l := openLog(t, t.TempDir(), testConfig())
	defer l.Close()
	for seq := int32(0); seq < 60; seq += 3 {
		if _, err := l.Append(idempotentBatch(2000, seq, 3), 0, t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.TruncateTo(30); err != nil {
		t.Fatal(err)
	}
	res, err := l.Append(idempotentBatch(2000, 30, 3), 0, t0)
	if err != nil || res.Duplicate || res.BaseOffset != 30 {
		t.Fatalf("re-send after truncation: %+v %v", res, err)
	}
	if err := l.TruncateFullyAndStartAt(100); err != nil {
		t.Fatal(err)
	}
	if l.ProducerCount() != 0 {
		t.Errorf("producers after a full truncation: %d", l.ProducerCount())
	}
}

// TestFollowerAppendsBuildProducerState: AppendVerbatim (a follower)
// records producer state, so a retry sent to it after it becomes leader
// is recognised.
func TestFollowerAppendsBuildProducerState(t *testing.T) {
	leader := openLog(t, t.TempDir(), testConfig())
	defer leader.Close()
	follower := openLog(t, t.TempDir(), testConfig())
	defer follower.Close()
	for seq := int32(0); seq < 15; seq += 3 {
		b := idempotentBatch(3000, seq, 3)
		if _, err := leader.Append(b, 0, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := follower.AppendVerbatim(b, t0); err != nil {
			t.Fatal(err)
		}
	}
	res, err := follower.Append(idempotentBatch(3000, 12, 3), 1, t0)
	if err != nil || !res.Duplicate || res.BaseOffset != 12 {
		t.Fatalf("retry on the new leader: %+v %v", res, err)
	}
}
