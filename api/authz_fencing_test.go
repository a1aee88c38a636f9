package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The rules of auth.Operations that keep one principal from interfering
// with another's transactions and groups, over a node's real
// coordinators: a Transactions and a Groups service built as the node
// builds its own, with authorization (until the node wires
// --authorizer), called in process as one principal or another.

// locatorVia locates through conn's FindCoordinator (the node's own,
// unauthorized service), which creates the internal topic on first need
// as the node's locators do.
type locatorVia struct {
	conn    grpc.ClientConnInterface
	keyType sluicev1.CoordinatorKeyType
}

func (l locatorVia) Locate(ctx context.Context, key string) (coordinator.CoordinatorNode, error) {
	resp, err := sluicev1.NewTransactionsClient(l.conn).FindCoordinator(ctx, &sluicev1.FindCoordinatorRequest{KeyType: l.keyType, Keys: []string{key}})
	if err != nil {
		return coordinator.CoordinatorNode{}, err
	}
	c := resp.Coordinators[0]
	if c.ErrorCode != sluicev1.ErrorCode_NONE {
		return coordinator.CoordinatorNode{}, errs.New(c.ErrorCode, "%s", c.ErrorMessage)
	}
	return coordinator.CoordinatorNode{NodeID: c.NodeId, Address: c.Address}, nil
}

// authorizedServices are tn's Transactions and Groups services with an
// authorizer of acls.
func authorizedServices(tn *testNode, acls []auth.ACL) (*api.TransactionsService, *api.GroupsService) {
	z := api.NewAuthz(auth.NewAuthorizer(acls, nil), slog.New(slog.DiscardHandler))
	txns := api.NewTransactionsService(api.TransactionsConfig{ProducerIDs: tn.node.ProducerIDs(), Coordinator: tn.node.TransactionCoordinator(),
		Locator:      locatorVia{tn.conn, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION},
		GroupLocator: locatorVia{tn.conn, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP}, Authz: z})
	return txns, api.NewGroupsService(tn.node.GroupCoordinator(), 1).WithAuthz(z)
}

func as(t *testing.T, user string) context.Context {
	return auth.WithCaller(ctx(t), auth.Caller{Principal: auth.User(user)})
}

// untilSettled calls req until its answer's code is not one a client
// retries at the same coordinator, and returns that code.
func untilSettled(t *testing.T, what string, req func() (sluicev1.ErrorCode, string)) sluicev1.ErrorCode {
	t.Helper()
	var code sluicev1.ErrorCode
	wait.For(t, txnWait, what, func() error {
		var msg string
		code, msg = req()
		switch code {
		case sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS,
			sluicev1.ErrorCode_NOT_COORDINATOR, sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS:
			return fmt.Errorf("%v %s", code, msg)
		}
		return nil
	})
	return code
}

// TestTransactionalIDWriteGuardsTheOwnersTransaction: a principal without
// WRITE on a transactional id (here with DESCRIBE on it: it may find and
// describe the transaction) can neither fence its owner (InitProducerId,
// plain or KIP-360, bumps no epoch) nor end its transaction (EndTxn,
// commit or abort), nor add offsets to it (TxnOffsetCommit); the owner's
// transaction is untouched and commits.
func TestTransactionalIDWriteGuardsTheOwnersTransaction(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.TransactionStatePartitions = 1; c.OffsetsTopicPartitions = 1 })
	tn.createTopic("payments", 1, nil)
	const id = "pay"
	txns, groups := authorizedServices(tn, []auth.ACL{
		allowUser("owner", auth.ResourceTransactionalID, id, auth.OpWrite),
		allowUser("intruder", auth.ResourceTransactionalID, id, auth.OpDescribe),
		allowUser("intruder", auth.ResourceGroup, "g", auth.OpRead),
		allowUser("intruder", auth.ResourceTopic, "payments", auth.OpRead),
	})
	owner, intruder := as(t, "owner"), as(t, "intruder")

	var init *sluicev1.InitProducerIdResponse
	if code := untilSettled(t, "owner's InitProducerId", func() (sluicev1.ErrorCode, string) {
		init, _ = txns.InitProducerId(owner, &sluicev1.InitProducerIdRequest{TransactionalId: id})
		return init.ErrorCode, init.ErrorMessage
	}); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("owner's InitProducerId: %v", init)
	}
	pid, epoch := init.ProducerId, init.ProducerEpoch
	if r := tn.produceTxn(id, "payments", map[int32][]byte{0: txnBatchOf(pid, epoch, 0, "p1", "p2")})[0]; r.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("owner's transactional produce: %v", r)
	}
	before := waitTxnState(t, tn.conn, id, txn.Ongoing)

	// The intruder finds the coordinator and sees the transaction...
	fc, _ := txns.FindCoordinator(intruder, &sluicev1.FindCoordinatorRequest{Keys: []string{id}})
	if c := fc.Coordinators[0]; c.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("intruder's FindCoordinator (DESCRIBE): %v", c)
	}
	// ...but every request that would change it is refused.
	for what, req := range map[string]*sluicev1.InitProducerIdRequest{
		"InitProducerId":          {TransactionalId: id},
		"KIP-360 InitProducerId":  {TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch},
		"InitProducerId, timeout": {TransactionalId: id, TransactionTimeoutMs: 1},
	} {
		r, _ := txns.InitProducerId(intruder, req)
		if r.ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED || r.ProducerId != -1 {
			t.Errorf("intruder's %s: %v", what, r)
		}
	}
	for _, commit := range []bool{false, true} {
		r, _ := txns.EndTxn(intruder, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, Committed: commit})
		if r.ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED {
			t.Errorf("intruder's EndTxn (commit %v): %v", commit, r)
		}
	}
	toc, _ := groups.TxnOffsetCommit(intruder, &sluicev1.TxnOffsetCommitRequest{TransactionalId: id, GroupId: "g", ProducerId: pid, ProducerEpoch: epoch,
		MemberEpoch: -1, Topics: []*sluicev1.OffsetCommitTopic{{Name: "payments", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 1}}}}})
	if toc.ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED {
		t.Errorf("intruder's TxnOffsetCommit: %v", toc)
	}
	after := waitTxnState(t, tn.conn, id, txn.Ongoing)
	if after.ProducerId != before.ProducerId || after.ProducerEpoch != before.ProducerEpoch || len(after.Topics) != 1 {
		t.Fatalf("the owner's transaction changed: %v, was %v", after, before)
	}

	// The owner commits; read_committed sees its records.
	var end *sluicev1.EndTxnResponse
	if code := untilSettled(t, "owner's EndTxn", func() (sluicev1.ErrorCode, string) {
		end, _ = txns.EndTxn(owner, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, Committed: true})
		return end.ErrorCode, end.ErrorMessage
	}); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("owner's commit: %v", end)
	}
	waitTxnState(t, tn.conn, id, txn.CompleteCommit)
	wait.For(t, txnWait, "the committed records", func() error {
		if vals := values(tn.fetch("payments", 0, 0, 0), 0); fmt.Sprint(vals) != "[p1 p2]" {
			return fmt.Errorf("read_committed sees %v", vals)
		}
		return nil
	})
}

