package loopback

import (
	"net"
	"strconv"
	"testing"
)

// Addresses are distinct across calls, below the ephemeral range, and
// bindable for TCP and UDP.
func TestFreeAddrs(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addrs, err := FreeAddrs(5)
		if err != nil {
			t.Fatal(err)
		}
		if len(addrs) != 5 {
			t.Fatalf("got %d addresses, want 5", len(addrs))
		}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s handed out twice", a)
			}
			seen[a] = true
			host, p, err := net.SplitHostPort(a)
			if err != nil || host != "127.0.0.1" {
				t.Fatalf("address %q", a)
			}
			port, _ := strconv.Atoi(p)
			if port < minPort || port >= maxPort {
				t.Fatalf("port %d outside [%d, %d)", port, minPort, maxPort)
			}
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("TCP %s: %v", a, err)
			}
			u, err := net.ListenPacket("udp", a)
			if err != nil {
				t.Fatalf("UDP %s: %v", a, err)
			}
			l.Close()
			u.Close()
		}
	}
}

// A port in use is never handed out.
func TestFreeAddrsSkipsPortsInUse(t *testing.T) {
	var held []net.Listener
	for p := minPort; p < minPort+200; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			held = append(held, l)
		}
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	inUse := map[string]bool{}
	for _, l := range held {
		inUse[l.Addr().String()] = true
	}
	addrs, err := FreeAddrs(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if inUse[a] {
			t.Fatalf("%s is in use, yet handed out", a)
		}
	}
}
