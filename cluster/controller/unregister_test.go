package controller

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// withPhantom is withTopic (brokers 1..3, t-0 on 1,2,3) plus broker 9,
// registered at offset 8 and never unfenced: a registration nobody runs.
func withPhantom() []Record {
	return append(withTopic(), RegisterBroker{BrokerID: 9, Address: "b1:9404", IncarnationID: "phantom"})
}

// UnregisterBroker (issue 28, KIP-631): a fenced broker that hosts no
// replica is removed at its current epoch; everything else is refused and
// leaves the image as it was.
func TestApplyUnregisterBrokerRules(t *testing.T) {
	cases := []struct {
		name  string
		setup []Record
		rec   UnregisterBroker
		code  sluicev1.ErrorCode // NONE = accepted
		msg   string             // in the refusal's message
	}{
		{name: "a fenced broker with no replicas is removed", setup: withPhantom(),
			rec: UnregisterBroker{BrokerID: 9, BrokerEpoch: 8}},
		{name: "an unknown id", setup: withPhantom(), rec: UnregisterBroker{BrokerID: 7, BrokerEpoch: 8},
			code: sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED, msg: "broker 7 is not registered"},
		{name: "a stale epoch (the broker registered again since)",
			setup: append(withPhantom(), RegisterBroker{BrokerID: 9, Address: "b9:9400", IncarnationID: "again"}),
			rec:   UnregisterBroker{BrokerID: 9, BrokerEpoch: 8}, code: sluicev1.ErrorCode_STALE_BROKER_EPOCH},
		{name: "an unfenced broker", setup: append(withPhantom(), UnfenceBroker{BrokerID: 9, BrokerEpoch: 8}),
			rec: UnregisterBroker{BrokerID: 9, BrokerEpoch: 8}, code: sluicev1.ErrorCode_INVALID_REQUEST, msg: "is live"},
		{name: "a fenced broker that is still a replica",
			setup: append(withPhantom(), FenceBroker{BrokerID: 3, BrokerEpoch: 3},
				CreateTopic{Name: "u", TopicID: "id-u", Partitions: []PartitionAssignment{{Replicas: []int32{3, 1}}, {Replicas: []int32{1, 2}}}}),
			rec: UnregisterBroker{BrokerID: 3, BrokerEpoch: 3}, code: sluicev1.ErrorCode_INVALID_REQUEST,
			msg: "still a replica of 2 partitions; move them to other brokers first (sluice topic reassign)"},
		{name: "a broker a running reassignment adds",
			setup: append(withPhantom(), UnfenceBroker{BrokerID: 9, BrokerEpoch: 8},
				PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 9, 3}, AddingReplicas: []int32{9}, RemovingReplicas: []int32{3}},
				FenceBroker{BrokerID: 9, BrokerEpoch: 8}),
			rec: UnregisterBroker{BrokerID: 9, BrokerEpoch: 8}, code: sluicev1.ErrorCode_INVALID_REQUEST, msg: "still a replica of 1 partition;"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			im := build(t, tc.setup...)
			before := im.Clone()
			_, err := Apply(im, tc.rec, im.Offset+1)
			if got := errs.Code(err); got != tc.code {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
			}
			if !strings.Contains(errs.Message(err), tc.msg) {
				t.Errorf("message %q lacks %q", errs.Message(err), tc.msg)
			}
			if tc.code != sluicev1.ErrorCode_NONE {
				if !reflect.DeepEqual(im, before) {
					t.Errorf("a refused record changed the image")
				}
				return
			}
			if _, ok := im.Brokers[tc.rec.BrokerID]; ok {
				t.Errorf("broker %d is still registered", tc.rec.BrokerID)
			}
			if len(im.Brokers) != len(before.Brokers)-1 || !reflect.DeepEqual(im.Topics, before.Topics) {
				t.Errorf("the removal changed more than the one broker: %+v", im)
			}
			// The removal survives a snapshot, and the id can register anew.
			data, err := EncodeSnapshot(im)
			if err != nil {
				t.Fatal(err)
			}
			back, err := DecodeSnapshot(data)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := back.Brokers[tc.rec.BrokerID]; ok || !reflect.DeepEqual(back, im.Clone()) {
				t.Errorf("snapshot round trip: %+v", back)
			}
			res, err := Apply(im, RegisterBroker{BrokerID: tc.rec.BrokerID, Address: "b9:9400", IncarnationID: "new"}, im.Offset+1)
			if err != nil || res.BrokerEpoch != int64(im.Offset) || !im.Brokers[tc.rec.BrokerID].Fenced {
				t.Errorf("registering again: %+v %v", res, err)
			}
		})
	}
}

func TestUnregisterBrokerRecordRoundTrip(t *testing.T) {
	data, err := EncodeRecord(UnregisterBroker{BrokerID: 9, BrokerEpoch: 8})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"UnregisterBroker","version":1,"broker_id":9,"broker_epoch":8}`; string(data) != want {
		t.Fatalf("encoding %s, want %s", data, want)
	}
	got, err := DecodeRecord(data)
	if err != nil || got != (UnregisterBroker{BrokerID: 9, BrokerEpoch: 8}) {
		t.Fatalf("decoded %#v, %v", got, err)
	}
}

// Heard: a broker counts as alive for a session timeout after its last
// heartbeat of its current epoch, or after its session started (this
// controller's election, or its registration first seen), and always
// while the tracker has no session of its epoch.
func TestLivenessHeard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	im := build(t, withPhantom()...)
	l := NewLiveness(2*time.Second, 400*time.Millisecond)
	if !l.Heard(9, 8, t0) {
		t.Error("no session yet: not heard")
	}
	l.Reset(im, t0)
	for _, tc := range []struct {
		at    time.Duration
		epoch int64
		want  bool
	}{{0, 8, true}, {1999 * time.Millisecond, 8, true}, {2 * time.Second, 8, false}, {3 * time.Second, 12, true}} {
		if got := l.Heard(9, tc.epoch, t0.Add(tc.at)); got != tc.want {
			t.Errorf("Heard(9, epoch %d) at +%v = %v, want %v", tc.epoch, tc.at, got, tc.want)
		}
	}
	l.Heartbeat(9, 8, t0.Add(5*time.Second))
	if !l.Heard(9, 8, t0.Add(6*time.Second)) || l.Heard(9, 8, t0.Add(7*time.Second)) {
		t.Error("a heartbeat at +5s: want heard until +7s")
	}
}
