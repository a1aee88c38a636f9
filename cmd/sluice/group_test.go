package main

import (
	"context"
	"encoding/json"
	"fmt"
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

// fakeGroupBroker is a one-node cluster for the group commands: topic
// "m" with two partitions (earliest 0; LSO 8 and HW 10; the first offset
// at or after any time is 3) and the coordinator of every group.
type fakeGroupBroker struct {
	sluicev1.UnimplementedAdminServer
	sluicev1.UnimplementedTransactionsServer
	sluicev1.UnimplementedLogServer
	sluicev1.UnimplementedGroupsServer
	addr string

	mu         sync.Mutex // guards the following
	described  map[string]*sluicev1.DescribedGroup
	listed     []*sluicev1.ListedGroup
	offsets    map[string]int64 // "topic/partition" -> committed
	commits    []*sluicev1.OffsetCommitRequest
	listStates [][]string
	heartbeats []*sluicev1.ConsumerGroupHeartbeatRequest
	commitCode sluicev1.ErrorCode // answered to every OffsetCommit when set
	deleteMsg  string             // error_message of a NON_EMPTY_GROUP DeleteGroups answer
}

func startFakeGroupBroker(t *testing.T) *fakeGroupBroker {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeGroupBroker{addr: l.Addr().String(), described: map[string]*sluicev1.DescribedGroup{}, offsets: map[string]int64{}}
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, f)
	sluicev1.RegisterTransactionsServer(s, f)
	sluicev1.RegisterLogServer(s, f)
	sluicev1.RegisterGroupsServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return f
}

func (f *fakeGroupBroker) Metadata(context.Context, *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	p := func(i int32) *sluicev1.PartitionMetadata {
		return &sluicev1.PartitionMetadata{Partition: i, LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}
	}
	return &sluicev1.MetadataResponse{Brokers: []*sluicev1.BrokerMetadata{{NodeId: 1, Address: f.addr}},
		Topics: []*sluicev1.TopicMetadata{{Name: "m", Partitions: []*sluicev1.PartitionMetadata{p(0), p(1)}}}}, nil
}

func (f *fakeGroupBroker) FindCoordinator(_ context.Context, req *sluicev1.FindCoordinatorRequest) (*sluicev1.FindCoordinatorResponse, error) {
	resp := &sluicev1.FindCoordinatorResponse{}
	for _, k := range req.Keys {
		resp.Coordinators = append(resp.Coordinators, &sluicev1.Coordinator{Key: k, NodeId: 1, Address: f.addr})
	}
	return resp, nil
}

func (f *fakeGroupBroker) ListOffsets(_ context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	resp := &sluicev1.ListOffsetsResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.ListOffsetsTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			pr := &sluicev1.ListOffsetsPartitionResponse{Partition: p.Partition}
			switch p.Spec {
			case sluicev1.OffsetSpec_OFFSET_SPEC_LATEST:
				pr.Offset = 10
				if req.IsolationLevel == sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
					pr.Offset = 8
				}
			case sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
				pr.Offset = 3
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, nil
}

func (f *fakeGroupBroker) ListGroups(_ context.Context, req *sluicev1.ListGroupsRequest) (*sluicev1.ListGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listStates = append(f.listStates, req.StatesFilter)
	return &sluicev1.ListGroupsResponse{Groups: f.listed}, nil
}

func (f *fakeGroupBroker) DescribeGroups(_ context.Context, req *sluicev1.DescribeGroupsRequest) (*sluicev1.DescribeGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DescribeGroupsResponse{}
	for _, id := range req.GroupIds {
		d := f.described[id]
		if d == nil {
			d = &sluicev1.DescribedGroup{GroupId: id, State: "Dead"}
		}
		resp.Groups = append(resp.Groups, d)
	}
	return resp, nil
}

func (f *fakeGroupBroker) OffsetFetch(_ context.Context, req *sluicev1.OffsetFetchRequest) (*sluicev1.OffsetFetchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tr := &sluicev1.OffsetFetchTopicResponse{Name: "m"}
	for _, p := range []int32{0, 1} {
		if off, ok := f.offsets[fmt.Sprintf("m/%d", p)]; ok {
			tr.Partitions = append(tr.Partitions, &sluicev1.OffsetFetchPartitionResponse{Partition: p, CommittedOffset: off, CommitTimeMs: 1})
		}
	}
	return &sluicev1.OffsetFetchResponse{Topics: []*sluicev1.OffsetFetchTopicResponse{tr}}, nil
}

