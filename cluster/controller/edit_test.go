package controller

import (
	"reflect"
	"testing"
)

// An ImageEditor gives the image the package's Apply gives a deep copy,
// never modifies the image it started from, and shares with it every
// broker, topic and partition the records left alone (issue 31).
func TestImageEditorCopiesOnlyWhatChanges(t *testing.T) {
	base := NewImage()
	var off uint64
	apply := func(r Record) {
		t.Helper()
		off++
		if _, err := Apply(base, r, off); err != nil {
			t.Fatalf("base %T: %v", r, err)
		}
	}
	apply(BootstrapCluster{ClusterID: "c"})
	for id := int32(1); id <= 3; id++ {
		apply(RegisterBroker{BrokerID: id, Address: "h:1", IncarnationID: "i"})
		apply(UnfenceBroker{BrokerID: id, BrokerEpoch: int64(off)})
	}
	assign := func(n int) []PartitionAssignment {
		out := make([]PartitionAssignment, n)
		for i := range out {
			out[i] = PartitionAssignment{Replicas: []int32{int32(i%3 + 1), int32((i+1)%3 + 1)}}
		}
		return out
	}
	apply(CreateTopic{Name: "a", TopicID: "id-a", Partitions: assign(4)})
	apply(CreateTopic{Name: "b", TopicID: "id-b", Partitions: assign(3), Configs: map[string]string{"retention.ms": "1"}})
	apply(scram("alice", ScramSHA256, 1))
	apply(scram("bob", ScramSHA256, 2))
	apply(scram("carol", ScramSHA256, 3))
	readA := acl(ResourceTopic, "a", PatternLiteral, "User:alice", OperationRead, PermissionAllow)
	apply(CreateAcl{Acl: readA})
	frozen := base.Clone()

	pa := base.Topics["a"].Partitions[2]
	records := []Record{
		PartitionChange{Topic: "a", Partition: 2, PartitionEpoch: pa.PartitionEpoch, LeaderEpoch: pa.LeaderEpoch, Leader: NoChange, ISR: pa.ISR[:1]},
		FenceBroker{BrokerID: 3, BrokerEpoch: base.Brokers[3].Epoch},
		OfflineReplicas{BrokerID: 2, BrokerEpoch: base.Brokers[2].Epoch, Replicas: []OfflineReplica{{Topic: "a", TopicID: "id-a", Partition: 1}}},
		ConfigChange{Topic: "b", Key: "retention.ms", Value: "2"},
		ConfigChange{Key: "unclean.leader.election.enable", Value: "true"},
		FeatureLevel{Name: firstFeature(t), Level: 1},
		CreateTopic{Name: "c", TopicID: "id-c", Partitions: assign(2)},
		DeleteTopic{Name: "c"},
		CreatePartitions{Topic: "a", TopicID: "id-a", Partitions: assign(2)},
		TopicConfigs{Topic: "b", TopicID: "id-b", Configs: map[string]string{"retention.ms": "3", "segment.ms": "4"}},
		ProducerIDsBlock{BrokerID: 1, NextBlockStart: base.nextBlockStart()},
		scram("alice", ScramSHA512, 4),
		scram("bob", ScramSHA256, 5),
		RemoveUserScramCredential{User: "carol", Mechanism: ScramSHA256},
		scram("dave", ScramSHA256, 6),
		CreateAcl{Acl: readA}, // already held: no change
		CreateAcl{Acl: acl(ResourceTopic, "b", PatternLiteral, "User:alice", OperationRead, PermissionAllow)},
		RemoveAcl{Acl: readA},
	}
	ed := EditImage(base)
	deep := base.Clone()
	for i, r := range records {
		o := off + uint64(i) + 1
		_, err1 := ed.Apply(r, o)
		_, err2 := Apply(deep, r, o)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("record %d %T: editor %v, deep copy %v", i, r, err1, err2)
		}
	}
	if !reflect.DeepEqual(ed.Image(), deep) {
		t.Fatalf("the edited image differs from the deep copy's:\n%+v\n%+v", ed.Image(), deep)
	}
	if !reflect.DeepEqual(base, frozen) {
		t.Fatal("the edit modified the image it started from")
	}
	got := ed.Image()
	if got.Brokers[1] != base.Brokers[1] || got.Brokers[3] == base.Brokers[3] || got.Brokers[2] == base.Brokers[2] {
		t.Error("brokers: want 1 shared, 2 and 3 (changed) copied")
	}
	if got.Topics["a"] == base.Topics["a"] || got.Topics["a"].Partitions[0] != base.Topics["a"].Partitions[0] ||
		got.Topics["a"].Partitions[2] == base.Topics["a"].Partitions[2] {
		t.Error("topic a: want its partition 2 copied and the others shared")
	}
	if len(got.Topics["a"].Partitions) != 6 || len(base.Topics["a"].Partitions) != 4 {
		t.Errorf("topic a: %d partitions after adding 2 to %d", len(got.Topics["a"].Partitions), len(base.Topics["a"].Partitions))
	}
	if got.Topics["b"] == base.Topics["b"] || got.Topics["b"].Partitions[0] != base.Topics["b"].Partitions[0] {
		t.Error("topic b: want the topic copied (its configs changed) and its partitions shared")
	}
	if _, ok := got.Users["carol"]; ok || len(got.Users["alice"]) != 2 || len(base.Users["alice"]) != 1 {
		t.Errorf("users: %v, from %v", got.Users, base.Users)
	}
	if got.HasAcl(readA) || !base.HasAcl(readA) || len(got.Acls) != 1 || got.AclsVersion != off+uint64(len(records)) {
		t.Errorf("ACLs %v (version %d), from %v", got.AclList(), got.AclsVersion, base.AclList())
	}

	// An edit without ACL records shares the set, and its version.
	ed = EditImage(base)
	if _, err := ed.Apply(CreateAcl{Acl: readA}, base.Offset+1); err != nil {
		t.Fatal(err)
	}
	if _, err := ed.Apply(ConfigChange{Key: "k", Value: "v"}, base.Offset+2); err != nil {
		t.Fatal(err)
	}
	if !sameMap(ed.Image().Acls, base.Acls) || ed.Image().AclsVersion != base.AclsVersion {
		t.Error("an edit that changes no ACL copied the set, or moved its version")
	}
	// Each ACL record alone copies the set before changing it.
	for _, r := range []Record{RemoveAcl{Acl: readA}, CreateAcl{Acl: acl(ResourceGroup, "g", PatternLiteral, "User:bob", OperationRead, PermissionAllow)}} {
		ed = EditImage(base)
		if _, err := ed.Apply(r, base.Offset+1); err != nil {
			t.Fatal(err)
		}
		if sameMap(ed.Image().Acls, base.Acls) || !reflect.DeepEqual(base, frozen) || ed.Image().AclsVersion != base.Offset+1 {
			t.Errorf("%T: the edit changed the set it started from, or did not move the version", r)
		}
	}
}

// sameMap reports whether a and b are the same map (not equal ones).
func sameMap[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func firstFeature(t *testing.T) string {
	for name, max := range SupportedFeatures {
		if max >= 1 {
			return name
		}
	}
	t.Fatal("no feature with a level above 0 to apply")
	return ""
}
