package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// threeNodeCluster is a healthy three-voter, three-broker answer whose
// voters and brokers arrive out of id order, as a server is free to send
// them.
func threeNodeCluster() *sluicev1.DescribeClusterResponse {
	return &sluicev1.DescribeClusterResponse{
		ClusterId:        "c-7f3a",
		ControllerLeader: 1,
		NodeId:           2,
		MetadataOffset:   123,
		Voters: []*sluicev1.VoterStatus{
			{NodeId: 3, RaftAddress: "127.0.0.1:9421", Address: "127.0.0.1:9420", State: "follower", Term: 3, LastLogIndex: 40, CommitIndex: 40, AppliedIndex: 39},
			{NodeId: 1, RaftAddress: "127.0.0.1:9401", Address: "127.0.0.1:9400", State: "leader", Term: 3, LastLogIndex: 40, CommitIndex: 40, AppliedIndex: 40},
			{NodeId: 2, RaftAddress: "127.0.0.1:9411", Address: "127.0.0.1:9410", State: "follower", Term: 3, LastLogIndex: 40, CommitIndex: 40, AppliedIndex: 40},
		},
		Brokers: []*sluicev1.BrokerStatus{
			{NodeId: 2, Address: "127.0.0.1:9410", Rack: "b", Epoch: 18, LeaderPartitions: 1, Replicas: 4},
			{NodeId: 3, Address: "127.0.0.1:9420", Rack: "c", Epoch: 19, Fenced: true, Replicas: 2, OutOfSyncReplicas: 2},
			{NodeId: 1, Address: "127.0.0.1:9400", Rack: "a", Epoch: 17, LeaderPartitions: 2, Replicas: 4},
		},
		OfflinePartitions:         1,
		UnderReplicatedPartitions: 2,
		Topics:                    2,
		Partitions:                4,
		UnderMinIsrPartitions:     1,
		AtMinIsrPartitions:        1,
	}
}

func renderCluster(t *testing.T, resp *sluicev1.DescribeClusterResponse, asJSON bool) string {
	t.Helper()
	var b bytes.Buffer
	if err := writeClusterStatus(&b, resp, asJSON); err != nil {
		t.Fatalf("writeClusterStatus: %v", err)
	}
	return b.String()
}

// The JSON shape is a documented contract (docs/operations.md): key order,
// names and sorting are compared byte for byte.
func TestClusterStatusJSONGolden(t *testing.T) {
	const want = `{"cluster_id":"c-7f3a","node_id":2,"metadata_offset":123,"controller_leader":1,` +
		`"voters":[1,2,3],` +
		`"quorum":[` +
		`{"id":1,"raft_address":"127.0.0.1:9401","address":"127.0.0.1:9400","state":"leader","term":3,"last_log_index":40,"commit_index":40,"applied_index":40},` +
		`{"id":2,"raft_address":"127.0.0.1:9411","address":"127.0.0.1:9410","state":"follower","term":3,"last_log_index":40,"commit_index":40,"applied_index":40},` +
		`{"id":3,"raft_address":"127.0.0.1:9421","address":"127.0.0.1:9420","state":"follower","term":3,"last_log_index":40,"commit_index":40,"applied_index":39}],` +
		`"brokers":[` +
		`{"id":1,"address":"127.0.0.1:9400","rack":"a","epoch":17,"fenced":false,"leader_partitions":2,"offline_replicas":[],"replicas":4,"out_of_sync_replicas":0,"offline_replica_count":0},` +
		`{"id":2,"address":"127.0.0.1:9410","rack":"b","epoch":18,"fenced":false,"leader_partitions":1,"offline_replicas":[],"replicas":4,"out_of_sync_replicas":0,"offline_replica_count":0},` +
		`{"id":3,"address":"127.0.0.1:9420","rack":"c","epoch":19,"fenced":true,"leader_partitions":0,"offline_replicas":[],"replicas":2,"out_of_sync_replicas":2,"offline_replica_count":0}],` +
		`"offline_partitions":1,"under_replicated_partitions":2,"topics":2,"partitions":4,"under_min_isr_partitions":1,"at_min_isr_partitions":1}` + "\n"
	if got := renderCluster(t, threeNodeCluster(), true); got != want {
		t.Errorf("JSON mismatch\n got: %s\nwant: %s", got, want)
	}
}

