package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/sluice-io/sluice/cluster/faultnet"
)

// Raft transport settings: connections pooled per peer and the I/O
// deadline (scaled up for snapshots by raft).
const (
	raftMaxPool = 3
	raftTimeout = 5 * time.Second
	// raftHandshakeTimeout bounds an incoming connection's TLS handshake.
	raftHandshakeTimeout = 10 * time.Second
)

// TransportTLS is the Raft transport's mutual TLS: Server for the
// connections other voters open (it must require and verify their node
// certificates), Client called for each connection this voter opens.
type TransportTLS struct {
	Server *tls.Config
	Client func() *tls.Config
	// OnRefused, if set, is told of each incoming connection whose
	// handshake failed (counted and logged by the node).
	OnRefused func(peer net.Addr, err error)
}

// newTransport listens on bind and returns the Raft transport. advertise
// is the address the others dial, nil for the bound one (which must then be
// a specific IP). With a dial map (fault injection, testing only) outgoing
// connections dial the map's target for a voter's address; with TLS every
// connection is mutual TLS; without either it is raft's own TCP transport.
func newTransport(bind string, advertise net.Addr, dialMap faultnet.DialMap, tlsCfg *TransportTLS, logger hclog.Logger) (*raft.NetworkTransport, error) {
	if len(dialMap) == 0 && tlsCfg == nil {
		return raft.NewTCPTransportWithLogger(bind, advertise, raftMaxPool, raftTimeout, logger)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &streamLayer{Listener: l, advertise: advertise, dialMap: dialMap, tls: tlsCfg}
	// The same check as raft's TCP transport: the others must be able to
	// dial the address this node gives them.
	if a, ok := s.Addr().(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		_ = l.Close()
		return nil, fmt.Errorf("raft address %s: %w", s.Addr(), errNotAdvertisable)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s, MaxPool: raftMaxPool, Timeout: raftTimeout, Logger: logger,
	}), nil
}

var errNotAdvertisable = errors.New("local bind address is not advertisable")

// streamLayer is raft's TCP stream layer with mutual TLS (when tls is
// set) and outgoing connections redirected by a dial map (testing only).
// Raft, its configuration and its logs keep the voters' real addresses;
// only the dial target changes.
type streamLayer struct {
	net.Listener
	advertise net.Addr         // nil: the listener's address
	dialMap   faultnet.DialMap // read-only; nil: none
	tls       *TransportTLS    // nil: plaintext
}

// Accept implements net.Listener: with TLS, the connection's handshake
// runs at its first read or write (on raft's goroutine for it, not the
// accept loop), bounded by raftHandshakeTimeout.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.tls == nil {
		return c, err
	}
	return &serverConn{Conn: tls.Server(c, s.tls.Server), refused: s.tls.OnRefused}, nil
}

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	target := string(address)
	if len(s.dialMap) > 0 {
		target = s.dialMap.Target(target)
	}
	c, err := net.DialTimeout("tcp", target, timeout)
	if err != nil || s.tls == nil {
		return c, err
	}
	tc := tls.Client(c, s.tls.Client())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", address, err)
	}
	return tc, nil
}

// Addr is the advertised address if set, else the bound one.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// serverConn is an accepted TLS connection whose handshake, at first
// use, has a deadline (a peer that connects and sends nothing does not
// hold raft's goroutine for ever).
type serverConn struct {
	*tls.Conn
	refused func(net.Addr, error) // nil: not told
	once    sync.Once
	err     error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
		if c.err != nil {
			if c.refused != nil {
				c.refused(c.Conn.RemoteAddr(), c.err)
			}
			_ = c.Conn.Close()
		}
	})
	return c.err
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
