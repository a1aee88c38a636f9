package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// closedAddr returns a 127.0.0.1 address whose port was free and is closed
// again: connecting to it is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// The pause between passes over the brokers starts at 50 ms and doubles up
// to 1 s.
func TestRetryBackoffDoublesUpToOneSecond(t *testing.T) {
	for _, tc := range []struct {
		pass int
		want time.Duration
	}{
		{0, 50 * time.Millisecond}, {1, 100 * time.Millisecond}, {2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {40, time.Second},
	} {
		if got := retryBackoff(tc.pass); got != tc.want {
			t.Errorf("retryBackoff(%d) = %v, want %v", tc.pass, got, tc.want)
		}
	}
}

// Metadata and cluster status try each bootstrap address: a refused one
// and a starting-up one (LEADER_NOT_AVAILABLE, empty cluster) listed first
// do not stop a healthy one listed last from answering, at once.
func TestAnyCallTriesEachBootstrapAddress(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	f.mu.Lock()
	f.starting[1] = true
	healthy := f.nodes[2].addr
	f.mu.Unlock()
	c, err := New([]string{closedAddr(t), f.addr, healthy}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	start := time.Now()
	dc, err := c.DescribeCluster(ctx)
	if err != nil {
		t.Fatalf("describe cluster with a healthy broker listed: %v", err)
	}
	if dc.NodeId != 2 || len(dc.Brokers) != 2 {
		t.Fatalf("answered by node %d with %d brokers, want node 2 with 2", dc.NodeId, len(dc.Brokers))
	}
	md, err := c.Metadata(ctx, "t")
	if err != nil {
		t.Fatalf("metadata with a healthy broker listed: %v", err)
	}
	if len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 1 {
		t.Fatalf("metadata %v", md)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %v with a healthy broker listed", d)
	}
}

// A broker that is starting up is asked again, with backoff, until it has
// metadata, within the request timeout.
func TestAnyCallRetriesUntilBrokerHasMetadata(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.starting[1] = true
	f.mu.Unlock()
	c, err := New([]string{f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(400*time.Millisecond, func() {
		f.mu.Lock()
		f.starting[1] = false
		f.mu.Unlock()
	})
	if _, err := c.DescribeCluster(context.Background()); err != nil {
		t.Fatalf("describe cluster of a broker that finishes starting: %v", err)
	}
	f.mu.Lock()
	calls := f.metadataCalls
	f.mu.Unlock()
	if calls != 0 {
		t.Fatalf("%d metadata calls from DescribeCluster", calls)
	}
	f.mu.Lock()
	f.starting[1] = true
	f.mu.Unlock()
	time.AfterFunc(400*time.Millisecond, func() {
		f.mu.Lock()
		f.starting[1] = false
		f.mu.Unlock()
	})
	if _, err := c.Metadata(context.Background(), "t"); err != nil {
		t.Fatalf("metadata of a broker that finishes starting: %v", err)
	}
	f.mu.Lock()
	calls = f.metadataCalls
	f.mu.Unlock()
	// Requests at about 0, 50, 150, 350 and 750 ms (pauses of 50 ms
	// doubling): about 5; a retry without backoff would make hundreds.
	if calls < 3 || calls > 10 {
		t.Fatalf("%d metadata requests in about 400 ms, want a few (backoff 50 ms doubling)", calls)
	}
}

// A broker that stays without metadata fails the call with
// LEADER_NOT_AVAILABLE once the request timeout is spent, not before and
// not much after.
func TestAnyCallGivesUpAtRequestTimeout(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.starting[1] = true
	f.mu.Unlock()
	c, err := New([]string{f.addr}, WithRequestTimeout(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.DescribeCluster(context.Background())
	d := time.Since(start)
	if !containsCode(err, sluicev1.ErrorCode_LEADER_NOT_AVAILABLE) {
		t.Fatalf("describe cluster of a broker without metadata: %v, want LEADER_NOT_AVAILABLE", err)
	}
	if d < 500*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("gave up after %v, want about the 600ms request timeout", d)
	}
}

// With nothing listening at any address the call fails within the request
// timeout with one line naming the addresses, not gRPC's text.
func TestAnyCallNoBrokerReachable(t *testing.T) {
	a, b := closedAddr(t), closedAddr(t)
	c, err := New([]string{a, b}, WithRequestTimeout(700*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Metadata(context.Background())
	d := time.Since(start)
	var nb *NoBrokerError
	if !errors.As(err, &nb) {
		t.Fatalf("metadata with nothing listening: %v (%T), want *NoBrokerError", err, err)
	}
	want := "no broker reachable at " + a + "," + b + " (is sluiced running?)"
	if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "rpc error") {
		t.Fatalf("error %q, want it to say %q and nothing of gRPC", err, want)
	}
	if d > 1500*time.Millisecond {
		t.Fatalf("failed after %v, want within the 700ms request timeout", d)
	}
}

// A broker that accepts connections but never answers (a paused process)
// costs one call its timeout; the calls after it try the other brokers
// first, so they are answered at once.
func TestAnyCallTriesAHungBrokerLast(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close() // accepts (the kernel does) and never speaks
	c, err := New([]string{hung.Addr().String(), f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = c.DescribeCluster(ctx)
	cancel()
	if err == nil {
		t.Fatal("the first call, to the hung broker, was answered")
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.DescribeCluster(ctx)
		cancel()
		if err != nil {
			t.Fatalf("call %d after the hung broker timed out once: %v", i+2, err)
		}
	}
}

// A partition whose leader cannot be reached is retried, not reported by
// Poll, and Stalled says why; once its leader answers, the records come
// and Stalled is nil again.
func TestConsumerStalledOnDeadLeaderThenRecovers(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	produceN(t, f, "t", []int32{0}, 3)
	f.mu.Lock()
	f.leaders["t/0"] = 2
	f.nodes[2].addr = closedAddr(t) // the metadata names a dead leader
	f.mu.Unlock()
	c, err := New([]string{f.addr}, WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	co, err := c.NewConsumer(WithMaxWait(20 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.Assign("t", 0, OffsetEarliest); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	recs, err := co.Poll(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || len(recs) != 0 {
		t.Fatalf("Poll with the leader dead: %d records, %v; want none and the deadline (retried, not reported)", len(recs), err)
	}
	if st := co.Stalled(); st == nil || !strings.Contains(st.Error(), `topic "t" partition 0`) {
		t.Fatalf("Stalled() = %v, want the partition's failure", st)
	}
	f.mu.Lock()
	f.leaders["t/0"] = 1 // a new leader, reachable
	f.mu.Unlock()
	// Polls of 100 ms, as applications poll: the leader and offset
	// lookups run inside Poll, under its deadline.
	var got int
	wait.For(t, 10*time.Second, "the records from the new leader", func() error {
		pctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
		defer cancel()
		recs, _ := co.Poll(pctx)
		if got += len(recs); got < 3 {
			return fmt.Errorf("%d records; stalled: %v", got, co.Stalled())
		}
		return nil
	})
	if st := co.Stalled(); st != nil {
		t.Errorf("Stalled() = %v after good fetches", st)
	}
}

// The timeout_ms of an admin attempt fits what the attempt has left, so a
// retry at a second broker still hears that broker's answer (e.g.
// NOT_CONTROLLER) before the client's deadline.
func TestAdminTimeoutFitsTheAttempt(t *testing.T) {
	c := &Client{cfg: clientConfig{requestTimeout: 3 * time.Second}}
	if got := c.adminTimeoutMs(context.Background()); got != 2000 {
		t.Errorf("no deadline: %d ms, want 2000 (3 s less a margin of 1 s)", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if got := c.adminTimeoutMs(ctx); got < 600 || got > 750 {
		t.Errorf("1.5 s left: %d ms, want about 750 (half of what is left)", got)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if got := c.adminTimeoutMs(past); got != 1 {
		t.Errorf("deadline passed: %d ms, want 1 (never 0, the broker's default)", got)
	}
}

// quorumlessAdmin answers CreateTopics NOT_CONTROLLER at once on odd calls
// and holds even ones until the deadline the client sent (gRPC then resets
// the call), as brokers without a controller quorum do.
type quorumlessAdmin struct {
	sluicev1.UnimplementedAdminServer
	calls atomic.Int64
}

func (a *quorumlessAdmin) CreateTopics(ctx context.Context, _ *sluicev1.CreateTopicsRequest) (*sluicev1.CreateTopicsResponse, error) {
	if a.calls.Add(1)%2 == 1 {
		return nil, errs.NewStatus(codes.Unavailable, sluicev1.ErrorCode_NOT_CONTROLLER, "no controller", nil)
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// When the budget ends in an attempt that the broker resets at the
// deadline, the call fails with the answer the brokers gave before
// (NOT_CONTROLLER), never with gRPC's DeadlineExceeded: gRPC can report
// the reset before the context's timer has fired, and the retry loop must
// not take that for an answer (TestClusterFiveVotersLoseTwoThenThree
// failed so about once in ten runs under load).
func TestAnyCallBudgetEndsInAResetAttempt(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	admin := &quorumlessAdmin{}
	sluicev1.RegisterAdminServer(s, admin)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	defer func() { s.Stop(); <-done }()
	c, err := New([]string{l.Addr().String()}, WithRequestTimeout(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 15 {
		admin.calls.Store(0)
		err := c.CreateTopic(context.Background(), "t", 1, 1, nil)
		if !containsCode(err, sluicev1.ErrorCode_NOT_CONTROLLER) {
			t.Fatalf("create %d: %v, want NOT_CONTROLLER", i, err)
		}
	}
}

// metadataAttempt is an invokeAny attempt that asks cc for metadata and
// counts itself in n.
func metadataAttempt(n *atomic.Int64) func(context.Context, *grpc.ClientConn) error {
	return func(ctx context.Context, cc *grpc.ClientConn) error {
		n.Add(1)
		_, err := sluicev1.NewAdminClient(cc).Metadata(ctx, &sluicev1.MetadataRequest{})
		return err
	}
}

// Issue 28: when every address refuses the connection, a call gives up
// after unreachablePasses passes (about 2.5 s), not at the request timeout
// (30 s here), with the one-line *NoBrokerError.
func TestAnyCallGivesUpSoonWhenEveryAddressRefuses(t *testing.T) {
	a, b := closedAddr(t), closedAddr(t)
	c, err := New([]string{a, b}, WithRequestTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var attempts atomic.Int64
	err = c.invokeAny(context.Background(), metadataAttempt(&attempts))
	var nb *NoBrokerError
	if !errors.As(err, &nb) {
		t.Fatalf("every address refused: %v (%T), want *NoBrokerError", err, err)
	}
	if want := "no broker reachable at " + a + "," + b + " (is sluiced running?)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if got, want := attempts.Load(), int64(2*unreachablePasses); got != want {
		t.Errorf("%d attempts, want %d: %d passes over the 2 addresses", got, want, unreachablePasses)
	}
}

// The bound is for addresses where nobody listens only: with one address
// refusing and another answering LEADER_NOT_AVAILABLE (a broker starting
// up), the call keeps retrying past unreachablePasses passes and succeeds
// once the broker is ready.
func TestAnyCallKeepsRetryingAStartingBrokerBesideARefusingOne(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.mu.Lock()
	f.starting[1] = true
	f.mu.Unlock()
	c, err := New([]string{closedAddr(t), f.addr}, WithRequestTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	readyAt := int64(2 * (unreachablePasses + 2)) // two passes past the bound
	var attempts atomic.Int64
	count := metadataAttempt(&attempts)
	err = c.invokeAny(context.Background(), func(ctx context.Context, cc *grpc.ClientConn) error {
		if attempts.Load() == readyAt {
			f.mu.Lock()
			f.starting[1] = false
			f.mu.Unlock()
		}
		return count(ctx, cc)
	})
	if err != nil {
		t.Fatalf("a broker that finishes starting, beside a refusing address: %v", err)
	}
	if got := attempts.Load(); got <= readyAt {
		t.Fatalf("%d attempts, want more than %d", got, readyAt)
	}
}

// What unreachable counts as nobody there: refused, no route, a name that
// does not resolve, a malformed address; not a timeout, a reset or a
// broker's answer.
func TestUnreachable(t *testing.T) {
	refused := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`)
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{fmt.Errorf("metadata: %w", refused), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.9:9400: connect: no route to host"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.9:9400: connect: network is unreachable"`), true},
		{status.Error(codes.Unavailable, "name resolver error: produced zero addresses"), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp: lookup nonsense: no such host"`), true},
		{&BrokerAddrError{Addr: "nonsense:xx", Reason: "bad port"}, true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.9:9400: i/o timeout"`), false},
		{status.Error(codes.Unavailable, "dns: A record lookup error: lookup sluice on 10.0.0.2:53: server misbehaving"), false},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), false},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false},
		{errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "connection refused, says the message"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The text unreachable looks for is what gRPC says of a real refused
// connection (a gRPC or Go upgrade that changed it would make every
// refused call wait the whole request timeout again).
func TestUnreachableMatchesGRPCsRefusal(t *testing.T) {
	addr := closedAddr(t)
	c, err := New([]string{addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc, err := c.conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sluicev1.NewAdminClient(cc).Metadata(context.Background(), &sluicev1.MetadataRequest{})
	if !unreachable(err) {
		t.Fatalf("gRPC's error for a refused connection: %v; unreachable says it is not", err)
	}
}
