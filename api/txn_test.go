package api_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// txnWait bounds the waits of these tests for a retriable answer to turn
// into a definite one (topic creation, leader election, partition load).
const txnWait = 20 * time.Second

// findCoordinator asks conn for key's coordinator until the answer is
// not retriable, and fails the test unless it is NONE. Only NONE and
// COORDINATOR_NOT_AVAILABLE may be seen on the way.
func findCoordinator(t *testing.T, conn grpc.ClientConnInterface, key string) *sluicev1.Coordinator {
	t.Helper()
	var c *sluicev1.Coordinator
	wait.For(t, txnWait, "FindCoordinator("+key+")", func() error {
		resp, err := sluicev1.NewTransactionsClient(conn).FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{
			KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: []string{key}})
		if err != nil {
			return err
		}
		c = resp.Coordinators[0]
		switch c.ErrorCode {
		case sluicev1.ErrorCode_NONE:
			return nil
		case sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE:
			return fmt.Errorf("%v %s", c.ErrorCode, c.ErrorMessage)
		}
		t.Fatalf("FindCoordinator(%s): %v %s", key, c.ErrorCode, c.ErrorMessage)
		return nil
	})
	if c.Key != key || c.NodeId < 0 || c.Address == "" {
		t.Fatalf("FindCoordinator(%s) = %v", key, c)
	}
	return c
}

// retriableTxnCode reports the answers a transactional client retries at
// the same coordinator (after a pause).
func retriableTxnCode(c sluicev1.ErrorCode) bool {
	switch c {
	case sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE, sluicev1.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS,
		sluicev1.ErrorCode_CONCURRENT_TRANSACTIONS, sluicev1.ErrorCode_NOT_COORDINATOR:
		return true
	}
	return false
}

// initTxnProducer sends InitProducerId(id) to conn until it is answered
// with something other than a retriable code, and returns that answer.
func initTxnProducer(t *testing.T, conn grpc.ClientConnInterface, req *sluicev1.InitProducerIdRequest) *sluicev1.InitProducerIdResponse {
	t.Helper()
	var resp *sluicev1.InitProducerIdResponse
	wait.For(t, txnWait, "InitProducerId("+req.TransactionalId+")", func() error {
		var err error
		if resp, err = sluicev1.NewTransactionsClient(conn).InitProducerId(ctx(t), req); err != nil {
			return err
		}
		if retriableTxnCode(resp.ErrorCode) {
			return fmt.Errorf("%v %s", resp.ErrorCode, resp.ErrorMessage)
		}
		return nil
	})
	return resp
}

// endTxn sends EndTxn to conn until it is answered with something other
// than a retriable code, and returns that answer.
func endTxn(t *testing.T, conn grpc.ClientConnInterface, req *sluicev1.EndTxnRequest) *sluicev1.EndTxnResponse {
	t.Helper()
	var resp *sluicev1.EndTxnResponse
	wait.For(t, txnWait, "EndTxn("+req.TransactionalId+")", func() error {
		var err error
		if resp, err = sluicev1.NewTransactionsClient(conn).EndTxn(ctx(t), req); err != nil {
			return err
		}
		if retriableTxnCode(resp.ErrorCode) {
			return fmt.Errorf("%v %s", resp.ErrorCode, resp.ErrorMessage)
		}
		return nil
	})
	return resp
}

// waitTxnState waits until conn's coordinator describes id in state.
func waitTxnState(t *testing.T, conn grpc.ClientConnInterface, id string, state txn.State) *sluicev1.TransactionState {
	t.Helper()
	var ts *sluicev1.TransactionState
	wait.For(t, txnWait, fmt.Sprintf("%s in %v", id, state), func() error {
		resp, err := sluicev1.NewTransactionsClient(conn).DescribeTransactions(ctx(t), &sluicev1.DescribeTransactionsRequest{TransactionalIds: []string{id}})
		if err != nil {
			return err
		}
		ts = resp.TransactionStates[0]
		if ts.ErrorCode != sluicev1.ErrorCode_NONE || ts.State != state.String() {
			return fmt.Errorf("%v %s: state %q", ts.ErrorCode, ts.ErrorMessage, ts.State)
		}
		return nil
	})
	return ts
}

