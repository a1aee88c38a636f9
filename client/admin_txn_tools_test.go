package client

import (
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// KIP-664's find-hanging rule: an open transaction is hanging unless a
// transactional id has its producer open at its epoch (TV2: Prepare* at
// epoch + 1) with its partition, and it is never older than the maximum
// timeout.
func TestJudgeOpenTellsOwnedFromHanging(t *testing.T) {
	o := OpenTransaction{Topic: "t", Partition: 1, ProducerID: 9, ProducerEpoch: 4, Duration: time.Minute}
	st := func(state string, pid int64, epoch, last int32, parts ...int32) *sluicev1.TransactionState {
		return &sluicev1.TransactionState{TransactionalId: "x", State: state, ProducerId: pid, ProducerEpoch: epoch, LastProducerEpoch: last,
			Topics: []*sluicev1.TxnTopic{{Name: "t", Partitions: parts}}}
	}
	for _, tc := range []struct {
		name    string
		states  []*sluicev1.TransactionState
		max     time.Duration
		hanging bool
		reason  string
	}{
		{"unknown producer", nil, time.Hour, true, "no coordinator knows"},
		{"ongoing with the partition", []*sluicev1.TransactionState{st("Ongoing", 9, 4, -1, 1)}, time.Hour, false, ""},
		{"ongoing without the partition", []*sluicev1.TransactionState{st("Ongoing", 9, 4, -1, 0)}, time.Hour, true, "not open at epoch 4"},
		{"ongoing at a later epoch", []*sluicev1.TransactionState{st("Ongoing", 9, 6, 5, 1)}, time.Hour, true, "not open at epoch 4"},
		{"prepare abort at epoch + 1", []*sluicev1.TransactionState{st("PrepareAbort", 9, 5, 4, 1)}, time.Hour, false, ""},
		{"complete abort", []*sluicev1.TransactionState{st("CompleteAbort", 9, 5, 4)}, time.Hour, true, "CompleteAbort"},
		{"owned but older than the max timeout", []*sluicev1.TransactionState{st("Ongoing", 9, 4, -1, 1)}, time.Second, true, "longer than the maximum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, hanging := judgeOpen(o, tc.states, tc.max)
			if hanging != tc.hanging || !strings.Contains(h.Reason, tc.reason) {
				t.Errorf("judgeOpen = %v, %q; want %v with %q", hanging, h.Reason, tc.hanging, tc.reason)
			}
		})
	}
}