// With no controller leader, controller_leader is 0 (present, not omitted)
// and the text header says "none".
func TestClusterStatusNoLeader(t *testing.T) {
	resp := threeNodeCluster()
	resp.ControllerLeader = 0
	for _, v := range resp.Voters {
		v.State = "candidate"
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(renderCluster(t, resp, true)), &got); err != nil {
		t.Fatal(err)
	}
	if v, ok := got["controller_leader"]; !ok || v != float64(0) {
		t.Errorf("controller_leader = %v (present %v), want 0", v, ok)
	}
	text := renderCluster(t, resp, false)
	if first, _, _ := strings.Cut(text, "\n"); !strings.Contains(first, "Controller leader: none") {
		t.Errorf("header line = %q, want it to say Controller leader: none", first)
	}
}

// Empty lists encode as [] and every required key is present even when
// the server sends an empty answer.
func TestClusterStatusEmptyListsAreArrays(t *testing.T) {
	for name, resp := range map[string]*sluicev1.DescribeClusterResponse{
		"empty":       {ClusterId: "c"},
		"nil":         nil,
		"nil entries": {Voters: []*sluicev1.VoterStatus{nil}, Brokers: []*sluicev1.BrokerStatus{nil}},
	} {
		out := renderCluster(t, resp, true)
		for _, key := range []string{`"voters":[]`, `"quorum":[]`, `"brokers":[]`, `"controller_leader":0`, `"offline_partitions":0`, `"under_replicated_partitions":0`} {
			if !strings.Contains(out, key) {
				t.Errorf("%s: %s missing from %s", name, key, out)
			}
		}
	}
	// A broker with zero values still carries every required key.
	out := renderCluster(t, &sluicev1.DescribeClusterResponse{Brokers: []*sluicev1.BrokerStatus{{}}}, true)
	if !strings.Contains(out, `"brokers":[{"id":0,"address":"","rack":"","epoch":0,"fenced":false,"leader_partitions":0,"offline_replicas":[],"replicas":0,"out_of_sync_replicas":0,"offline_replica_count":0}]`) {
		t.Errorf("zero broker not fully encoded: %s", out)
	}
}

// Text output: header, voters then brokers in ascending id, fenced/active
// status, "-" for empty cells, and the health counts last.
func TestClusterStatusText(t *testing.T) {
	resp := threeNodeCluster()
	resp.Brokers[0].Rack = ""
	text := renderCluster(t, resp, false)
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	fields := func(i int) []string {
		if i >= len(lines) {
			t.Fatalf("only %d lines:\n%s", len(lines), text)
		}
		return strings.Fields(lines[i])
	}
	want := [][]string{
		{"Cluster:", "c-7f3a", "Controller", "leader:", "1", "Answered", "by:", "node", "2", "at", "metadata", "offset", "123"},
		{},
		{"Voters:"},
		{"ID", "STATE", "TERM", "LAST", "INDEX", "APPLIED", "RAFT", "ADDRESS"},
		{"1", "leader", "3", "40", "40", "127.0.0.1:9401"},
		{"2", "follower", "3", "40", "40", "127.0.0.1:9411"},
		{"3", "follower", "3", "40", "39", "127.0.0.1:9421"},
		{},
		{"Brokers:"},
		{"ID", "ADDRESS", "RACK", "EPOCH", "STATUS", "LEADERS", "REPLICAS", "OUT_OF_SYNC"},
		{"1", "127.0.0.1:9400", "a", "17", "active", "2", "4", "0"},
		{"2", "127.0.0.1:9410", "-", "18", "active", "1", "4", "0"},
		{"3", "127.0.0.1:9420", "c", "19", "fenced", "0", "2", "2"},
		{},
		{"topics:", "2,", "partitions:", "4"},
		{"offline", "partitions:", "1"},
		{"under-replicated", "partitions:", "2"},
		{"under-min-isr", "partitions:", "1"},
		{"at-min-isr", "partitions:", "1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), text)
	}
	for i, w := range want {
		if got := fields(i); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d = %q, want fields %q", i, lines[i], w)
		}
	}
	// The tables are aligned: each column starts at the same position in
	// the header and in the rows.
	if h, r := strings.Index(lines[3], "RAFT ADDRESS"), strings.Index(lines[4], "127.0.0.1:9401"); h != r {
		t.Errorf("RAFT ADDRESS column at %d in header, %d in row:\n%s", h, r, text)
	}
}

