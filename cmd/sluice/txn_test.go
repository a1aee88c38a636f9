package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/proto/batch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeTxnBroker is a one-node cluster for the transaction commands: topic
// "m" (one partition), a coordinator for every transactional id, and a
// unary Produce that counts records and checks their producer fields.
type fakeTxnBroker struct {
	sluicev1.UnimplementedAdminServer
	sluicev1.UnimplementedTransactionsServer
	sluicev1.UnimplementedLogServer
	addr string

	mu           sync.Mutex // guards the following
	epoch        int32
	ends         []*sluicev1.EndTxnRequest
	records      int
	nonTxn       int // batches without the transactional attribute or id
	listReqs     []*sluicev1.ListTransactionsRequest
	listings     []*sluicev1.TransactionListing
	descriptions map[string]*sluicev1.TransactionState
}

func startFakeTxnBroker(t *testing.T) *fakeTxnBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTxnBroker{addr: l.Addr().String(), descriptions: map[string]*sluicev1.TransactionState{}}
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, f)
	sluicev1.RegisterTransactionsServer(s, f)
	sluicev1.RegisterLogServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return f
}

func (f *fakeTxnBroker) Metadata(context.Context, *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	return &sluicev1.MetadataResponse{Brokers: []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}},
		Topics: []*sluicev1.TopicMetadata{{Name: "m", Partitions: []*sluicev1.PartitionMetadata{{LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}}}}}, nil
}

func (f *fakeTxnBroker) FindCoordinator(_ context.Context, req *sluicev1.FindCoordinatorRequest) (*sluicev1.FindCoordinatorResponse, error) {
	resp := &sluicev1.FindCoordinatorResponse{}
	for _, k := range req.Keys {
		resp.Coordinators = append(resp.Coordinators, &sluicev1.Coordinator{Key: k, NodeId: 1, Address: f.addr})
	}
	return resp, nil
}

func (f *fakeTxnBroker) InitProducerId(context.Context, *sluicev1.InitProducerIdRequest) (*sluicev1.InitProducerIdResponse, error) {
	return &sluicev1.InitProducerIdResponse{ProducerId: 7}, nil
}

func (f *fakeTxnBroker) EndTxn(_ context.Context, req *sluicev1.EndTxnRequest) (*sluicev1.EndTxnResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ends = append(f.ends, req)
	f.epoch++
	return &sluicev1.EndTxnResponse{ProducerId: 7, ProducerEpoch: f.epoch}, nil
}

