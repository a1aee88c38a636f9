package chaos

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The Kafka workload's topics come after the gRPC workload's, so the
// history's partition numbers of the gRPC topics do not move, and the
// Kafka copier's input and output are among them.
func TestKafkaTopicsFollowTheGRPCWorkloads(t *testing.T) {
	wc := DefaultConfig().Workload
	want := []string{"chaos", "chaos-2", "chaos-out", "chaos-kafka", "chaos-kafka-2", "chaos-kafka-out"}
	if got := wc.Topics(); !slices.Equal(got, want) {
		t.Fatalf("topics %v, want %v", got, want)
	}
	if got := wc.logOf(wc.kafkaCopierInput(), 1); got != 3*wc.Partitions+1 {
		t.Errorf("kafka copier input partition 1 is log %d", got)
	}
	wc.KafkaTxnProducers, wc.KafkaConsumers, wc.KafkaCopierMembers = 0, 0, 0
	if wc.kafkaOn() || slices.Contains(wc.Topics(), "chaos-kafka") {
		t.Errorf("Kafka workload off, yet topics %v", wc.Topics())
	}
	wc.KafkaCopierMembers = 2
	if wc.kafkaCopier() {
		t.Error("a Kafka copier without its input's producers")
	}
}

// Coordinator faults pick among every transactional id of the run.
func TestTransactionalIDsIncludeTheKafkaWorkloads(t *testing.T) {
	got := DefaultConfig().Workload.transactionalIDs()
	want := []string{"chaos-txn-1", "chaos-txn-2", "chaos-txn-3", "chaos-kafka-txn-1", "chaos-kafka-txn-2",
		"chaos-kafka-copier-1", "chaos-kafka-copier-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("transactional ids %v, want %v", got, want)
	}
}

// The watch notices an EndTxn with commit, from the line franz-go logs
// just before sending it, and nothing else: an abort's line, or another
// message, leaves the transaction "commit not sent" (judged aborted).
func TestEndTxnWatchSeesOnlyACommitBeingSent(t *testing.T) {
	var w endTxnWatch
	w.Log(kgo.LogLevelInfo, "ending transaction", "transactional_id", "x", "commit", kgo.TryAbort, "producer_id", int64(1))
	w.Log(kgo.LogLevelInfo, "transaction session ending", "want_commit", true)
	if w.sent.Load() {
		t.Fatal("an abort or another line counted as a commit sent")
	}
	w.Log(kgo.LogLevelInfo, "ending transaction", "transactional_id", "x", "commit", kgo.TryCommit, "producer_id", int64(1))
	if !w.sent.Load() {
		t.Fatal("the commit's line was not noticed")
	}
}

func TestParseGroupProtocol(t *testing.T) {
	for in, want := range map[string]GroupProtocol{"": DefaultGroupProtocol, "consumer": GroupProtocolConsumer, "classic": GroupProtocolClassic,
		"seed": GroupProtocolBySeed} {
		if got, err := ParseGroupProtocol(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseGroupProtocol("eager"); err == nil {
		t.Error("eager accepted")
	}
}

// The default picks the protocol by the seed, so random seeds run both;
// an explicit protocol stays.
func TestResolveGroupProtocol(t *testing.T) {
	for _, c := range []struct {
		p    GroupProtocol
		seed uint64
		want GroupProtocol
	}{
		{GroupProtocolBySeed, 20261202, GroupProtocolConsumer},
		{GroupProtocolBySeed, 51, GroupProtocolClassic},
		{GroupProtocolClassic, 2, GroupProtocolClassic},
		{GroupProtocolConsumer, 3, GroupProtocolConsumer},
	} {
		if got := ResolveGroupProtocol(c.p, c.seed); got != c.want {
			t.Errorf("%s with seed %d: %s, want %s", c.p, c.seed, got, c.want)
		}
	}
}
