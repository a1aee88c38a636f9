package node

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/fdlimit"
	"github.com/sluice-io/sluice/internal/wait"
)

// dialFrom connects to addr from the loopback address local (Linux
// routes all of 127/8 to lo, so 127.0.0.2 is another client host).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, local, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether the peer closed or reset c within d.
func closedByPeer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	for {
		_, err := c.Read(buf[:])
		if err == nil {
			continue
		}
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, io.EOF)
	}
}

// Issue 29: a listener admits at most Max connections and PerIP from one
// address; one over either limit is reset at once (Accept does not wait
// for a slot and goes on with the next connection), counted by reason;
// a closed connection gives its slot back.
func TestLimitListenerResetsConnectionsOverItsLimits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dials from 127.0.0.2 and 127.0.0.3, which only Linux routes to lo without setup")
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(raw, listenerClient, ConnectionLimit{Max: 3, PerIP: 2}, nil)
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	addr := raw.Addr().String()
	serverSide := func(what string) net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: not accepted", what)
			return nil
		}
	}
	// refused dials from local and checks that the connection is reset:
	// the dial itself may already see the reset.
	refused := func(local, what string) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer c.Close()
		if !closedByPeer(c, 5*time.Second) {
			t.Fatalf("%s: not reset", what)
		}
	}

	a1 := dialFrom(t, "127.0.0.1", addr)
	s1 := serverSide("first from 127.0.0.1")
	dialFrom(t, "127.0.0.1", addr)
	serverSide("second from 127.0.0.1")
	refused("127.0.0.1", "third from 127.0.0.1 (per IP)")
	dialFrom(t, "127.0.0.2", addr)
	serverSide("first from 127.0.0.2")
	refused("127.0.0.3", "first from 127.0.0.3 (total)")
	if got := l.connections(); got != 3 {
		t.Fatalf("%d connections open, want 3", got)
	}
	if m, p := l.refusedMax.Load(), l.refusedPerIP.Load(); m != 1 || p != 1 {
		t.Fatalf("refused %d over the total, %d over the per-IP limit; want 1 and 1", m, p)
	}
	if closedByPeer(a1, 100*time.Millisecond) {
		t.Fatal("an admitted connection was closed")
	}

	// A slot given back is taken again; Close twice gives back one.
	s1.Close()
	s1.Close()
	wait.For(t, 5*time.Second, "the slot given back", func() error {
		if n := l.connections(); n != 2 {
			return errors.New("not yet")
		}
		return nil
	})
	dialFrom(t, "127.0.0.3", addr)
	serverSide("127.0.0.3 after a slot was freed")
	if got := l.connections(); got != 3 {
		t.Fatalf("%d connections open, want 3", got)
	}
}

// The default limits are shares of the open-files limit, the limit per
// IP a share of the listener's total; a zero setting takes its default
// and a set one is kept. The clients' half of the limit is the client
// gRPC listener's alone without a Kafka listener (the defaults before
// issue 34's listener existed) and split in quarters between it and the
// Kafka listener with one, so that every listener at its limit still
// leaves about 40% of the descriptors to the logs either way.
func TestConnectionLimitDefaults(t *testing.T) {
	for _, tc := range []struct {
		nofile                         int
		client, internal, http, kafka  int // with a Kafka listener
		clientAlone                    int // without one
		clientIP, internalIP, hIP, kIP int // per IP, with a Kafka listener
	}{
		{20000, 5000, 2000, 200, 5000, 10000, 500, 2000, 50, 500},
		{1024, 256, 102, 16, 256, 512, 25, 102, 8, 25},
		{1 << 20, 1 << 18, 104857, 1024, 1 << 18, 1 << 19, 26214, 104857, 256, 26214},
		{64, 16, 64, 16, 16, 32, 1, 64, 8, 1},
	} {
		kinds := []listenerKind{listenerClient, listenerInternal, listenerHTTP, listenerKafka}
		want := []int{tc.client, tc.internal, tc.http, tc.kafka}
		wantIP := []int{tc.clientIP, tc.internalIP, tc.hIP, tc.kIP}
		for i, k := range kinds {
			if got := defaultMaxConnections(k, tc.nofile, true); got != want[i] {
				t.Errorf("nofile %d: %v limit %d, want %d", tc.nofile, k, got, want[i])
			}
			if got := defaultMaxConnectionsPerIP(k, want[i]); got != wantIP[i] {
				t.Errorf("nofile %d: %v limit per IP %d, want %d", tc.nofile, k, got, wantIP[i])
			}
			if k == listenerClient {
				continue
			}
			if got := defaultMaxConnections(k, tc.nofile, false); got != want[i] {
				t.Errorf("nofile %d, no Kafka listener: %v limit %d, want %d as with one", tc.nofile, k, got, want[i])
			}
		}
		if got := defaultMaxConnections(listenerClient, tc.nofile, false); got != tc.clientAlone {
			t.Errorf("nofile %d, no Kafka listener: client limit %d, want %d", tc.nofile, got, tc.clientAlone)
		}
		// What connections may hold at most, every listener full.
		if tc.nofile >= 1024 {
			withKafka := tc.client + tc.internal + tc.http + tc.kafka
			without := tc.clientAlone + tc.internal + tc.http
			for _, sum := range []int{withKafka, without} {
				if left := float64(tc.nofile-sum) / float64(tc.nofile); left < 0.35 {
					t.Errorf("nofile %d: the limits add up to %d, leaving %.0f%% of the descriptors", tc.nofile, sum, 100*left)
				}
			}
		}
	}
	c := Config{MaxConnections: 100}
	if l := c.connectionLimits(listenerClient); l != (ConnectionLimit{Max: 100, PerIP: 10}) {
		t.Errorf("--max-connections 100 alone: %+v, want 100 and 10 per IP", l)
	}
	d := DefaultConfig()
	if !d.KafkaListenerEnabled() {
		t.Fatal("DefaultConfig has no Kafka listener")
	}
	for _, k := range []listenerKind{listenerClient, listenerKafka} {
		if l := d.connectionLimits(k); l.Max != defaultMaxConnections(k, fdlimit.Limit(), true) || *d.connectionLimitFields()[k][0] != l.Max {
			t.Errorf("DefaultConfig's %v limits %+v (setting %d), want derived from the open-files limit %d", k, l, *d.connectionLimitFields()[k][0], fdlimit.Limit())
		}
	}
	// A node without a Kafka listener (none configured, or controller
	// only) whose limits are left at zero gives the client listener the
	// clients' whole half.
	for _, off := range []Config{{}, {KafkaListen: "127.0.0.1:9092", Roles: []string{RoleController}}} {
		if l := off.connectionLimits(listenerClient); l.Max != defaultMaxConnections(listenerClient, fdlimit.Limit(), false) {
			t.Errorf("no Kafka listener (%q, roles %v): client limit %d, want %d", off.KafkaListen, off.Roles, l.Max, defaultMaxConnections(listenerClient, fdlimit.Limit(), false))
		}
	}
	for name, bad := range map[string]Config{"max connections per ip": {MaxConnectionsPerIP: -1},
		"kafka max connections": {KafkaMaxConnections: -1}, "kafka max connections per ip": {KafkaMaxConnectionsPerIP: -1}} {
		if err := bad.validateConnections(); err == nil {
			t.Errorf("a negative %s is accepted", name)
		}
	}
}
