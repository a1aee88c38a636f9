package node

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sluice-io/sluice/internal/fdlimit"
)

// Connection limits per listener (issue 29; Kafka's max.connections and
// max.connections.per.ip). Every connection holds a file descriptor, and
// the descriptors are shared with the partition logs: tens of thousands
// of idle connections used to exhaust RLIMIT_NOFILE, and storage then
// failed. So each listener (client gRPC, internal gRPC, HTTP, Kafka)
// admits at most a number of open connections in total and from one IP
// address;
// past either limit a new connection is accepted and closed at once
// (reset), counted and logged (rate-limited), and Accept goes on with the
// next one: it never blocks waiting for a slot (netutil.LimitListener
// does, which leaves new connections, a prober's and a legitimate
// client's alike, in the kernel's backlog until it fills). The defaults
// are shares of the open-files limit (defaultMaxConnections).
//
// A connection that holds a slot without using it is closed too: a gRPC
// connection that has not finished its HTTP/2 handshake (client preface
// and settings) within ConnectionSetupTimeout — one that sends nothing
// included — and one with no call in progress for ConnectionsMaxIdle
// (GOAWAY: gRPC clients reconnect when they next need to); an HTTP
// connection whose request header has not arrived within 5 s, or idle
// between requests for ConnectionsMaxIdle; a Kafka connection whose first
// request (after the TLS handshake, with TLS) has not wholly arrived
// within ConnectionSetupTimeout, or that sends no request for
// ConnectionsMaxIdle.

// listenerKind names a listener in settings, metrics and logs.
type listenerKind int

const (
	listenerClient listenerKind = iota
	listenerInternal
	listenerHTTP
	listenerKafka // the Kafka-protocol listener (issue 34)
	listenerKinds // the number of kinds
)

// String is the listener's label value in metrics and logs.
func (k listenerKind) String() string {
	return [...]string{"client", "internal", "http", "kafka"}[k]
}

// ConnectionLimit is one listener's limits: at most Max connections open
// at once, at most PerIP of them from one IP address.
type ConnectionLimit struct {
	Max, PerIP int
}

// The defaults of ConnectionSetupTimeout and ConnectionsMaxIdle.
const (
	DefaultConnectionSetupTimeout = 10 * time.Second
	// DefaultConnectionsMaxIdle is Kafka's connections.max.idle.ms.
	DefaultConnectionsMaxIdle = 10 * time.Minute
	// DefaultFailedAuthenticationDelay is Kafka's
	// connection.failed.authentication.delay.ms.
	DefaultFailedAuthenticationDelay = 100 * time.Millisecond
)

// defaultMaxConnections derives a listener's default limit from the
// open-files limit nofile, leaving about 40% of the descriptors to the
// partition logs, Raft, gossip and outgoing connections whichever
// listeners the node has: a tenth (at least 64) for the internal
// listener, a hundredth within [16, 1024] for HTTP (probes, scrapes,
// pprof), and half of nofile for the clients. That half is the clients'
// whatever door they come in by: with a Kafka listener (kafka, true when
// the node has one) the client gRPC listener and the Kafka listener get a
// quarter each, without one the client gRPC listener has the half alone
// (as before the Kafka listener existed). Giving each door its own half
// would add up to more than nofile (111%) when floods come in by both:
// no descriptor left to the logs; a budget shared by the two doors
// would let a flood of one lock the other's clients out, which is what
// separate listeners with limits of their own prevent. A node whose
// clients mostly use one door gives it more with its flag
// (--max-connections, --kafka-max-connections). A node without a Kafka
// listener still derives the Kafka limit (a quarter), unused.
func defaultMaxConnections(kind listenerKind, nofile int, kafka bool) int {
	switch kind {
	case listenerClient:
		if kafka {
			return max(nofile/4, 1)
		}
		return max(nofile/2, 1)
	case listenerKafka:
		return max(nofile/4, 1)
	case listenerInternal:
		return max(nofile/10, 64)
	}
	return min(max(nofile/100, 16), 1024)
}

// defaultMaxConnectionsPerIP derives a listener's default limit per IP
// address from its limit in total: a tenth on the client gRPC and Kafka
// listeners (no one client host can take every slot), a quarter (at
// least 8) on HTTP, and no lower limit than
// the total on the internal listener (its peers are the cluster's few
// nodes, which may share an address behind NAT).
func defaultMaxConnectionsPerIP(kind listenerKind, total int) int {
	switch kind {
	case listenerClient, listenerKafka:
		return max(total/10, 1)
	case listenerInternal:
		return total
	}
	return min(max(total/4, 8), total)
}

