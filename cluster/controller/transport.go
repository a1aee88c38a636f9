package controller

import (
	"errors"
	"fmt"
	"net"
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
)

// newTransport listens on bind and returns the Raft transport. advertise
// is the address the others dial, nil for the bound one (which must then be
// a specific IP). With a dial map (fault injection, testing only) outgoing
// connections dial the map's target for a voter's address; without one it
// is raft's own TCP transport.
func newTransport(bind string, advertise net.Addr, dialMap faultnet.DialMap, logger hclog.Logger) (*raft.NetworkTransport, error) {
	if len(dialMap) == 0 {
		return raft.NewTCPTransportWithLogger(bind, advertise, raftMaxPool, raftTimeout, logger)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &dialMapStreamLayer{Listener: l, advertise: advertise, dialMap: dialMap}
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

// dialMapStreamLayer is raft's TCP stream layer with outgoing connections
// redirected by a dial map. Raft, its configuration and its logs keep the
// voters' real addresses; only the dial target changes.
type dialMapStreamLayer struct {
	net.Listener
	advertise net.Addr         // nil: the listener's address
	dialMap   faultnet.DialMap // read-only
}

// Dial implements raft.StreamLayer.
func (s *dialMapStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", s.dialMap.Target(string(address)), timeout)
}

// Addr is the advertised address if set, else the bound one.
func (s *dialMapStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}
