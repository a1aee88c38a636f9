package kafka_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/internal/wait"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// configOf is the config named key of a described resource.
func configOf(t *testing.T, rcs kadm.ResourceConfigs, name, key string) kadm.Config {
	t.Helper()
	rc, err := rcs.On(name, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s: %v %v (%s)", name, err, rc.Err, rc.ErrMessage)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("%s has no config %s", name, key)
	return kadm.Config{}
}

// alterErr is the error of one resource of an alteration.
func alterErr(t *testing.T, rs kadm.AlterConfigsResponses, err error, name string) error {
	t.Helper()
	if err != nil {
		t.Fatalf("alter %s: %v", name, err)
	}
	r, err := rs.On(name, nil)
	if err != nil {
		t.Fatalf("alter %s: no answer: %v", name, err)
	}
	return r.Err
}

// TestFranzGoTopicConfigs: kadm describes a topic's every config (its
// default or its setting, with synonyms), alters them incrementally
// (SET, APPEND to the list cleanup.policy, DELETE), validate-only
// changes nothing, the legacy AlterConfigs replaces the set; the gRPC
// door and the broker's replica see the change. Bad input gets Kafka's
// codes.
func TestFranzGoTopicConfigs(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	adm := kadm.NewClient(cl)
	const topic = "cfg"
	if res, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}

	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, rcs, topic, "retention.ms"); c.MaybeValue() != "604800000" || c.Source != kmsg.ConfigSourceDefaultConfig ||
		len(c.Synonyms) != 1 || c.Synonyms[0].Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("retention.ms before: %+v", c)
	}
	if c := configOf(t, rcs, topic, "min.insync.replicas"); c.MaybeValue() != "1" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("min.insync.replicas (set at creation): %+v", c)
	}

	// Validate-only changes nothing.
	rs, err := adm.ValidateAlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}}, topic)
	if err := alterErr(t, rs, err, topic); err != nil {
		t.Fatalf("validate: %v", err)
	}
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("3600000")},
		{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("compact")},
	}, topic)
	if err := alterErr(t, rs, err, topic); err != nil {
		t.Fatalf("alter: %v", err)
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, rcs, topic, "retention.ms"); c.MaybeValue() != "3600000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig ||
		len(c.Synonyms) != 2 || *c.Synonyms[0].Value != "3600000" || *c.Synonyms[1].Value != "604800000" || c.Synonyms[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("retention.ms after SET: %+v (synonyms %+v)", c, c.Synonyms)
	}
	if c := configOf(t, rcs, topic, "cleanup.policy"); c.MaybeValue() != "compact,delete" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("cleanup.policy after APPEND: %+v", c)
	}

	// The gRPC door answers the same configs; the broker's replica
	// applies them.
	md, err := s.Admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{topic}})
	if err != nil || md.Topics[0].Configs["retention.ms"] != "3600000" || md.Topics[0].Configs["cleanup.policy"] != "compact,delete" {
		t.Errorf("gRPC Metadata: %v %v", md.GetTopics(), err)
	}
	wait.For(t, 10*time.Second, "the replica applies the configs", func() error {
		p, err := s.Node.Replicas().Replica(topic, 0)
		if err != nil {
			return err
		}
		if cfg := p.Config().Storage; cfg.RetentionMs != 3600000 || !cfg.Compacted() {
			return fmt.Errorf("replica config %+v", cfg)
		}
		return nil
	})

	// DELETE: back to the default.
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "retention.ms"}}, topic)
	if err := alterErr(t, rs, err, topic); err != nil {
		t.Fatalf("delete: %v", err)
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, rcs, topic, "retention.ms"); c.MaybeValue() != "604800000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("retention.ms after DELETE: %+v", c)
	}

	// The legacy AlterConfigs replaces the whole set.
	rs, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "segment.ms", Value: kadm.StringPtr("60000")}}, topic)
	if err := alterErr(t, rs, err, topic); err != nil {
		t.Fatalf("alter state: %v", err)
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, rcs, topic, "segment.ms"); c.MaybeValue() != "60000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("segment.ms after AlterConfigs: %+v", c)
	}
	if c := configOf(t, rcs, topic, "cleanup.policy"); c.Source != kmsg.ConfigSourceDefaultConfig || c.MaybeValue() != "delete" {
		t.Errorf("cleanup.policy after AlterConfigs replaced the set: %+v", c)
	}

	// Bad input.
	for _, c := range []struct {
		name  string
		topic string
		op    kadm.AlterConfig
		want  error
	}{
		{"an unknown config", topic, kadm.AlterConfig{Op: kadm.SetConfig, Name: "bogus.config", Value: kadm.StringPtr("1")}, kerr.InvalidConfig},
		{"a bad value", topic, kadm.AlterConfig{Op: kadm.SetConfig, Name: "segment.bytes", Value: kadm.StringPtr("twelve")}, kerr.InvalidConfig},
		{"min.insync.replicas above the replication factor", topic, kadm.AlterConfig{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: kadm.StringPtr("2")}, kerr.InvalidConfig},
		{"APPEND to a config that is no list", topic, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}, kerr.InvalidConfig},
		{"an unknown topic", "nope", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}, kerr.UnknownTopicOrPartition},
		{"an internal topic", "__transaction_state", kadm.AlterConfig{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("1")}, kerr.InvalidRequest},
	} {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{c.op}, c.topic)
		if got := alterErr(t, rs, err, c.topic); !errors.Is(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// kadm sends only the four operations: another number, raw.
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	rr := kmsg.NewIncrementalAlterConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	rr.Configs = []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: "retention.ms", Op: 7, Value: kmsg.StringPtr("1")}}
	req.Resources = append(req.Resources, rr)
	if kr, err := cl.Request(ctx, req); err != nil || kr.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("an unknown operation: %+v %v, want INVALID_REQUEST", kr, err)
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, "nope")
	if err != nil {
		t.Fatal(err)
	}
	if rc, _ := rcs.On("nope", nil); !errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("describe an unknown topic: %+v", rc)
	}
}

