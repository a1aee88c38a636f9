package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/coordinator"
	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// The authorization of the Transactions and Groups services (issue 33),
// rule by rule of auth.Operations, over fake coordinators that record
// what they are asked: each case runs its request with exactly the ACLs
// the table names (served), then without each of them in turn (refused
// with the right code, per item where the table says "each", listings
// filtered, and nothing asked of the coordinator for what was refused),
// then with authorization off (served, as before issue 33).
//
// To cover another RPC, add a case to authzCases; the test fails while a
// Transactions or Groups RPC of auth.Operations has none, or when a
// case's ACLs are not what the table names.

// fakeTxnCoordinator is a transaction coordinator that records the
// requests that would change something. Called from the test's goroutine
// only.
type fakeTxnCoordinator struct {
	inits []txn.InitProducerIDRequest
	ends  []txn.EndTxnRequest
}

func (f *fakeTxnCoordinator) InitProducerID(_ context.Context, req txn.InitProducerIDRequest) (txn.ProducerIDAndEpoch, error) {
	f.inits = append(f.inits, req)
	return txn.ProducerIDAndEpoch{ProducerID: 7, ProducerEpoch: 1}, nil
}

func (f *fakeTxnCoordinator) EndTxn(_ context.Context, req txn.EndTxnRequest) (txn.ProducerIDAndEpoch, error) {
	f.ends = append(f.ends, req)
	return txn.ProducerIDAndEpoch{ProducerID: 7, ProducerEpoch: 2}, nil
}

// Describe: every id has a transaction open on orders-0, orders-1 and
// payments-0.
func (f *fakeTxnCoordinator) Describe(id string) (txn.Description, error) {
	return txn.Description{Metadata: txn.Metadata{TransactionalID: id, ProducerID: 7, PrevProducerID: 7, NextProducerID: -1,
		ProducerEpoch: 1, LastProducerEpoch: -1, State: txn.Ongoing, StartTimeMs: 1, UpdateTimeMs: 1,
		Partitions: []txn.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "payments", Partition: 0}}}}, nil
}

func (f *fakeTxnCoordinator) List(txn.ListFilter) ([]txn.Listing, error) {
	return []txn.Listing{{TransactionalID: "tx1", ProducerID: 7, State: txn.Empty, StartTimeMs: txn.NoTimestamp},
		{TransactionalID: "tx2", ProducerID: 8, State: txn.Empty, StartTimeMs: txn.NoTimestamp}}, nil
}

// fakeLocator answers node 1 for every key and records the keys (a real
// locator creates the internal topic on first need).
type fakeLocator struct{ keys []string }

func (l *fakeLocator) Locate(_ context.Context, key string) (coordinator.CoordinatorNode, error) {
	l.keys = append(l.keys, key)
	return coordinator.CoordinatorNode{NodeID: 1, Address: "127.0.0.1:9092"}, nil
}

// fakeProducerIDs hands out 1000, 1001, ...
type fakeProducerIDs struct{ next int64 }

func (p *fakeProducerIDs) Next(context.Context) (int64, error) {
	p.next++
	return 999 + p.next, nil
}

// fakeGroupCoordinator is a group coordinator that records the requests
// that would change something, and what FetchOffsets was asked. Called
// from the test's goroutine only.
type fakeGroupCoordinator struct {
	heartbeats []group.HeartbeatRequest
	commits    []group.OffsetCommitEntry // OffsetCommit's and TxnOffsetCommit's
	deleted    []string
	fetches    [][]group.TopicPartition // nil: all
}

func (f *fakeGroupCoordinator) Heartbeat(_ context.Context, _ string, req group.HeartbeatRequest) (group.HeartbeatResponse, error) {
	f.heartbeats = append(f.heartbeats, req)
	return group.HeartbeatResponse{MemberID: "m1", MemberEpoch: 1, Assignment: group.Assignment{"orders": {0}}, AssignmentChanged: true}, nil
}

func (f *fakeGroupCoordinator) commit(entries []group.OffsetCommitEntry) map[group.TopicPartition]error {
	f.commits = append(f.commits, entries...)
	out := map[group.TopicPartition]error{}
	for _, e := range entries {
		out[e.TP] = nil
	}
	return out
}

func (f *fakeGroupCoordinator) CommitOffsets(_ context.Context, _, _, _ string, _ int32, entries []group.OffsetCommitEntry) (map[group.TopicPartition]error, error) {
	return f.commit(entries), nil
}

func (f *fakeGroupCoordinator) TxnCommitOffsets(_ context.Context, r group.TxnOffsetCommitRequest) (map[group.TopicPartition]error, error) {
	return f.commit(r.Entries), nil
}

