package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fakeController answers CreateTopics, ElectLeaders and UnregisterBroker
// as the controller would for a cluster with topic "m" (one partition)
// and brokers 1..3, with defaults replication factor 3 and
// min.insync.replicas 2, and records the requests.
type fakeController struct {
	sluicev1.UnimplementedAdminServer
	addr string

	mu      sync.Mutex // guards the following
	created []*sluicev1.CreatableTopic
}

func startFakeController(t *testing.T) *fakeController {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeController{addr: l.Addr().String()}
	s := grpc.NewServer()
	sluicev1.RegisterAdminServer(s, f)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return f
}

func (f *fakeController) CreateTopics(_ context.Context, req *sluicev1.CreateTopicsRequest) (*sluicev1.CreateTopicsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ct := req.Topics[0]
	f.created = append(f.created, ct)
	r := &sluicev1.CreatableTopicResult{Name: ct.Name, NumPartitions: ct.NumPartitions, ReplicationFactor: ct.ReplicationFactor,
		Configs: map[string]string{"min.insync.replicas": "2"}}
	if r.ReplicationFactor == 0 {
		r.ReplicationFactor = 3
	}
	if v, ok := ct.Configs["min.insync.replicas"]; ok {
		r.Configs["min.insync.replicas"] = v
	} else if r.ReplicationFactor < 2 {
		r.Configs["min.insync.replicas"] = "1"
		r.Note = "the cluster default min.insync.replicas 2 is above the replication factor 1: the topic has min.insync.replicas 1"
	}
	return &sluicev1.CreateTopicsResponse{Topics: []*sluicev1.CreatableTopicResult{r}}, nil
}