func (f *fakeTxnBroker) Produce(_ context.Context, req *sluicev1.ProduceRequest) (*sluicev1.ProduceResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.ProduceResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.TopicProduceResponse{Name: t.Name}
		for _, p := range t.Partitions {
			raw, err := proto.Marshal(p.Batch)
			if err != nil {
				return nil, err
			}
			_, h, err := batch.Canonicalize(raw)
			if err != nil {
				return nil, err
			}
			if !h.IsTransactional() || req.TransactionalId == "" {
				f.nonTxn++
			}
			tr.Partitions = append(tr.Partitions, &sluicev1.PartitionProduceResponse{Partition: p.Partition, BaseOffset: int64(f.records), LogAppendTimeMs: -1})
			f.records += int(h.RecordCount)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, nil
}

func (f *fakeTxnBroker) ListTransactions(_ context.Context, req *sluicev1.ListTransactionsRequest) (*sluicev1.ListTransactionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listReqs = append(f.listReqs, req)
	return &sluicev1.ListTransactionsResponse{TransactionStates: f.listings}, nil
}

func (f *fakeTxnBroker) DescribeTransactions(_ context.Context, req *sluicev1.DescribeTransactionsRequest) (*sluicev1.DescribeTransactionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DescribeTransactionsResponse{}
	for _, id := range req.TransactionalIds {
		st := f.descriptions[id]
		if st == nil {
			st = &sluicev1.TransactionState{TransactionalId: id, ErrorCode: sluicev1.ErrorCode_TRANSACTIONAL_ID_NOT_FOUND, ErrorMessage: "unknown id"}
		}
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp, nil
}

func runWithStdin(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb strings.Builder
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

// --commit-every N commits after every N records and at the end of the
// input; --abort aborts instead. Every batch is transactional.
func TestProduceTransactionalCommitsEveryN(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantEnds  string
		wantTotal string
	}{
		{[]string{"--commit-every", "2"}, "[true true true]", "committed 3 transactions (5 records)"},
		{[]string{"--commit-every", "5"}, "[true]", "committed 1 transactions (5 records)"},
		{[]string{"--abort"}, "[false]", "aborted 1 transactions (5 records)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f := startFakeTxnBroker(t)
			args := append([]string{"--brokers", f.addr, "produce", "m", "--transactional-id", "tx"}, tc.args...)
			_, stderr, err := runWithStdin(t, "a\nb\nc\nd\ne\n", args...)
			if err != nil {
				t.Fatalf("%v: %s", err, stderr)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			var ends []bool
			for _, e := range f.ends {
				ends = append(ends, e.Committed)
				if e.TransactionalId != "tx" || e.ProducerId != 7 {
					t.Errorf("EndTxn %v", e)
				}
			}
			if got := strings.ReplaceAll(jsonString(ends), ",", " "); got != tc.wantEnds {
				t.Errorf("EndTxn outcomes %v, want %s", ends, tc.wantEnds)
			}
			if f.records != 5 || f.nonTxn != 0 {
				t.Errorf("records %d (want 5), non-transactional batches %d", f.records, f.nonTxn)
			}
			if !strings.Contains(stderr, tc.wantTotal) {
				t.Errorf("stderr %q, want %q", stderr, tc.wantTotal)
			}
		})
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The transaction flags need --transactional-id, and transactions need
// acks=all; both are refused before connecting.
func TestProduceTransactionFlagsChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--commit-every", "2"},
		{"--abort"},
		{"--transaction-timeout", "10s"},
		{"--transactional-id", "tx", "--acks", "1"},
		{"--transactional-id", "tx", "--commit-every", "-1"},
		{"--transactional-id", "tx", "--transaction-timeout", "0s"},
	} {
		_, _, err := runWithStdin(t, "", append([]string{"--brokers", "127.0.0.1:1", "produce", "m"}, args...)...)
		if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: err %v, want a flag error", args, err)
		}
	}
}

// txn list sends the filters, prints the merged listing as a table or as
// output.TransactionListing JSON, and refuses unknown states.
func TestTxnListFiltersAndOutput(t *testing.T) {
	f := startFakeTxnBroker(t)
	f.listings = []*sluicev1.TransactionListing{
		{TransactionalId: "b", ProducerId: 2, State: "Empty", DurationMs: -1},
		{TransactionalId: "a", ProducerId: 1, State: "Ongoing", DurationMs: 1500},
	}
	out, stderr, err := runCmd(t, "--brokers", f.addr, "--output", "json", "txn", "list", "--state", "ongoing,Empty", "--producer-id", "1", "--producer-id", "2", "--min-duration", "1s")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var rows []output.TransactionListing
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 2 || rows[0].TransactionalID != "a" || rows[0].DurationMs != 1500 || rows[1].State != "Empty" {
		t.Errorf("rows %+v, want a then b", rows)
	}
	f.mu.Lock()
	req := f.listReqs[0]
	f.mu.Unlock()
	if jsonString(req.StateFilters) != `["Ongoing","Empty"]` || jsonString(req.ProducerIdFilters) != "[1,2]" || req.DurationFilterMs != 1000 {
		t.Errorf("request %v", req)
	}

	out, _, err = runCmd(t, "--brokers", f.addr, "txn", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TRANSACTIONAL ID") || !strings.Contains(lines[1], "Ongoing") || !strings.Contains(lines[1], "1.5s") || !strings.HasSuffix(lines[2], "-") {
		t.Errorf("table:\n%s", out)
	}

	if _, _, err := runCmd(t, "--brokers", f.addr, "txn", "list", "--state", "Running"); err == nil || !strings.Contains(err.Error(), "not a transaction state") {
		t.Errorf("unknown state: %v", err)
	}
	f.mu.Lock()
	f.listings = nil
	f.mu.Unlock()
	if out, _, _ := runCmd(t, "--brokers", f.addr, "--output", "json", "txn", "list"); out != "[]\n" {
		t.Errorf("empty list json %q, want []", out)
	}
}

// txn describe prints each id's state (table or output.Transaction JSON)
// and exits 1 when an id could not be described.
func TestTxnDescribeOutput(t *testing.T) {
	f := startFakeTxnBroker(t)
	f.descriptions["a"] = &sluicev1.TransactionState{TransactionalId: "a", State: "Ongoing", ProducerId: 5, ProducerEpoch: 3, LastProducerEpoch: 2,
		TransactionTimeoutMs: 60000, TransactionStartTimeMs: 1000, LastUpdateTimeMs: 2000, PreviousProducerId: -1, NextProducerId: -1, CoordinatorEpoch: 4,
		Topics: []*sluicev1.TxnTopic{{Name: "z", Partitions: []int32{2, 0}}, {Name: "m", Partitions: []int32{0}}}}
	out, stderr, err := runCmd(t, "--brokers", f.addr, "--output", "json", "txn", "describe", "a")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var ts []output.Transaction
	if err := json.Unmarshal([]byte(out), &ts); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(ts) != 1 || ts[0].State != "Ongoing" || ts[0].ProducerEpoch != 3 || ts[0].Error != "" ||
		jsonString(ts[0].Topics) != `[{"name":"m","partitions":[0]},{"name":"z","partitions":[0,2]}]` {
		t.Errorf("describe json %s", out)
	}

	out, _, err = runCmd(t, "--brokers", f.addr, "txn", "describe", "a", "nope")
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("describe with an unknown id: %v", err)
	}
	for _, want := range []string{"State:", "Ongoing", "id 5, epoch 3 (last epoch 2)", "Timeout:", "1m0s", "m: 0", "z: 0,2", "nope", "TRANSACTIONAL_ID_NOT_FOUND"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe text lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := runCmd(t, "--brokers", f.addr, "txn", "describe"); !errors.Is(err, errUsage) {
		t.Errorf("describe without an id: %v, want a usage error", err)
	}
}