func (f *fakeGroupBroker) OffsetCommit(_ context.Context, req *sluicev1.OffsetCommitRequest) (*sluicev1.OffsetCommitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, req)
	if f.commitCode != sluicev1.ErrorCode_NONE {
		return &sluicev1.OffsetCommitResponse{ErrorCode: f.commitCode, ErrorMessage: "fake"}, nil
	}
	if d := f.described[req.GroupId]; d != nil && len(d.Members) > 0 && req.MemberEpoch < 0 {
		return &sluicev1.OffsetCommitResponse{ErrorCode: sluicev1.ErrorCode_UNKNOWN_MEMBER_ID, ErrorMessage: "the group has members"}, nil
	}
	return &sluicev1.OffsetCommitResponse{}, nil
}

func (f *fakeGroupBroker) DeleteGroups(_ context.Context, req *sluicev1.DeleteGroupsRequest) (*sluicev1.DeleteGroupsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &sluicev1.DeleteGroupsResponse{}
	for _, id := range req.GroupIds {
		r := &sluicev1.DeleteGroupResult{GroupId: id}
		if d := f.described[id]; d != nil && len(d.Members) > 0 {
			r.ErrorCode, r.ErrorMessage = sluicev1.ErrorCode_NON_EMPTY_GROUP, f.deleteMsg
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func runArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runWithStdin(t, "", args...)
}

// --partition and --offset pick partitions and offsets, which a group
// does by itself: with --group they are refused, naming the flag, before
// any broker is contacted.
func TestConsumeGroupRefusesPartitionAndOffset(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partition", "0"}, "--partition cannot be used with --group"},
		{[]string{"--offset", "3"}, "--offset cannot be used with --group"},
		{[]string{"--partition", "1", "--offset", "3"}, "--offset and --partition cannot be used with --group"},
	} {
		args := append([]string{"--brokers", "127.0.0.1:1", "consume", "m", "--group", "g"}, tc.args...)
		_, _, err := runArgs(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// --group-instance-id and --session-timeout only mean something in a
// group: without --group they are refused, naming the flags.
func TestConsumeGroupOnlyFlagsNeedGroup(t *testing.T) {
	for _, args := range [][]string{{"--session-timeout", "5s"}, {"--group-instance-id", "a"}} {
		_, _, err := runArgs(t, append([]string{"--brokers", "127.0.0.1:1", "consume", "m"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "--group-instance-id and --session-timeout need --group") {
			t.Errorf("%v: %v", args, err)
		}
	}
	_, _, err := runArgs(t, "--brokers", "127.0.0.1:1", "consume", "m", "--group", "g", "--session-timeout", "-1s")
	if err == nil || !strings.Contains(err.Error(), "--session-timeout must not be negative") {
		t.Errorf("negative session timeout: %v", err)
	}
}

// reset-offsets needs --topic and exactly one --to-* flag; errors name
// the flags.
func TestGroupResetOffsetsFlagsChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--to-earliest"}, "--topic is required"},
		{[]string{"--topic", "m"}, "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime (got -)"},
		{[]string{"--topic", "m", "--to-earliest", "--to-offset", "3"}, "(got --to-earliest, --to-offset)"},
		{[]string{"--topic", "m", "--to-offset", "-4"}, "--to-offset must be >= 0"},
		{[]string{"--topic", "m", "--to-datetime", "yesterday"}, "--to-datetime must be RFC 3339"},
	} {
		args := append([]string{"--brokers", "127.0.0.1:1", "group", "reset-offsets", "g"}, tc.args...)
		_, _, err := runArgs(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, _, err := runArgs(t, "--brokers", "127.0.0.1:1", "group", "list", "--state", "Running"); err == nil || !strings.Contains(err.Error(), `--state "Running" is not a group state`) {
		t.Errorf("bad --state: %v", err)
	}
	if _, _, err := runArgs(t, "--brokers", "127.0.0.1:1", "group", "describe", "g", "--isolation", "snapshot"); err == nil || !strings.Contains(err.Error(), "--isolation must be") {
		t.Errorf("bad --isolation: %v", err)
	}
}

func describedGroup() *sluicev1.DescribedGroup {
	return &sluicev1.DescribedGroup{
		GroupId: "g", State: "Stable", GroupEpoch: 5, AssignmentEpoch: 5, Assignor: "uniform", CoordinatorId: 1,
		Members: []*sluicev1.GroupMember{
			{MemberId: "m-2", ClientId: "sluice-go", MemberEpoch: 5, MemberState: "Stable", SubscribedTopicNames: []string{"m"},
				Assignment: []*sluicev1.GroupTopicPartitions{{Topic: "m", Partitions: []int32{1}}}, TargetAssignment: []*sluicev1.GroupTopicPartitions{{Topic: "m", Partitions: []int32{1}}}},
			{MemberId: "m-1", InstanceId: "i-1", ClientId: "sluice-go", MemberEpoch: 5, MemberState: "Stable", SubscribedTopicNames: []string{"m"},
				Assignment: []*sluicev1.GroupTopicPartitions{{Topic: "m", Partitions: []int32{0}}}, TargetAssignment: []*sluicev1.GroupTopicPartitions{{Topic: "m", Partitions: []int32{0}}}},
		},
	}
}

// group describe prints the members with their assignments and, per
// partition, the committed offset, LSO, HW and the lag — to the LSO by
// default (read_committed), to the HW with --isolation read_uncommitted;
// a partition without a commit shows "-".
func TestGroupDescribeOutput(t *testing.T) {
	f := startFakeGroupBroker(t)
	f.described["g"] = describedGroup()
	f.offsets["m/0"] = 5
	out, stderr, err := runArgs(t, "--brokers", f.addr, "group", "describe", "g")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, want := range []string{
		"Group:        g\n",
		"State:        Stable\n",
		"Epoch:        group 5, assignment 5\n",
		"MEMBER ID  INSTANCE  CLIENT     RACK  EPOCH  STATE   ASSIGNMENT  TARGET\n",
		"m-1        i-1       sluice-go  -     5      Stable  m: 0        m: 0\n",
		"Offsets (lag to the LSO (read_committed)):\n",
		"TOPIC  PARTITION  COMMITTED  LSO  HW  LAG  OWNER\n",
		"m      0          5          8    10  3    m-1\n",
		"m      1          -          8    10  -    m-2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "m-1  ") > strings.Index(out, "m-2  ") {
		t.Errorf("members not sorted by id:\n%s", out)
	}
	if strings.Contains(out, "REGEX") {
		t.Errorf("a REGEX column without a regular-expression subscription:\n%s", out)
	}

	out, stderr, err = runArgs(t, "--brokers", f.addr, "--output", "json", "group", "describe", "g", "--isolation", "read_uncommitted")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var g output.Group
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if g.Isolation != "read_uncommitted" || len(g.Members) != 2 || len(g.Offsets) != 2 {
		t.Fatalf("json %+v", g)
	}
	o := g.Offsets[0]
	if o.Committed != 5 || *o.LastStableOffset != 8 || *o.HighWatermark != 10 || *o.Lag != 5 || o.Owner != "m-1" {
		t.Errorf("offset %+v, want committed 5, LSO 8, HW 10, lag 5 (to the HW)", o)
	}
	if g.Offsets[1].Committed != -1 || g.Offsets[1].Lag != nil {
		t.Errorf("partition without a commit: %+v", g.Offsets[1])
	}

	if _, _, err := runArgs(t, "--brokers", f.addr, "group", "describe", "nope"); err == nil || !strings.Contains(err.Error(), `group "nope" does not exist`) {
		t.Errorf("unknown group: %v", err)
	}
}

// group describe shows a KIP-848 member's regular-expression
// subscription: a REGEX column ("-" for a member subscribed by name) in
// the text, subscribed_topic_regex ("" when none) in the JSON.
func TestGroupDescribeShowsSubscribedTopicRegex(t *testing.T) {
	f := startFakeGroupBroker(t)
	d := describedGroup()
	d.Members[0].SubscribedTopicNames, d.Members[0].SubscribedTopicRegex = nil, "^m(-.*)?$" // m-2
	f.described["g"] = d
	out, stderr, err := runArgs(t, "--brokers", f.addr, "group", "describe", "g")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	for _, want := range []string{
		"MEMBER ID  INSTANCE  CLIENT     RACK  EPOCH  STATE   ASSIGNMENT  TARGET  REGEX\n",
		"m-1        i-1       sluice-go  -     5      Stable  m: 0        m: 0    -\n",
		"m-2        -         sluice-go  -     5      Stable  m: 1        m: 1    ^m(-.*)?$\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	out, stderr, err = runArgs(t, "--brokers", f.addr, "--output", "json", "group", "describe", "g")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var g output.Group
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(g.Members) != 2 || g.Members[0].SubscribedRegex != "" || g.Members[1].SubscribedRegex != "^m(-.*)?$" || len(g.Members[1].Subscribed) != 0 {
		t.Errorf("json members %+v, want m-1 without a regex and m-2 with ^m(-.*)?$", g.Members)
	}
	if !strings.Contains(out, `"subscribed_topic_regex":""`) {
		t.Errorf("json lacks an empty subscribed_topic_regex for the member without one: %s", out)
	}
}

// group list prints the merged listing and passes the state filter,
// spelled as the coordinator does.
func TestGroupListOutput(t *testing.T) {
	f := startFakeGroupBroker(t)
	f.listed = []*sluicev1.ListedGroup{{GroupId: "b", State: "Empty", Type: "classic"}, {GroupId: "a", State: "Stable", Members: 2, CoordinatorId: 1, Type: "consumer"}}
	out, stderr, err := runArgs(t, "--brokers", f.addr, "group", "list", "--state", "stable,empty")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	want := "GROUP  TYPE      STATE   MEMBERS  COORDINATOR\na      consumer  Stable  2        1\nb      classic   Empty   0        1\n"
	if out != want {
		t.Errorf("output\n%s\nwant\n%s", out, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.listStates) != 1 || strings.Join(f.listStates[0], ",") != "Stable,Empty" {
		t.Errorf("states sent %v", f.listStates)
	}
}

// reset-offsets prints the plan without committing unless --execute;
// --execute commits with member epoch -1, and is refused while the group
// has members ("stop the group's consumers first").
func TestGroupResetOffsetsPlanAndExecute(t *testing.T) {
	f := startFakeGroupBroker(t)
	f.offsets["m/0"] = 5
	out, stderr, err := runArgs(t, "--brokers", f.addr, "group", "reset-offsets", "g", "--topic", "m", "--to-datetime", "2026-01-02T15:04:05Z")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if want := "TOPIC  PARTITION  CURRENT  NEW\nm      0          5        3\nm      1          -        3\n"; out != want {
		t.Errorf("plan\n%s\nwant\n%s", out, want)
	}
	if !strings.Contains(stderr, "add --execute") {
		t.Errorf("stderr %q does not say it was a dry run", stderr)
	}
	f.mu.Lock()
	if len(f.commits) != 0 {
		t.Errorf("a dry run committed %v", f.commits)
	}
	f.mu.Unlock()

	out, stderr, err = runArgs(t, "--brokers", f.addr, "--output", "json", "group", "reset-offsets", "g", "--topic", "m", "--to-offset", "99", "--execute")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var plan output.OffsetReset
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if !plan.Executed || len(plan.Partitions) != 2 || plan.Partitions[0].New != 8 {
		t.Errorf("plan %+v, want executed, --to-offset 99 kept at the latest (8)", plan)
	}
	f.mu.Lock()
	if len(f.commits) != 1 || f.commits[0].MemberEpoch != -1 || f.commits[0].MemberId != "" || len(f.commits[0].Topics[0].Partitions) != 2 {
		t.Errorf("commits %v", f.commits)
	}
	f.described["g"] = describedGroup()
	f.mu.Unlock()

	_, _, err = runArgs(t, "--brokers", f.addr, "group", "reset-offsets", "g", "--topic", "m", "--to-earliest", "--execute")
	if err == nil || !strings.Contains(err.Error(), "stop the group's consumers first") {
		t.Errorf("with members: %v", err)
	}
	// A member joining between the check and the commit: the
	// coordinator's refusal is explained the same way.
	f.mu.Lock()
	delete(f.described, "g")
	f.commitCode = sluicev1.ErrorCode_NON_EMPTY_GROUP
	f.mu.Unlock()
	_, _, err = runArgs(t, "--brokers", f.addr, "group", "reset-offsets", "g", "--topic", "m", "--to-earliest", "--execute")
	if err == nil || !strings.Contains(err.Error(), "stop the group's consumers first") || !strings.Contains(err.Error(), "NON_EMPTY_GROUP") {
		t.Errorf("commit refused NON_EMPTY_GROUP: %v", err)
	}
	f.mu.Lock()
	f.described["g"] = describedGroup()
	f.mu.Unlock()
	_, _, err = runArgs(t, "--brokers", f.addr, "group", "delete", "g")
	if err == nil || !strings.Contains(err.Error(), "stop the group's consumers first") || !strings.Contains(err.Error(), "NON_EMPTY_GROUP") {
		t.Errorf("delete with members, no message: %v", err)
	}
	// The coordinator's message gives the reason and the remedy: it is
	// printed once, not wrapped in the CLI's own.
	f.mu.Lock()
	f.deleteMsg = `group "g" has 1 member; stop its consumers first`
	f.mu.Unlock()
	_, _, err = runArgs(t, "--brokers", f.addr, "group", "delete", "g")
	if err == nil || !strings.Contains(err.Error(), "NON_EMPTY_GROUP: "+f.deleteMsg) ||
		strings.Count(err.Error(), "consumers first") != 1 || strings.Contains(err.Error(), "active members") {
		t.Errorf("delete with members: %v, want the coordinator's reason once", err)
	}
	// reset-offsets counts the members it found, in the singular for one.
	f.mu.Lock()
	f.commitCode = sluicev1.ErrorCode_NONE
	f.described["g"].Members = f.described["g"].Members[:1]
	f.mu.Unlock()
	_, _, err = runArgs(t, "--brokers", f.addr, "group", "reset-offsets", "g", "--topic", "m", "--to-earliest", "--execute")
	if err == nil || !strings.Contains(err.Error(), "(1 member)") {
		t.Errorf("reset-offsets with one member: %v, want (1 member)", err)
	}
}

// The fake's consumer side for "consume --group": partitions 0 and 1 of
// "m" hold five records each (offsets 0-4); one member gets both.

func (f *fakeGroupBroker) ConsumerGroupHeartbeat(_ context.Context, req *sluicev1.ConsumerGroupHeartbeatRequest) (*sluicev1.ConsumerGroupHeartbeatResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeats = append(f.heartbeats, req)
	resp := &sluicev1.ConsumerGroupHeartbeatResponse{MemberId: "m-1", MemberEpoch: 1, HeartbeatIntervalMs: 20}
	switch {
	case req.MemberEpoch < 0:
		resp.MemberEpoch = req.MemberEpoch
	case req.MemberEpoch == 0:
		resp.Assignment = &sluicev1.GroupAssignment{TopicPartitions: []*sluicev1.GroupTopicPartitions{{Topic: "m", Partitions: []int32{0, 1}}}}
	}
	return resp, nil
}

func (f *fakeGroupBroker) Fetch(_ context.Context, req *sluicev1.FetchRequest) (*sluicev1.FetchResponse, error) {
	resp := &sluicev1.FetchResponse{}
	for _, t := range req.Topics {
		tr := &sluicev1.FetchableTopicResponse{Name: t.Name}
		for _, p := range t.Partitions {
			pd := &sluicev1.PartitionData{Partition: p.Partition, HighWatermark: 5, LastStableOffset: 5, NextFetchOffset: max(p.FetchOffset, 5)}
			if p.FetchOffset < 5 {
				var b batch.Builder
				b.Reset(1)
				for i := int64(0); i < 5; i++ {
					b.Add(1, nil, []byte(fmt.Sprintf("v%d-%d", p.Partition, i)), nil)
				}
				raw := b.Finish(batch.Producer{ID: -1, Epoch: -1, BaseSequence: -1}, 0)
				rb := &sluicev1.RecordBatch{}
				if err := proto.Unmarshal(raw, rb); err != nil {
					return nil, err
				}
				pd.Batches = append(pd.Batches, rb)
			}
			tr.Partitions = append(tr.Partitions, pd)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, nil
}

// consume --group joins, reads the assigned partitions from the start
// (--from-beginning, nothing committed), and commits the offsets of the
// records it printed — not past them, though more were fetched — then
// leaves the group.
func TestConsumeGroupCommitsWhatItPrinted(t *testing.T) {
	f := startFakeGroupBroker(t)
	out, stderr, err := runArgs(t, "--brokers", f.addr, "consume", "m", "--group", "g", "--from-beginning", "--max-messages", "3", "--print-offsets", "--timeout", "10s")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %q, want 3 records", out)
	}
	printed := map[int32]int64{}
	for _, l := range lines {
		var p int32
		var off int64
		if _, err := fmt.Sscanf(l, "%d:%d", &p, &off); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		printed[p] = off + 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	committed := map[int32]int64{}
	for _, c := range f.commits {
		if c.MemberId != "m-1" || c.MemberEpoch != 1 {
			t.Errorf("commit as %q epoch %d, want the member's", c.MemberId, c.MemberEpoch)
		}
		for _, tp := range c.Topics {
			for _, p := range tp.Partitions {
				committed[p.Partition] = p.CommittedOffset
			}
		}
	}
	if fmt.Sprint(committed) != fmt.Sprint(printed) {
		t.Errorf("committed %v, want the offsets after the printed records %v", committed, printed)
	}
	join, last := f.heartbeats[0], f.heartbeats[len(f.heartbeats)-1]
	if join.MemberEpoch != 0 || join.GroupId != "g" || strings.Join(join.SubscribedTopicNames, ",") != "m" {
		t.Errorf("join %v", join)
	}
	if last.MemberEpoch != -1 {
		t.Errorf("last heartbeat %v, want the leave (epoch -1)", last)
	}
}
