package controller

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func TestRecordRoundTrip(t *testing.T) {
	recs := []Record{
		RegisterBroker{BrokerID: 1, Address: "a:1", Rack: "r1", IncarnationID: "i"},
		FenceBroker{BrokerID: 1, BrokerEpoch: 7},
		UnfenceBroker{BrokerID: 1, BrokerEpoch: 7},
		CreateTopic{Name: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2}}}, Configs: map[string]string{"k": "v"}},
		DeleteTopic{Name: "t"},
		PartitionChange{Topic: "t", Partition: 3, PartitionEpoch: 4, LeaderEpoch: 5, Leader: NoChange, ISR: []int32{1}, Replicas: []int32{1, 2}},
		PartitionChange{Topic: "t", Leader: NoChange, Replicas: []int32{1, 2, 3}, AddingReplicas: []int32{1}, RemovingReplicas: []int32{3}},
		PartitionChange{Topic: "t", Leader: 2, ISR: []int32{2}, Replicas: []int32{2}, ClearReassignment: true},
		ProducerIDsBlock{BrokerID: 2, NextBlockStart: 5000},
		FeatureLevel{Name: FeatureTransactionVersion, Level: 2},
		ConfigChange{Topic: "t", Key: "k", Value: "v"},
		DeleteTopic{},
		BootstrapCluster{ClusterID: "c1"},
	}
	for i, r := range recs {
		t.Run(fmt.Sprintf("%d-%s", i, r.Type()), func(t *testing.T) {
			data, err := EncodeRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			prefix := `{"type":"` + string(r.Type()) + `","version":1`
			if !strings.HasPrefix(string(data), prefix) {
				t.Errorf("encoding %s does not start with %s", data, prefix)
			}
			got, err := DecodeRecord(data)
			if err != nil {
				t.Fatalf("decode %s: %v", data, err)
			}
			if !reflect.DeepEqual(got, r) {
				t.Errorf("round trip of %s = %#v, want %#v", data, got, r)
			}
		})
	}
}

func TestRecordEncodingIsStable(t *testing.T) {
	data, err := EncodeRecord(FenceBroker{BrokerID: 2, BrokerEpoch: 17})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"FenceBroker","version":1,"broker_id":2,"broker_epoch":17}`; string(data) != want {
		t.Errorf("encoding = %s, want %s", data, want)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	for _, in := range []string{
		``, `{`, `[]`,
		`{"type":"FenceBroker","version":2,"broker_id":1}`,
		`{"type":"FenceBroker","broker_id":1}`,
		`{"type":"Nope","version":1}`,
		`{"type":"FenceBroker","version":1,"broker_id":"x"}`,
	} {
		if _, err := DecodeRecord([]byte(in)); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
			t.Errorf("DecodeRecord(%q) err = %v, want INVALID_REQUEST", in, err)
		}
	}
}

// The reassignment fields were added to PartitionChange version 1 as
// optional fields: a record written before them decodes exactly as it did
// (no reassignment fields set, which keeps the partition's reassignment),
// and a record without reassignment encodes without them.
func TestPartitionChangeVersion1StaysReadable(t *testing.T) {
	old := `{"type":"PartitionChange","version":1,"topic":"t","partition":0,"partition_epoch":2,"leader_epoch":1,"leader":-2,"isr":[1,2]}`
	got, err := DecodeRecord([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	want := PartitionChange{Topic: "t", PartitionEpoch: 2, LeaderEpoch: 1, Leader: NoChange, ISR: []int32{1, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %#v, want %#v", got, want)
	}
	data, err := EncodeRecord(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != old {
		t.Errorf("encoding = %s, want the old encoding %s", data, old)
	}
}