// FetchOffsets: offset 5 for every partition asked; all of them (nil)
// is orders-0 and payments-0.
func (f *fakeGroupCoordinator) FetchOffsets(_, _ string, _ int32, tps []group.TopicPartition, _ bool) ([]group.FetchedOffset, error) {
	f.fetches = append(f.fetches, tps)
	if tps == nil {
		tps = []group.TopicPartition{{Topic: "orders", Partition: 0}, {Topic: "payments", Partition: 0}}
	}
	var out []group.FetchedOffset
	for _, tp := range tps {
		out = append(out, group.FetchedOffset{TP: tp, Offset: group.Offset{Offset: 5, LeaderEpoch: 1, CommitTimeMs: 1, RecordOffset: 1}})
	}
	return out, nil
}

func (f *fakeGroupCoordinator) ListGroups([]string) ([]group.Listing, error) {
	return []group.Listing{{Group: "g1", State: "Stable", Members: 1}, {Group: "g2", State: "Empty"}}, nil
}

// DescribeGroup: one member, assigned orders-0, targeted orders-0 and
// payments-0.
func (f *fakeGroupCoordinator) DescribeGroup(g string) (group.Description, error) {
	return group.Description{GroupID: g, State: group.Stable, GroupEpoch: 1, AssignmentEpoch: 1, Assignor: "uniform",
		Members: []group.MemberDescription{{MemberID: "m1", MemberEpoch: 1, SubscribedTopics: []string{"orders", "payments"},
			Assignment: group.Assignment{"orders": {0}}, TargetAssignment: group.Assignment{"orders": {0}, "payments": {0}}}}}, nil
}

func (f *fakeGroupCoordinator) DeleteGroup(_ context.Context, g string) error {
	f.deleted = append(f.deleted, g)
	return nil
}

// authzEnv is a Transactions and a Groups service over the fakes, called
// as alice.
type authzEnv struct {
	ctx        context.Context
	txns       *api.TransactionsService
	groups     *api.GroupsService
	txnCoord   *fakeTxnCoordinator
	groupCoord *fakeGroupCoordinator
	locator    *fakeLocator
	ids        *fakeProducerIDs
	denials    []auth.ResourceType // counted by the Authz hook
}

var alice = auth.User("alice")

// newAuthzEnv authorizes with acls (super user: User:admin); off: no
// authorization at all.
func newAuthzEnv(t *testing.T, acls []auth.ACL, off bool) *authzEnv {
	t.Helper()
	e := &authzEnv{ctx: auth.WithCaller(ctx(t), auth.Caller{Principal: alice}),
		txnCoord: &fakeTxnCoordinator{}, groupCoord: &fakeGroupCoordinator{}, locator: &fakeLocator{}, ids: &fakeProducerIDs{}}
	var z *api.Authz
	if !off {
		z = api.NewAuthz(auth.NewAuthorizer(acls, []string{"User:admin"}), slog.New(slog.DiscardHandler))
		z.Denied = func(rt auth.ResourceType) { e.denials = append(e.denials, rt) }
	}
	e.txns = api.NewTransactionsService(api.TransactionsConfig{ProducerIDs: e.ids, Coordinator: e.txnCoord,
		Locator: e.locator, GroupLocator: e.locator, Authz: z})
	e.groups = api.NewGroupsService(e.groupCoord, 1).WithAuthz(z)
	return e
}

// allowAlice is an ALLOW of op on the literal resource name of type rt
// to alice from any host.
func allowAlice(rt auth.ResourceType, name string, op auth.Operation) auth.ACL {
	return auth.ACL{ResourceType: rt, Name: name, Pattern: auth.PatternLiteral, Principal: "User:alice", Host: "*", Operation: op, Permission: auth.Allow}
}

func clusterAlice(op auth.Operation) auth.ACL {
	return allowAlice(auth.ResourceCluster, auth.ClusterResourceName, op)
}

// authzCase is one rule of auth.Operations for one RPC.
type authzCase struct {
	method string // as in auth.Operations
	rule   string
	// acls are exactly what the table names for run's request, by a
	// short name that run switches on.
	acls map[string]auth.ACL
	// alt: acls are a requirement's alternative (Requirement.Alt), not
	// the requirement itself.
	alt bool
	// quiet are the ACLs whose absence only filters a listing: no audit
	// line, no denial counted (Authz.AllowedQuiet).
	quiet []string
	// run sends the request and checks the answer and what the fakes were
	// asked, with every ACL (without == "") or all but acls[without].
	run func(t *testing.T, e *authzEnv, without string)
}

