package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluice-io/sluice/cluster/faultnet"
)

// Failure-detection defaults. They start from memberlist's DefaultLANConfig
// (ProbeInterval 1s, ProbeTimeout 500ms, GossipInterval 200ms,
// SuspicionMult 4) and are tightened so that a SIGKILLed node on loopback or
// a LAN is declared dead in about one second:
//
//   - a peer is probed every ProbeInterval, round robin, so a dead node is
//     probed within about (members-1) × ProbeInterval;
//   - the probe fails after ProbeInterval (direct ping for ProbeTimeout,
//     then indirect and TCP pings until the interval ends), and the node
//     becomes suspect;
//   - with SuspicionMult 2 memberlist expects no independent confirmations
//     (it wants SuspicionMult-2), so the suspicion timeout is its minimum,
//     SuspicionMult × max(1, log10(members)) × ProbeInterval: 500 ms for
//     fewer than 10 members, 1 s for 100;
//   - the resulting dead message reaches the others by gossip every
//     GossipInterval.
//
// The price is sensitivity: a node that stalls for about a second (long GC
// pause, overloaded host) is declared dead and has to refute. Memberlist's
// Lifeguard awareness stretches the local timeouts of a node that notices
// it is slow, which absorbs most of that.
const (
	DefaultProbeInterval     = 250 * time.Millisecond
	DefaultProbeTimeout      = 200 * time.Millisecond
	DefaultGossipInterval    = 100 * time.Millisecond
	DefaultSuspicionMult     = 2
	DefaultJoinRetryInterval = 1 * time.Second
	// DefaultRejoinInterval is how often a node in a cluster pushes its
	// state to every seed again, which heals a partition that outlasted
	// memberlist's memory of dead nodes (30 s).
	DefaultRejoinInterval = 30 * time.Second
	// DefaultBroadcastTimeout bounds Leave and UpdateMeta when they are
	// given no positive timeout.
	DefaultBroadcastTimeout = 5 * time.Second
)

// pushPullTimeout bounds one TCP state exchange (a join attempt with one
// seed, or a periodic push/pull). LAN default is 10 s; a Sluice cluster's
// state is a few KB, and a shorter bound keeps Start and Shutdown, which may
// wait for a join attempt, short when a seed host is down.
const pushPullTimeout = 3 * time.Second

// eventBuffer is the capacity of the queue between memberlist's callbacks
// and the goroutine that calls Config.OnEvent.
const eventBuffer = 1024

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("membership: invalid config")

// Config configures a Membership. Zero durations take the defaults above.
type Config struct {
	// Meta is what this node gossips about itself. Meta.NodeID must be >= 0
	// and unique in the cluster; the encoding must fit 512 bytes.
	Meta Meta
	// BindAddr is the host:port gossip listens on, TCP and UDP. The host
	// must be an IP literal; empty means 0.0.0.0. Port 0 picks a free port
	// (tests); LocalAddr reports it.
	BindAddr string
	// AdvertiseAddr is the IP:port other nodes use to reach this one.
	// Empty means the bound address, or, when bound to 0.0.0.0, the first
	// private IP of this host. A zero port means the bound port; when
	// BindAddr's port is 0 the bound port is always advertised.
	AdvertiseAddr string
	// Join lists seed host:port addresses. It may include this node's own
	// address, which is ignored. Empty means this node starts a cluster
	// and waits for others to join it.
	Join []string

	// ProbeInterval is the interval between failure probes of a random
	// peer.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a direct ping waits for its ack before
	// indirect pings are tried. It must not exceed ProbeInterval.
	ProbeTimeout time.Duration
	// GossipInterval is the interval between gossip rounds, which carry
	// join, leave and suspicion messages.
	GossipInterval time.Duration
	// SuspicionMult scales how long a suspect node has to refute before it
	// is declared dead (see the defaults above).
	SuspicionMult int

	// JoinRetryInterval is how often a node that has seeds but is alone
	// (no seed reached yet, or a restarted node that nobody knows) tries
	// to join them again. The same interval paces retries after a name
	// conflict about this node, which is what a node restarted on a new
	// address sees until the others declare its old address dead.
	JoinRetryInterval time.Duration
	// RejoinInterval is how often a node that is in a cluster joins its
	// seeds again anyway, to merge back a partition. Negative disables it.
	RejoinInterval time.Duration

	// KeyFile, if set, encrypts gossip (AES-GCM, memberlist's keyring)
	// with the keys it lists: one base64 key per line, the first the
	// primary (see ReadKeyFile). Every UDP packet and TCP stream is then
	// encrypted with the primary and authenticated, and whatever no listed
	// key decrypts, plaintext included, is refused. Start fails if the file
	// cannot be read or parsed. The file is read again every
	// KeyReloadInterval and by ReloadKeys: the keys it lists are added, the
	// first becomes the primary, and the keys no longer listed are removed;
	// a file that fails then is logged at Error and the keys in force stay.
	// Empty means plaintext gossip; encryption cannot be turned on or off
	// without a restart.
	KeyFile string
	// KeyReloadInterval is how often the key file is read again (0 takes
	// DefaultKeyReloadInterval; negative: only on ReloadKeys).
	KeyReloadInterval time.Duration

	// DialMap (fault injection, testing only) redirects every outgoing
	// gossip packet and stream, seeds included, whose destination is in
	// the map to the map's target. Members, events and logs keep the real
	// addresses. Nil in production.
	DialMap faultnet.DialMap

	// Logger receives this package's log and memberlist's (memberlist's
	// [DEBUG] at Debug, [INFO] at Info, [WARN] and [ERR] at Warn: its
	// errors are network failures that the protocol tolerates). Nil means
	// slog.Default.
	Logger *slog.Logger

	// OnEvent, if not nil, is called for every membership change of
	// another node, in the order memberlist saw them, from one goroutine.
	// It must return promptly (Shutdown waits for it) and must not call
	// Leave, UpdateMeta or Shutdown. Events are queued in a buffer of 1024;
	// when it is full, further events are dropped with a warning.
	OnEvent func(Event)
}

