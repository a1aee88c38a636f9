package controller

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A TopicConfigs record replaces the configs of the topic it names, by
// id, whole; anything else leaves the image as it was.
func TestApplyTopicConfigsRules(t *testing.T) {
	setup := append(threeBrokers(), CreateTopic{Name: "t", TopicID: "id-t", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2}}},
		Configs: map[string]string{"retention.ms": "1", "min.insync.replicas": "2"}})
	cases := []struct {
		name string
		rec  TopicConfigs
		code sluicev1.ErrorCode
	}{
		{name: "replaced whole", rec: TopicConfigs{Topic: "t", TopicID: "id-t", Configs: map[string]string{"segment.ms": "5"}}},
		{name: "emptied", rec: TopicConfigs{Topic: "t", TopicID: "id-t"}},
		{name: "unknown topic", rec: TopicConfigs{Topic: "u", TopicID: "id-t"}, code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "the topic was re-created since", rec: TopicConfigs{Topic: "t", TopicID: "id-old"}, code: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION},
		{name: "an empty key", rec: TopicConfigs{Topic: "t", TopicID: "id-t", Configs: map[string]string{"": "x"}}, code: sluicev1.ErrorCode_INVALID_CONFIG},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			im := build(t, setup...)
			before := im.Clone()
			_, err := Apply(im, c.rec, im.Offset+1)
			if errs.Code(err) != c.code {
				t.Fatalf("err = %v, want %v", err, c.code)
			}
			if c.code != sluicev1.ErrorCode_NONE {
				before.Offset = im.Offset
				if !reflect.DeepEqual(im, before) {
					t.Error("a refused record changed the image")
				}
				return
			}
			if got := im.Topics["t"].Configs; !maps.Equal(got, c.rec.Configs) {
				t.Errorf("configs %v, want %v", got, c.rec.Configs)
			}
		})
	}
}

// planTopicConfigs runs each topic's edit on a copy of its configs and
// its replication factor, fills in the cluster's min.insync.replicas
// when the edit removed it, proposes nothing for an edit that changes
// nothing, and refuses an unknown topic, a topic named twice and what
// the edit refuses.
func TestPlanTopicConfigs(t *testing.T) {
	im := build(t, append(threeBrokers(),
		CreateTopic{Name: "a", TopicID: "id-a", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2}}}, Configs: map[string]string{"min.insync.replicas": "2", "retention.ms": "1"}},
		CreateTopic{Name: "b", TopicID: "id-b", Partitions: []PartitionAssignment{{Replicas: []int32{1, 2, 3}}}, Configs: map[string]string{"min.insync.replicas": "3"}})...)
	var seenRF int32
	set := func(k, v string) func(map[string]string, int32) (map[string]string, error) {
		return func(m map[string]string, rf int32) (map[string]string, error) {
			seenRF = rf
			m[k] = v
			return m, nil
		}
	}
	del := func(k string) func(map[string]string, int32) (map[string]string, error) {
		return func(m map[string]string, rf int32) (map[string]string, error) {
			delete(m, k)
			return m, nil
		}
	}
	refuse := func(map[string]string, int32) (map[string]string, error) {
		return nil, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "no")
	}
	d := TopicDefaults{ReplicationFactor: 3, MinInsyncReplicas: 2}
	per, recs, recordOf := planTopicConfigs(im, d, []TopicConfigEdit{
		{"a", set("retention.ms", "7")},
		{"b", del("min.insync.replicas")},
		{"a", set("segment.ms", "1")},
		{"nope", set("retention.ms", "1")},
	})
	if per[0] != nil || per[1] != nil || errs.Code(per[2]) != sluicev1.ErrorCode_INVALID_REQUEST || errs.Code(per[3]) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("outcomes %v", per)
	}
	want := []Record{
		TopicConfigs{Topic: "a", TopicID: "id-a", Configs: map[string]string{"min.insync.replicas": "2", "retention.ms": "7"}},
		TopicConfigs{Topic: "b", TopicID: "id-b", Configs: map[string]string{"min.insync.replicas": "2"}},
	}
	if !reflect.DeepEqual(recs, want) || !reflect.DeepEqual(recordOf, []int{0, 1, -1, -1}) {
		t.Errorf("records %v recordOf %v, want %v", recs, recordOf, want)
	}
	if seenRF != 2 {
		t.Errorf("the edit of a saw replication factor %d, want 2", seenRF)
	}
	if im.Topics["a"].Configs["retention.ms"] != "1" || im.Topics["b"].Configs["min.insync.replicas"] != "3" {
		t.Error("planning changed the image's configs")
	}
	per, recs, _ = planTopicConfigs(im, d, []TopicConfigEdit{{"a", set("retention.ms", "1")}, {"b", refuse}})
	if per[0] != nil || errs.Code(per[1]) != sluicev1.ErrorCode_INVALID_CONFIG || len(recs) != 0 {
		t.Errorf("a no-op and a refusal: %v, records %v", per, recs)
	}
}

// Through a running single-voter controller: validate-only changes
// nothing; then the configs change and the offset answered holds them.
func TestControllerAlterTopicConfigs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := startController(t, Config{NodeID: 1, DataDir: t.TempDir(), RaftBind: freeAddr(t), Logger: testLogger()})
	wait.For(t, 10*time.Second, "single voter leads, cluster bootstrapped", func() error {
		if im := c.Image(); !c.IsLeader() || im.ClusterID == "" {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	e, err := c.RegisterBroker(ctx, RegisterBroker{BrokerID: 1, Address: "h1:1", IncarnationID: "i"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UnfenceBroker(ctx, 1, e); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTopic(ctx, "t", 1, 1, map[string]string{"min.insync.replicas": "1"}); err != nil {
		t.Fatal(err)
	}
	edit := []TopicConfigEdit{{"t", func(m map[string]string, _ int32) (map[string]string, error) {
		m["retention.ms"] = "1000"
		return m, nil
	}}}
	per, _, err := c.AlterTopicConfigs(ctx, edit, true)
	if err != nil || per[0] != nil || c.Image().Topics["t"].Configs["retention.ms"] != "" {
		t.Fatalf("validate only: %v %v, configs %v", per, err, c.Image().Topics["t"].Configs)
	}
	per, offset, err := c.AlterTopicConfigs(ctx, edit, false)
	if err != nil || per[0] != nil {
		t.Fatalf("alter: %v %v", per, err)
	}
	im := c.Image()
	if offset == 0 || offset > im.Offset || !maps.Equal(im.Topics["t"].Configs, map[string]string{"min.insync.replicas": "1", "retention.ms": "1000"}) {
		t.Errorf("offset %d (image at %d), configs %v", offset, im.Offset, im.Topics["t"].Configs)
	}
}
