package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeAdmin answers Metadata and AlterPartitionReassignments for topic
// "m" (one partition) as a reassignment from 1,2 to 1,3 would: running
// (replicas 1,3,2, adding 3, removing 2) until Metadata has been asked
// doneAfter times, then done (replicas 1,3).
type fakeAdmin struct {
	sluicev1.UnimplementedAdminServer
	addr string

	mu        sync.Mutex // guards the following
	doneAfter int
	polls     int
	refuse    sluicev1.ErrorCode
	// hw and lso are m-0's offsets as fakeLog answers ListOffsets LATEST;
	// offsetsErr, when set, is its answer instead.
	hw, lso    int64
	offsetsErr sluicev1.ErrorCode
}

// fakeLog is the Log service beside fakeAdmin: it answers ListOffsets
// LATEST for m-0 with f's hw (read_uncommitted) or lso (read_committed,
// the default), as the broker does.
type fakeLog struct {
	sluicev1.UnimplementedLogServer
	f *fakeAdmin
}

func (l fakeLog) ListOffsets(_ context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	l.f.mu.Lock()
	defer l.f.mu.Unlock()
	p := &sluicev1.ListOffsetsPartitionResponse{Partition: 0, Offset: l.f.lso, ErrorCode: l.f.offsetsErr}
	if req.IsolationLevel == sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED {
		p.Offset = l.f.hw
	}
	if len(req.Topics) != 1 || req.Topics[0].Name != "m" || len(req.Topics[0].Partitions) != 1 ||
		req.Topics[0].Partitions[0].Spec != sluicev1.OffsetSpec_OFFSET_SPEC_LATEST {
		p.ErrorCode = sluicev1.ErrorCode_INVALID_REQUEST
	}
	return &sluicev1.ListOffsetsResponse{Topics: []*sluicev1.ListOffsetsTopicResponse{{Name: "m", Partitions: []*sluicev1.ListOffsetsPartitionResponse{p}}}}, nil
}

func startFakeAdmin(t *testing.T, doneAfter int) *fakeAdmin {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAdmin{addr: l.Addr().String(), doneAfter: doneAfter, hw: 10, lso: 7}
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, f)
	sluicev1.RegisterLogServer(s, fakeLog{f: f})
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return f
}

func (f *fakeAdmin) Metadata(_ context.Context, req *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	p := &sluicev1.PartitionMetadata{LeaderId: 1, LeaderEpoch: 4, Replicas: []int32{1, 3, 2}, Isr: []int32{1, 2},
		AddingReplicas: []int32{3}, RemovingReplicas: []int32{2}}
	if f.polls > f.doneAfter {
		p = &sluicev1.PartitionMetadata{LeaderId: 1, LeaderEpoch: 4, Replicas: []int32{1, 3}, Isr: []int32{1, 3}}
	}
	return &sluicev1.MetadataResponse{Brokers: []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}},
		Topics: []*sluicev1.TopicMetadata{{Name: "m", Partitions: []*sluicev1.PartitionMetadata{p}}}}, nil
}

func (f *fakeAdmin) AlterPartitionReassignments(_ context.Context, req *sluicev1.AlterPartitionReassignmentsRequest) (*sluicev1.AlterPartitionReassignmentsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != sluicev1.ErrorCode_NONE {
		return &sluicev1.AlterPartitionReassignmentsResponse{ErrorCode: f.refuse, ErrorMessage: "m-0 is already being reassigned"}, nil
	}
	return &sluicev1.AlterPartitionReassignmentsResponse{Replicas: []int32{1, 3, 2}, AddingReplicas: []int32{3}, RemovingReplicas: []int32{2}}, nil
}

func runCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, nil, &out, &errb)
	return out.String(), errb.String(), err
}

// --wait polls the metadata until the reassignment is done and prints the
// final partition; without it the controller's answer is printed.
func TestTopicReassignWaitPrintsFinalState(t *testing.T) {
	f := startFakeAdmin(t, 2)
	out, stderr, err := runCmd(t, "--brokers", f.addr, "--output", "json", "topic", "reassign", "m", "--partition", "0", "--replicas", "1,3", "--wait", "--timeout", "20s")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	const want = `{"topic":"m","partition":0,"target":[1,3],"done":true,"replicas":[1,3],"adding_replicas":[],"removing_replicas":[],` +
		`"leader":1,"leader_epoch":4,"isr":[1,3]}` + "\n"
	if out != want {
		t.Errorf("json:\n got %s\nwant %s", out, want)
	}

	f = startFakeAdmin(t, 1000)
	out, stderr, err = runCmd(t, "--brokers", f.addr, "topic", "reassign", "m", "--partition", "0", "--replicas", "1,3")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if want := "reassignment of m-0 to 1,3 started: replicas 1,3,2, adding 3, removing 2\n"; out != want {
		t.Errorf("text: %q, want %q", out, want)
	}
}

// --wait gives up after --timeout with an error that says where the
// reassignment stands (exit 1, not a usage error).
func TestTopicReassignWaitTimesOut(t *testing.T) {
	f := startFakeAdmin(t, 1000)
	_, _, err := runCmd(t, "--brokers", f.addr, "topic", "reassign", "m", "--partition", "0", "--replicas", "1,3", "--wait", "--timeout", "600ms")
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "not complete after 600ms") || !strings.Contains(err.Error(), "adding 3, removing 2") {
		t.Fatalf("err = %v", err)
	}
}

