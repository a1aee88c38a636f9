package kafka_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// TestFranzGoZombieFenced: a second franz-go producer with the same
// transactional id fences the first, whose open transaction is aborted:
// the zombie's commit fails with a fencing error, nothing it wrote is
// visible at read_committed, and the new producer's transaction commits
// — whichever transaction version each speaks (capped at Kafka 3.7's
// versions franz-go speaks version 1).
func TestFranzGoZombieFenced(t *testing.T) {
	tv1 := kgo.MaxVersions(kversion.V3_7_0())
	for _, tc := range []struct {
		name          string
		zombie, fresh []kgo.Opt
	}{
		{"tv2 fences tv2", nil, nil},
		{"tv2 fences tv1", []kgo.Opt{tv1}, nil},
		{"tv1 fences tv2", nil, []kgo.Opt{tv1}},
		{"tv1 fences tv1", []kgo.Opt{tv1}, []kgo.Opt{tv1}},
	} {
		t.Run(tc.name, func(t *testing.T) { testZombieFenced(t, tc.zombie, tc.fresh) })
	}
}

func testZombieFenced(t *testing.T, zombieOpts, freshOpts []kgo.Opt) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 60*time.Second)
	adm := kadm.NewClient(newClient(t, addr))
	createTopics(t, ctx, adm, 2, "fenced")

	zombie := newClient(t, addr, append([]kgo.Opt{kgo.TransactionalID("app"), kgo.DefaultProduceTopic("fenced")}, zombieOpts...)...)
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	fresh := newClient(t, addr, append([]kgo.Opt{kgo.TransactionalID("app"), kgo.DefaultProduceTopic("fenced")}, freshOpts...)...)
	if err := fresh.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	// The fresh producer's InitProducerId (on its first produce) fences
	// the zombie and aborts its transaction.
	if err := fresh.ProduceSync(ctx, &kgo.Record{Value: []byte("fresh")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	err := zombie.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		t.Fatalf("the zombie's commit: %v, want PRODUCER_FENCED or INVALID_PRODUCER_EPOCH", err)
	}
	if err := fresh.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := consumeAll(t, ctx, addr, "fenced", 1, kgo.ReadCommitted())
	if got["fresh"] != 1 || got["zombie"] != 0 {
		t.Fatalf("read_committed got %v, want only fresh", got)
	}
}

