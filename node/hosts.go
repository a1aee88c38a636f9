//go:build sluicetest

package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// Hosts is a testing-only table of host names and the IPs they resolve
// to (sluiced --hosts), for rehearsing a deployment on one machine: the
// StatefulSet rehearsal (deploy/) resolves the pods' DNS names
// (sluice-0.sluice-headless.default.svc.cluster.local) to loopback
// addresses (127.0.0.11, ...), as the cluster's DNS would to pod IPs.
// Keys are lower case without a trailing dot. Nil in production.
type Hosts map[string]netip.Addr

// ParseHosts parses "name=ip,name=ip" (sluiced --hosts); "" is nil.
// Errors name the bad item: no '=', an empty name, an IP that does not
// parse, or a name given twice.
func ParseHosts(s string) (Hosts, error) {
	var h Hosts
	for _, item := range ParseList(s) {
		name, ip, ok := strings.Cut(item, "=")
		name = normalizeHost(strings.TrimSpace(name))
		if !ok || name == "" {
			return nil, fmt.Errorf("hosts item %q: want name=ip", item)
		}
		addr, err := netip.ParseAddr(strings.TrimSpace(ip))
		if err != nil {
			return nil, fmt.Errorf("hosts item %q: %w", item, err)
		}
		if _, dup := h[name]; dup {
			return nil, fmt.Errorf("hosts item %q: %s is given twice", item, name)
		}
		if h == nil {
			h = Hosts{}
		}
		h[name] = addr.Unmap()
	}
	return h, nil
}

// String renders h in ParseHosts's format, sorted by name.
func (h Hosts) String() string {
	items := make([]string, 0, len(h))
	for _, name := range slices.Sorted(maps.Keys(h)) {
		items = append(items, name+"="+h[name].String())
	}
	return strings.Join(items, ",")
}

func normalizeHost(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// lookup returns the IP of name, if h has it.
func (h Hosts) lookup(name string) (netip.Addr, bool) {
	ip, ok := h[normalizeHost(name)]
	return ip, ok
}

// Rewrite returns addr (host:port) with its host replaced by its IP when h
// has the host, and addr unchanged otherwise.
func (h Hosts) Rewrite(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, ok := h.lookup(host); ok {
		return net.JoinHostPort(ip.String(), port)
	}
	return addr
}

// installMu serializes Install.
var installMu sync.Mutex

// Install makes h this process's DNS: net.DefaultResolver (which net.Dial,
// net.ResolveTCPAddr, gRPC's dns resolver, Raft's transport and
// memberlist's fallback lookup use) answers the names of h with their IP
// from an in-process DNS server, and every other name "no such host",
// without sending a query anywhere; /etc/hosts still applies first. It
// changes the whole process for good, so call it before anything resolves
// a name (sluiced does at start; a test process once). Memberlist also
// resolves seeds over TCP with the nameserver of /etc/resolv.conf
// directly: Start therefore rewrites the join seeds that h names to
// their IPs (Rewrite) instead.
func (h Hosts) Install() {
	installMu.Lock()
	defer installMu.Unlock()
	net.DefaultResolver.PreferGo = true
	net.DefaultResolver.Dial = h.dial
}

// dial is a net.Resolver's Dial: a connection to h's in-process DNS
// server, whatever nameserver the resolver asked for.
func (h Hosts) dial(context.Context, string, string) (net.Conn, error) {
	client, server := net.Pipe()
	// One goroutine per connection: it ends when the resolver closes its
	// end after reading the answer, so it is bounded by one lookup. Not in
	// a goroutine.Group: the resolver is process-wide and has no owner
	// that stops.
	go h.serveDNS(server)
	return client, nil
}

// serveDNS answers DNS queries on conn in TCP framing (a 2-byte length
// before each message: the Go resolver uses it on a connection that is
// not a net.PacketConn) until conn is closed.
func (h Hosts) serveDNS(conn net.Conn) {
	defer conn.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(conn, n[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return
		}
		resp, err := h.answer(msg)
		if err != nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := conn.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// answer builds the response to one query: the A or AAAA record of a name
// of h (none when the name has no IP of that family), "no such name" for
// any other name.
func (h Hosts) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	ip, known := h.lookup(q.Name.String())
	rh := dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true, RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	switch {
	case known && q.Type == dnsmessage.TypeA && ip.Is4():
		err = b.AResource(rr, dnsmessage.AResource{A: ip.As4()})
	case known && q.Type == dnsmessage.TypeAAAA && ip.Is6():
		err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: ip.As16()})
	}
	if err != nil {
		return nil, err
	}
	return b.Finish()
}

// withHosts installs c.Hosts (if any) and returns c with the join seeds
// that it names rewritten to their IPs (see Install).
func (c Config) withHosts(logger *slog.Logger) Config {
	if len(c.Hosts) == 0 {
		return c
	}
	c.Hosts.Install()
	join := make([]string, len(c.Join))
	for i, seed := range c.Join {
		join[i] = c.Hosts.Rewrite(seed)
	}
	c.Join = join
	logger.Warn("testing only: host names resolved by --hosts, every other name fails DNS", "hosts", c.Hosts.String())
	return c
}
