package membership

import (
	"fmt"
	"log"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluice-io/sluice/cluster/faultnet"
)

// dialMapTransport is memberlist's NetTransport with the destination of
// every outgoing packet (UDP) and stream (TCP) redirected by a dial map
// (fault injection, testing only). Memberlist keeps the real addresses:
// nodes, gossip, acks and events name them; only the socket's destination
// changes. Listening and incoming traffic are the NetTransport's own.
type dialMapTransport struct {
	*memberlist.NetTransport
	dialMap faultnet.DialMap // read-only
}

var _ memberlist.NodeAwareTransport = (*dialMapTransport)(nil)

// WriteTo implements memberlist.Transport.
func (t *dialMapTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.NetTransport.WriteTo(b, t.dialMap.Target(addr))
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *dialMapTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	a.Addr = t.dialMap.Target(a.Addr)
	return t.NetTransport.WriteToAddress(b, a)
}

// DialTimeout implements memberlist.Transport.
func (t *dialMapTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.NetTransport.DialTimeout(t.dialMap.Target(addr), timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *dialMapTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	a.Addr = t.dialMap.Target(a.Addr)
	return t.NetTransport.DialAddressTimeout(a, timeout)
}

// newDialMapTransport binds gossip on bindIP:port (TCP and UDP) the way
// memberlist.Create does when it makes its own transport, and wraps it in
// a dialMapTransport. Port 0 picks a free port; as in memberlist, binding
// is retried a few times then, since the UDP port may be taken between the
// two binds. It returns the bound port.
func newDialMapTransport(bindIP netip.Addr, port int, dialMap faultnet.DialMap, logger *log.Logger) (*dialMapTransport, int, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{bindIP.String()}, BindPort: port, Logger: logger}
	attempts := 1
	if port == 0 {
		attempts = 10
	}
	var err error
	for range attempts {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			return &dialMapTransport{NetTransport: nt, dialMap: dialMap}, nt.GetAutoBindPort(), nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, 0, fmt.Errorf("set up gossip transport: %w", err)
}
