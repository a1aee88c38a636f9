package controller

import (
	"encoding/json"
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
		RegisterBroker{BrokerID: 1, Address: "a:1", InternalAddress: "a:2", IncarnationID: "i"},
		RegisterBroker{BrokerID: 1, Address: "a:1", InternalAddress: "a:2", KafkaAddress: "a:9092", IncarnationID: "i"},
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
		UserScramCredential{User: "u", Mechanism: ScramSHA512, Iterations: 4096, Salt: []byte{1}, StoredKey: []byte{2}, ServerKey: []byte{3}},
		RemoveUserScramCredential{User: "u", Mechanism: ScramSHA512},
		CreateAcl{Acl: acl(ResourceTopic, "t", PatternLiteral, "User:u", OperationRead, PermissionAllow)},
		RemoveAcl{Acl: acl(ResourceGroup, "g-", PatternPrefixed, "User:*", OperationAll, PermissionDeny)},
		ClientQuota{Entity: QuotaEntity{User: QuotaName{Name: "u"}, ClientID: QuotaName{Default: true}},
			Ops: []QuotaOp{{Key: QuotaProducerByteRate, Value: 1024}, {Key: QuotaConsumerByteRate, Remove: true}}},
		CreatePartitions{Topic: "t", TopicID: "id", Partitions: []PartitionAssignment{{Replicas: []int32{2, 1}}, {Replicas: []int32{1, 2}}}},
		TopicConfigs{Topic: "t", TopicID: "id", Configs: map[string]string{"retention.ms": "1000"}},
		TopicConfigs{Topic: "t", TopicID: "id"},
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

// Decision 41: the internal address was added to RegisterBroker version 1
// as an optional field. A registration logged before it (and an image
// snapshot built from one) decodes with no internal address, the broker is
// then dialled at its one address, and encodes exactly as it did; the next
// registration of the same incarnation with an internal address moves the
// inter-node traffic there.
func TestRegisterBrokerWithoutInternalAddressFallsBack(t *testing.T) {
	old := `{"type":"RegisterBroker","version":1,"broker_id":3,"address":"h3:9400","incarnation_id":"i"}`
	rec, err := DecodeRecord([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if want := (RegisterBroker{BrokerID: 3, Address: "h3:9400", IncarnationID: "i"}); !reflect.DeepEqual(rec, want) {
		t.Fatalf("decoded %#v, want %#v", rec, want)
	}
	if data, err := EncodeRecord(rec); err != nil || string(data) != old {
		t.Errorf("encoding = %s, %v; want the old encoding %s", data, err, old)
	}
	im := NewImage()
	if _, err := Apply(im, rec, 1); err != nil {
		t.Fatal(err)
	}
	if b := im.Brokers[3]; b.InternalAddress != "" || b.InterBrokerAddress() != "h3:9400" {
		t.Fatalf("old registration: internal %q, dialled at %q; want none, h3:9400", b.InternalAddress, b.InterBrokerAddress())
	}

	// An image snapshot written before the field.
	snap, err := json.Marshal(im)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(snap), "internal_address") {
		t.Errorf("snapshot %s names an internal address the broker never registered", snap)
	}
	var back Image
	if err := json.Unmarshal(snap, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Brokers[3].InterBrokerAddress(); got != "h3:9400" {
		t.Errorf("broker of a decoded old snapshot dialled at %q, want h3:9400", got)
	}

	// The same incarnation registering again, now with an internal
	// listener, keeps its epoch and is dialled there.
	epoch := im.Brokers[3].Epoch
	if _, err := Apply(im, RegisterBroker{BrokerID: 3, Address: "h3:9400", InternalAddress: "h3:9404", IncarnationID: "i"}, 2); err != nil {
		t.Fatal(err)
	}
	if b := im.Brokers[3]; b.Epoch != epoch || b.Address != "h3:9400" || b.InterBrokerAddress() != "h3:9404" {
		t.Errorf("re-registration: %+v, want epoch %d, client address h3:9400, dialled at h3:9404", b, epoch)
	}
}

// Issue 34: the Kafka listener's address was added to RegisterBroker
// version 1 as an optional field, as the internal address was. A
// registration without it (logged before it, or from a broker without a
// Kafka listener) decodes and encodes as before and leaves the broker
// without a Kafka address; one with it carries it into the image, through
// a snapshot and its restore, and a re-registration of the same
// incarnation updates it (keeping the epoch) as it does the other
// addresses.
func TestRegisterBrokerKafkaAddress(t *testing.T) {
	old := `{"type":"RegisterBroker","version":1,"broker_id":3,"address":"h3:9400","internal_address":"h3:9404","incarnation_id":"i"}`
	rec, err := DecodeRecord([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := EncodeRecord(rec); err != nil || string(data) != old {
		t.Errorf("encoding = %s, %v; want the old encoding %s", data, err, old)
	}
	im := NewImage()
	if _, err := Apply(im, rec, 1); err != nil {
		t.Fatal(err)
	}
	if b := im.Brokers[3]; b.KafkaAddress != "" {
		t.Fatalf("registration without a Kafka address: broker has %q", b.KafkaAddress)
	}
	snap, err := EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(snap), "kafka_address") {
		t.Errorf("snapshot %s names a Kafka address the broker never registered", snap)
	}

	epoch := im.Brokers[3].Epoch
	if _, err := Apply(im, RegisterBroker{BrokerID: 3, Address: "h3:9400", InternalAddress: "h3:9404", KafkaAddress: "h3:9092", IncarnationID: "i"}, 2); err != nil {
		t.Fatal(err)
	}
	if b := im.Brokers[3]; b.Epoch != epoch || b.KafkaAddress != "h3:9092" || b.InterBrokerAddress() != "h3:9404" {
		t.Fatalf("re-registration with a Kafka address: %+v, want epoch %d, Kafka address h3:9092", b, epoch)
	}
	// A new incarnation registers its own (here: none, its listener off).
	if _, err := Apply(im, RegisterBroker{BrokerID: 3, Address: "h3:9400", InternalAddress: "h3:9404", IncarnationID: "j"}, 3); err != nil {
		t.Fatal(err)
	}
	if b := im.Brokers[3]; b.KafkaAddress != "" {
		t.Fatalf("new incarnation without a Kafka listener still has Kafka address %q", b.KafkaAddress)
	}
	if _, err := Apply(im, RegisterBroker{BrokerID: 4, Address: "h4:9400", KafkaAddress: "h4:9092", IncarnationID: "k"}, 4); err != nil {
		t.Fatal(err)
	}
	snap, err = EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Brokers[4].KafkaAddress; got != "h4:9092" {
		t.Errorf("Kafka address after snapshot and restore: %q, want h4:9092", got)
	}
	if !reflect.DeepEqual(back, im.Clone()) {
		t.Errorf("restored image differs from the snapshotted one:\n%+v\n%+v", back.Brokers, im.Brokers)
	}
}
