package api_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/node"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// TestCoordinatorRequestsAuthorizedOnTheNode: with --authorizer acl and
// no ACL, a node's Transactions and Groups services refuse an
// unauthenticated caller (User:ANONYMOUS) through real gRPC — each
// request with its *_AUTHORIZATION_FAILED code, listings empty — and
// count the denials on /metrics; the same caller as a super user is
// served.
func TestCoordinatorRequestsAuthorizedOnTheNode(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.Authorizer = node.AuthorizerACL
		c.TransactionStatePartitions, c.OffsetsTopicPartitions = 1, 1
		c.HTTPListen = "127.0.0.1:0"
	})
	txns, groups := sluicev1.NewTransactionsClient(tn.conn), sluicev1.NewGroupsClient(tn.conn)
	for _, c := range []struct {
		what string
		call func() (sluicev1.ErrorCode, error)
		want sluicev1.ErrorCode
	}{
		{"FindCoordinator(transaction)", func() (sluicev1.ErrorCode, error) {
			r, err := txns.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{Keys: []string{"tx"}})
			if err != nil {
				return 0, err
			}
			return r.Coordinators[0].ErrorCode, nil
		}, sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
		{"InitProducerId(transactional)", func() (sluicev1.ErrorCode, error) {
			r, err := txns.InitProducerId(ctx(t), &sluicev1.InitProducerIdRequest{TransactionalId: "tx"})
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
		{"InitProducerId(idempotent)", func() (sluicev1.ErrorCode, error) {
			r, err := txns.InitProducerId(ctx(t), &sluicev1.InitProducerIdRequest{})
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED},
		{"EndTxn", func() (sluicev1.ErrorCode, error) {
			r, err := txns.EndTxn(ctx(t), &sluicev1.EndTxnRequest{TransactionalId: "tx", ProducerId: 1000})
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
		{"FindCoordinator(group)", func() (sluicev1.ErrorCode, error) {
			r, err := txns.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{"g"}})
			if err != nil {
				return 0, err
			}
			return r.Coordinators[0].ErrorCode, nil
		}, sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED},
		{"ConsumerGroupHeartbeat", func() (sluicev1.ErrorCode, error) {
			r, err := groups.ConsumerGroupHeartbeat(ctx(t), &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g", SubscribedTopicNames: []string{"t"}})
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED},
		{"OffsetCommit", func() (sluicev1.ErrorCode, error) {
			r, err := groups.OffsetCommit(ctx(t), &sluicev1.OffsetCommitRequest{GroupId: "g", MemberEpoch: -1,
				Topics: []*sluicev1.OffsetCommitTopic{{Name: "t", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 1}}}}})
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED},
		{"ListGroups", func() (sluicev1.ErrorCode, error) {
			r, err := groups.ListGroups(ctx(t), &sluicev1.ListGroupsRequest{})
			if len(r.GetGroups()) != 0 {
				t.Errorf("ListGroups lists %v", r.Groups)
			}
			return r.GetErrorCode(), err
		}, sluicev1.ErrorCode_NONE},
	} {
		code, err := c.call()
		if err != nil || code != c.want {
			t.Errorf("%s as User:ANONYMOUS: %v %v, want %v", c.what, code, err, c.want)
		}
	}
	hr, err := http.Get("http://" + tn.node.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	for _, want := range []string{`sluice_authorization_denials_total{resource_type="transactional_id"} 3`,
		`sluice_authorization_denials_total{resource_type="group"} 3`, `sluice_authorization_denials_total{resource_type="cluster"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A super user is served.
	tn.stop()
	tn = startNodeWith(t, tn.dir, func(c *node.Config) {
		c.Authorizer, c.SuperUsers = node.AuthorizerACL, []string{"User:ANONYMOUS"}
		c.TransactionStatePartitions, c.OffsetsTopicPartitions = 1, 1
	})
	if r := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: "tx"}); r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId as a super user: %v", r)
	}
}