// The command checks its arguments before dialling: a missing or unknown
// subcommand and extra arguments are usage errors (exit 2), a bad --output
// is a plain error (exit 1).
func TestClusterStatusCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantUsage bool
	}{
		{[]string{"cluster"}, true},
		{[]string{"cluster", "bogus"}, true},
		{[]string{"cluster", "status", "extra"}, true},
		{[]string{"cluster", "status", "--no-such-flag"}, true},
		{[]string{"cluster", "status", "--output", "yaml"}, false},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, nil, &out, &errb)
		if err == nil {
			t.Errorf("%q: no error", tc.args)
			continue
		}
		if errors.Is(err, errUsage) != tc.wantUsage {
			t.Errorf("%q: err = %v, usage error %v, want %v", tc.args, err, errors.Is(err, errUsage), tc.wantUsage)
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote to stdout: %q", tc.args, out.String())
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"cluster", "--help"}, nil, &out, &errb); err != nil || !strings.Contains(errb.String(), "sluice cluster status") {
		t.Errorf("cluster --help: err %v, stderr %q", err, errb.String())
	}
}

func TestClusterElectLeadersArguments(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantUsage bool
		want      string
	}{
		{[]string{"cluster", "elect-leaders", "--partition", "1"}, false, "--partition needs --topic"},
		{[]string{"cluster", "elect-leaders", "--topic", "t", "--partition", "x"}, true, ""},
		{[]string{"cluster", "elect-leaders", "extra"}, true, ""},
	} {
		out, _, err := runCmd(t, append([]string{"--brokers", "127.0.0.1:1"}, tc.args...)...)
		if err == nil || errors.Is(err, errUsage) != tc.wantUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want usage %v mentioning %q", tc.args, err, tc.wantUsage, tc.want)
		}
		if out != "" {
			t.Errorf("%q: wrote to stdout: %q", tc.args, out)
		}
	}
}