// wantCode fails t unless got is want and, for a refusal, msg names
// resource (when not "").
func wantCode(t *testing.T, what string, got sluicev1.ErrorCode, msg string, want sluicev1.ErrorCode, resource string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %v %q, want %v", what, got, msg, want)
		return
	}
	if resource != "" && !strings.Contains(msg, `"`+resource+`"`) {
		t.Errorf("%s: message %q does not name %q", what, msg, resource)
	}
}

// commitTopics are orders-0, orders-1 and payments-0 at offset 10.
func commitTopics() []*sluicev1.OffsetCommitTopic {
	return []*sluicev1.OffsetCommitTopic{
		{Name: "orders", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 10}, {Partition: 1, CommittedOffset: 10}}},
		{Name: "payments", Partitions: []*sluicev1.OffsetCommitPartition{{Partition: 0, CommittedOffset: 10}}}}
}

// checkCommit checks a commit of commitTopics: every partition answered
// reqCode when the request was refused, else TOPIC_AUTHORIZATION_FAILED
// for deniedTopic's partitions and NONE for the others, and exactly the
// served partitions committed.
func checkCommit(t *testing.T, e *authzEnv, topLevel sluicev1.ErrorCode, topMsg string, topics []*sluicev1.OffsetCommitTopicResponse,
	reqCode sluicev1.ErrorCode, reqResource, deniedTopic string) {
	t.Helper()
	wantCode(t, "request", topLevel, topMsg, reqCode, reqResource)
	var committed []string
	for _, c := range e.groupCoord.commits {
		committed = append(committed, c.TP.String())
	}
	var want []string
	for _, tr := range topics {
		for _, p := range tr.Partitions {
			what := fmt.Sprintf("%s-%d", tr.Name, p.Partition)
			switch {
			case reqCode != sluicev1.ErrorCode_NONE:
				wantCode(t, what, p.ErrorCode, p.ErrorMessage, reqCode, reqResource)
			case tr.Name == deniedTopic:
				wantCode(t, what, p.ErrorCode, p.ErrorMessage, sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED, deniedTopic)
			default:
				wantCode(t, what, p.ErrorCode, p.ErrorMessage, sluicev1.ErrorCode_NONE, "")
				want = append(want, group.TopicPartition{Topic: tr.Name, Partition: p.Partition}.String())
			}
		}
	}
	if !slices.Equal(committed, want) {
		t.Errorf("committed %v, want %v", committed, want)
	}
}

// listedGroups are the group ids of a ListGroups answer.
func listedGroups(resp *sluicev1.ListGroupsResponse) []string {
	var ids []string
	for _, g := range resp.Groups {
		ids = append(ids, g.GroupId)
	}
	return ids
}