// TestTransactionRequestsRefusedAsKafkas: what bad transaction and group
// requests get through the Kafka door, as Kafka 4 answers them, nothing
// written: an EndTxn with a stale epoch (PRODUCER_FENCED) or for an
// unknown transactional id (INVALID_PRODUCER_ID_MAPPING), a
// FindCoordinator of a share group (INVALID_REQUEST), an OffsetCommit
// from a member the group does not have (UNKNOWN_MEMBER_ID), and a
// TxnOffsetCommit whose member epoch is not the member's (a zombie,
// ILLEGAL_GENERATION), and, from a transaction version 1 client, a
// TxnOffsetCommit for a group the transaction did not add
// (INVALID_TXN_STATE) and an AddPartitionsToTxn naming an unknown topic
// (UNKNOWN_TOPIC_OR_PARTITION, OPERATION_NOT_ATTEMPTED for the others).
func TestTransactionRequestsRefusedAsKafkas(t *testing.T) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, addr)
	adm := kadm.NewClient(cl)
	createTopics(t, ctx, adm, 1, "t")
	request := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	init := func() *kmsg.InitProducerIDResponse {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = kmsg.StringPtr("bad"), 60000, -1, -1
		resp := request(req).(*kmsg.InitProducerIDResponse)
		if resp.ErrorCode != 0 {
			t.Fatalf("InitProducerId: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
		return resp
	}
	first := init()
	second := init()
	if second.ProducerID != first.ProducerID || second.ProducerEpoch != first.ProducerEpoch+1 {
		t.Fatalf("second InitProducerId %d/%d after %d/%d", second.ProducerID, second.ProducerEpoch, first.ProducerID, first.ProducerEpoch)
	}
	endTxn := func(id string, pid int64, epoch int16) error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = id, pid, epoch, true
		return kerr.ErrorForCode(request(req).(*kmsg.EndTxnResponse).ErrorCode)
	}
	if err := endTxn("bad", first.ProducerID, first.ProducerEpoch); !errors.Is(err, kerr.ProducerFenced) {
		t.Fatalf("EndTxn at the stale epoch: %v, want PRODUCER_FENCED", err)
	}
	if err := endTxn("never-initialised", 12345, 0); !errors.Is(err, kerr.InvalidProducerIDMapping) {
		t.Fatalf("EndTxn of an unknown id: %v, want INVALID_PRODUCER_ID_MAPPING", err)
	}
	// The epoch is unchanged by the refused requests.
	d, err := adm.DescribeTransactions(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if got := d["bad"]; got.ProducerEpoch != second.ProducerEpoch || got.State != "Empty" {
		t.Fatalf("after the refusals: %+v", got)
	}

	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKeys = 2, []string{"share"}
	if c := request(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]; c.ErrorCode != kerr.InvalidRequest.Code {
		t.Fatalf("FindCoordinator of a share group: %v", kerr.ErrorForCode(c.ErrorCode))
	}

	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.MemberID, oc.Generation = "g", "nobody", 3
	oc.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	if code := request(oc).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownMemberID.Code {
		t.Fatalf("OffsetCommit of an unknown member: %v", kerr.ErrorForCode(code))
	}

	// A KIP-848 member joins; a TxnOffsetCommit at another epoch is a
	// zombie's.
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = "g", "m1", 0, 30000
	hb.SubscribedTopicNames, hb.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	hbr := request(hb).(*kmsg.ConsumerGroupHeartbeatResponse)
	if hbr.ErrorCode != 0 || hbr.MemberEpoch < 1 {
		t.Fatalf("join: %v epoch %d", kerr.ErrorForCode(hbr.ErrorCode), hbr.MemberEpoch)
	}
	tc := kmsg.NewPtrTxnOffsetCommitRequest()
	tc.Version = 5
	tc.TransactionalID, tc.Group, tc.ProducerID, tc.ProducerEpoch = "bad", "g", second.ProducerID, second.ProducerEpoch
	tc.MemberID, tc.Generation = "m1", hbr.MemberEpoch+5
	tc.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	if code := request(tc).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.IllegalGeneration.Code {
		t.Fatalf("TxnOffsetCommit at a wrong member epoch: %v", kerr.ErrorForCode(code))
	}
	// Transaction version 1: a TxnOffsetCommit (v4) for a group whose
	// offsets partition the transaction did not add (no AddOffsetsToTxn)
	// is refused, and so is an AddPartitionsToTxn naming an unknown topic
	// (the others not attempted): nothing added, nothing committed.
	// The client sends the highest version both sides know: capped, a
	// transaction version 1 client's (TxnOffsetCommit v4,
	// AddPartitionsToTxn v3).
	v := kversion.V3_7_0()
	v.SetMaxKeyVersion(int16(kmsg.TxnOffsetCommit), 4)
	v.SetMaxKeyVersion(int16(kmsg.AddPartitionsToTxn), 3)
	tv1 := newClient(t, addr, kgo.MaxVersions(v))
	request = func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := tv1.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	tc.Generation = hbr.MemberEpoch
	if code := request(tc).(*kmsg.TxnOffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.InvalidTxnState.Code {
		t.Fatalf("TV1 TxnOffsetCommit without AddOffsetsToTxn: %v, want INVALID_TXN_STATE", kerr.ErrorForCode(code))
	}
	ap := kmsg.NewPtrAddPartitionsToTxnRequest()
	ap.TransactionalID, ap.ProducerID, ap.ProducerEpoch = "bad", second.ProducerID, second.ProducerEpoch
	ap.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: []int32{0}}, {Topic: "nosuch", Partitions: []int32{0}}}
	apr := request(ap).(*kmsg.AddPartitionsToTxnResponse)
	if a, b := apr.Topics[0].Partitions[0].ErrorCode, apr.Topics[1].Partitions[0].ErrorCode; a != kerr.OperationNotAttempted.Code || b != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("AddPartitionsToTxn with an unknown topic: %v, %v", kerr.ErrorForCode(a), kerr.ErrorForCode(b))
	}
	if d, err := adm.DescribeTransactions(ctx, "bad"); err != nil || d["bad"].State != "Empty" || len(d["bad"].Topics) != 0 {
		t.Fatalf("after the refused AddPartitionsToTxn: %+v %v", d["bad"], err)
	}
	offs, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("t", 0); ok && o.At >= 0 {
		t.Fatalf("an offset was committed: %+v", o)
	}
}

