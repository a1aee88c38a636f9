package membership

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// seedLookupTimeout bounds the DNS lookup of one seed host name when
// deciding whether the seed is this node.
const seedLookupTimeout = time.Second

// selfAddrs lists the addresses at which this node's gossip port is
// reachable, to tell our own entry in a seed list. any is set when bound to
// an unspecified IP, in which case every loopback IP counts too.
type selfAddrs struct {
	addrs []netip.AddrPort
	port  uint16
	any   bool
}

// newSelfAddrs collects the advertised and bound addresses; bound to an
// unspecified IP, every interface address with our port.
func newSelfAddrs(advertise, bound netip.AddrPort) selfAddrs {
	s := selfAddrs{addrs: []netip.AddrPort{advertise}, port: bound.Port(), any: bound.Addr().IsUnspecified()}
	if !s.any {
		s.addrs = append(s.addrs, bound)
		return s
	}
	ifAddrs, _ := net.InterfaceAddrs() // best effort: advertise and loopback still count
	for _, a := range ifAddrs {
		if p, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(p.IP); ok {
				s.addrs = append(s.addrs, netip.AddrPortFrom(ip.Unmap(), s.port))
			}
		}
	}
	return s
}

// has reports whether ip:port is this node.
func (s selfAddrs) has(ip netip.Addr, port uint16) bool {
	ip = ip.Unmap()
	if s.any && port == s.port && ip.IsLoopback() {
		return true
	}
	return slices.Contains(s.addrs, netip.AddrPortFrom(ip, port))
}

// isSelf reports whether seed (host:port) names this node. A host name is
// resolved with a bounded lookup; if that fails the seed is kept, and
// memberlist's own resolution reports the error when joining.
func (s selfAddrs) isSelf(seed string) bool {
	host, portStr, err := net.SplitHostPort(seed)
	if err != nil {
		return false
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return s.has(ip, uint16(port))
	}
	ctx, cancel := context.WithTimeout(context.Background(), seedLookupTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if s.has(ip, uint16(port)) {
			return true
		}
	}
	return false
}

// otherSeeds returns the seeds that are not this node, in order.
func (s selfAddrs) otherSeeds(seeds []string) []string {
	var out []string
	for _, seed := range seeds {
		if !s.isSelf(seed) {
			out = append(out, seed)
		}
	}
	return out
}

// joinLoop retries joining the seeds every JoinRetryInterval while this
// node is alone, and joins them every RejoinInterval regardless. While a
// peer holds this node's name at another address (a restart on a new
// address, reported by NotifyConflict or NotifyMerge), it joins the seeds
// and every known member each JoinRetryInterval: a peer takes the new
// address only once it has declared the old one dead, and only from a
// message about this node, which a direct push carries without waiting for
// gossip. It ends on Shutdown or Leave.
func (m *Membership) joinLoop() {
	retry := time.NewTicker(m.cfg.JoinRetryInterval)
	defer retry.Stop()
	var rejoin <-chan time.Time // nil (never fires) when disabled
	if m.cfg.RejoinInterval > 0 {
		t := time.NewTicker(m.cfg.RejoinInterval)
		defer t.Stop()
		rejoin = t.C
	}
	for {
		reason, targets := "", m.seeds
		select {
		case <-m.stop:
			return
		case <-retry.C:
			switch {
			case m.ml.NumMembers() <= 1:
				reason = "alone"
			case m.rejoin.Swap(false):
				reason, targets = "node id conflict", m.seedsAndMembers()
			default:
				continue
			}
		case <-rejoin:
			reason = "periodic"
		}
		if m.left.Load() {
			return
		}
		m.join(reason, targets)
	}
}

// seedsAndMembers returns the seeds followed by the gossip addresses of the
// other alive members that are not seeds.
func (m *Membership) seedsAndMembers() []string {
	out := slices.Clone(m.seeds)
	for _, a := range m.memberAddrs() {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// join makes one attempt to join targets (a TCP state exchange with each,
// bounded by pushPullTimeout) and logs the outcome: the first failure of a
// run at Warn, repeats at Debug, a join that ends isolation at Info.
// Called by Start before joinLoop runs, then only by joinLoop, which owns
// joinFailing.
func (m *Membership) join(reason string, targets []string) {
	n, err := m.ml.Join(targets)
	if n == 0 {
		level := slog.LevelWarn
		if m.joinFailing {
			level = slog.LevelDebug
		}
		m.joinFailing = true
		m.log.Log(context.Background(), level, "membership: no seed reachable, will retry",
			"reason", reason, "seeds", targets, "retry_interval", m.cfg.JoinRetryInterval, "err", err)
		return
	}
	members := m.ml.NumMembers()
	level := slog.LevelDebug
	if (m.joinFailing || reason == "start" || reason == "alone") && members > 1 {
		level = slog.LevelInfo
	}
	m.joinFailing = false
	m.log.Log(context.Background(), level, "membership: joined seeds",
		"reason", reason, "seeds_reached", n, "members", members)
}