func authzCases() []authzCase {
	const (
		tx = sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
		gr = sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED
		tp = sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED
		cl = sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED
		ok = sluicev1.ErrorCode_NONE
	)
	initIdempotent := func(t *testing.T, e *authzEnv, without string) {
		resp, _ := e.txns.InitProducerId(e.ctx, &sluicev1.InitProducerIdRequest{})
		if without != "" {
			wantCode(t, "InitProducerId", resp.ErrorCode, resp.ErrorMessage, cl, auth.ClusterResourceName)
			if resp.ProducerId != -1 || e.ids.next != 0 {
				t.Errorf("refused InitProducerId: producer id %d, %d ids handed out", resp.ProducerId, e.ids.next)
			}
			return
		}
		wantCode(t, "InitProducerId", resp.ErrorCode, resp.ErrorMessage, ok, "")
		if resp.ProducerId != 1000 {
			t.Errorf("InitProducerId: %v", resp)
		}
	}
	findCoordinators := func(keyType sluicev1.CoordinatorKeyType, code sluicev1.ErrorCode) func(*testing.T, *authzEnv, string) {
		return func(t *testing.T, e *authzEnv, without string) {
			resp, _ := e.txns.FindCoordinator(e.ctx, &sluicev1.FindCoordinatorRequest{KeyType: keyType, Keys: []string{"k1", "k2"}})
			var located []string
			for _, c := range resp.Coordinators {
				if c.Key == without {
					wantCode(t, c.Key, c.ErrorCode, c.ErrorMessage, code, c.Key)
					if c.NodeId != -1 || c.Address != "" {
						t.Errorf("%s refused but located: %v", c.Key, c)
					}
					continue
				}
				wantCode(t, c.Key, c.ErrorCode, c.ErrorMessage, ok, "")
				located = append(located, c.Key)
			}
			if !slices.Equal(e.locator.keys, located) {
				t.Errorf("located %v, want %v (a refused key creates no topic)", e.locator.keys, located)
			}
		}
	}
	return []authzCase{
		{
			method: "/sluice.v1.Transactions/InitProducerId",
			rule:   "a transactional id needs WRITE on it; refused, the coordinator is not asked (no epoch bump fences the owner)",
			acls:   map[string]auth.ACL{"tx": allowAlice(auth.ResourceTransactionalID, "tx", auth.OpWrite)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.txns.InitProducerId(e.ctx, &sluicev1.InitProducerIdRequest{TransactionalId: "tx"})
				if without != "" {
					wantCode(t, "InitProducerId", resp.ErrorCode, resp.ErrorMessage, tx, "tx")
					if resp.ProducerId != -1 || len(e.txnCoord.inits) != 0 || len(e.locator.keys) != 0 {
						t.Errorf("refused InitProducerId: %v; coordinator asked %v, located %v", resp, e.txnCoord.inits, e.locator.keys)
					}
					return
				}
				wantCode(t, "InitProducerId", resp.ErrorCode, resp.ErrorMessage, ok, "")
				if len(e.txnCoord.inits) != 1 || resp.ProducerId != 7 {
					t.Errorf("InitProducerId: %v; coordinator asked %v", resp, e.txnCoord.inits)
				}
			},
		},
		{
			method: "/sluice.v1.Transactions/InitProducerId",
			rule:   "an idempotent producer needs IDEMPOTENT_WRITE on the cluster",
			acls:   map[string]auth.ACL{"idempotent write": clusterAlice(auth.OpIdempotentWrite)},
			run:    initIdempotent,
		},
		{
			method: "/sluice.v1.Transactions/InitProducerId",
			rule:   "or WRITE on any topic (Kafka 3's authorizeByResourceType)",
			acls:   map[string]auth.ACL{"write orders": allowAlice(auth.ResourceTopic, "orders", auth.OpWrite)},
			alt:    true,
			run:    initIdempotent,
		},
		{
			method: "/sluice.v1.Transactions/FindCoordinator",
			rule:   "a transaction key needs DESCRIBE on the transactional id, per key",
			acls: map[string]auth.ACL{"k1": allowAlice(auth.ResourceTransactionalID, "k1", auth.OpDescribe),
				"k2": allowAlice(auth.ResourceTransactionalID, "k2", auth.OpDescribe)},
			run: findCoordinators(sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, tx),
		},
		{
			method: "/sluice.v1.Transactions/FindCoordinator",
			rule:   "a group key needs DESCRIBE on the group, per key",
			acls: map[string]auth.ACL{"k1": allowAlice(auth.ResourceGroup, "k1", auth.OpDescribe),
				"k2": allowAlice(auth.ResourceGroup, "k2", auth.OpDescribe)},
			run: findCoordinators(sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, gr),
		},
		{
			method: "/sluice.v1.Transactions/EndTxn",
			rule:   "WRITE on the transactional id; refused, nothing is committed or aborted",
			acls:   map[string]auth.ACL{"tx": allowAlice(auth.ResourceTransactionalID, "tx", auth.OpWrite)},
			run: func(t *testing.T, e *authzEnv, without string) {
				for _, commit := range []bool{true, false} {
					resp, _ := e.txns.EndTxn(e.ctx, &sluicev1.EndTxnRequest{TransactionalId: "tx", ProducerId: 7, ProducerEpoch: 1, Committed: commit})
					if without != "" {
						wantCode(t, "EndTxn", resp.ErrorCode, resp.ErrorMessage, tx, "tx")
						continue
					}
					wantCode(t, "EndTxn", resp.ErrorCode, resp.ErrorMessage, ok, "")
				}
				want := 2
				if without != "" {
					want = 0
				}
				if len(e.txnCoord.ends) != want {
					t.Errorf("the coordinator ended %d transactions, want %d", len(e.txnCoord.ends), want)
				}
			},
		},
		{
			method: "/sluice.v1.Transactions/DescribeTransactions",
			rule:   "DESCRIBE per id; a transaction's partitions only of the topics the caller may describe",
			acls: map[string]auth.ACL{"tx1": allowAlice(auth.ResourceTransactionalID, "tx1", auth.OpDescribe),
				"tx2":    allowAlice(auth.ResourceTransactionalID, "tx2", auth.OpDescribe),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			quiet: []string{"orders", "payments"},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.txns.DescribeTransactions(e.ctx, &sluicev1.DescribeTransactionsRequest{TransactionalIds: []string{"tx1", "tx2"}})
				for _, ts := range resp.TransactionStates {
					if ts.TransactionalId == without {
						wantCode(t, ts.TransactionalId, ts.ErrorCode, ts.ErrorMessage, tx, without)
						if ts.State != "" || ts.ProducerId != -1 || len(ts.Topics) != 0 {
							t.Errorf("%s refused but described: %v", without, ts)
						}
						continue
					}
					wantCode(t, ts.TransactionalId, ts.ErrorCode, ts.ErrorMessage, ok, "")
					var topics []string
					for _, tt := range ts.Topics {
						topics = append(topics, tt.Name)
					}
					want := slices.DeleteFunc([]string{"orders", "payments"}, func(s string) bool { return s == without })
					if ts.State != "Ongoing" || !slices.Equal(topics, want) {
						t.Errorf("%s: state %q, topics %v, want Ongoing %v", ts.TransactionalId, ts.State, topics, want)
					}
				}
			},
		},
		{
			method: "/sluice.v1.Transactions/ListTransactions",
			rule:   "only the ids the caller may describe",
			acls: map[string]auth.ACL{"tx1": allowAlice(auth.ResourceTransactionalID, "tx1", auth.OpDescribe),
				"tx2": allowAlice(auth.ResourceTransactionalID, "tx2", auth.OpDescribe)},
			quiet: []string{"tx1", "tx2"},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.txns.ListTransactions(e.ctx, &sluicev1.ListTransactionsRequest{})
				wantCode(t, "ListTransactions", resp.ErrorCode, resp.ErrorMessage, ok, "")
				var ids []string
				for _, l := range resp.TransactionStates {
					ids = append(ids, l.TransactionalId)
				}
				if want := slices.DeleteFunc([]string{"tx1", "tx2"}, func(s string) bool { return s == without }); !slices.Equal(ids, want) {
					t.Errorf("listed %v, want %v", ids, want)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/ConsumerGroupHeartbeat",
			rule:   "READ on the group and DESCRIBE on each subscribed topic named; refused, the member does not join",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpRead),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.ConsumerGroupHeartbeat(e.ctx, &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g",
					SubscribedTopicNames: []string{"orders", "payments", "orders"}})
				switch without {
				case "":
					wantCode(t, "join", resp.ErrorCode, resp.ErrorMessage, ok, "")
					if resp.MemberId != "m1" || len(e.groupCoord.heartbeats) != 1 {
						t.Errorf("join: %v; %d heartbeats", resp, len(e.groupCoord.heartbeats))
					}
					return
				case "g":
					wantCode(t, "join", resp.ErrorCode, resp.ErrorMessage, gr, "g")
				default:
					wantCode(t, "join", resp.ErrorCode, resp.ErrorMessage, tp, without)
				}
				if len(e.groupCoord.heartbeats) != 0 || resp.MemberId != "" || resp.Assignment != nil {
					t.Errorf("refused join: %v; coordinator asked %v", resp, e.groupCoord.heartbeats)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/ConsumerGroupHeartbeat",
			rule:   "a regex is not refused for what it may match: the coordinator gets the regex and the caller's quiet DESCRIBE check to filter its matches with",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpRead),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			quiet: []string{"orders", "payments"},
			run: func(t *testing.T, e *authzEnv, without string) {
				regex := "orders|payments"
				resp, _ := e.groups.ConsumerGroupHeartbeat(e.ctx, &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g",
					Regex: &sluicev1.ConsumerGroupHeartbeatRequest_SubscribedTopicRegex{SubscribedTopicRegex: regex}})
				if without == "g" {
					wantCode(t, "join", resp.ErrorCode, resp.ErrorMessage, gr, "g")
					return
				}
				wantCode(t, "join", resp.ErrorCode, resp.ErrorMessage, ok, "")
				if len(e.groupCoord.heartbeats) != 1 {
					t.Fatalf("%d heartbeats", len(e.groupCoord.heartbeats))
				}
				hr := e.groupCoord.heartbeats[0]
				// No filter means every topic: authorization off (or every
				// ACL granted); withholding one needs a filter that says so.
				if hr.SubscribedTopicRegex == nil || *hr.SubscribedTopicRegex != regex || (without != "" && hr.TopicFilter == nil) {
					t.Fatalf("the coordinator got regex %v, filter set %v", hr.SubscribedTopicRegex, hr.TopicFilter != nil)
				}
				for _, topic := range []string{"orders", "payments"} {
					if got := hr.TopicFilter == nil || hr.TopicFilter(topic); got != (topic != without) {
						t.Errorf("filter(%s) = %v with %q withheld", topic, got, without)
					}
				}
			},
		},
		{
			method: "/sluice.v1.Groups/ConsumerGroupHeartbeat",
			rule:   "a heartbeat naming no topics needs READ on the group only",
			acls:   map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpRead)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.ConsumerGroupHeartbeat(e.ctx, &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g", MemberId: "m1", MemberEpoch: 1})
				if without == "" {
					wantCode(t, "heartbeat", resp.ErrorCode, resp.ErrorMessage, ok, "")
					return
				}
				wantCode(t, "heartbeat", resp.ErrorCode, resp.ErrorMessage, gr, "g")
				if len(e.groupCoord.heartbeats) != 0 || resp.MemberId != "m1" || resp.MemberEpoch != 1 {
					t.Errorf("refused heartbeat: %v; coordinator asked %v", resp, e.groupCoord.heartbeats)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/OffsetCommit",
			rule:   "READ on the group (request) and on each topic (its partitions refused, the others committed)",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpRead),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpRead), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpRead)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.OffsetCommit(e.ctx, &sluicev1.OffsetCommitRequest{GroupId: "g", MemberEpoch: -1, Topics: commitTopics()})
				if without == "g" {
					checkCommit(t, e, resp.ErrorCode, resp.ErrorMessage, resp.Topics, gr, "g", "")
					return
				}
				checkCommit(t, e, resp.ErrorCode, resp.ErrorMessage, resp.Topics, ok, "", without)
			},
		},
		{
			method: "/sluice.v1.Groups/OffsetFetch",
			rule:   "DESCRIBE on the group (request) and on each topic named (its partitions refused, the others fetched)",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpDescribe),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.OffsetFetch(e.ctx, &sluicev1.OffsetFetchRequest{GroupId: "g", MemberEpoch: -1,
					Topics: []*sluicev1.OffsetFetchTopic{{Name: "orders", Partitions: []int32{0}}, {Name: "payments", Partitions: []int32{0}}}})
				if without == "g" {
					wantCode(t, "OffsetFetch", resp.ErrorCode, resp.ErrorMessage, gr, "g")
					if len(resp.Topics) != 0 || len(e.groupCoord.fetches) != 0 {
						t.Errorf("refused OffsetFetch: %v; coordinator asked %v", resp, e.groupCoord.fetches)
					}
					return
				}
				wantCode(t, "OffsetFetch", resp.ErrorCode, resp.ErrorMessage, ok, "")
				if len(resp.Topics) != 2 {
					t.Fatalf("OffsetFetch: %v", resp)
				}
				for _, tr := range resp.Topics {
					p := tr.Partitions[0]
					if tr.Name == without {
						wantCode(t, tr.Name, p.ErrorCode, p.ErrorMessage, tp, without)
						if p.CommittedOffset != -1 {
							t.Errorf("%s refused but fetched: %v", tr.Name, p)
						}
						continue
					}
					wantCode(t, tr.Name, p.ErrorCode, p.ErrorMessage, ok, "")
					if p.CommittedOffset != 5 {
						t.Errorf("%s: %v", tr.Name, p)
					}
				}
				for _, f := range e.groupCoord.fetches {
					for _, tp := range f {
						if tp.Topic == without {
							t.Errorf("the coordinator was asked for %v", tp)
						}
					}
				}
			},
		},
		{
			method: "/sluice.v1.Groups/OffsetFetch",
			rule:   "one topic named and refused: the coordinator is asked for none, not for all",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpDescribe),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.OffsetFetch(e.ctx, &sluicev1.OffsetFetchRequest{GroupId: "g", MemberEpoch: -1,
					Topics: []*sluicev1.OffsetFetchTopic{{Name: "orders", Partitions: []int32{0}}}})
				if without != "orders" {
					return // as in the case above
				}
				if len(resp.Topics) != 1 || resp.Topics[0].Name != "orders" || len(e.groupCoord.fetches) != 1 || e.groupCoord.fetches[0] == nil {
					t.Errorf("OffsetFetch of a refused topic: %v; coordinator asked %v", resp, e.groupCoord.fetches)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/OffsetFetch",
			rule:   "every partition (no topic named): the topics the caller may not describe are left out",
			acls: map[string]auth.ACL{"g": allowAlice(auth.ResourceGroup, "g", auth.OpDescribe),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			quiet: []string{"orders", "payments"},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.OffsetFetch(e.ctx, &sluicev1.OffsetFetchRequest{GroupId: "g", MemberEpoch: -1})
				if without == "g" {
					wantCode(t, "OffsetFetch", resp.ErrorCode, resp.ErrorMessage, gr, "g")
					return
				}
				var topics []string
				for _, tr := range resp.Topics {
					topics = append(topics, tr.Name)
				}
				if want := slices.DeleteFunc([]string{"orders", "payments"}, func(s string) bool { return s == without }); !slices.Equal(topics, want) {
					t.Errorf("fetched %v, want %v", topics, want)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/TxnOffsetCommit",
			rule:   "WRITE on the transactional id and READ on the group (request), READ on each topic (its partitions refused)",
			acls: map[string]auth.ACL{"tx": allowAlice(auth.ResourceTransactionalID, "tx", auth.OpWrite),
				"g":      allowAlice(auth.ResourceGroup, "g", auth.OpRead),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpRead), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpRead)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.TxnOffsetCommit(e.ctx, &sluicev1.TxnOffsetCommitRequest{TransactionalId: "tx", GroupId: "g",
					ProducerId: 7, ProducerEpoch: 1, MemberEpoch: -1, Topics: commitTopics()})
				switch without {
				case "tx":
					checkCommit(t, e, resp.ErrorCode, resp.ErrorMessage, resp.Topics, tx, "tx", "")
				case "g":
					checkCommit(t, e, resp.ErrorCode, resp.ErrorMessage, resp.Topics, gr, "g", "")
				default:
					checkCommit(t, e, resp.ErrorCode, resp.ErrorMessage, resp.Topics, ok, "", without)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/ListGroups",
			rule:   "only the groups the caller may describe",
			acls: map[string]auth.ACL{"g1": allowAlice(auth.ResourceGroup, "g1", auth.OpDescribe),
				"g2": allowAlice(auth.ResourceGroup, "g2", auth.OpDescribe)},
			quiet: []string{"g1", "g2"},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.ListGroups(e.ctx, &sluicev1.ListGroupsRequest{})
				if want := slices.DeleteFunc([]string{"g1", "g2"}, func(s string) bool { return s == without }); !slices.Equal(listedGroups(resp), want) {
					t.Errorf("listed %v, want %v", listedGroups(resp), want)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/ListGroups",
			rule:   "every group for a caller that may describe the cluster",
			acls:   map[string]auth.ACL{"cluster": clusterAlice(auth.OpDescribe)},
			alt:    true,
			quiet:  []string{"cluster"},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.ListGroups(e.ctx, &sluicev1.ListGroupsRequest{})
				var want []string
				if without == "" {
					want = []string{"g1", "g2"}
				}
				if !slices.Equal(listedGroups(resp), want) {
					t.Errorf("listed %v, want %v", listedGroups(resp), want)
				}
			},
		},
		{
			method: "/sluice.v1.Groups/DescribeGroups",
			rule:   "DESCRIBE per group, and on each topic its members are assigned or targeted (unnamed in the answer)",
			acls: map[string]auth.ACL{"g1": allowAlice(auth.ResourceGroup, "g1", auth.OpDescribe),
				"g2":     allowAlice(auth.ResourceGroup, "g2", auth.OpDescribe),
				"orders": allowAlice(auth.ResourceTopic, "orders", auth.OpDescribe), "payments": allowAlice(auth.ResourceTopic, "payments", auth.OpDescribe)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.DescribeGroups(e.ctx, &sluicev1.DescribeGroupsRequest{GroupIds: []string{"g1", "g2"}})
				for _, g := range resp.Groups {
					switch without {
					case "":
						wantCode(t, g.GroupId, g.ErrorCode, g.ErrorMessage, ok, "")
						if g.State != "Stable" || len(g.Members) != 1 {
							t.Errorf("%s: %v", g.GroupId, g)
						}
						continue
					case g.GroupId:
						wantCode(t, g.GroupId, g.ErrorCode, g.ErrorMessage, gr, g.GroupId)
					case "orders", "payments":
						wantCode(t, g.GroupId, g.ErrorCode, g.ErrorMessage, tp, g.GroupId)
						if strings.Contains(g.ErrorMessage, without) {
							t.Errorf("%s: %q names the topic the caller may not describe", g.GroupId, g.ErrorMessage)
						}
					default:
						wantCode(t, g.GroupId, g.ErrorCode, g.ErrorMessage, ok, "")
						continue
					}
					if len(g.Members) != 0 || g.Assignor != "" {
						t.Errorf("%s refused but described: %v", g.GroupId, g)
					}
				}
			},
		},
		{
			method: "/sluice.v1.Groups/DeleteGroups",
			rule:   "DELETE per group; a refused group is not deleted",
			acls: map[string]auth.ACL{"g1": allowAlice(auth.ResourceGroup, "g1", auth.OpDelete),
				"g2": allowAlice(auth.ResourceGroup, "g2", auth.OpDelete)},
			run: func(t *testing.T, e *authzEnv, without string) {
				resp, _ := e.groups.DeleteGroups(e.ctx, &sluicev1.DeleteGroupsRequest{GroupIds: []string{"g1", "g2"}})
				for _, r := range resp.Results {
					if r.GroupId == without {
						wantCode(t, r.GroupId, r.ErrorCode, r.ErrorMessage, gr, r.GroupId)
						continue
					}
					wantCode(t, r.GroupId, r.ErrorCode, r.ErrorMessage, ok, "")
				}
				if want := slices.DeleteFunc([]string{"g1", "g2"}, func(s string) bool { return s == without }); !slices.Equal(e.groupCoord.deleted, want) {
					t.Errorf("deleted %v, want %v", e.groupCoord.deleted, want)
				}
			},
		},
	}
}