// allowUser is an ALLOW of op on the literal resource name of type rt to
// User:user from any host.
func allowUser(user string, rt auth.ResourceType, name string, op auth.Operation) auth.ACL {
	return auth.ACL{ResourceType: rt, Name: name, Pattern: auth.PatternLiteral, Principal: "User:" + user, Host: "*", Operation: op, Permission: auth.Allow}
}

// TestConsumerWithoutGroupReadCannotJoinOrCommit: a consumer with READ on
// the topic and DESCRIBE on the group, but not READ on it, cannot join
// (ConsumerGroupHeartbeat), commit offsets (even with a member's id and
// epoch) or delete the group; it may fetch the committed offsets, which
// stay those of the member that may.
func TestConsumerWithoutGroupReadCannotJoinOrCommit(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.OffsetsTopicPartitions = 1 })
	tn.createTopic("orders", 1, nil)
	_, groups := authorizedServices(tn, []auth.ACL{
		allowUser("alice", auth.ResourceGroup, "etl", auth.OpRead),
		allowUser("alice", auth.ResourceTopic, "orders", auth.OpRead),
		allowUser("bob", auth.ResourceGroup, "etl", auth.OpDescribe),
		allowUser("bob", auth.ResourceTopic, "orders", auth.OpRead),
	})
	alice, bob := as(t, "alice"), as(t, "bob")
	join := &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "etl", SubscribedTopicNames: []string{"orders"}}
	wait.For(t, txnWait, "the group's coordinator", func() error { // creates __consumer_offsets
		_, err := locatorVia{tn.conn, sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP}.Locate(ctx(t), "etl")
		return err
	})
	var joined *sluicev1.ConsumerGroupHeartbeatResponse
	if code := untilSettled(t, "alice joins", func() (sluicev1.ErrorCode, string) {
		joined, _ = groups.ConsumerGroupHeartbeat(alice, join)
		return joined.ErrorCode, joined.ErrorMessage
	}); code != sluicev1.ErrorCode_NONE {
		t.Fatalf("alice's join: %v", joined)
	}

	if r, _ := groups.ConsumerGroupHeartbeat(bob, join); r.ErrorCode != sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED || r.MemberId != "" {
		t.Fatalf("bob's join: %v", r)
	}
	d, _ := groups.DescribeGroups(bob, &sluicev1.DescribeGroupsRequest{GroupIds: []string{"etl"}})
	if g := d.Groups[0]; g.ErrorCode != sluicev1.ErrorCode_NONE || len(g.Members) != 1 || g.Members[0].MemberId != joined.MemberId {
		t.Fatalf("the group after bob's join: %v", g)
	}

	commit := func(who context.Context, offset int64) *sluicev1.OffsetCommitResponse {
		r, _ := groups.OffsetCommit(who, &sluicev1.OffsetCommitRequest{GroupId: "etl", MemberId: joined.MemberId, MemberEpoch: joined.MemberEpoch,
			Topics: []*sluicev1.OffsetCommitTopic{{Name: "orders", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: offset}}}}})
		return r
	}
	if r := commit(alice, 10); r.ErrorCode != sluicev1.ErrorCode_NONE || r.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("alice's commit: %v", r)
	}
	if r := commit(bob, 99); r.ErrorCode != sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED ||
		r.Topics[0].Partitions[0].ErrorCode != sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED {
		t.Fatalf("bob's commit with alice's member id and epoch: %v", r)
	}
	if r, _ := groups.DeleteGroups(bob, &sluicev1.DeleteGroupsRequest{GroupIds: []string{"etl"}}); r.Results[0].ErrorCode != sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED {
		t.Fatalf("bob's DeleteGroups: %v", r)
	}
	f, _ := groups.OffsetFetch(bob, &sluicev1.OffsetFetchRequest{GroupId: "etl", MemberEpoch: -1,
		Topics: []*sluicev1.OffsetFetchTopic{{Name: "orders", Partitions: []int32{0}}}})
	if f.ErrorCode != sluicev1.ErrorCode_NONE || len(f.Topics) != 1 || f.Topics[0].Partitions[0].CommittedOffset != 10 {
		t.Fatalf("bob's OffsetFetch: %v, want alice's offset 10", f)
	}
}