// TestCoordinatorAPIsAuthorizedAsKafkas: with --authorizer acl,
// FindCoordinator needs DESCRIBE on the transactional id or group, and
// InitProducerId WRITE on the transactional id; refused, nothing is
// created or bumped (the id's epoch is unchanged).
func TestCoordinatorAPIsAuthorizedAsKafkas(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(c *node.Config) {
		c.KafkaListen = "127.0.0.1:0"
		c.Authorizer = node.AuthorizerACL
	})
	ctx := testContext(t, 60*time.Second)
	ctl := s.Node.Controller()
	grant := func(rt controller.ResourceType, name string, op controller.AclOperation) {
		grantAnonymous(t, ctx, s, rt, name, op)
	}
	cl := newClient(t, s.Node.KafkaAddr())
	request := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	find := func(typ int8, key string) int16 {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType, req.CoordinatorKeys = typ, []string{key}
		return request(req).(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode
	}
	if code := find(1, "tx"); code != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("FindCoordinator without DESCRIBE on the id: %v", kerr.ErrorForCode(code))
	}
	if code := find(0, "grp"); code != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("FindCoordinator without DESCRIBE on the group: %v", kerr.ErrorForCode(code))
	}
	// Straight to the node: the client would otherwise ask
	// FindCoordinator first, and report its refusal instead.
	node := cl.Broker(int(ctl.NodeID()))
	init := func() *kmsg.InitProducerIDResponse {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis, req.ProducerID, req.ProducerEpoch = kmsg.StringPtr("tx"), 60000, -1, -1
		resp, err := node.Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.(*kmsg.InitProducerIDResponse)
	}
	if r := init(); r.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code || r.ProducerID != -1 {
		t.Fatalf("InitProducerId without WRITE: %v %d", kerr.ErrorForCode(r.ErrorCode), r.ProducerID)
	}
	grant(controller.ResourceTransactionalID, "tx", controller.OperationDescribe)
	grant(controller.ResourceGroup, "grp", controller.OperationDescribe)
	if code := find(1, "tx"); code != 0 {
		t.Fatalf("FindCoordinator with DESCRIBE on the id: %v", kerr.ErrorForCode(code))
	}
	if code := find(0, "grp"); code != 0 {
		t.Fatalf("FindCoordinator with DESCRIBE on the group: %v", kerr.ErrorForCode(code))
	}
	if r := init(); r.ErrorCode != kerr.TransactionalIDAuthorizationFailed.Code {
		t.Fatalf("InitProducerId with DESCRIBE only: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	grant(controller.ResourceTransactionalID, "tx", controller.OperationWrite)
	r := init()
	if r.ErrorCode != 0 || r.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId with WRITE: %v epoch %d (the refused ones must not have bumped it)", kerr.ErrorForCode(r.ErrorCode), r.ProducerEpoch)
	}
}

