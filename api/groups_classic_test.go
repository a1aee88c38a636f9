package api_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A classic group made through the coordinator's Go API (as the Kafka
// door makes them) is listed and described by the gRPC door, its
// consumer-protocol assignment decoded.
func TestClassicGroupListedAndDescribed(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.OffsetsTopicPartitions = 1
		c.GroupInitialRebalanceDelay = -1
	})
	coord := tn.node.GroupCoordinator()
	wait.For(t, txnWait, "the group's coordinator", func() error { // creates __consumer_offsets
		_, err := locatorVia{tn.conn, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP}.Locate(ctx(t), "legacy")
		return err
	})
	sub := kmsg.NewConsumerMemberMetadata()
	sub.Topics = []string{"orders"}
	req := group.JoinGroupRequest{Group: "legacy", ClientID: "rdkafka", ClientHost: "/127.0.0.1", ProtocolType: "consumer",
		Protocols: []group.ClassicProtocol{{Name: "range", Metadata: sub.AppendTo(nil)}}, SessionTimeout: 30 * time.Second, RebalanceTimeout: time.Minute}
	var resp group.JoinGroupResponse
	untilSettled(t, "join", func() (sluicev1.ErrorCode, string) {
		var err error
		resp, err = coord.JoinGroup(ctx(t), req)
		return errs.Code(err), errs.Message(err)
	})
	if resp.Generation != 1 || resp.Leader != resp.MemberID {
		t.Fatalf("join: %+v", resp)
	}
	asg := kmsg.NewConsumerMemberAssignment()
	asg.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "orders", Partitions: []int32{0, 1}}}
	if _, err := coord.SyncGroup(ctx(t), group.SyncGroupRequest{Group: "legacy", MemberID: resp.MemberID, Generation: 1,
		Assignments: map[string][]byte{resp.MemberID: asg.AppendTo(nil)}}); err != nil {
		t.Fatal(err)
	}
	groups := api.NewGroupsService(coord, 1)
	ls, err := groups.ListGroups(ctx(t), &sluicev1.ListGroupsRequest{})
	if err != nil || len(ls.Groups) != 1 || ls.Groups[0].Type != "classic" || ls.Groups[0].State != "Stable" || ls.Groups[0].ProtocolType != "consumer" {
		t.Fatalf("list: %v %v", ls, err)
	}
	d, err := groups.DescribeGroups(ctx(t), &sluicev1.DescribeGroupsRequest{GroupIds: []string{"legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	g := d.Groups[0]
	if g.ErrorCode != sluicev1.ErrorCode_NONE || g.Type != "classic" || g.Generation != 1 || g.Protocol != "range" || g.Leader != resp.MemberID || len(g.Members) != 1 {
		t.Fatalf("describe: %v", g)
	}
	m := g.Members[0]
	if m.ClientId != "rdkafka" || m.ClientHost != "/127.0.0.1" || len(m.MemberAssignment) == 0 || len(m.Assignment) != 1 ||
		m.Assignment[0].Topic != "orders" || len(m.Assignment[0].Partitions) != 2 || len(m.SubscribedTopicNames) != 1 {
		t.Fatalf("member: %v", m)
	}
	del, _ := groups.DeleteGroups(ctx(t), &sluicev1.DeleteGroupsRequest{GroupIds: []string{"legacy"}})
	if del.Results[0].ErrorCode != sluicev1.ErrorCode_NON_EMPTY_GROUP {
		t.Fatalf("delete: %v", del)
	}
}
