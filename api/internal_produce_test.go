package api_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/proto/batch"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 29: no client writes __consumer_offsets or __transaction_state
// through the public Produce, keyed or keyless, plain or transactional
// (INVALID_TOPIC_EXCEPTION, nothing stored): one keyed record made a
// partition of __consumer_offsets unloadable, and a forged
// __transaction_state record would be applied. The coordinators still
// write them (a commit after the refusals succeeds).
func TestProduceToInternalTopicsRefused(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.TransactionStatePartitions = 1
		c.OffsetsTopicPartitions = 1
	})
	findCoordinator(t, tn.conn, "tx") // creates __transaction_state
	cl := sluicev1.NewTransactionsClient(tn.conn)
	wait.Until(t, 30*time.Second, "a group coordinator", func() bool { // creates __consumer_offsets
		resp, err := cl.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{"g"}})
		return err == nil && resp.Coordinators[0].ErrorCode == sluicev1.ErrorCode_NONE
	})

	build := func(key []byte, attrs uint32, p batch.Producer) []byte {
		var b batch.Builder
		b.Reset(1000)
		b.Add(1000, key, []byte("forged"), nil)
		return b.Finish(p, attrs)
	}
	produce := func(transactionalID, topic string, raw []byte) *sluicev1.PartitionProduceResponse {
		req := &internalv1.ProduceRequestView{TransactionalId: transactionalID, Acks: sluicev1.Acks_ACKS_ALL,
			Topics: []*internalv1.TopicProduceDataView{{Name: topic, Partitions: []*internalv1.PartitionProduceDataView{{Partition: 0, Batch: raw}}}}}
		resp := &sluicev1.ProduceResponse{}
		if err := tn.conn.Invoke(ctx(t), "/sluice.v1.Log/Produce", req, resp); err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	txnBatch := build([]byte("tx"), batch.AttrTransactional, batch.Producer{ID: 1, Epoch: 0, BaseSequence: 0})
	for _, topic := range []string{group.OffsetsTopic, txn.StateTopic} {
		before := tn.fetch(topic, 0, 0, 0).HighWatermark
		for what, pr := range map[string]*sluicev1.PartitionProduceResponse{
			"keyless":       produce("", topic, build(nil, 0, batch.PlainProducer)),
			"keyed":         produce("", topic, build(group.OffsetKey("g", "t", 0), 0, batch.PlainProducer)),
			"public view":   tn.producePublic(topic, 0, build([]byte("tx"), 0, batch.PlainProducer)),
			"transactional": produce("tx", topic, txnBatch),
		} {
			if pr.ErrorCode != sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION || pr.BaseOffset != -1 {
				t.Errorf("%s produce to %s: %v %q at %d, want INVALID_TOPIC_EXCEPTION", what, topic, pr.ErrorCode, pr.ErrorMessage, pr.BaseOffset)
			}
			if want := "topic " + topic + " is internal: only its coordinator writes it"; !strings.Contains(pr.ErrorMessage, want) {
				t.Errorf("%s produce to %s: message %q does not say %q", what, topic, pr.ErrorMessage, want)
			}
		}
		if after := tn.fetch(topic, 0, 0, 0).HighWatermark; after != before {
			t.Errorf("%s: refused produces moved the high watermark from %d to %d", topic, before, after)
		}
	}

	// The group coordinator still writes __consumer_offsets.
	tn.createTopic("t", 1, nil)
	resp, err := sluicev1.NewGroupsClient(tn.conn).OffsetCommit(ctx(t), &sluicev1.OffsetCommitRequest{GroupId: "g", MemberEpoch: -1,
		Topics: []*sluicev1.OffsetCommitTopic{{Name: "t", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != sluicev1.ErrorCode_NONE || resp.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("offset commit after the refusals: %v", resp)
	}
}