// checkCasesFollowTable fails t unless every Transactions and Groups RPC
// is in auth.Operations and has cases, and the cases' ACLs are the
// table's requirements (or, for alt cases, an alternative it names), each
// requirement exercised.
func checkCasesFollowTable(t *testing.T, cases []authzCase) {
	t.Helper()
	type req struct {
		rt auth.ResourceType
		op auth.Operation
	}
	covered := map[string]map[req]bool{}
	for _, c := range cases {
		reqs, ok := auth.Operations[c.method]
		if !ok {
			t.Errorf("%s: not in auth.Operations", c.method)
			continue
		}
		if covered[c.method] == nil {
			covered[c.method] = map[req]bool{}
		}
		for name, acl := range c.acls {
			r := req{acl.ResourceType, acl.Operation}
			match := slices.ContainsFunc(reqs, func(q auth.Requirement) bool {
				if c.alt {
					return strings.Contains(q.Alt, string(r.op)) && strings.Contains(q.Alt, strings.ToLower(string(r.rt)))
				}
				return q.Resource == r.rt && q.Op == r.op
			})
			if !match {
				t.Errorf("%s (%s): ACL %s (%s on %s) is not in the table's requirements %v", c.method, c.rule, name, r.op, r.rt, reqs)
			}
			if !c.alt {
				covered[c.method][r] = true
			}
		}
	}
	var methods []string
	for _, m := range sluicev1.Transactions_ServiceDesc.Methods {
		methods = append(methods, "/"+sluicev1.Transactions_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for _, m := range sluicev1.Groups_ServiceDesc.Methods {
		methods = append(methods, "/"+sluicev1.Groups_ServiceDesc.ServiceName+"/"+m.MethodName)
	}
	for m := range maps.Keys(auth.Operations) {
		if (strings.HasPrefix(m, "/sluice.v1.Transactions/") || strings.HasPrefix(m, "/sluice.v1.Groups/")) && !slices.Contains(methods, m) {
			methods = append(methods, m)
		}
	}
	for _, m := range methods {
		reqs, ok := auth.Operations[m]
		if !ok {
			t.Errorf("%s: not in auth.Operations", m)
			continue
		}
		for _, q := range reqs {
			if !covered[m][req{q.Resource, q.Op}] {
				t.Errorf("%s: no case exercises %s on %s (%s)", m, q.Op, q.Resource, q.Of)
			}
		}
	}
}

func TestTransactionsAndGroupsAuthorization(t *testing.T) {
	cases := authzCases()
	checkCasesFollowTable(t, cases)
	for _, c := range cases {
		t.Run(strings.TrimPrefix(c.method, "/sluice.v1.")+"/"+c.rule, func(t *testing.T) {
			names := slices.Sorted(maps.Keys(c.acls))
			t.Run("allowed", func(t *testing.T) {
				e := newAuthzEnv(t, slices.Collect(maps.Values(c.acls)), false)
				c.run(t, e, "")
				if len(e.denials) != 0 {
					t.Errorf("denials counted: %v", e.denials)
				}
			})
			for _, without := range names {
				t.Run("without "+without, func(t *testing.T) {
					acls := maps.Clone(c.acls)
					delete(acls, without)
					e := newAuthzEnv(t, slices.Collect(maps.Values(acls)), false)
					c.run(t, e, without)
					if quiet := slices.Contains(c.quiet, without); quiet != (len(e.denials) == 0) {
						t.Errorf("denials counted: %v (a listing filters quietly; a refusal is audited)", e.denials)
					}
				})
			}
			t.Run("authorization off", func(t *testing.T) {
				c.run(t, newAuthzEnv(t, nil, true), "")
			})
		})
	}
}
