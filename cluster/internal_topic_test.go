package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 29: producers never write internal topics, keyed or keyless,
// plain or transactional (INVALID_TOPIC_EXCEPTION, nothing stored); the
// coordinators still do, through AppendCommitted and AppendCoordinatorTxn.
func TestProducersCannotWriteInternalTopics(t *testing.T) {
	now := time.Unix(5000, 0)
	m := newManager(t, t.TempDir(), 1)
	f := &fakeVerifier{}
	m.SetTxnVerifier(f)
	applyImage(t, m, newImage(t, "c1").
		apply(createTopic("__consumer_offsets", "id-o", []int32{1})).
		apply(createTopic("__transaction_state", "id-t", []int32{1})).snapshot(), now)

	keyed := func(attrs uint32, p batch.Producer) []byte {
		var b batch.Builder
		b.Reset(1000)
		b.Add(1000, []byte("k"), []byte("v"), nil)
		return b.Finish(p, attrs)
	}
	for _, name := range []string{"__consumer_offsets", "__transaction_state"} {
		p, err := m.Replica(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		for what, produce := range map[string]func() error{
			"keyless": func() error { _, err := m.Append(name, 0, plainBatch(1), now); return err },
			"keyed":   func() error { _, err := m.Append(name, 0, keyed(0, batch.PlainProducer), now); return err },
			"transactional": func() error {
				_, err := m.AppendTxnTo(testCtx(t), p, "tx", keyed(batch.AttrTransactional, batch.Producer{ID: 5, Epoch: 0, BaseSequence: 0}), now, true)
				return err
			},
		} {
			err := produce()
			wantCode(t, name+" "+what, err, sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION)
			if want := "topic " + name + " is internal: only its coordinator writes it"; !strings.Contains(err.Error(), want) {
				t.Errorf("%s %s: %q does not say %q", name, what, err, want)
			}
		}
		if end := p.LogEndOffset(); end != 0 {
			t.Fatalf("%s: refused produces wrote to the log (end %d)", name, end)
		}
		if f.callCount() != 0 {
			t.Fatalf("%s: the coordinator was asked to verify a refused batch", name)
		}
		// The coordinator's own path.
		if _, err := m.AppendCommitted(testCtx(t), TopicPartition{Topic: name, Partition: 0}, keyed(0, batch.PlainProducer), NoLeaderEpoch, now); err != nil {
			t.Fatalf("%s: coordinator append: %v", name, err)
		}
	}
	// The group coordinator's offsets of a transaction (TxnOffsetCommit).
	res, err := m.AppendCoordinatorTxn(testCtx(t), TopicPartition{Topic: "__consumer_offsets", Partition: 0}, 0, "tx", 5, 0, false, func(seq int32) []byte {
		return keyed(batch.AttrTransactional, batch.Producer{ID: 5, Epoch: 0, BaseSequence: seq})
	}, now)
	if err != nil || res.BaseOffset != 1 {
		t.Fatalf("AppendCoordinatorTxn: %+v %v, want offset 1", res, err)
	}
}