// DescribeConfigs v3+ answers each config's type and, when asked, its
// documentation; only the named configs when some are named.
func TestDescribeConfigsTypesAndDocumentation(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 30*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	if res, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "docs"); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	req.IncludeDocumentation = true
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName, rr.ConfigNames = kmsg.ConfigResourceTypeTopic, "docs", []string{"retention.ms", "cleanup.policy"}
	req.Resources = append(req.Resources, rr)
	kr, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := kr.(*kmsg.DescribeConfigsResponse)
	if resp.Version < 3 || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || len(resp.Resources[0].Configs) != 2 {
		t.Fatalf("v%d answer %+v", resp.Version, resp.Resources)
	}
	types := map[string]kmsg.ConfigType{"retention.ms": kmsg.ConfigTypeLong, "cleanup.policy": kmsg.ConfigTypeList}
	for _, c := range resp.Resources[0].Configs {
		if c.ConfigType != types[c.Name] || c.Documentation == nil || *c.Documentation == "" || c.ReadOnly || c.IsSensitive || len(c.ConfigSynonyms) != 0 {
			t.Errorf("%s: %+v", c.Name, c)
		}
	}
}

// A broker's settings are answered read-only (this broker's id or the
// empty name); another broker's id is refused; broker configs cannot be
// altered.
func TestFranzGoBrokerConfigs(t *testing.T) {
	s := startKafkaNode(t)
	ctx := testContext(t, 30*time.Second)
	cl := newClient(t, s.Node.KafkaAddr())
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil || len(md.Brokers) != 1 {
		t.Fatalf("brokers: %v %v", md.Brokers, err)
	}
	id := md.Brokers[0].NodeID
	for _, ids := range [][]int32{{id}, nil} {
		rcs, err := adm.DescribeBrokerConfigs(ctx, ids...)
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		if ids != nil {
			name = strconv.Itoa(int(id))
		}
		c := configOf(t, rcs, name, "broker.id")
		if c.MaybeValue() != strconv.Itoa(int(id)) || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
			t.Errorf("broker %q: broker.id %+v", name, c)
		}
		if c := configOf(t, rcs, name, "socket.request.max.bytes"); c.MaybeValue() != "104857600" {
			t.Errorf("broker %q: socket.request.max.bytes %+v", name, c)
		}
	}
	req := kmsg.NewPtrDescribeConfigsRequest()
	rr := kmsg.NewDescribeConfigsRequestResource()
	rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(id)+1)
	req.Resources = append(req.Resources, rr)
	kr, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r := kr.(*kmsg.DescribeConfigsResponse).Resources[0]; r.ErrorCode != kerr.InvalidRequest.Code {
		t.Errorf("another broker's configs: %+v", r)
	}
	rs, err := adm.AlterBrokerConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "log.retention.ms", Value: kadm.StringPtr("1")}}, id)
	if got := alterErr(t, rs, err, strconv.Itoa(int(id))); !errors.Is(got, kerr.InvalidRequest) {
		t.Errorf("alter a broker's config: %v, want INVALID_REQUEST", got)
	}
}