func (f *fakeController) ElectLeaders(_ context.Context, req *sluicev1.ElectLeadersRequest) (*sluicev1.ElectLeadersResponse, error) {
	for _, tp := range req.Topics {
		if tp.Name != "m" {
			return nil, errs.Status(errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q does not exist", tp.Name), nil)
		}
		for _, p := range tp.Partitions {
			if p != 0 {
				return nil, errs.Status(errs.New(sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, "topic %q has no partition %d (its partitions are 0..0)", tp.Name, p), nil)
			}
		}
	}
	if len(req.Topics) == 0 {
		return &sluicev1.ElectLeadersResponse{Elected: []*sluicev1.ElectedLeader{{Topic: "m", Partition: 0, LeaderId: 1}}}, nil
	}
	return &sluicev1.ElectLeadersResponse{}, nil
}

func (f *fakeController) UnregisterBroker(_ context.Context, req *sluicev1.UnregisterBrokerRequest) (*sluicev1.UnregisterBrokerResponse, error) {
	switch id := req.BrokerId; {
	case id == 9:
		return &sluicev1.UnregisterBrokerResponse{}, nil
	case id >= 1 && id <= 3:
		return &sluicev1.UnregisterBrokerResponse{ErrorCode: sluicev1.ErrorCode_INVALID_REQUEST, ErrorMessage: "broker 2 is live (unfenced); stop it before unregistering it"}, nil
	default:
		return &sluicev1.UnregisterBrokerResponse{ErrorCode: sluicev1.ErrorCode_BROKER_ID_NOT_REGISTERED, ErrorMessage: "broker 7 is not registered"}, nil
	}
}

// topic create leaves the replication factor to the cluster unless told,
// and prints what the topic got, with the controller's note on stderr.
func TestTopicCreatePrintsReplication(t *testing.T) {
	f := startFakeController(t)
	for _, tc := range []struct {
		args     []string
		sentRF   int32
		out      string
		noteWant string
	}{
		{[]string{"orders", "--partitions", "3"}, 0, "created topic orders: 3 partitions, replication factor 3, min.insync.replicas 2\n", ""},
		{[]string{"one", "--replication-factor", "1"}, 1, "created topic one: 1 partition, replication factor 1, min.insync.replicas 1\n",
			"note: the cluster default min.insync.replicas 2 is above the replication factor 1"},
		{[]string{"isr", "--config", "min.insync.replicas=3"}, 0, "created topic isr: 1 partition, replication factor 3, min.insync.replicas 3\n", ""},
	} {
		out, stderr, err := runCmd(t, append([]string{"--brokers", f.addr, "topic", "create"}, tc.args...)...)
		if err != nil {
			t.Fatalf("%q: %v: %s", tc.args, err, stderr)
		}
		if out != tc.out {
			t.Errorf("%q: stdout %q, want %q", tc.args, out, tc.out)
		}
		if (tc.noteWant == "") != (stderr == "") || !strings.Contains(stderr, tc.noteWant) {
			t.Errorf("%q: stderr %q, want %q", tc.args, stderr, tc.noteWant)
		}
		f.mu.Lock()
		sent := f.created[len(f.created)-1]
		f.mu.Unlock()
		if sent.ReplicationFactor != tc.sentRF {
			t.Errorf("%q: sent replication factor %d, want %d", tc.args, sent.ReplicationFactor, tc.sentRF)
		}
	}
	if _, _, err := runCmd(t, "--brokers", f.addr, "topic", "create", "neg", "--replication-factor", "-1"); err == nil || !strings.Contains(err.Error(), "--replication-factor must be >= 1") {
		t.Errorf("--replication-factor -1: %v", err)
	}
}

// elect-leaders fails (exit 1) naming an unknown topic or partition, and
// counts what it moved in good English.
func TestClusterElectLeadersUnknownAndCounts(t *testing.T) {
	f := startFakeController(t)
	for _, args := range [][]string{{"--topic", "nosuch"}, {"--topic", "m", "--partition", "7"}} {
		_, _, err := runCmd(t, append([]string{"--brokers", f.addr, "cluster", "elect-leaders"}, args...)...)
		if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") {
			t.Errorf("%q: err %v, want UNKNOWN_TOPIC_OR_PARTITION", args, err)
		}
	}
	out, stderr, err := runCmd(t, "--brokers", f.addr, "cluster", "elect-leaders")
	if err != nil || out != "m-0: leader 1\n" || stderr != "1 partition moved to its preferred leader\n" {
		t.Errorf("one moved: %v, stdout %q, stderr %q", err, out, stderr)
	}
	_, stderr, err = runCmd(t, "--brokers", f.addr, "cluster", "elect-leaders", "--topic", "m")
	if err != nil || !strings.HasPrefix(stderr, "0 partitions moved") {
		t.Errorf("none moved: %v, stderr %q", err, stderr)
	}
	if got := movedSummary(2); got != "2 partitions moved to their preferred leaders" {
		t.Errorf("movedSummary(2) = %q", got)
	}
}

func TestClusterUnregisterBroker(t *testing.T) {
	f := startFakeController(t)
	out, stderr, err := runCmd(t, "--brokers", f.addr, "cluster", "unregister-broker", "--broker", "9")
	if err != nil || out != "broker 9 unregistered\n" {
		t.Errorf("unregister 9: %v, stdout %q, stderr %q", err, out, stderr)
	}
	for _, tc := range []struct{ id, want string }{
		{"2", "INVALID_REQUEST: broker 2 is live"},
		{"7", "BROKER_ID_NOT_REGISTERED: broker 7 is not registered"},
	} {
		out, _, err := runCmd(t, "--brokers", f.addr, "cluster", "unregister-broker", "--broker", tc.id)
		if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) || out != "" {
			t.Errorf("unregister %s: %v, stdout %q; want an error with %q", tc.id, err, out, tc.want)
		}
	}
	// Arguments are checked before dialling.
	for _, args := range [][]string{{}, {"--broker", "-1"}, {"--broker", "x"}, {"--broker", "1", "extra"}} {
		_, _, err := runCmd(t, append([]string{"--brokers", "127.0.0.1:1", "cluster", "unregister-broker"}, args...)...)
		if err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}
