package controller

import (
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestCheckAlterPartition(t *testing.T) {
	// Topic "t" partition 0: replicas 1,2,3, leader 1, ISR 1,2,3, epochs 0/0;
	// brokers 1..3 at epochs 1..3.
	base := func() *Image { return build(t, withTopic()...) }
	req := func(mod func(r *AlterPartitionRequest)) AlterPartitionRequest {
		r := AlterPartitionRequest{BrokerID: 1, BrokerEpoch: 1, Topic: "t", NewISR: []int32{1, 2}}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	cases := []struct {
		name  string
		setup func(im *Image)
		req   AlterPartitionRequest
		code  sluicev1.ErrorCode
	}{
		{name: "shrink", req: req(nil)},
		{name: "expand back", setup: func(im *Image) { im.Topics["t"].Partitions[0].ISR = []int32{1} },
			req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{1, 3} })},
		{name: "stale broker epoch", req: req(func(r *AlterPartitionRequest) { r.BrokerEpoch = 0 }), code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},
		{name: "unknown partition", req: req(func(r *AlterPartitionRequest) { r.Partition = 4 }), code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "not the leader", req: req(func(r *AlterPartitionRequest) { r.BrokerID, r.BrokerEpoch = 2, 2 }), code: sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER},
		{name: "stale leader epoch", setup: func(im *Image) { im.Topics["t"].Partitions[0].LeaderEpoch = 3 },
			req: req(func(r *AlterPartitionRequest) { r.LeaderEpoch = 2 }), code: sluicev1.ErrorCode_FENCED_LEADER_EPOCH},
		{name: "future leader epoch", req: req(func(r *AlterPartitionRequest) { r.LeaderEpoch = 1 }), code: sluicev1.ErrorCode_UNKNOWN_LEADER_EPOCH},
		{name: "stale partition epoch", setup: func(im *Image) { im.Topics["t"].Partitions[0].PartitionEpoch = 4 },
			req: req(func(r *AlterPartitionRequest) { r.PartitionEpoch = 3 }), code: sluicev1.ErrorCode_INVALID_UPDATE_VERSION},
		{name: "ISR without the leader", req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{2, 3} }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "ISR with a non-replica", req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{1, 4} }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "ISR with a duplicate", req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{1, 1} }), code: sluicev1.ErrorCode_INVALID_REQUEST},
		{name: "adding a fenced replica", setup: func(im *Image) {
			im.Topics["t"].Partitions[0].ISR = []int32{1}
			im.Brokers[3].Fenced = true
		}, req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{1, 3} }), code: sluicev1.ErrorCode_INELIGIBLE_REPLICA},
		{name: "keeping a fenced replica is allowed", setup: func(im *Image) { im.Brokers[3].Fenced = true },
			req: req(func(r *AlterPartitionRequest) { r.NewISR = []int32{1, 3} })},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := base()
			if tc.setup != nil {
				tc.setup(im)
			}
			pc, err := CheckAlterPartition(im, tc.req)
			if errs.Code(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", errs.Code(err), err, tc.code)
			}
			if err != nil {
				return
			}
			p := im.Topics["t"].Partitions[0]
			want := PartitionChange{Topic: "t", PartitionEpoch: p.PartitionEpoch, LeaderEpoch: p.LeaderEpoch, Leader: NoChange, ISR: tc.req.NewISR}
			if !reflect.DeepEqual(pc, want) {
				t.Fatalf("change %+v, want %+v", pc, want)
			}
			// The change applies cleanly and bumps only the partition epoch.
			if _, err := Apply(im, pc, im.Offset+1); err != nil {
				t.Fatalf("apply: %v", err)
			}
			if q := im.Topics["t"].Partitions[0]; q.PartitionEpoch != want.PartitionEpoch+1 || q.LeaderEpoch != want.LeaderEpoch || q.Leader != 1 {
				t.Errorf("after apply: %+v", q)
			}
		})
	}
}