// stateTopic returns the metadata of __transaction_state from conn.
func stateTopic(t *testing.T, conn grpc.ClientConnInterface) *sluicev1.TopicMetadata {
	t.Helper()
	md, err := sluicev1.NewAdminClient(conn).Metadata(ctx(t), &sluicev1.MetadataRequest{Topics: []string{txn.StateTopic}})
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[0]
}

// TestFindCoordinatorCreatesStateTopic: on a one-node cluster the first
// FindCoordinator creates __transaction_state (the configured partition
// count, replication factor 1 = min(3, brokers), min.insync.replicas 1)
// and answers the node itself; bad keys are INVALID_REQUEST per key. A
// group key creates __consumer_offsets and is answered the same way.
func TestFindCoordinatorCreatesStateTopic(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.TransactionStatePartitions = 4 })
	if tm := stateTopic(t, tn.conn); tm.ErrorCode != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("%s exists before any transactional request: %v", txn.StateTopic, tm)
	}
	for _, key := range []string{"a", "b", "u12-txn"} {
		if c := findCoordinator(t, tn.conn, key); c.NodeId != 1 || c.Address != tn.node.Addr() {
			t.Errorf("coordinator of %s: %v, want node 1 at %s", key, c, tn.node.Addr())
		}
	}
	tm := stateTopic(t, tn.conn)
	if tm.ErrorCode != sluicev1.ErrorCode_NONE || len(tm.Partitions) != 4 || len(tm.Partitions[0].Replicas) != 1 ||
		tm.Configs["min.insync.replicas"] != "1" {
		t.Fatalf("%s: %v", txn.StateTopic, tm)
	}
	cl := sluicev1.NewTransactionsClient(tn.conn)
	resp, err := cl.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{Keys: []string{"", "ok", strings.Repeat("x", txn.MaxTransactionalIDBytes+1)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []sluicev1.ErrorCode{sluicev1.ErrorCode_INVALID_REQUEST, sluicev1.ErrorCode_NONE, sluicev1.ErrorCode_INVALID_REQUEST}
	for i, c := range resp.Coordinators {
		if c.ErrorCode != want[i] || (c.ErrorCode != sluicev1.ErrorCode_NONE && (c.NodeId != -1 || c.ErrorMessage == "")) {
			t.Errorf("key #%d: %v %s, want %v", i, c.ErrorCode, c.ErrorMessage, want[i])
		}
	}
	// Group keys: served by the leader of the group's __consumer_offsets
	// partition (created on this first call); a bad group id is refused.
	var gr *sluicev1.FindCoordinatorResponse
	wait.Until(t, 30*time.Second, "a group coordinator", func() bool {
		gr, err = cl.FindCoordinator(ctx(t), &sluicev1.FindCoordinatorRequest{KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP, Keys: []string{"g", ""}})
		if err != nil {
			t.Fatal(err)
		}
		return gr.Coordinators[0].ErrorCode != sluicev1.ErrorCode_COORDINATOR_NOT_AVAILABLE
	})
	if c := gr.Coordinators[0]; c.ErrorCode != sluicev1.ErrorCode_NONE || c.NodeId != 1 || c.Address == "" {
		t.Errorf("group key: %v", c)
	}
	if c := gr.Coordinators[1]; c.ErrorCode != sluicev1.ErrorCode_INVALID_GROUP_ID || c.NodeId != -1 {
		t.Errorf("empty group id: %v, want INVALID_GROUP_ID", c)
	}
}

// TestInternalTopicsRefusedToUsers: CreateTopics of a "__" name is
// refused in the public API (the other topics of the request are still
// created), and __transaction_state cannot be deleted through it.
func TestInternalTopicsRefusedToUsers(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.TransactionStatePartitions = 1 })
	resp, err := tn.admin.CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{
		{Name: "__x", NumPartitions: 1, ReplicationFactor: 1},
		{Name: "user", NumPartitions: 1, ReplicationFactor: 1},
		{Name: txn.StateTopic, NumPartitions: 1, ReplicationFactor: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Topics
	if len(got) != 3 || got[0].Name != "__x" || got[0].ErrorCode != sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION ||
		!strings.Contains(got[0].ErrorMessage, "reserved for internal topics") ||
		got[1].Name != "user" || got[1].ErrorCode != sluicev1.ErrorCode_NONE ||
		got[2].ErrorCode != sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION {
		t.Fatalf("create: %v", got)
	}
	findCoordinator(t, tn.conn, "tx") // creates __transaction_state
	del, err := tn.admin.DeleteTopics(ctx(t), &sluicev1.DeleteTopicsRequest{Names: []string{txn.StateTopic}})
	if err != nil {
		t.Fatal(err)
	}
	if r := del.Topics[0]; r.ErrorCode != sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION || r.Name != txn.StateTopic {
		t.Fatalf("delete %s: %v", txn.StateTopic, r)
	}
	if tm := stateTopic(t, tn.conn); tm.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("%s after the refused delete: %v", txn.StateTopic, tm)
	}
}

