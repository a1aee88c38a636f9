// Package faultnettest provides a counting TCP and UDP forwarder to stand at
// the "to" side of a faultnet.DialMap in tests: traffic that arrives at the
// forwarder proves that a component dialed through the map.
package faultnettest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Forwarder listens on a loopback port (TCP, and UDP on the same port when
// asked) and forwards everything to a target address: each accepted TCP
// connection to a new connection to the target, both ways; each UDP
// datagram to the target, one way (memberlist answers a ping at the
// sender's advertised address, not at the datagram's source). It counts
// what it forwarded and stops when the test ends.
type Forwarder struct {
	target string
	tcp    net.Listener
	udp    net.PacketConn // nil unless UDP was asked for
	out    net.Conn       // UDP socket to target; nil unless UDP

	conns   atomic.Int64 // TCP connections accepted
	packets atomic.Int64 // UDP datagrams forwarded

	mu     sync.Mutex // guards the following
	open   map[net.Conn]struct{}
	closed bool

	wg sync.WaitGroup
}

// New starts a forwarder to target (host:port), with UDP too if udp is
// set, and stops it in t.Cleanup.
func New(t testing.TB, target string, udp bool) *Forwarder {
	t.Helper()
	f := &Forwarder{target: target, open: map[net.Conn]struct{}{}}
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if !udp {
			f.tcp = l
			break
		}
		u, err := net.ListenPacket("udp", l.Addr().String())
		if err != nil {
			l.Close() // that port is taken for UDP; try another
			continue
		}
		out, err := net.Dial("udp", target)
		if err != nil {
			l.Close()
			u.Close()
			t.Fatal(err)
		}
		f.tcp, f.udp, f.out = l, u, out
		break
	}
	if f.tcp == nil {
		t.Fatal("faultnettest: no loopback port free for both TCP and UDP")
	}
	f.wg.Add(1)
	go f.acceptLoop()
	if f.udp != nil {
		f.wg.Add(1)
		go f.packetLoop()
	}
	t.Cleanup(f.Close)
	return f
}

// Addr is the forwarder's host:port, for the "to" side of a DialMap.
func (f *Forwarder) Addr() string { return f.tcp.Addr().String() }

// Conns is the number of TCP connections accepted so far.
func (f *Forwarder) Conns() int64 { return f.conns.Load() }

// Packets is the number of UDP datagrams forwarded so far.
func (f *Forwarder) Packets() int64 { return f.packets.Load() }

// Close stops the forwarder, cuts the connections it carries and waits for
// its goroutines. Safe to call more than once.
func (f *Forwarder) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.tcp.Close()
	if f.udp != nil {
		f.udp.Close()
		f.out.Close()
	}
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// track registers c to be closed by Close; false if already closed.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.open[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.open, c)
	f.mu.Unlock()
}

func (f *Forwarder) acceptLoop() {
	defer f.wg.Done()
	for {
		in, err := f.tcp.Accept()
		if err != nil {
			return // closed
		}
		f.conns.Add(1)
		if !f.track(in) {
			in.Close()
			return
		}
		f.wg.Add(1)
		go f.pipe(in)
	}
}

// pipe copies in ↔ target until either side ends, then closes both.
func (f *Forwarder) pipe(in net.Conn) {
	defer f.wg.Done()
	defer f.untrack(in)
	defer in.Close()
	out, err := net.Dial("tcp", f.target)
	if err != nil {
		return
	}
	if !f.track(out) {
		out.Close()
		return
	}
	defer f.untrack(out)
	defer out.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	// One direction ended: end the other by closing both; the second copy
	// returns promptly and is waited for so no goroutine outlives Close.
	in.Close()
	out.Close()
	<-done
}

func (f *Forwarder) packetLoop() {
	defer f.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, _, err := f.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if _, err := f.out.Write(buf[:n]); err == nil {
			f.packets.Add(1)
		}
	}
}
