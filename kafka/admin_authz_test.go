package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// TestAdminAPIsAuthorizedAsKafkas: with --authorizer acl, each admin API
// of the Kafka door asks Kafka's operation — DescribeConfigs
// DESCRIBE_CONFIGS, IncrementalAlterConfigs and AlterConfigs
// ALTER_CONFIGS, CreatePartitions ALTER, DescribeProducers READ, on the
// topic, or on the cluster for a broker — and refuses without it
// (TOPIC_ or CLUSTER_AUTHORIZATION_FAILED, nothing changed); granting
// that operation alone is what lets it through.
func TestAdminAPIsAuthorizedAsKafkas(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) {
		c.KafkaListen = "127.0.0.1:0"
		c.Authorizer = node.AuthorizerACL
	})
	ctx := testContext(t, 60*time.Second)
	ctl := s.Node.Controller()
	const topic = "guarded"
	if _, err := ctl.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	// A plaintext Kafka connection is User:ANONYMOUS. DESCRIBE on the
	// topic lets the client find its leader (Metadata); it allows none
	// of the admin APIs.
	grant := func(rt controller.ResourceType, name string, op controller.AclOperation) {
		grantAnonymous(t, ctx, s, rt, name, op)
	}
	grant(controller.ResourceTopic, topic, controller.OperationDescribe)
	cl := newClient(t, s.Node.KafkaAddr())
	id := strconv.Itoa(int(s.Node.Controller().NodeID()))

	request := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	describeConfigs := func(typ kmsg.ConfigResourceType, name string) int16 {
		req := kmsg.NewPtrDescribeConfigsRequest()
		req.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: typ, ResourceName: name}}
		return request(req).(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode
	}
	incremental := func(typ kmsg.ConfigResourceType, name string) int16 {
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		key := "retention.ms"
		if typ == kmsg.ConfigResourceTypeBroker {
			key = "log.retention.ms"
		}
		req.Resources = []kmsg.IncrementalAlterConfigsRequestResource{{ResourceType: typ, ResourceName: name,
			Configs: []kmsg.IncrementalAlterConfigsRequestResourceConfig{{Name: key, Op: kmsg.IncrementalAlterConfigOpSet, Value: kmsg.StringPtr("3600000")}}}}
		return request(req).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode
	}
	legacy := func() int16 {
		req := kmsg.NewPtrAlterConfigsRequest()
		req.Resources = []kmsg.AlterConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: topic,
			Configs: []kmsg.AlterConfigsRequestResourceConfig{{Name: "segment.ms", Value: kmsg.StringPtr("60000")}}}}
		return request(req).(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode
	}
	createPartitions := func(count int32) int16 {
		req := kmsg.NewPtrCreatePartitionsRequest()
		req.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: topic, Count: count}}
		return request(req).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode
	}
	describeProducers := func() int16 {
		req := kmsg.NewPtrDescribeProducersRequest()
		req.Topics = []kmsg.DescribeProducersRequestTopic{{Topic: topic, Partitions: []int32{0}}}
		return request(req).(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0].ErrorCode
	}
	topicDenied, clusterDenied := kerr.TopicAuthorizationFailed.Code, kerr.ClusterAuthorizationFailed.Code
	expect := func(what string, got, want int16) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %s, want %s", what, kerr.ErrorForCode(got), kerr.ErrorForCode(want))
		}
	}
	unchanged := func() {
		t.Helper()
		tp := ctl.Image().Topics[topic]
		if len(tp.Partitions) != 1 || tp.Configs["retention.ms"] != "" || tp.Configs["segment.ms"] != "" {
			t.Fatalf("a refused request changed the topic: %d partitions, configs %v", len(tp.Partitions), tp.Configs)
		}
	}

	expect("DescribeConfigs(topic) with DESCRIBE", describeConfigs(kmsg.ConfigResourceTypeTopic, topic), topicDenied)
	expect("DescribeConfigs(broker) with DESCRIBE", describeConfigs(kmsg.ConfigResourceTypeBroker, id), clusterDenied)
	expect("IncrementalAlterConfigs(topic) with DESCRIBE", incremental(kmsg.ConfigResourceTypeTopic, topic), topicDenied)
	expect("IncrementalAlterConfigs(broker) with DESCRIBE", incremental(kmsg.ConfigResourceTypeBroker, id), clusterDenied)
	expect("AlterConfigs with DESCRIBE", legacy(), topicDenied)
	expect("CreatePartitions with DESCRIBE", createPartitions(2), topicDenied)
	expect("DescribeProducers with DESCRIBE", describeProducers(), topicDenied)
	expect("DescribeConfigs of a topic that does not exist", describeConfigs(kmsg.ConfigResourceTypeTopic, "absent"), topicDenied)
	unchanged()

	grant(controller.ResourceTopic, topic, controller.OperationDescribeConfigs)
	expect("DescribeConfigs(topic) with DESCRIBE_CONFIGS", describeConfigs(kmsg.ConfigResourceTypeTopic, topic), 0)
	expect("IncrementalAlterConfigs(topic) with DESCRIBE_CONFIGS", incremental(kmsg.ConfigResourceTypeTopic, topic), topicDenied)
	unchanged()

	grant(controller.ResourceTopic, topic, controller.OperationAlterConfigs)
	expect("IncrementalAlterConfigs(topic) with ALTER_CONFIGS", incremental(kmsg.ConfigResourceTypeTopic, topic), 0)
	expect("AlterConfigs with ALTER_CONFIGS", legacy(), 0)
	expect("CreatePartitions with ALTER_CONFIGS", createPartitions(2), topicDenied)
	expect("DescribeProducers with ALTER_CONFIGS", describeProducers(), topicDenied)

	grant(controller.ResourceTopic, topic, controller.OperationAlter)
	expect("CreatePartitions with ALTER", createPartitions(2), 0)
	expect("DescribeProducers with ALTER", describeProducers(), topicDenied)
	if n := len(ctl.Image().Topics[topic].Partitions); n != 2 {
		t.Errorf("%d partitions after CreatePartitions, want 2", n)
	}

	grant(controller.ResourceTopic, topic, controller.OperationRead)
	expect("DescribeProducers with READ", describeProducers(), 0)

	grant(controller.ResourceCluster, controller.ClusterResourceName, controller.OperationDescribeConfigs)
	expect("DescribeConfigs(broker) with DESCRIBE_CONFIGS on the cluster", describeConfigs(kmsg.ConfigResourceTypeBroker, id), 0)
	expect("IncrementalAlterConfigs(broker) with DESCRIBE_CONFIGS on the cluster", incremental(kmsg.ConfigResourceTypeBroker, id), clusterDenied)
	grant(controller.ResourceCluster, controller.ClusterResourceName, controller.OperationAlterConfigs)
	// Allowed, and refused because a broker's settings are static.
	expect("IncrementalAlterConfigs(broker) with ALTER_CONFIGS on the cluster", incremental(kmsg.ConfigResourceTypeBroker, id), kerr.InvalidRequest.Code)
}

// grantAnonymous allows User:ANONYMOUS (a plaintext Kafka connection) op
// on the resource, from any host, and waits until s's node has the ACL.
func grantAnonymous(t *testing.T, ctx context.Context, s *nodetest.Single, rt controller.ResourceType, name string, op controller.AclOperation) {
	t.Helper()
	per, offset, err := s.Node.Controller().CreateAcls(ctx, []controller.Acl{{ResourceType: rt, ResourceName: name, PatternType: controller.PatternLiteral,
		Principal: "User:ANONYMOUS", Host: controller.WildcardHost, Operation: op, Permission: controller.PermissionAllow}})
	if err != nil || per[0] != nil {
		t.Fatalf("grant %s: %v %v", op, per, err)
	}
	if err := s.Node.Metadata().WaitForOffset(ctx, offset); err != nil {
		t.Fatal(err)
	}
}