// connectionLimits returns kind's limits as set in c, a zero taking its
// default: the total derived from the open-files limit and whether the
// node has a Kafka listener, the limit per IP from the total.
func (c Config) connectionLimits(kind listenerKind) ConnectionLimit {
	p := c.connectionLimitFields()[kind]
	l := ConnectionLimit{Max: *p[0], PerIP: *p[1]}
	if l.Max == 0 {
		l.Max = defaultMaxConnections(kind, fdlimit.Limit(), c.KafkaListenerEnabled())
	}
	if l.PerIP == 0 {
		l.PerIP = defaultMaxConnectionsPerIP(kind, l.Max)
	}
	return l
}

// connectionLimitFields points at each listener's two limit settings in
// c: the total and the limit per IP.
func (c *Config) connectionLimitFields() [listenerKinds][2]*int {
	return [listenerKinds][2]*int{
		listenerClient:   {&c.MaxConnections, &c.MaxConnectionsPerIP},
		listenerInternal: {&c.InternalMaxConnections, &c.InternalMaxConnectionsPerIP},
		listenerHTTP:     {&c.HTTPMaxConnections, &c.HTTPMaxConnectionsPerIP},
		listenerKafka:    {&c.KafkaMaxConnections, &c.KafkaMaxConnectionsPerIP},
	}
}

// KafkaListenerEnabled reports whether Start opens a Kafka-protocol
// listener: KafkaListen set on a broker (controller-only nodes open
// none).
func (c Config) KafkaListenerEnabled() bool { return c.KafkaListen != "" && c.hasRole(RoleBroker) }

// ConnectionLimitsTotal is the sum of the connection limits (in total) of
// the listeners Start opens with c: the descriptors connections may hold
// at most. A zero limit counts as its default.
func (c Config) ConnectionLimitsTotal() int {
	sum := c.connectionLimits(listenerClient).Max + c.connectionLimits(listenerInternal).Max
	if c.HTTPListen != "" {
		sum += c.connectionLimits(listenerHTTP).Max
	}
	if c.KafkaListenerEnabled() {
		sum += c.connectionLimits(listenerKafka).Max
	}
	return sum
}

// withConnectionDefaults is WithDefaults for the connection settings.
func (c Config) withConnectionDefaults() Config {
	for i, p := range c.connectionLimitFields() {
		l := c.connectionLimits(listenerKind(i))
		*p[0], *p[1] = l.Max, l.PerIP
	}
	if c.ConnectionSetupTimeout == 0 {
		c.ConnectionSetupTimeout = DefaultConnectionSetupTimeout
	}
	if c.ConnectionsMaxIdle == 0 {
		c.ConnectionsMaxIdle = DefaultConnectionsMaxIdle
	}
	if c.FailedAuthenticationDelay == 0 {
		c.FailedAuthenticationDelay = DefaultFailedAuthenticationDelay
	}
	return c
}

// failedAuthenticationDelay is the delay in force (none when negative).
func (c Config) failedAuthenticationDelay() time.Duration {
	return max(c.withConnectionDefaults().FailedAuthenticationDelay, 0)
}

// validateConnections checks the connection settings: no negative limit
// or setup timeout.
func (c Config) validateConnections() error {
	for _, s := range []struct {
		name string
		v    int
	}{
		{"max connections", c.MaxConnections}, {"max connections per ip", c.MaxConnectionsPerIP},
		{"internal max connections", c.InternalMaxConnections}, {"internal max connections per ip", c.InternalMaxConnectionsPerIP},
		{"http max connections", c.HTTPMaxConnections}, {"http max connections per ip", c.HTTPMaxConnectionsPerIP},
		{"kafka max connections", c.KafkaMaxConnections}, {"kafka max connections per ip", c.KafkaMaxConnectionsPerIP},
	} {
		if s.v < 0 {
			return fmt.Errorf("%s must be >= 0 (0: derived from the open-files limit), got %d", s.name, s.v)
		}
	}
	if c.ConnectionSetupTimeout < 0 {
		return fmt.Errorf("connection setup timeout must be >= 0, got %v", c.ConnectionSetupTimeout)
	}
	return nil
}

// grpcConnectionOptions are the gRPC server options that close
// connections holding a slot without using it: the handshake deadline
// (grpc-go's own default is 120 s) and the idle timeout (none by default
// in grpc-go; a negative ConnectionsMaxIdle keeps that).
func grpcConnectionOptions(c Config) []grpc.ServerOption {
	c = c.withConnectionDefaults()
	opts := []grpc.ServerOption{grpc.ConnectionTimeout(c.ConnectionSetupTimeout)}
	if c.ConnectionsMaxIdle > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.ConnectionsMaxIdle}))
	}
	return opts
}