// TestTransactionalProducerLifecycle: InitProducerId with a transactional
// id gives a new producer id at epoch 0 (creating __transaction_state on
// the way) and bumps the epoch on the next call; empty transactions
// commit and abort cleanly (TV2: the epoch is bumped at every end); stale
// epochs are fenced per the core; Describe and List show the state; the
// coordinator's gauges are on /metrics.
func TestTransactionalProducerLifecycle(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) {
		c.TransactionStatePartitions = 3
		c.HTTPListen = "127.0.0.1:0"
	})
	const id = "tx-lifecycle"
	first := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id})
	if first.ErrorCode != sluicev1.ErrorCode_NONE || first.ProducerId < 1000 || first.ProducerEpoch != 0 {
		t.Fatalf("first InitProducerId: %v", first)
	}
	pid := first.ProducerId
	second := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id, TransactionTimeoutMs: 30000})
	if second.ErrorCode != sluicev1.ErrorCode_NONE || second.ProducerId != pid || second.ProducerEpoch != 1 {
		t.Fatalf("second InitProducerId: %v, want producer %d epoch 1", second, pid)
	}
	ts := waitTxnState(t, tn.conn, id, txn.Empty)
	if ts.ProducerId != pid || ts.ProducerEpoch != 1 || ts.TransactionTimeoutMs != 30000 || ts.CoordinatorEpoch < 0 {
		t.Fatalf("describe after InitProducerId: %v", ts)
	}
	// The id never changed: no previous and no next producer id.
	if ts.PreviousProducerId != -1 || ts.NextProducerId != -1 {
		t.Fatalf("describe after InitProducerId: previous %d, next %d producer id, want -1 and -1", ts.PreviousProducerId, ts.NextProducerId)
	}
	// A timeout above transaction.max.timeout.ms is refused.
	if r := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id, TransactionTimeoutMs: int32((16 * time.Minute).Milliseconds())}); r.ErrorCode != sluicev1.ErrorCode_INVALID_TRANSACTION_TIMEOUT {
		t.Fatalf("timeout above the maximum: %v", r)
	}

	// An empty commit, then an empty abort: each bumps the epoch and
	// completes.
	c := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 1, Committed: true})
	if c.ErrorCode != sluicev1.ErrorCode_NONE || c.ProducerId != pid || c.ProducerEpoch != 2 {
		t.Fatalf("empty commit: %v", c)
	}
	waitTxnState(t, tn.conn, id, txn.CompleteCommit)
	a := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 2})
	if a.ErrorCode != sluicev1.ErrorCode_NONE || a.ProducerEpoch != 3 {
		t.Fatalf("empty abort: %v", a)
	}
	ts = waitTxnState(t, tn.conn, id, txn.CompleteAbort)
	if ts.ProducerEpoch != 3 || ts.LastProducerEpoch != 2 || len(ts.Topics) != 0 {
		t.Fatalf("describe after the abort: %v", ts)
	}
	// A retry of that abort (epoch 2) is answered the same; an older
	// epoch is fenced; another producer id is not this id's.
	if r := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 2}); r.ErrorCode != sluicev1.ErrorCode_NONE || r.ProducerEpoch != 3 {
		t.Fatalf("retried abort: %v", r)
	}
	if r := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 0, Committed: true}); r.ErrorCode != sluicev1.ErrorCode_PRODUCER_FENCED || r.ProducerId != -1 {
		t.Fatalf("stale epoch: %v", r)
	}
	if r := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid + 1, ProducerEpoch: 3, Committed: true}); r.ErrorCode != sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING {
		t.Fatalf("other producer id: %v", r)
	}
	if r := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: "never-initialised", ProducerId: pid, ProducerEpoch: 0}); r.ErrorCode != sluicev1.ErrorCode_INVALID_PRODUCER_ID_MAPPING {
		t.Fatalf("unknown id: %v", r)
	}
	// KIP-360: the current id and epoch get the next epoch; an old epoch
	// is fenced.
	if r := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 3}); r.ErrorCode != sluicev1.ErrorCode_NONE || r.ProducerEpoch != 4 {
		t.Fatalf("KIP-360 InitProducerId: %v", r)
	}
	if r := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 1}); r.ErrorCode != sluicev1.ErrorCode_PRODUCER_FENCED {
		t.Fatalf("KIP-360 InitProducerId with an old epoch: %v", r)
	}
	if r := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: "tx-other"}); r.ErrorCode != sluicev1.ErrorCode_NONE || r.ProducerId == pid {
		t.Fatalf("second id: %v", r)
	}

	// Describe of an unknown id; List with filters.
	cl := sluicev1.NewTransactionsClient(tn.conn)
	dr, err := cl.DescribeTransactions(ctx(t), &sluicev1.DescribeTransactionsRequest{TransactionalIds: []string{"nobody"}})
	if err != nil || dr.TransactionStates[0].ErrorCode != sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND {
		t.Fatalf("describe unknown: %v %v", dr, err)
	}
	list := func(req *sluicev1.ListTransactionsRequest) ([]string, []string) {
		t.Helper()
		resp, err := cl.ListTransactions(ctx(t), req)
		if err != nil || resp.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("list %v: %v %v", req, resp, err)
		}
		var ids []string
		for _, l := range resp.TransactionStates {
			ids = append(ids, l.TransactionalId+"/"+l.State)
			if l.DurationMs != -1 {
				t.Errorf("%s has no open transaction but a duration of %d ms", l.TransactionalId, l.DurationMs)
			}
		}
		return ids, resp.UnknownStateFilters
	}
	if ids, unknown := list(&sluicev1.ListTransactionsRequest{}); !slices.Equal(ids, []string{"tx-lifecycle/Empty", "tx-other/Empty"}) || unknown != nil {
		t.Errorf("list all: %v %v", ids, unknown)
	}
	if ids, unknown := list(&sluicev1.ListTransactionsRequest{StateFilters: []string{"Empty", "Bogus"}, ProducerIdFilters: []int64{pid}}); !slices.Equal(ids, []string{"tx-lifecycle/Empty"}) || !slices.Equal(unknown, []string{"Bogus"}) {
		t.Errorf("list Empty of producer %d: %v %v", pid, ids, unknown)
	}
	if ids, _ := list(&sluicev1.ListTransactionsRequest{StateFilters: []string{"Ongoing"}}); len(ids) != 0 {
		t.Errorf("list Ongoing: %v", ids)
	}
	if ids, unknown := list(&sluicev1.ListTransactionsRequest{StateFilters: []string{"Bogus"}}); len(ids) != 0 || !slices.Equal(unknown, []string{"Bogus"}) {
		t.Errorf("list with only unknown states: %v %v", ids, unknown)
	}
	if ids, _ := list(&sluicev1.ListTransactionsRequest{DurationFilterMs: 1}); len(ids) != 0 {
		t.Errorf("list open for 1 ms: %v", ids)
	}

	// The coordinator's gauges, one series per led partition.
	hr, err := http.Get("http://" + tn.node.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	for _, want := range []string{`sluice_txn_coordinator_open_transactions{partition="0"} 0`, `sluice_txn_coordinator_pending_markers{partition="2"} 0`,
		`sluice_txn_coordinator_loading{partition="1"} 0`, `sluice_txn_coordinator_load_seconds{partition="0"}`,
		`sluice_txn_coordinator_queue_depth{partition="0"} 0`, `sluice_txn_coordinator_append_seconds_count `,
		`sluice_txn_coordinator_append_seconds_bucket{le="0.0005"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestTransactionMarkersAcrossBrokers: on three nodes, every broker names
// the same coordinator; another broker answers NOT_COORDINATOR; a
// transaction whose partitions (led by different nodes) are added through
// the internal AddPartitionsToTxn, as a partition leader would, commits
// with a COMMIT marker in each partition — written locally and through
// WriteTxnMarkers to the other leaders — and completes.
func TestTransactionMarkersAcrossBrokers(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, true, nil)
	tc.ConfigureAll(func(_ int32, c *node.Config) { c.TransactionStatePartitions = 3 })
	tc.StartAll()
	const id = "tx-markers"
	conns := map[int32]*grpc.ClientConn{}
	for _, n := range []int32{1, 2, 3} {
		conns[n] = tc.Dial(n)
	}
	coord := findCoordinator(t, conns[1], id)
	tc.WaitTopic(txn.StateTopic, 3)
	for _, n := range []int32{2, 3} {
		if c := findCoordinator(t, conns[n], id); c.NodeId != coord.NodeId || c.Address != coord.Address {
			t.Fatalf("node %d names coordinator %v, node 1 %v", n, c, coord)
		}
	}
	if tm := stateTopic(t, conns[1]); len(tm.Partitions[0].Replicas) != 3 || tm.Configs["min.insync.replicas"] != "2" {
		t.Fatalf("%s: %v", txn.StateTopic, tm)
	}
	cc := conns[coord.NodeId]
	other := coord.NodeId%3 + 1
	if r, err := sluicev1.NewTransactionsClient(conns[other]).InitProducerId(ctx(t), &sluicev1.InitProducerIdRequest{TransactionalId: id}); err != nil ||
		r.ErrorCode != sluicev1.ErrorCode_NOT_COORDINATOR {
		t.Fatalf("InitProducerId at node %d (not the coordinator): %v %v", other, r, err)
	}

	// A user topic with partitions led by different nodes.
	cr, err := sluicev1.NewAdminClient(cc).CreateTopics(ctx(t), &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "orders", NumPartitions: 3, ReplicationFactor: 1}}})
	if err != nil || cr.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("create orders: %v %v", cr, err)
	}
	tc.WaitTopic("orders", 3)
	leaders := map[int32]int32{}
	for p := int32(0); p < 3; p++ {
		h, _ := tc.Node(1).Metadata().Leader("orders", p)
		leaders[p] = h.LeaderID
	}
	distinct := map[int32]bool{}
	for _, l := range leaders {
		distinct[l] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("orders' partitions are all led by one node: %v", leaders)
	}

	init := initTxnProducer(t, cc, &sluicev1.InitProducerIdRequest{TransactionalId: id})
	if init.ErrorCode != sluicev1.ErrorCode_NONE || init.ProducerEpoch != 0 {
		t.Fatalf("InitProducerId: %v", init)
	}
	pid := init.ProducerId
	add := &internalv1.AddPartitionsToTxnRequest{BrokerId: leaders[0], Transactions: []*internalv1.AddPartitionsToTxnTransaction{{
		TransactionalId: id, ProducerId: pid, ProducerEpoch: 0,
		Partitions: []*internalv1.TxnPartition{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "orders", Partition: 2}},
	}}}
	wait.For(t, txnWait, "AddPartitionsToTxn", func() error {
		resp, err := internalv1.NewTxnBrokerClient(tc.DialInternal(coord.NodeId)).AddPartitionsToTxn(ctx(t), add)
		if err != nil {
			return err
		}
		r := resp.Results[0]
		if r.TransactionalId != id {
			t.Fatalf("AddPartitionsToTxn answered %v", resp)
		}
		if r.ErrorCode != sluicev1.ErrorCode_NONE && !errs.Retriable(r.ErrorCode) {
			t.Fatalf("AddPartitionsToTxn: %v %s", r.ErrorCode, r.ErrorMessage)
		}
		if r.ErrorCode != sluicev1.ErrorCode_NONE {
			return fmt.Errorf("%v %s", r.ErrorCode, r.ErrorMessage)
		}
		return nil
	})
	if ts := waitTxnState(t, cc, id, txn.Ongoing); len(ts.Topics) != 1 || !slices.Equal(ts.Topics[0].Partitions, []int32{0, 1, 2}) {
		t.Fatalf("describe Ongoing: %v", ts)
	}
	lr, err := sluicev1.NewTransactionsClient(cc).ListTransactions(ctx(t), &sluicev1.ListTransactionsRequest{StateFilters: []string{"Ongoing"}})
	if err != nil || len(lr.TransactionStates) != 1 || lr.TransactionStates[0].DurationMs < 0 {
		t.Fatalf("list Ongoing: %v %v", lr, err)
	}

	end := endTxn(t, cc, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: 0, Committed: true})
	if end.ErrorCode != sluicev1.ErrorCode_NONE || end.ProducerEpoch != 1 {
		t.Fatalf("EndTxn commit: %v", end)
	}
	waitTxnState(t, cc, id, txn.CompleteCommit)

	// Each partition holds exactly one batch: the COMMIT marker of pid at
	// the bumped epoch, committed (below the high watermark).
	for p, leader := range leaders {
		rep, err := tc.Node(leader).Replicas().Replica("orders", p)
		if err != nil {
			t.Fatal(err)
		}
		if leo, hw := rep.LogEndOffset(), rep.HighWatermark(); leo != 1 || hw != 1 {
			t.Fatalf("orders-%d on node %d: log end %d, high watermark %d; want one committed marker", p, leader, leo, hw)
		}
		rd, err := rep.Read(0, 1<<20, 1)
		if err != nil || len(rd.Batches) != 1 {
			t.Fatalf("orders-%d: %v %v", p, rd, err)
		}
		h, err := batch.ParseHeader(rd.Batches[0])
		if err != nil || !h.IsControl() || h.ProducerID != pid || h.ProducerEpoch != 1 {
			t.Fatalf("orders-%d: batch %+v %v, want a control batch of producer %d epoch 1", p, h, err, pid)
		}
		var ct batch.ControlType
		if err := batch.ForEachRecord(rd.Batches[0], func(r batch.Record) error {
			ct, _, err = batch.ParseMarker(r.Key, r.Value)
			return err
		}); err != nil || ct != batch.ControlCommit {
			t.Fatalf("orders-%d: marker %v %v, want COMMIT", p, ct, err)
		}
	}
	lr, err = sluicev1.NewTransactionsClient(conns[other]).ListTransactions(ctx(t), &sluicev1.ListTransactionsRequest{})
	if err != nil || lr.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("list at node %d: %v %v", other, lr, err)
	}
	for _, l := range lr.TransactionStates {
		if l.TransactionalId == id {
			t.Errorf("node %d, not the coordinator, lists %s", other, id)
		}
	}
}

// addPartitionWithRetry calls v.AddPartition until the answer is not
// retriable and returns it (one attempt per call is the verifier's
// contract; the caller retries).
func addPartitionWithRetry(t *testing.T, v cluster.TxnVerifier, id string, pid int64, epoch int16, tp cluster.TopicPartition) error {
	t.Helper()
	var last error
	wait.For(t, txnWait, "AddPartition "+tp.String(), func() error {
		last = v.AddPartition(ctx(t), id, pid, epoch, tp, false)
		if last != nil && errs.Retriable(errs.Code(last)) {
			return last
		}
		return nil
	})
	return last
}

// TestTxnVerifierRoutesToCoordinator: a partition leader's verifier adds
// partitions at the transaction's coordinator, directly on the
// coordinator's own node and through AddPartitionsToTxn from another;
// concurrent calls from one broker for one transaction all succeed (they
// queue behind the request in flight and are merged into one entry); a
// stale epoch gets the coordinator's fencing answer.
func TestTxnVerifierRoutesToCoordinator(t *testing.T) {
	tc := newTestCluster(t, []int32{1, 2, 3}, true, nil)
	tc.ConfigureAll(func(_ int32, c *node.Config) { c.TransactionStatePartitions = 2 })
	tc.StartAll()
	const id = "tx-verify"
	coord := findCoordinator(t, tc.Dial(1), id)
	cc := tc.Dial(coord.NodeId)
	init := initTxnProducer(t, cc, &sluicev1.InitProducerIdRequest{TransactionalId: id})
	if init.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v", init)
	}
	pid, epoch := init.ProducerId, int16(init.ProducerEpoch)
	other := coord.NodeId%3 + 1
	tc.WaitTopic(txn.StateTopic, 2) // the other node's metadata names the coordinator

	if err := addPartitionWithRetry(t, tc.Node(coord.NodeId).TxnVerifier(), id, pid, epoch, cluster.TopicPartition{Topic: "t", Partition: 0}); err != nil {
		t.Fatalf("local AddPartition: %v", err)
	}
	remote := tc.Node(other).TxnVerifier()
	if err := addPartitionWithRetry(t, remote, id, pid, epoch, cluster.TopicPartition{Topic: "t", Partition: 1}); err != nil {
		t.Fatalf("remote AddPartition: %v", err)
	}
	const n = 8
	errsCh := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			errsCh <- remote.AddPartition(ctx(t), id, pid, epoch, cluster.TopicPartition{Topic: "u", Partition: int32(i)}, false)
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errsCh; err != nil {
			t.Errorf("concurrent AddPartition: %v", err)
		}
	}
	ts := waitTxnState(t, cc, id, txn.Ongoing)
	if len(ts.Topics) != 2 || !slices.Equal(ts.Topics[0].Partitions, []int32{0, 1}) || len(ts.Topics[1].Partitions) != n {
		t.Fatalf("describe: %v", ts.Topics)
	}
	if err := addPartitionWithRetry(t, remote, id, pid, epoch-1, cluster.TopicPartition{Topic: "t", Partition: 2}); errs.Code(err) != sluicev1.ErrorCode_PRODUCER_FENCED &&
		errs.Code(err) != sluicev1.ErrorCode_INVALID_PRODUCER_EPOCH {
		t.Fatalf("stale epoch: %v", err)
	}
}

// TestMarkersSkipDeletedTopic: a partition whose topic is deleted before
// the transaction ends gets no marker (UNKNOWN_TOPIC_OR_PARTITION drops
// it from the round) and the transaction still completes, with its marker
// written in the partition that remains.
func TestMarkersSkipDeletedTopic(t *testing.T) {
	tn := startNodeWith(t, t.TempDir(), func(c *node.Config) { c.TransactionStatePartitions = 1 })
	tn.createTopic("kept", 1, nil)
	tn.createTopic("gone", 1, nil)
	const id = "tx-deleted"
	init := initTxnProducer(t, tn.conn, &sluicev1.InitProducerIdRequest{TransactionalId: id})
	if init.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("InitProducerId: %v", init)
	}
	v := tn.node.TxnVerifier()
	for _, topic := range []string{"kept", "gone"} {
		if err := addPartitionWithRetry(t, v, id, init.ProducerId, int16(init.ProducerEpoch), cluster.TopicPartition{Topic: topic}); err != nil {
			t.Fatalf("AddPartition %s: %v", topic, err)
		}
	}
	del, err := tn.admin.DeleteTopics(ctx(t), &sluicev1.DeleteTopicsRequest{Names: []string{"gone"}})
	if err != nil || del.Topics[0].ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("delete: %v %v", del, err)
	}
	end := endTxn(t, tn.conn, &sluicev1.EndTxnRequest{TransactionalId: id, ProducerId: init.ProducerId, ProducerEpoch: init.ProducerEpoch})
	if end.ErrorCode != sluicev1.ErrorCode_NONE {
		t.Fatalf("EndTxn abort: %v", end)
	}
	waitTxnState(t, tn.conn, id, txn.CompleteAbort)
	rep, err := tn.node.Replicas().Replica("kept", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LogEndOffset() != 1 || rep.HighWatermark() != 1 {
		t.Fatalf("kept-0: log end %d, high watermark %d; want one ABORT marker", rep.LogEndOffset(), rep.HighWatermark())
	}
}