// Decision 42: a broker's replicas that failed on its disk show in the
// brokers table and, with their path and error, in their own section; the
// JSON carries them per broker.
func TestClusterStatusShowsOfflineReplicas(t *testing.T) {
	resp := &sluicev1.DescribeClusterResponse{Brokers: []*sluicev1.BrokerStatus{
		{NodeId: 2, Address: "127.0.0.1:9410", Epoch: 18, OfflineReplicas: []*sluicev1.OfflineReplica{
			{Topic: "orders", Partition: 3, Path: "/data/logs/orders-3", Error: "write /data/logs/orders-3/00000000000000000000.log: input/output error"}}},
	}}
	text := renderCluster(t, resp, false)
	for _, want := range []string{"active, 1 offline replicas", "Offline replicas (disk failures):",
		"node 2: orders-3 at /data/logs/orders-3: write /data/logs/orders-3/00000000000000000000.log: input/output error"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	js := renderCluster(t, resp, true)
	if !strings.Contains(js, `"offline_replicas":[{"topic":"orders","partition":3,"path":"/data/logs/orders-3","error":"write /data/logs/orders-3/00000000000000000000.log: input/output error"}]`) {
		t.Errorf("JSON output lacks the offline replica:\n%s", js)
	}
}

// fakeCluster answers DescribeCluster for one broker with 250 offline
// replicas, listing as many as the request's offline_replicas_limit asks
// (100 for 0, as a broker does), and records the limits asked.
type fakeCluster struct {
	sluicev1.UnimplementedAdminServer
	mu     sync.Mutex // guards limits
	limits []int32
}

func (f *fakeCluster) DescribeCluster(_ context.Context, req *sluicev1.DescribeClusterRequest) (*sluicev1.DescribeClusterResponse, error) {
	f.mu.Lock()
	f.limits = append(f.limits, req.OfflineReplicasLimit)
	f.mu.Unlock()
	n := int(req.OfflineReplicasLimit)
	switch {
	case n == 0:
		n = 100
	case n < 0 || n > 250:
		n = 250
	}
	b := &sluicev1.BrokerStatus{NodeId: 1, Address: "127.0.0.1:9400", Epoch: 3, Replicas: 250, OutOfSyncReplicas: 250, OfflineReplicaCount: 250}
	for i := range n {
		b.OfflineReplicas = append(b.OfflineReplicas, &sluicev1.OfflineReplica{Topic: "t", Partition: int32(i), Path: fmt.Sprintf("/d/t-%d", i), Error: "input/output error"})
	}
	return &sluicev1.DescribeClusterResponse{ClusterId: "c", NodeId: 1, MetadataOffset: 9, Brokers: []*sluicev1.BrokerStatus{b}, Topics: 1, Partitions: 250}, nil
}

// Issue 31: cluster status lists at most --offline-replicas-limit offline
// replicas per broker (20 by default; -1 all), says how many more there
// are, and counts them all in the status and the JSON; a limit of 0 or
// below -1 is refused before anything is dialled.
func TestClusterStatusLimitsOfflineReplicas(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCluster{}
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	brokers := "--brokers=" + l.Addr().String()

	out, stderr, err := runCmd(t, brokers, "cluster", "status")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if n := strings.Count(out, "node 1: t-"); n != 20 || !strings.Contains(out, "node 1: and 230 more (--offline-replicas-limit -1 lists all)") ||
		!strings.Contains(out, "active, 250 offline replicas") || !strings.Contains(out, "topics: 1, partitions: 250") {
		t.Errorf("default limit: %d listed:\n%s", n, out)
	}
	out, _, err = runCmd(t, brokers, "cluster", "status", "--offline-replicas-limit", "-1")
	if n := strings.Count(out, "node 1: t-"); err != nil || n != 250 || strings.Contains(out, "more (") {
		t.Errorf("--offline-replicas-limit -1: %v, %d listed", err, n)
	}
	out, _, err = runCmd(t, brokers, "--output", "json", "cluster", "status", "--offline-replicas-limit", "5")
	var got clusterJSON
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got.Brokers) != 1 ||
		len(got.Brokers[0].OfflineReplicas) != 5 || got.Brokers[0].OfflineReplicaCount != 250 || got.Brokers[0].Replicas != 250 {
		t.Errorf("--offline-replicas-limit 5 --output json: %v %s", err, out)
	}
	f.mu.Lock()
	if fmt.Sprint(f.limits) != "[20 -1 5]" {
		t.Errorf("limits asked: %v, want [20 -1 5]", f.limits)
	}
	f.mu.Unlock()
	for _, bad := range []string{"0", "-2"} {
		_, _, err := runCmd(t, brokers, "cluster", "status", "--offline-replicas-limit", bad)
		if err == nil || !strings.Contains(err.Error(), "--offline-replicas-limit must be >= 1, or -1 for all") {
			t.Errorf("--offline-replicas-limit %s: %v", bad, err)
		}
	}
	if f.mu.Lock(); len(f.limits) != 3 {
		t.Errorf("a refused limit reached the broker: %v", f.limits)
	}
	f.mu.Unlock()
}
