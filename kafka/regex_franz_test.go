package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// TestFranzGoRegexSubscription: franz-go, unmodified, consumes with
// ConsumeRegex in a KIP-848 group (ServerSideBalancer): it sends its
// pattern as ConsumerGroupHeartbeat's SubscribedTopicRegex and consumes
// only what the coordinator assigns (decision 73). A topic matching the
// regex that is created after the consumer joined is assigned and
// consumed; a topic that does not match is not; ConsumerGroupDescribe
// answers the member's regex and an assignment naming both topics. A
// regex that does not compile is INVALID_REGULAR_EXPRESSION (128).
func TestFranzGoRegexSubscription(t *testing.T) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 90*time.Second)
	adm := kadm.NewClient(newClient(t, addr))
	createTopics(t, ctx, adm, 2, "rx-a", "other")
	prod := newClient(t, addr)
	produce := func(topic, value string) {
		t.Helper()
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
	}
	produce("rx-a", "a")
	produce("other", "o")

	cl := newClient(t, addr, kgo.ServerSideBalancer(), kgo.ConsumerGroup("rx"), kgo.ConsumeRegex(), kgo.ConsumeTopics(`rx-.*`),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(250*time.Millisecond))
	seen := map[string]bool{}
	poll := func(topic string) {
		t.Helper()
		for !seen[topic] {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("no record of %s before the deadline (seen %v)", topic, seen)
			}
			fs.EachRecord(func(r *kgo.Record) { seen[r.Topic] = true })
		}
	}
	poll("rx-a")

	// Created after the consumer joined: the coordinator resolves the
	// regex again on the metadata change and assigns it.
	createTopics(t, ctx, adm, 2, "rx-b")
	produce("rx-b", "b")
	poll("rx-b")
	if seen["other"] {
		t.Fatal("consumed a topic the regex does not match")
	}

	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{"rx"}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 || len(resp.Groups[0].Members) != 1 {
		t.Fatalf("describe: %+v %v", resp, err)
	}
	m := resp.Groups[0].Members[0]
	if m.SubscribedTopicRegex == nil || *m.SubscribedTopicRegex == "" {
		t.Fatalf("the member's regex is not described: %+v", m)
	}
	var assigned []string
	for _, tp := range m.Assignment.TopicPartitions {
		assigned = append(assigned, tp.Topic)
	}
	slices.Sort(assigned)
	if !slices.Equal(assigned, []string{"rx-a", "rx-b"}) {
		t.Fatalf("described assignment %v, want rx-a and rx-b (regex %q)", assigned, *m.SubscribedTopicRegex)
	}

	// A regex the coordinator cannot compile.
	for _, re := range []string{`rx-[`, `(?P<x`} {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = "rx-bad", "m", 0, 30000
		hb.SubscribedTopicRegex, hb.Topics = kmsg.StringPtr(re), []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		hresp, err := hb.RequestWith(ctx, newClient(t, addr))
		if err != nil {
			t.Fatal(err)
		}
		if hresp.ErrorCode != kerr.InvalidRegularExpression.Code || hresp.ErrorMessage == nil {
			t.Fatalf("regex %q: %v, want INVALID_REGULAR_EXPRESSION with a message", re, kerr.ErrorForCode(hresp.ErrorCode))
		}
	}
}

// TestRegexResolvesToDescribableTopics: with --authorizer acl a regex
// resolves only to the matching topics the member's principal may
// DESCRIBE (Kafka 4's KAFKA-18813; decision 73): the heartbeat is not
// refused for a topic it might match, the member is just not assigned
// it. A topic created later that it may describe is added on the
// metadata change; one created later that it may not is not.
func TestRegexResolvesToDescribableTopics(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) {
		c.KafkaListen = "127.0.0.1:0"
		c.Authorizer = node.AuthorizerACL
	})
	ctx := testContext(t, 60*time.Second)
	ctl := s.Node.Controller()
	for _, topic := range []string{"rx-open", "rx-secret"} {
		if _, err := ctl.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	const g = "rxg"
	grantAnonymous(t, ctx, s, controller.ResourceGroup, g, controller.OperationRead)
	grantAnonymous(t, ctx, s, controller.ResourceTopic, "rx-open", controller.OperationDescribe)
	grantAnonymous(t, ctx, s, controller.ResourceTopic, "rx-later", controller.OperationDescribe)
	cl := newClient(t, s.Node.KafkaAddr())

	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = g, "m-1", 0, 30000
	hb.SubscribedTopicRegex, hb.Topics = kmsg.StringPtr(`rx-.*`), []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	// The group's coordinator may still be loading on the fresh node:
	// retried, as a client does, while it answers a retriable coordinator
	// error.
	wait.For(t, 30*time.Second, "the join answered", func() error {
		r, err := hb.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		switch r.ErrorCode {
		case 0:
			return nil
		case kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.CoordinatorNotAvailable.Code:
			return kerr.ErrorForCode(r.ErrorCode)
		}
		t.Fatalf("join: %v", kerr.ErrorForCode(r.ErrorCode))
		return nil
	})
	// The answer's assignment is by topic id; the description names them.
	assigned := func() []string {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{g}
		d, err := req.RequestWith(ctx, cl)
		if err != nil || d.Groups[0].ErrorCode != 0 || len(d.Groups[0].Members) != 1 {
			t.Fatalf("describe: %+v %v", d, err)
		}
		var out []string
		for _, tp := range d.Groups[0].Members[0].TargetAssignment.TopicPartitions {
			out = append(out, tp.Topic)
		}
		slices.Sort(out)
		return out
	}
	if got := assigned(); !slices.Equal(got, []string{"rx-open"}) {
		t.Fatalf("target %v, want rx-open alone (rx-secret is not the caller's to describe)", got)
	}
	for _, topic := range []string{"rx-later", "rx-hidden"} {
		if _, err := ctl.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The coordinator's metadata check sees the new topics within its tick.
	wait.For(t, 30*time.Second, "rx-later (not rx-hidden) in the member's target", func() error {
		if got := assigned(); !slices.Equal(got, []string{"rx-later", "rx-open"}) {
			return fmt.Errorf("target %v, want rx-later and rx-open", got)
		}
		return nil
	})
}
