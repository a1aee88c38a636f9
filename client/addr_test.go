package client

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 28: a bootstrap address that is not host:port with a port from 1
// to 65535 fails New at once, naming the address and the form wanted;
// nothing is dialed, so no retry can spend the request timeout on it.
func TestNewRefusesAMalformedBrokerAddress(t *testing.T) {
	for _, tc := range []struct {
		addr, reason string
	}{
		{"nonsense:xx", `port "xx" is not a number from 1 to 65535`},
		{"localhost", "missing port in address"},
		{"localhost:", `port "" is not a number from 1 to 65535`},
		{"localhost:0", `port "0" is not a number from 1 to 65535`},
		{"localhost:65536", `port "65536" is not a number from 1 to 65535`},
		{"localhost:+80", `port "+80" is not a number from 1 to 65535`},
		{":9400", "no host"},
		{"::1:9400", "too many colons in address"},
		{"[::1]", "missing port in address"},
		{"http://localhost:9400", "too many colons in address"},
		{"local host:9400", `host "local host" has a space or a slash`},
	} {
		var dials atomic.Int64
		dialer := WithDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		})
		c, err := New([]string{"127.0.0.1:9400", tc.addr}, dialer)
		var bad *BrokerAddrError
		if !errors.As(err, &bad) || bad.Addr != tc.addr {
			if c != nil {
				c.Close()
			}
			t.Errorf("New with %q: %v (%T), want a *BrokerAddrError for it", tc.addr, err, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, `"`+tc.addr+`"`) || !strings.Contains(msg, tc.reason) ||
			!strings.Contains(msg, "want host:port with a port from 1 to 65535") {
			t.Errorf("New with %q: %q, want it to name the address, say %q and the form wanted", tc.addr, msg, tc.reason)
		}
		if n := dials.Load(); n != 0 {
			t.Errorf("New with %q dialed %d times", tc.addr, n)
		}
	}
	for _, ok := range []string{"localhost:9400", "127.0.0.1:1", "[::1]:65535", "node-1.sluice.svc.cluster.local:9400", ""} {
		c, err := New([]string{"127.0.0.1:9400", ok})
		if err != nil {
			t.Errorf("New with %q: %v", ok, err)
			continue
		}
		c.Close()
	}
}

// A broker that advertises an address that is not host:port is never
// dialed: a cluster-wide call skips it for the next address, and a call
// aimed at it fails with the *BrokerAddrError.
func TestMalformedAdvertisedAddressIsNotDialed(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	seed := f.addr
	c, err := New([]string{seed}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f.mu.Lock()
	f.addr = "nonsense:xx" // the metadata now advertises node 1 there
	f.mu.Unlock()
	ctx := context.Background()
	if _, err := c.Metadata(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if got := c.anyAddrs(); len(got) != 2 || got[0] != "nonsense:xx" {
		t.Fatalf("addresses to try %v, want the advertised one first", got)
	}
	if _, err := c.Metadata(ctx, "t"); err != nil {
		t.Fatalf("metadata with a malformed advertised address listed first: %v", err)
	}
	_, err = c.conn("nonsense:xx")
	var bad *BrokerAddrError
	if !errors.As(err, &bad) {
		t.Fatalf("conn to the malformed address: %v, want *BrokerAddrError", err)
	}
	c.mu.Lock()
	_, made := c.conns["nonsense:xx"]
	c.mu.Unlock()
	if made {
		t.Error("a connection to the malformed address was made")
	}
}
