package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// http2Preface is what an HTTP/2 client sends first: the connection
// preface and an empty SETTINGS frame. A connection that sent it has
// finished its handshake as far as the server is concerned.
var http2Preface = append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)

// dialRaw opens a TCP connection to addr from the loopback address local
// and, if preface, sends the HTTP/2 preface; nil when the dial fails.
func dialRaw(local, addr string, preface bool) net.Conn {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	if preface {
		if _, err := c.Write(http2Preface); err != nil {
			c.Close()
			return nil
		}
	}
	return c
}

// dialGRPCFrom is a gRPC client connection to addr from the loopback
// address local.
func dialGRPCFrom(t *testing.T, local, addr string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// canary produces one record through cc and fetches it back.
func canary(t *testing.T, cc *grpc.ClientConn, topic, value string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logc := sluicev1.NewLogClient(cc)
	pr, err := logc.Produce(ctx, &sluicev1.ProduceRequest{Acks: sluicev1.Acks_ACKS_ALL, TimeoutMs: 5000, Topics: []*sluicev1.TopicProduceData{
		{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: 0, Batch: batchOf(t, nodetest.Batch(value, 1, time.Now().UnixMilli()))}}}}})
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	ppr := pr.Topics[0].Partitions[0]
	if ppr.ErrorCode != sluicev1.ErrorCode_NONE {
		return fmt.Errorf("produce: %v %s", ppr.ErrorCode, ppr.ErrorMessage)
	}
	fr, err := logc.Fetch(ctx, &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: topic,
		Partitions: []*sluicev1.FetchPartition{{Partition: 0, FetchOffset: ppr.BaseOffset, CurrentLeaderEpoch: -1}}}}})
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	pd := fr.Topics[0].Partitions[0]
	if pd.ErrorCode != sluicev1.ErrorCode_NONE || len(pd.Batches) == 0 || pd.Batches[0].BaseOffset != ppr.BaseOffset {
		return fmt.Errorf("fetch at %d: %v %s, %d batches", ppr.BaseOffset, pd.ErrorCode, pd.ErrorMessage, len(pd.Batches))
	}
	return nil
}

// Issue 29: connections beyond a listener's limits cannot take a node
// down. Held connections (handshake done, then silent) fill the client
// listener's limit per IP and then its total; the connections over them
// are reset as they arrive. Meanwhile a client connected before keeps
// producing and fetching, a client from another address is served while
// only the per-IP limit is reached, the internal listener (limits of its
// own) keeps answering, and the refusals are counted. Once the flood
// closes, new clients are served again.
func TestConnectionFloodLeavesTheNodeServing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dials from several 127/8 addresses, which only Linux routes to lo without setup")
	}
	const topic = "canary"
	const total, perIP = 120, 60
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.MaxConnections, cfg.MaxConnectionsPerIP = total, perIP
		cfg.HTTPListen = "127.0.0.1:0"
	})
	s.CreateTopic(topic, 1, nil)
	if err := canary(t, s.Conn, topic, "before"); err != nil {
		t.Fatal(err)
	}
	addr := s.Node.Addr()
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	held := func() int {
		t.Helper()
		mfs := scrape(t, s.Node.HTTPAddr())
		return int(mustSample(t, mfs, "sluice_listener_connections", "listener", "client"))
	}

	// From 127.0.0.1 (the canary's address too): twice the per-IP limit.
	for range 2 * perIP {
		if c := dialRaw("127.0.0.1", addr, true); c != nil {
			flood = append(flood, c)
		}
	}
	wait.For(t, 10*time.Second, "127.0.0.1 at its limit", func() error {
		if n := held(); n != perIP {
			return fmt.Errorf("%d client connections open, want %d", n, perIP)
		}
		return nil
	})
	if err := canary(t, s.Conn, topic, "flooded-same-ip"); err != nil {
		t.Fatalf("client connected before the flood: %v", err)
	}
	if err := canary(t, dialGRPCFrom(t, "127.0.0.2", addr), topic, "flooded-other-ip"); err != nil {
		t.Fatalf("new client from another address: %v", err)
	}

	// From more addresses, until the listener is full.
	for i := range 2 * total {
		if c := dialRaw(fmt.Sprintf("127.0.0.%d", 10+i/perIP), addr, true); c != nil {
			flood = append(flood, c)
		}
	}
	wait.For(t, 10*time.Second, "the listener at its limit", func() error {
		if n := held(); n != total {
			return fmt.Errorf("%d client connections open, want %d", n, total)
		}
		return nil
	})
	if err := canary(t, s.Conn, topic, "full"); err != nil {
		t.Fatalf("client connected before the flood, listener full: %v", err)
	}
	hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(s.Internal).Check(hctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("internal listener while the client listener is full: %v", err)
	}
	mfs := scrape(t, s.Node.HTTPAddr())
	for _, reason := range []string{"max_connections", "max_connections_per_ip"} {
		if v := mustSample(t, mfs, "sluice_listener_connections_refused_total", "listener", "client", "reason", reason); v == 0 {
			t.Errorf("no refusal counted for %s", reason)
		}
	}
	if v := mustSample(t, mfs, "sluice_listener_max_connections", "listener", "client"); v != total {
		t.Errorf("sluice_listener_max_connections %v, want %d", v, total)
	}
	t.Logf("%d flood connections dialed; the node holds %d client connections, resets the rest", len(flood), total)

	// The flood goes: new clients are served.
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	wait.For(t, 10*time.Second, "the flood's slots given back", func() error {
		if n := held(); n > 2 {
			return fmt.Errorf("%d client connections open", n)
		}
		return nil
	})
	if err := canary(t, dialGRPCFrom(t, "127.0.0.3", addr), topic, "after"); err != nil {
		t.Fatalf("new client after the flood: %v", err)
	}
	if !s.Node.Ready() {
		t.Errorf("not ready after the flood: %v", s.Node.NotReadyReasons())
	}
}