// TestReadCommittedSameThroughBothDoors: committed and aborted
// transactions of two franz-go producers interleaved with idempotent
// records on two partitions; a Kafka read_committed consumer (the door
// answers every batch and the aborted transactions; franz-go filters)
// and the gRPC door's read_committed fetch (the broker filters) give the
// same records at the same offsets, none of an aborted transaction.
func TestReadCommittedSameThroughBothDoors(t *testing.T) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 60*time.Second)
	adm := kadm.NewClient(newClient(t, addr))
	const topic = "mixed"
	createTopics(t, ctx, adm, 2, topic)
	plain := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	txA := newClient(t, addr, kgo.TransactionalID("a"), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	txB := newClient(t, addr, kgo.TransactionalID("b"), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := 0
	for round := range 12 {
		for i, tx := range []*kgo.Client{txA, txB} {
			if err := tx.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			commit := (round+i)%3 != 0
			for p := range int32(2) {
				v := fmt.Sprintf("r%d-tx%d-p%d-commit=%v", round, i, p, commit)
				if err := tx.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if commit {
					want++
				}
			}
			if err := plain.ProduceSync(ctx, &kgo.Record{Partition: int32(round % 2), Value: []byte(fmt.Sprintf("plain-%d-%d", round, i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			want++
			if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
		}
	}
	type rec struct {
		offset int64
		value  string
	}
	kafkaRecs := map[int32][]rec{}
	cons := newClient(t, addr, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for n := 0; n < want; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records", n, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			kafkaRecs[r.Partition] = append(kafkaRecs[r.Partition], rec{r.Offset, string(r.Value)})
			n++
		})
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(2) {
		end, _ := ends.Lookup(topic, p)
		var grpcRecs []rec
		for off := int64(0); off < end.Offset; {
			pd := s.Fetch(topic, p, off, 0)
			if len(pd.Batches) == 0 {
				break
			}
			for _, b := range pd.Batches {
				for _, r := range grpcRecords(t, b) {
					if r.Offset >= off {
						grpcRecs = append(grpcRecs, rec{r.Offset, string(r.Value)})
					}
				}
				off = b.BaseOffset + int64(b.LastOffsetDelta) + 1
			}
		}
		if fmt.Sprint(grpcRecs) != fmt.Sprint(kafkaRecs[p]) {
			t.Fatalf("partition %d:\n gRPC  %v\n Kafka %v", p, grpcRecs, kafkaRecs[p])
		}
		for _, r := range grpcRecs {
			if strings.Contains(r.value, "commit=false") {
				t.Fatalf("partition %d: an aborted record %+v", p, r)
			}
		}
	}
}

// TestClassicGroupRequestsRefusedAsKafkas: what bad classic-group
// requests get through the Kafka door, as Kafka 4 answers them: a first
// JoinGroup v4+ without a member id (MEMBER_ID_REQUIRED, with the id to
// join with), a JoinGroup with an empty protocol type or no protocols
// (INCONSISTENT_GROUP_PROTOCOL), a session timeout below the broker's
// minimum (INVALID_SESSION_TIMEOUT), a SyncGroup or Heartbeat from a
// stale generation (ILLEGAL_GENERATION), a Heartbeat from a member the
// group does not have (UNKNOWN_MEMBER_ID), and a KIP-848 heartbeat for the
// classic group (GROUP_ID_NOT_FOUND); the group stays as it was.
func TestClassicGroupRequestsRefusedAsKafkas(t *testing.T) {
	s := startKafkaNode(t)
	addr := s.Node.KafkaAddr()
	ctx := testContext(t, 60*time.Second)
	cl := newClient(t, addr)
	request := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		resp, err := cl.Request(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", kmsg.NameForKey(req.Key()), err)
		}
		return resp
	}
	join := func(member, protocolType string, protocols []kmsg.JoinGroupRequestProtocol, session int32) *kmsg.JoinGroupResponse {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType, req.Protocols = "classic", member, protocolType, protocols
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = session, 10000
		return request(req).(*kmsg.JoinGroupResponse)
	}
	range_ := []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}
	if r := join("", "consumer", range_, 6000); r.ErrorCode != kerr.MemberIDRequired.Code || r.MemberID == "" {
		t.Fatalf("first join: %v, member id %q", kerr.ErrorForCode(r.ErrorCode), r.MemberID)
	}
	if r := join("", "", range_, 6000); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join without a protocol type: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := join("", "consumer", nil, 6000); r.ErrorCode != kerr.InconsistentGroupProtocol.Code {
		t.Fatalf("join without protocols: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	if r := join("", "consumer", range_, 100); r.ErrorCode != kerr.InvalidSessionTimeout.Code {
		t.Fatalf("join with a 100 ms session: %v", kerr.ErrorForCode(r.ErrorCode))
	}
	id := join("", "consumer", range_, 6000).MemberID
	joined := join(id, "consumer", range_, 6000) // waits for the group's initial delay
	if joined.ErrorCode != 0 || joined.LeaderID != id {
		t.Fatalf("join with the member id: %v, leader %q", kerr.ErrorForCode(joined.ErrorCode), joined.LeaderID)
	}
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = "classic", id, joined.Generation+1
	if code := request(sync).(*kmsg.SyncGroupResponse).ErrorCode; code != kerr.IllegalGeneration.Code {
		t.Fatalf("SyncGroup at a stale generation: %v", kerr.ErrorForCode(code))
	}
	sync.Generation = joined.Generation
	sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: id, MemberAssignment: []byte{0, 0, 0, 0, 0, 0, 0, 0}}}
	if code := request(sync).(*kmsg.SyncGroupResponse).ErrorCode; code != 0 {
		t.Fatalf("the leader's SyncGroup: %v", kerr.ErrorForCode(code))
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "classic", id, joined.Generation-1
	if code := request(hb).(*kmsg.HeartbeatResponse).ErrorCode; code != kerr.IllegalGeneration.Code {
		t.Fatalf("Heartbeat at a stale generation: %v", kerr.ErrorForCode(code))
	}
	hb.MemberID, hb.Generation = "stranger", joined.Generation
	if code := request(hb).(*kmsg.HeartbeatResponse).ErrorCode; code != kerr.UnknownMemberID.Code {
		t.Fatalf("Heartbeat from an unknown member: %v", kerr.ErrorForCode(code))
	}
	chb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	chb.Group, chb.MemberID, chb.MemberEpoch, chb.RebalanceTimeoutMillis = "classic", "m", 0, 30000
	chb.SubscribedTopicNames, chb.Topics = []string{"t"}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if code := request(chb).(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != kerr.GroupIDNotFound.Code {
		t.Fatalf("a KIP-848 heartbeat for a classic group: %v", kerr.ErrorForCode(code))
	}
	hb.MemberID = id
	if code := request(hb).(*kmsg.HeartbeatResponse).ErrorCode; code != 0 {
		t.Fatalf("the member's own heartbeat after the refusals: %v", kerr.ErrorForCode(code))
	}
}