// A refusal from the controller is reported with its code.
func TestTopicReassignRefused(t *testing.T) {
	f := startFakeAdmin(t, 0)
	f.mu.Lock()
	f.refuse = sluicev1.ErrorCode_REASSIGNMENT_IN_PROGRESS
	f.mu.Unlock()
	_, _, err := runCmd(t, "--brokers", f.addr, "topic", "reassign", "m", "--partition", "0", "--replicas", "1,3")
	if err == nil || !strings.Contains(err.Error(), "REASSIGNMENT_IN_PROGRESS") {
		t.Fatalf("err = %v", err)
	}
}

// Arguments are checked before dialling.
func TestTopicReassignArguments(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		wantUsage bool
		want      string
	}{
		{[]string{"topic", "reassign"}, true, ""},
		{[]string{"topic", "reassign", "m", "--replicas", "1,2"}, false, "--partition is required"},
		{[]string{"topic", "reassign", "m", "--partition", "0"}, false, "--replicas"},
		{[]string{"topic", "reassign", "m", "--partition", "0", "--replicas", "1,x"}, false, `"x" is not a broker id`},
		{[]string{"topic", "reassign", "m", "--partition", "0", "--replicas", "1", "--wait", "--timeout", "0s"}, false, "--timeout"},
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

// describe shows the reassignment columns while one runs; the JSON keys
// are always present.
func TestTopicDescribeShowsReassignment(t *testing.T) {
	f := startFakeAdmin(t, 1000)
	out, stderr, err := runCmd(t, "--brokers", f.addr, "topic", "describe", "m")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || strings.Join(strings.Fields(lines[1]), " ") != "PARTITION LEADER LEADER_EPOCH REPLICAS ISR HIGH_WATERMARK LAST_STABLE_OFFSET ADDING REMOVING" ||
		strings.Join(strings.Fields(lines[2]), " ") != "0 1 4 1,3,2 1,2 10 7 3 2" {
		t.Errorf("text:\n%s", out)
	}
	out, stderr, err = runCmd(t, "--brokers", f.addr, "--output", "json", "topic", "describe", "m")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var d topicJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if p := d.Partitions[0]; len(p.AddingReplicas) != 1 || len(p.RemovingReplicas) != 1 || p.AddingReplicas[0] != 3 || p.RemovingReplicas[0] != 2 {
		t.Errorf("json partition %+v", p)
	}
	f.mu.Lock()
	f.doneAfter = 0
	f.mu.Unlock()
	out, _, _ = runCmd(t, "--brokers", f.addr, "--output", "json", "topic", "describe", "m")
	if !strings.Contains(out, `"adding_replicas":[],"removing_replicas":[]`) {
		t.Errorf("json without a reassignment: %s", out)
	}
	out, _, _ = runCmd(t, "--brokers", f.addr, "topic", "describe", "m")
	if strings.Contains(out, "ADDING") {
		t.Errorf("reassignment columns without a reassignment:\n%s", out)
	}
}

// describe shows each partition's last stable offset beside its high
// watermark, as the leader answers ListOffsets LATEST under read_committed
// and read_uncommitted; when the leader does not answer, the partition is
// still described, its offsets unknown ("-", null) and the reason on
// stderr.
func TestTopicDescribeShowsLastStableOffset(t *testing.T) {
	f := startFakeAdmin(t, 0)
	out, stderr, err := runCmd(t, "--brokers", f.addr, "topic", "describe", "m")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || strings.Join(strings.Fields(lines[1]), " ") != "PARTITION LEADER LEADER_EPOCH REPLICAS ISR HIGH_WATERMARK LAST_STABLE_OFFSET" ||
		strings.Join(strings.Fields(lines[2]), " ") != "0 1 4 1,3 1,3 10 7" {
		t.Errorf("text:\n%s", out)
	}
	out, stderr, err = runCmd(t, "--brokers", f.addr, "--output", "json", "topic", "describe", "m")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if !strings.Contains(out, `"high_watermark":10,"last_stable_offset":7`) {
		t.Errorf("json: %s", out)
	}

	f.mu.Lock()
	f.offsetsErr = sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER
	f.mu.Unlock()
	out, stderr, err = runCmd(t, "--brokers", f.addr, "topic", "describe", "m")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if lines = strings.Split(out, "\n"); len(lines) < 3 || strings.Join(strings.Fields(lines[2]), " ") != "0 1 4 1,3 1,3 - -" {
		t.Errorf("text without offsets:\n%s", out)
	}
	if !strings.Contains(stderr, "offsets unknown for partition 0") || !strings.Contains(stderr, "NOT_LEADER_OR_FOLLOWER") {
		t.Errorf("stderr without offsets: %q", stderr)
	}
	out, _, _ = runCmd(t, "--brokers", f.addr, "--output", "json", "topic", "describe", "m")
	if !strings.Contains(out, `"high_watermark":null,"last_stable_offset":null`) {
		t.Errorf("json without offsets: %s", out)
	}
}
