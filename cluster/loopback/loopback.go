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
// and UDP (memberlist gossips on both), and never handed out twice: not by
// one process, and not by two processes using this package at once (test
// binaries of several packages run in parallel), which claim each port
// with a file in a shared directory. A claim holds while its process
// lives, so a node a test kills and restarts finds its ports still free.
package loopback

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// The ports handed out: [minPort, maxPort).
const (
	minPort = 20000
	maxPort = 32000
)

var (
	mu     sync.Mutex       // guards issued
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
		if issued[port] || !claim(port) {
			continue
		}
		issued[port] = true // claimed: never tried again, whatever the probe says
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
		out = append(out, addr)
	}
	return out, nil
}

// claimDir holds one file per claimed port, named by the port and holding
// the claiming process's id.
var claimDir = filepath.Join(os.TempDir(), "sluice-loopback-ports")

// claim reserves port for this process across processes: it creates the
// port's claim file, or takes over a claim whose process is gone. It
// reports false when another live process holds the port, or when the
// claim cannot be made for another reason (the port is then not used).
func claim(port int) bool {
	if err := os.MkdirAll(claimDir, 0o777); err != nil {
		return false
	}
	path := filepath.Join(claimDir, strconv.Itoa(port))
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, werr := f.WriteString(strconv.Itoa(os.Getpid()))
			if cerr := f.Close(); werr != nil || cerr != nil {
				os.Remove(path)
				return false
			}
			return true
		}
		if !errors.Is(err, fs.ErrExist) {
			return false
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err == nil && (pid == os.Getpid() || processAlive(pid)) {
			return false
		}
		// A stale claim (its process exited) or a torn one: take it over.
		// Two processes racing here both remove it, and O_EXCL lets one
		// of them create it again.
		os.Remove(path)
	}
	return false
}
