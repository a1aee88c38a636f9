// Package loopback hands out loopback addresses for tests and local
// harnesses that must know a node's ports before the node starts (Raft
// voters and gossip seeds are configured up front).
//
// The usual trick, listening on port 0 and closing, races with the
// kernel: it draws the port from the ephemeral range, where any outgoing
// connection made meanwhile (by another test, a client, Raft dialing a
// peer) may take it before the node binds it. Addresses here come from
// below Linux's default ephemeral range (32768-60999), so no outgoing
// connection ever gets one; they are drawn at random, probed free for TCP
// and UDP (memberlist gossips on both), and never handed out twice by one
// process.
package loopback

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// The ports handed out: [minPort, maxPort).
const (
	minPort = 20000
	maxPort = 32000
)

var (
	mu     sync.Mutex
	issued = map[int]bool{} // ports this process handed out
)

// ErrExhausted is returned when no free port is left to hand out.
var ErrExhausted = errors.New("loopback: no free port left in 20000-31999")

// FreeAddrs returns n distinct 127.0.0.1 addresses that were free for TCP
// and UDP a moment ago and that this process has not handed out before.
func FreeAddrs(n int) ([]string, error) {
	mu.Lock()
	defer mu.Unlock()
	var held []interface{ Close() error }
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if len(issued) >= (maxPort-minPort)/2 || tries > 20*(maxPort-minPort) {
			return nil, ErrExhausted
		}
		port := minPort + rand.IntN(maxPort-minPort)
		if issued[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue // in use
		}
		held = append(held, l)
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		held = append(held, u)
		issued[port] = true
		out = append(out, addr)
	}
	return out, nil
}
