package chaos

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Link is the fault-injecting proxy on one directed inter-node link: node
// From dials every address of node To (internal and client gRPC, Raft,
// gossip) through it, because From's sluiced was started with
// --fault-dial-map pointing To's real addresses at this link's listeners. A Link can cut the link (every
// open connection closed, new ones refused, UDP packets dropped) and add
// latency to whatever it forwards. A partition between two nodes cuts
// both directed links.
//
// Connections From makes to To go through Link(From→To); To's answers on
// those connections come back through the same Link. Connections To makes
// to From go through Link(To→From). Gossip's UDP answers are sent by To to
// From's advertised address, i.e. through Link(To→From).
type Link struct {
	From, To int32

	mu sync.Mutex // guards the following
	// cut refuses and drops everything; latency delays every forwarded
	// chunk or packet by that much.
	cut     bool
	latency time.Duration
	conns   map[net.Conn]struct{} // open proxied TCP connections (both sides)
	closed  bool

	ports  []*proxyPort
	wg     sync.WaitGroup
	stopCh chan struct{}
}

// proxyPort forwards one listening address (TCP, and UDP on the same port
// when udp is set) to target.
type proxyPort struct {
	name   string // grpc (the internal listener), client, raft, gossip
	target string
	ln     net.Listener
	pc     net.PacketConn // nil unless UDP is forwarded
}

// Addr returns the proxy address for name.
func (p *proxyPort) Addr() string { return p.ln.Addr().String() }

// newLink starts a Link with one proxy port per entry of targets (name →
// real address of node to). Names listed in udp also forward UDP on the
// same port (memberlist uses TCP and UDP on one port).
func newLink(from, to int32, targets map[string]string, udp map[string]bool) (*Link, error) {
	l := &Link{From: from, To: to, conns: map[net.Conn]struct{}{}, stopCh: make(chan struct{})}
	for name, target := range targets {
		p, err := listenPort(name, target, udp[name])
		if err != nil {
			l.Close()
			return nil, err
		}
		l.ports = append(l.ports, p)
	}
	for _, p := range l.ports {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.acceptLoop(p) }()
		if p.pc != nil {
			l.wg.Add(1)
			go func() { defer l.wg.Done(); l.udpLoop(p) }()
		}
	}
	return l, nil
}

// listenPort binds a loopback port free for TCP (and UDP when udp).
func listenPort(name, target string, udp bool) (*proxyPort, error) {
	for attempt := 0; attempt < 50; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := &proxyPort{name: name, target: target, ln: ln}
		if !udp {
			return p, nil
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err != nil {
			ln.Close() // UDP side taken: draw another port
			continue
		}
		p.pc = pc
		return p, nil
	}
	return nil, errors.New("chaos: no loopback port free for both TCP and UDP")
}

// Port returns the proxy address forwarding to name's target, or "".
func (l *Link) Port(name string) string {
	for _, p := range l.ports {
		if p.name == name {
			return p.Addr()
		}
	}
	return ""
}

// Cut cuts (true) or restores (false) the link. Cutting closes every open
// connection at once, as a failed network path would reset them.
func (l *Link) Cut(cut bool) {
	l.mu.Lock()
	l.cut = cut
	var open []net.Conn
	if cut {
		for c := range l.conns {
			open = append(open, c)
		}
	}
	l.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

// SetLatency delays everything the link forwards from now on by d (0
// removes the delay).
func (l *Link) SetLatency(d time.Duration) {
	l.mu.Lock()
	l.latency = d
	l.mu.Unlock()
}

func (l *Link) state() (cut bool, latency time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut, l.latency
}

// Close stops every listener and connection and waits for the link's
// goroutines.
func (l *Link) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.stopCh)
	var open []net.Conn
	for c := range l.conns {
		open = append(open, c)
	}
	l.mu.Unlock()
	for _, p := range l.ports {
		p.ln.Close()
		if p.pc != nil {
			p.pc.Close()
		}
	}
	for _, c := range open {
		c.Close()
	}
	l.wg.Wait()
}

// track registers c as open; false when the link is cut or closed (c is
// then closed by the caller).
func (l *Link) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut || l.closed {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *Link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
	}
}

func (l *Link) acceptLoop(p *proxyPort) {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		if cut, _ := l.state(); cut {
			in.Close() // a cut link: the dial "succeeds" at the proxy but the peer never answers
			continue
		}
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.serve(in, p.target) }()
	}
}

// serve proxies one TCP connection to target.
func (l *Link) serve(in net.Conn, target string) {
	out, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		in.Close()
		return
	}
	if !l.track(in, out) {
		in.Close()
		out.Close()
		return
	}
	defer l.untrack(in, out)
	done := make(chan struct{}, 2)
	go func() { l.pipe(out, in); done <- struct{}{} }()
	go func() { l.pipe(in, out); done <- struct{}{} }()
	<-done
	// One direction ended: close both, which ends the other.
	in.Close()
	out.Close()
	<-done
}

// chunk is data read from one side, due at the other side at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, holding every chunk back by the link's latency
// (read when it arrives, written when due, in order).
func (l *Link) pipe(dst, src net.Conn) {
	q := make(chan chunk, 256)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				select {
				case <-time.After(d):
				case <-l.stopCh:
					return
				}
			}
			if _, err := dst.Write(c.data); err != nil {
				src.Close()
				for range q { // drain so the reader never blocks
				}
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, lat := l.state()
			data := append([]byte(nil), buf[:n]...)
			q <- chunk{data: data, due: time.Now().Add(lat)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-writerDone
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// udpLoop forwards UDP packets to the target (gossip probes and gossip);
// the target answers to the sender's advertised address, which is another
// link, so nothing comes back through this one.
func (l *Link) udpLoop(p *proxyPort) {
	out, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return
	}
	defer out.Close()
	dst, err := net.ResolveUDPAddr("udp", p.target)
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := p.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		cut, lat := l.state()
		if cut {
			continue // dropped
		}
		pkt := append([]byte(nil), buf[:n]...)
		if lat <= 0 {
			_, _ = out.WriteTo(pkt, dst)
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			select {
			case <-time.After(lat):
				_, _ = out.WriteTo(pkt, dst)
			case <-l.stopCh:
			}
		}()
	}
}
