package controller

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 28 (decision 42 when no failover is possible): a partition left
// without a leader because the log of every ISR member failed on its
// broker's disk is offline for storage (KAFKA_STORAGE_ERROR naming the
// brokers, directories and OS errors); one whose ISR has a fenced or
// healthy member, or that has a leader, is not (LEADER_NOT_AVAILABLE or
// served).
func TestStorageOfflineOnlyWhenEveryISRMemberFailedOnDisk(t *testing.T) {
	const path1 = "/data/logs/t-0"
	cases := []struct {
		name    string
		log     []Record
		brokers []int32 // StorageOffline's brokers; nil: not offline for storage
		message []string
		// asIs: the image as the log leaves it, before the controller's
		// re-election (which keeps one failed ISR member only).
		asIs bool
	}{
		{name: "only ISR member offline: offline for storage",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0)),
			brokers: []int32{1},
			message: []string{"partition t-0 is offline: broker 1's log directory " + path1 + " failed: write " + path1 + "/x.log: input/output error",
				"fix the disk and restart broker 1"}},
		{name: "leader offline with other ISR members: the leadership moves",
			log: append(withTopic(), offline(1, 1, 0))},
		{name: "every replica offline: the remembered ISR member is named",
			log:     append(withTopic(), offline(1, 1, 0), offline(2, 2, 0), offline(3, 3, 0)),
			brokers: []int32{1}},
		{name: "another partition offline on the only ISR member: not this one",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 5))},
		{name: "only ISR member fenced, no disk failure: no leader, not storage",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				FenceBroker{BrokerID: 1, BrokerEpoch: 1})},
		{name: "only ISR member offline, then its broker fenced (stopping, restarting): not storage",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0), FenceBroker{BrokerID: 1, BrokerEpoch: 1})},
		{name: "only ISR member offline, then its broker registers again: not storage",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoChange, ISR: []int32{1}},
				offline(1, 1, 0), PartitionChange{Topic: "t", PartitionEpoch: 1, Leader: NoLeader},
				RegisterBroker{BrokerID: 1, Address: "b1:9400", IncarnationID: "inc-1-restarted"})},
		{name: "two ISR members, both offline, no leader: both named",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoLeader, ISR: []int32{1, 2}},
				offline(1, 1, 0), offline(2, 2, 0)),
			asIs:    true,
			brokers: []int32{1, 2},
			message: []string{"broker 1's log directory " + path1 + " failed", ", and broker 2's log directory " + path1 + " failed",
				"they were the only in-sync replicas"}},
		{name: "two ISR members, one offline, one fenced: not storage",
			log: append(withTopic(), PartitionChange{Topic: "t", Leader: NoLeader, ISR: []int32{1, 2}},
				offline(1, 1, 0), FenceBroker{BrokerID: 2, BrokerEpoch: 2})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.log...)
			// Converge as the controller does after each report.
			for i, c := range ReelectChanges(im) {
				if tc.asIs {
					break
				}
				if _, err := Apply(im, c, im.Offset+1); err != nil {
					t.Fatalf("change %d %+v rejected: %v", i, c, err)
				}
			}
			brokers, reports := im.StorageOffline("t", 0)
			if !reflect.DeepEqual(brokers, tc.brokers) || len(reports) != len(brokers) {
				t.Fatalf("StorageOffline = %v, %+v; want brokers %v (partition %+v)", brokers, reports, tc.brokers, im.Partition("t", 0))
			}
			err := im.StorageOfflineError("t", 0)
			if tc.brokers == nil {
				if err != nil {
					t.Errorf("StorageOfflineError = %v, want nil", err)
				}
				return
			}
			if errs.Code(err) != sluicev1.ErrorCode_KAFKA_STORAGE_ERROR {
				t.Fatalf("StorageOfflineError = %v, want KAFKA_STORAGE_ERROR", err)
			}
			for _, m := range tc.message {
				if !strings.Contains(errs.Message(err), m) {
					t.Errorf("message %q lacks %q", errs.Message(err), m)
				}
			}
		})
	}
	im := build(t, withTopic()...)
	if b, _ := im.StorageOffline("missing", 0); b != nil {
		t.Errorf("unknown topic: %v", b)
	}
	if b, _ := im.StorageOffline("t", 7); b != nil {
		t.Errorf("unknown partition: %v", b)
	}
}
