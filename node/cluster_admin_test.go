package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Issue 28's admin rules on a three-node cluster whose controllers give
// new topics replication factor 3 and min.insync.replicas 2 (as the
// Kubernetes manifests do): one cluster, one subtest per rule.
func TestClusterAdminRules(t *testing.T) {
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(_ int32, cfg *node.Config) {
		cfg.DefaultReplicationFactor, cfg.DefaultMinInsyncReplicas = 3, 2
		cfg.LeaderRebalanceInterval = -1
	})
	c.StartAll()
	admin := sluicev1.NewAdminClient(c.Dial(1))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t.Run("a topic that names no replication factor or min.insync.replicas gets the cluster defaults", func(t *testing.T) {
		for _, tc := range []struct {
			topic      *sluicev1.CreatableTopic
			rf         int32
			minISR     string
			noteSaying string // "" = no note
		}{
			{&sluicev1.CreatableTopic{Name: "dflt", NumPartitions: 2}, 3, "2", ""},
			{&sluicev1.CreatableTopic{Name: "kafka-default", NumPartitions: 1, ReplicationFactor: -1}, 3, "2", ""},
			{&sluicev1.CreatableTopic{Name: "rf2", NumPartitions: 1, ReplicationFactor: 2}, 2, "2", ""},
			// The request's values win; a default above the replication
			// factor is capped, and the answer says so.
			{&sluicev1.CreatableTopic{Name: "rf1", NumPartitions: 1, ReplicationFactor: 1}, 1, "1", "min.insync.replicas 2 is above the replication factor 1"},
			{&sluicev1.CreatableTopic{Name: "isr3", NumPartitions: 1, Configs: map[string]string{"min.insync.replicas": "3"}}, 3, "3", ""},
		} {
			resp, err := admin.CreateTopics(ctx, &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{tc.topic}})
			if err != nil {
				t.Fatal(err)
			}
			r := resp.Topics[0]
			if r.ErrorCode != sluicev1.ErrorCode_NONE || r.ReplicationFactor != tc.rf || r.Configs["min.insync.replicas"] != tc.minISR ||
				(tc.noteSaying == "") != (r.Note == "") || !strings.Contains(r.Note, tc.noteSaying) {
				t.Errorf("%s: %v %q, replication factor %d, min.insync.replicas %q, note %q; want %d, %s, a note saying %q",
					tc.topic.Name, r.ErrorCode, r.ErrorMessage, r.ReplicationFactor, r.Configs["min.insync.replicas"], r.Note, tc.rf, tc.minISR, tc.noteSaying)
			}
			// What the answer says is what the topic has.
			md, err := admin.Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{tc.topic.Name}})
			if err != nil {
				t.Fatal(err)
			}
			tm := md.Topics[0]
			if len(tm.Partitions) == 0 || int32(len(tm.Partitions[0].Replicas)) != tc.rf || tm.Configs["min.insync.replicas"] != tc.minISR {
				t.Errorf("%s: metadata %v", tc.topic.Name, tm)
			}
		}
	})

	t.Run("elect-leaders refuses a topic or partition that does not exist", func(t *testing.T) {
		c.WaitTopic("dflt", 2)
		for _, sel := range []*sluicev1.TopicPartitions{{Name: "nosuch"}, {Name: "dflt", Partitions: []int32{0, 7}}} {
			resp, err := admin.ElectLeaders(ctx, &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{sel}})
			e, _ := errs.FromStatus(err)
			if errs.Code(e) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION || !strings.Contains(errs.Message(e), sel.Name) {
				t.Errorf("elect %v: %v, %v; want UNKNOWN_TOPIC_OR_PARTITION naming the topic", sel, resp, err)
			}
		}
		if _, err := admin.ElectLeaders(ctx, &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{{Name: "dflt", Partitions: []int32{1}}}}); err != nil {
			t.Errorf("elect an existing partition: %v", err)
		}
	})

	t.Run("a broker is unregistered only when it is not live and hosts no replica", func(t *testing.T) {
		// Two phantoms, registered on the internal listener as a node with
		// a wrong id would be, never heartbeating.
		register := func(id int32) {
			wait.For(t, 20*time.Second, fmt.Sprintf("phantom broker %d registered", id), func() error {
				_, err := internalv1.NewControllerClient(c.DialInternal(c.Leader())).RegisterBroker(ctx, &internalv1.RegisterBrokerRequest{
					BrokerId: id, Address: c.Node(1).Addr(), InternalAddress: c.Node(1).InternalAddr(), IncarnationId: fmt.Sprint("phantom-", id)})
				return err
			})
		}
		register(8)
		register(9)
		// Phantom 8 is made a replica: a reassignment to a fenced target is
		// accepted and waits for it.
		rr, err := admin.AlterPartitionReassignments(ctx, &sluicev1.AlterPartitionReassignmentsRequest{Topic: "dflt", Partition: 0, Replicas: []int32{1, 2, 3, 8}})
		if err != nil || rr.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("reassign dflt-0 onto 8: %v %v", rr, err)
		}
		unregister := func(id int32) *sluicev1.UnregisterBrokerResponse {
			t.Helper()
			resp, err := admin.UnregisterBroker(ctx, &sluicev1.UnregisterBrokerRequest{BrokerId: id})
			if err != nil {
				t.Fatalf("unregister %d: %v", id, err)
			}
			return resp
		}
		// Just registered: it may be starting, so it counts as live for a
		// session timeout; then it goes.
		wait.For(t, 20*time.Second, "phantom 9 unregistered", func() error {
			r := unregister(9)
			switch {
			case r.ErrorCode == sluicev1.ErrorCode_NONE:
				return nil
			case r.ErrorCode != sluicev1.ErrorCode_INVALID_REQUEST || !strings.Contains(r.ErrorMessage, "heartbeating"):
				t.Fatalf("unregister 9: %v %q, want INVALID_REQUEST (still heard from) until it goes", r.ErrorCode, r.ErrorMessage)
			}
			return fmt.Errorf("%v: %s", r.ErrorCode, r.ErrorMessage)
		})
		cs, err := admin.DescribeCluster(ctx, &sluicev1.DescribeClusterRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int32
		for _, b := range cs.Brokers {
			ids = append(ids, b.NodeId)
		}
		if fmt.Sprint(ids) != "[1 2 3 8]" {
			t.Errorf("cluster status lists brokers %v, want [1 2 3 8]", ids)
		}
		if r := unregister(9); r.ErrorCode != sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED {
			t.Errorf("unregister 9 again: %v %q, want BROKER_ID_NOT_REGISTERED", r.ErrorCode, r.ErrorMessage)
		}
		// Phantom 8 hosts a replica: refused, once it no longer counts as
		// live, saying what to do.
		wait.For(t, 20*time.Second, "unregister 8 refused for its replica", func() error {
			r := unregister(8)
			if r.ErrorCode == sluicev1.ErrorCode_INVALID_REQUEST && strings.Contains(r.ErrorMessage, "still a replica of 1 partition") &&
				strings.Contains(r.ErrorMessage, "sluice topic reassign") {
				return nil
			}
			if r.ErrorCode == sluicev1.ErrorCode_NONE {
				t.Fatal("broker 8, a replica of dflt-0, was unregistered")
			}
			return fmt.Errorf("%v: %s", r.ErrorCode, r.ErrorMessage)
		})
		// A live broker is refused.
		if r := unregister(2); r.ErrorCode != sluicev1.ErrorCode_INVALID_REQUEST || !strings.Contains(r.ErrorMessage, "broker 2 is live") {
			t.Errorf("unregister live broker 2: %v %q", r.ErrorCode, r.ErrorMessage)
		}
		c.SyncMetadata()
		for id, n := range c.Nodes() {
			im := n.Metadata().Image()
			if im.Brokers[9] != nil || im.Brokers[8] == nil || im.Brokers[2] == nil {
				t.Errorf("node %d's image has brokers %v", id, im.LiveBrokers())
			}
		}
	})
}