// Issue 29: a connection that sends nothing (not even the HTTP/2
// preface) is closed once --connection-setup-timeout passes, and one
// that finished its handshake but makes no call is closed after
// --connections-max-idle (GOAWAY, then the close).
func TestSilentAndIdleConnectionsAreClosed(t *testing.T) {
	const setup, idle = time.Second, 2 * time.Second
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.ConnectionSetupTimeout, cfg.ConnectionsMaxIdle = setup, idle
	})
	// closedWithin waits until the server closes c, at most until
	// dialed+d, and returns how long after dialed it did.
	closedWithin := func(c net.Conn, dialed time.Time, d time.Duration) (time.Duration, error) {
		c.SetReadDeadline(dialed.Add(d))
		_, err := io.Copy(io.Discard, c) // the server's SETTINGS (and GOAWAY), then EOF or a reset
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, fmt.Errorf("still open after %v", d)
		}
		return time.Since(dialed), nil
	}
	for _, tc := range []struct {
		name    string
		preface bool
		within  time.Duration // the deadline, plus room for a loaded machine
	}{
		// grpc-go sends a second GOAWAY and closes 5 s after the first
		// when the client does not answer its ping.
		{"silent", false, setup + 5*time.Second},
		{"idle after the handshake", true, idle + 5*time.Second + 5*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrs := []string{s.Node.Addr(), s.Node.InternalAddr()}
			conns := make([]net.Conn, len(addrs))
			dialed := time.Now()
			for i, addr := range addrs {
				if conns[i] = dialRaw("127.0.0.1", addr, tc.preface); conns[i] == nil {
					t.Fatalf("dial %s failed", addr)
				}
				defer conns[i].Close()
			}
			for i, c := range conns {
				took, err := closedWithin(c, dialed, tc.within)
				if err != nil {
					t.Fatalf("%s: %v", addrs[i], err)
				}
				t.Logf("%s closed %v after the dial", addrs[i], took)
			}
		})
	}
	// The node still serves.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(s.Conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check after the closes: %v", err)
	}
}

// kafkaHeld is a Kafka connection from the loopback address local that
// the Kafka listener admitted: its ApiVersions was answered.
func kafkaHeld(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	c := dialRaw(local, addr, false)
	if c == nil {
		t.Fatalf("dial %s from %s failed", addr, local)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := kafkaAPIVersions(c, 1); err != nil {
		t.Fatalf("Kafka connection from %s not served: %v", local, err)
	}
	return c
}

// kafkaRefused checks that a Kafka connection from local is reset
// unanswered: the dial, or its ApiVersions, fails.
func kafkaRefused(t *testing.T, local, addr, what string) {
	t.Helper()
	c := dialRaw(local, addr, false)
	if c == nil {
		return // the reset came before the dial returned
	}
	defer c.Close()
	if resp, err := kafkaAPIVersions(c, 2); err == nil {
		t.Fatalf("%s: answered (%d API keys), want the connection reset", what, len(resp.ApiKeys))
	}
}

// Issue 29 for the Kafka listener (issue 34): it admits at most
// --kafka-max-connections connections, --kafka-max-connections-per-ip
// from one address, and resets the others as they arrive, counting them
// under listener="kafka" by reason; the connections it holds are served,
// a slot given back is taken again, and the client gRPC listener, with
// limits of its own, is not affected.
func TestKafkaListenerRefusesConnectionsOverItsLimits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dials from several 127/8 addresses, which only Linux routes to lo without setup")
	}
	const total, perIP = 5, 2
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.KafkaMaxConnections, cfg.KafkaMaxConnectionsPerIP = total, perIP
		cfg.HTTPListen = "127.0.0.1:0"
	})
	s.CreateTopic("canary", 1, nil)
	addr := s.Node.KafkaAddr()
	metric := func(name string, labels ...string) float64 {
		t.Helper()
		return mustSample(t, scrape(t, s.Node.HTTPAddr()), name, append([]string{"listener", "kafka"}, labels...)...)
	}

	first := kafkaHeld(t, "127.0.0.1", addr)
	kafkaHeld(t, "127.0.0.1", addr)
	kafkaRefused(t, "127.0.0.1", addr, "third from 127.0.0.1 (per IP)")
	kafkaHeld(t, "127.0.0.2", addr) // another address is served meanwhile
	kafkaHeld(t, "127.0.0.2", addr)
	kafkaHeld(t, "127.0.0.3", addr)
	kafkaRefused(t, "127.0.0.4", addr, "first from 127.0.0.4 (total)")
	if n := metric("sluice_listener_connections"); n != total {
		t.Errorf("sluice_listener_connections{listener=kafka} %v, want %d", n, total)
	}
	if n := metric("sluice_listener_max_connections"); n != total {
		t.Errorf("sluice_listener_max_connections{listener=kafka} %v, want %d", n, total)
	}
	for reason, want := range map[string]float64{"max_connections_per_ip": 1, "max_connections": 1} {
		if n := metric("sluice_listener_connections_refused_total", "reason", reason); n != want {
			t.Errorf("refusals for %s: %v, want %v", reason, n, want)
		}
	}
	// The connections held are served still.
	if _, err := kafkaAPIVersions(first, 3); err != nil {
		t.Fatalf("a connection admitted before the refusals: %v", err)
	}
	// The client gRPC listener has limits of its own.
	if err := canary(t, dialGRPCFrom(t, "127.0.0.4", s.Node.Addr()), "canary", "kafka-listener-full"); err != nil {
		t.Fatalf("client gRPC listener while the Kafka listener is full: %v", err)
	}

	// A slot given back is taken again.
	first.Close()
	wait.For(t, 10*time.Second, "the slot given back", func() error {
		if n := metric("sluice_listener_connections"); n != total-1 {
			return fmt.Errorf("%v Kafka connections open, want %d", n, total-1)
		}
		return nil
	})
	kafkaHeld(t, "127.0.0.4", addr)
}

