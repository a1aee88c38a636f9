// Package faultnet lets a fault-injection harness put itself between Sluice
// nodes. A DialMap redirects the outgoing inter-node connections of one node
// (gRPC, Raft, gossip over TCP and UDP) from a peer's real address to another
// address, where the harness runs a proxy that delays, drops or cuts that
// node's traffic to that peer. Testing only.
//
// Only the dial target changes: advertised addresses, metadata, gossip and
// logs keep the real addresses, so a node behind a proxy looks exactly like
// one without. Incoming connections are not affected.
package faultnet

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// DialMap maps a peer's real address (host:port, as this node would dial
// it) to the address this node dials instead. A nil or empty map changes
// nothing. A DialMap must not be modified once a component uses it; reads
// are safe concurrently.
//
// Keys whose host is an IP literal are matched in canonical form
// (127.0.0.1:9400, [::1]:9400), since memberlist dials resolved IPs; other
// keys are matched as written. ParseDialMap stores keys in that form.
type DialMap map[string]string

// ParseDialMap parses a comma-separated list of from=to pairs of host:port
// addresses ("127.0.0.1:9501=127.0.0.1:19501,..."). Empty items and spaces
// around items are ignored; the empty string gives a nil map. Errors name
// the offending item: a missing '=', an address that is not host:port with
// a port in 1-65535, or the same from address twice.
func ParseDialMap(s string) (DialMap, error) {
	var m DialMap
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		from, to, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("fault dial map item %q: want from=to (host:port=host:port)", item)
		}
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		key, err := checkAddr(from)
		if err != nil {
			return nil, fmt.Errorf("fault dial map item %q: from address: %w", item, err)
		}
		if _, err := checkAddr(to); err != nil {
			return nil, fmt.Errorf("fault dial map item %q: to address: %w", item, err)
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("fault dial map item %q: %s is mapped twice", item, from)
		}
		if m == nil {
			m = DialMap{}
		}
		m[key] = to
	}
	return m, nil
}

// Validate checks that every entry maps a host:port to a host:port (port
// 1-65535), for maps not made by ParseDialMap.
func (m DialMap) Validate() error {
	for _, from := range slices.Sorted(maps.Keys(m)) {
		if _, err := checkAddr(from); err != nil {
			return fmt.Errorf("fault dial map: from address: %w", err)
		}
		if _, err := checkAddr(m[from]); err != nil {
			return fmt.Errorf("fault dial map: to address for %s: %w", from, err)
		}
	}
	return nil
}

// Lookup returns the address to dial instead of addr, if addr is mapped
// (as written, or in canonical form when its host is an IP literal).
func (m DialMap) Lookup(addr string) (string, bool) {
	if len(m) == 0 {
		return "", false
	}
	if to, ok := m[addr]; ok {
		return to, true
	}
	if c, ok := canonical(addr); ok && c != addr {
		to, ok := m[c]
		return to, ok
	}
	return "", false
}

// Target returns the address to dial for addr: its mapping, or addr itself.
func (m DialMap) Target(addr string) string {
	if to, ok := m.Lookup(addr); ok {
		return to
	}
	return addr
}

// String renders the map in ParseDialMap's format, sorted by from address.
func (m DialMap) String() string {
	pairs := make([]string, 0, len(m))
	for _, from := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, from+"="+m[from])
	}
	return strings.Join(pairs, ",")
}

// checkAddr checks a host:port with a non-empty host and a port in 1-65535
// and returns it in the form keys are matched in.
func checkAddr(addr string) (string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", addr)
	}
	if port, err := strconv.ParseUint(portStr, 10, 16); err != nil || port == 0 {
		return "", fmt.Errorf("%q: port %q is not in 1-65535", addr, portStr)
	}
	if c, ok := canonical(addr); ok {
		return c, nil
	}
	return addr, nil
}

// canonical returns addr in netip's form when its host is an IP literal
// (IPv4-mapped IPv6 unmapped, as memberlist does).
func canonical(addr string) (string, bool) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), true
}