// Validate checks c and fills in defaults. Start calls it. Every error
// wraps ErrInvalidConfig.
func (c *Config) Validate() error {
	if c.Meta.NodeID < 0 {
		return fmt.Errorf("%w: node id %d is negative", ErrInvalidConfig, c.Meta.NodeID)
	}
	if _, err := encodeMeta(c.Meta); err != nil {
		return err
	}
	ip, port, err := splitIPPort(c.BindAddr, true)
	if err != nil {
		return fmt.Errorf("%w: bind address: %w", ErrInvalidConfig, err)
	}
	c.BindAddr = net.JoinHostPort(ip.String(), strconv.Itoa(int(port)))
	if c.AdvertiseAddr != "" {
		ip, _, err := splitIPPort(c.AdvertiseAddr, false)
		if err != nil {
			return fmt.Errorf("%w: advertise address: %w", ErrInvalidConfig, err)
		}
		if ip.IsUnspecified() {
			return fmt.Errorf("%w: advertise address %q is unspecified", ErrInvalidConfig, c.AdvertiseAddr)
		}
	} else if ip.IsUnspecified() && ip.Is6() {
		// memberlist picks a private IP only for 0.0.0.0; "::" would be
		// advertised as is.
		return fmt.Errorf("%w: bind address %q needs an advertise address", ErrInvalidConfig, c.BindAddr)
	}
	if err := c.DialMap.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, s := range c.Join {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%w: seed %q: %w", ErrInvalidConfig, s, err)
		}
	}

	durations := []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{
		{"probe interval", &c.ProbeInterval, DefaultProbeInterval},
		{"probe timeout", &c.ProbeTimeout, DefaultProbeTimeout},
		{"gossip interval", &c.GossipInterval, DefaultGossipInterval},
		{"join retry interval", &c.JoinRetryInterval, DefaultJoinRetryInterval},
	}
	for _, d := range durations {
		if *d.d < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, d.name, *d.d)
		}
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.RejoinInterval == 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.KeyReloadInterval == 0 {
		c.KeyReloadInterval = DefaultKeyReloadInterval
	}
	if c.ProbeTimeout > c.ProbeInterval {
		return fmt.Errorf("%w: probe timeout %v exceeds probe interval %v", ErrInvalidConfig, c.ProbeTimeout, c.ProbeInterval)
	}
	if c.SuspicionMult < 0 {
		return fmt.Errorf("%w: suspicion multiplier %d is negative", ErrInvalidConfig, c.SuspicionMult)
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = DefaultSuspicionMult
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// splitIPPort parses an IP:port address. An empty host is accepted (as
// 0.0.0.0) only if emptyHost is set. IPv4-mapped IPv6 addresses are
// unmapped, as memberlist does.
func splitIPPort(addr string, emptyHost bool) (netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("port %q: not a number in 0-65535", portStr)
	}
	if host == "" {
		if !emptyHost {
			return netip.Addr{}, 0, fmt.Errorf("%q has no host", addr)
		}
		return netip.IPv4Unspecified(), uint16(port), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("host %q is not an IP address", host)
	}
	if ip.Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("host %q: zoned addresses are not supported", host)
	}
	return ip.Unmap(), uint16(port), nil
}