// A Kafka connection that holds a slot without using it is closed: one
// that sends nothing, or only part of its first request, once
// --connection-setup-timeout has passed since it was accepted; one whose
// first request was answered is not held to that deadline but closed
// after --connections-max-idle without a request. The slots are given
// back.
func TestSilentKafkaConnectionsAreClosed(t *testing.T) {
	// The slack leaves room for a loaded machine, and setup+slack is
	// below idle: a silent connection closed only when idle fails.
	const setup, idle, slack = time.Second, 8 * time.Second, 4 * time.Second
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		cfg.ConnectionSetupTimeout, cfg.ConnectionsMaxIdle = setup, idle
		cfg.HTTPListen = "127.0.0.1:0"
	})
	addr := s.Node.KafkaAddr()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dialed := time.Now()
	silent := dial()
	partial := dial()
	// A frame of 100 bytes announced, 10 sent.
	if _, err := partial.Write(append([]byte{0, 0, 0, 100}, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	answered := dial()
	if _, err := kafkaAPIVersions(answered, 1); err != nil {
		t.Fatal(err)
	}
	answered.SetDeadline(time.Time{})

	// closedAt waits until the server closes c, at most until dialed+d.
	closedAt := func(c net.Conn, d time.Duration) (time.Duration, error) {
		c.SetReadDeadline(dialed.Add(d))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return 0, fmt.Errorf("still open %v after the dial", d)
		}
		return time.Since(dialed), nil
	}
	for _, tc := range []struct {
		name string
		c    net.Conn
	}{{"silent", silent}, {"partial first request", partial}} {
		took, err := closedAt(tc.c, setup+slack)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if took < setup-100*time.Millisecond {
			t.Errorf("%s: closed %v after the dial, before the setup timeout %v", tc.name, took, setup)
		}
		t.Logf("%s: closed %v after the dial", tc.name, took)
	}
	// The connection that sent a request outlives the setup timeout, and
	// is answered again.
	if took, err := closedAt(answered, 2*setup); err == nil {
		t.Fatalf("a connection that sent its first request closed %v after the dial", took)
	}
	if _, err := kafkaAPIVersions(answered, 2); err != nil {
		t.Fatalf("a connection that sent its first request, %v after the dial: %v", time.Since(dialed), err)
	}
	answered.SetDeadline(time.Time{})
	lastRequest := time.Now()
	took, err := closedAt(answered, time.Since(dialed)+idle+slack)
	if err != nil {
		t.Fatalf("idle: %v", err)
	}
	if sinceLast := time.Since(lastRequest); sinceLast < idle-100*time.Millisecond {
		t.Errorf("idle: closed %v after its last request, before --connections-max-idle %v", sinceLast, idle)
	}
	t.Logf("idle: closed %v after the dial", took)
	wait.For(t, 10*time.Second, "the slots given back", func() error {
		if n := mustSample(t, scrape(t, s.Node.HTTPAddr()), "sluice_listener_connections", "listener", "kafka"); n != 0 {
			return fmt.Errorf("%v Kafka connections open", n)
		}
		return nil
	})
}