// httpIdleTimeout is the HTTP server's IdleTimeout: ConnectionsMaxIdle,
// or none when negative.
func httpIdleTimeout(c Config) time.Duration {
	return max(c.withConnectionDefaults().ConnectionsMaxIdle, 0)
}

// kafkaConnectionTimeouts are the Kafka server's SetupTimeout and
// IdleTimeout: ConnectionSetupTimeout (the first request must have
// arrived by then, the TLS handshake included) and ConnectionsMaxIdle
// (negative: never, as kafka.Config takes it).
func kafkaConnectionTimeouts(c Config) (setup, idle time.Duration) {
	c = c.withConnectionDefaults()
	return c.ConnectionSetupTimeout, c.ConnectionsMaxIdle
}

// limitListener wraps lis with kind's connection limits from cfg and
// keeps it for the metrics (n.limited). Call it once per kind, before
// the listener is served.
func (n *Node) limitListener(kind listenerKind, lis net.Listener, cfg Config) net.Listener {
	l := newLimitListener(lis, kind, cfg.connectionLimits(kind), n.log)
	n.limited[kind] = l
	return l
}

// limitListener is a net.Listener that admits at most limit.Max
// connections, and limit.PerIP from one address, at once; it resets the
// others as it accepts them. Safe for concurrent use.
type limitListener struct {
	net.Listener
	kind  listenerKind
	limit ConnectionLimit
	log   *slog.Logger

	refusedMax, refusedPerIP atomic.Uint64

	mu   sync.Mutex // guards the following
	open int
	byIP map[netip.Addr]int
	// lastLog is when a refusal was last logged; notLogged counts the
	// refusals since then that were not.
	lastLog   time.Time
	notLogged uint64
}

// refusalLogEvery bounds the rate of a listener's refusal log line.
const refusalLogEvery = 10 * time.Second

func newLimitListener(lis net.Listener, kind listenerKind, limit ConnectionLimit, logger *slog.Logger) *limitListener {
	if logger == nil {
		logger = slog.Default()
	}
	return &limitListener{Listener: lis, kind: kind, limit: limit, log: logger, byIP: map[netip.Addr]int{}}
}

// Accept returns the next connection within the limits, resetting the
// ones over them meanwhile. Its errors are the wrapped listener's.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		reason := l.admit(ip)
		if reason == "" {
			return &limitedConn{Conn: c, l: l, ip: ip}, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: no TIME_WAIT kept for it
		}
		c.Close()
		l.refused(reason, c.RemoteAddr())
	}
}

// The reasons of a refusal (label reason of
// sluice_listener_connections_refused_total).
const (
	refusedMax   = "max_connections"
	refusedPerIP = "max_connections_per_ip"
)

// admit takes a slot for a connection from ip, or returns why not.
func (l *limitListener) admit(ip netip.Addr) (reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open >= l.limit.Max:
		l.refusedMax.Add(1)
		return refusedMax
	case l.byIP[ip] >= l.limit.PerIP:
		l.refusedPerIP.Add(1)
		return refusedPerIP
	}
	l.open++
	l.byIP[ip]++
	return ""
}

// release gives back the slot of a connection from ip.
func (l *limitListener) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

// refused logs a refusal unless one was logged less than refusalLogEvery
// ago.
func (l *limitListener) refused(reason string, remote net.Addr) {
	now := time.Now()
	l.mu.Lock()
	if !l.lastLog.IsZero() && now.Sub(l.lastLog) < refusalLogEvery {
		l.notLogged++
		l.mu.Unlock()
		return
	}
	notLogged := l.notLogged
	l.lastLog, l.notLogged = now, 0
	open := l.open
	l.mu.Unlock()
	limit := l.limit.Max
	if reason == refusedPerIP {
		limit = l.limit.PerIP
	}
	l.log.Warn("connection refused: the listener is at its connection limit", "listener", l.kind.String(), "reason", reason,
		"limit", limit, "open", open, "remote", remote.String(), "not_logged_since_last", notLogged)
}

// connections returns how many connections are open.
func (l *limitListener) connections() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// remoteIP is c's peer address without port (unmapped from IPv6), or the
// zero Addr for a connection without one (all such share one slot count).
func remoteIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// limitedConn gives its slot back when closed (once).
type limitedConn struct {
	net.Conn
	l    *limitListener
	ip   netip.Addr
	once sync.Once
}

// Close closes the connection and releases its slot.
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}
