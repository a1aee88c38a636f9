// Package membership is node discovery and failure detection for Sluice
// nodes, on hashicorp/memberlist (the Consul pattern). Each node gossips a
// Meta (node id, roles, advertised gRPC and Raft addresses, rack); every
// node learns the alive members and is told when one joins, fails, leaves
// or changes its Meta.
//
// Membership is advisory: it says who is probably up and where to reach
// them. Authority over metadata stays with the Raft controller quorum;
// membership only feeds it (for example, a broker reported dead).
package membership

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/sluice-io/sluice/internal/goroutine"
)

// Sentinel errors of Leave and UpdateMeta.
var (
	// ErrShutdown: the Membership was shut down.
	ErrShutdown = errors.New("membership: shut down")
	// ErrLeft: UpdateMeta after Leave; a node that left gossips nothing.
	ErrLeft = errors.New("membership: node has left")
)

// Membership is this node's member of the gossip cluster. Start it with
// Start and stop it with Shutdown, optionally after Leave. All methods are
// safe for concurrent use.
//
// Goroutines: memberlist's own, stopped by its Shutdown; eventLoop (when
// OnEvent is set), the only caller of OnEvent; joinLoop (when there are
// seeds other than this node); keyLoop (when there is a key file to read
// again). All stop on Shutdown, tracked by goroutines.
type Membership struct {
	cfg   Config
	log   *slog.Logger
	name  string // memberlist node name, nodeName(cfg.Meta.NodeID)
	ml    *memberlist.Memberlist
	bound string   // bound gossip host:port
	seeds []string // cfg.Join without this node's own address

	events  chan nodeEvent // memberlist callbacks → eventLoop
	rejoin  atomic.Bool    // a peer holds this node's name at another address
	left    atomic.Bool    // Leave was called: stop joining
	stopped atomic.Bool    // Shutdown has begun: callbacks queue nothing

	// advertise is the advertised gossip host:port, set once memberlist
	// runs; nil before.
	advertise atomic.Pointer[string]

	viewMu sync.Mutex        // guards view; see view.go
	view   map[string]member // memberlist node name → member

	conflictMu sync.Mutex           // guards conflicts
	conflicts  map[string]time.Time // node id conflict → when last logged at Error

	// joinFailing: the last join attempt reached no seed. Owned by
	// join's caller (Start, then joinLoop).
	joinFailing bool

	metaMu sync.Mutex // guards the following
	meta   []byte     // this node's encoded Meta, served to memberlist

	// keyring holds the gossip keys (memberlist reads it); nil without a
	// key file.
	keyring *memberlist.Keyring
	keysMu  sync.Mutex // serializes key reloads; guards the following
	// keys are the keys installed in keyring, in the key file's order.
	keys [][]byte
	// keyFileData is the key file's content as last read and parsed
	// (nil after a failure); keyFileErr the last read's error ("" if
	// none).
	keyFileData []byte
	keyFileErr  string
	keyPolls    atomic.Int64 // key file polls done by keyLoop (for tests)

	// lifeMu serializes Leave, UpdateMeta and Shutdown and guards
	// shutdown. Lock order: lifeMu, then metaMu; neither is held while
	// memberlist calls back into delegate (UpdateMeta releases metaMu
	// before memberlist asks for NodeMeta).
	lifeMu   sync.Mutex
	shutdown bool

	stop       chan struct{} // closed by Shutdown
	goroutines goroutine.Group
}

// Start validates cfg, listens for gossip on cfg.BindAddr under the node
// name "node-<id>", makes one synchronous attempt to join the seeds (a
// failure is logged, not returned: the join loop keeps trying) and starts
// the background goroutines. On error nothing is left running.
func Start(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	metaBytes, err := encodeMeta(cfg.Meta)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:       cfg,
		log:       cfg.Logger,
		name:      nodeName(cfg.Meta.NodeID),
		events:    make(chan nodeEvent, eventBuffer),
		view:      map[string]member{},
		conflicts: map[string]time.Time{},
		meta:      metaBytes,
		stop:      make(chan struct{}),
	}

	if cfg.KeyFile != "" {
		data, keys, err := loadKeyFile(cfg.KeyFile)
		if err == nil {
			m.keyring, err = memberlist.NewKeyring(keys[1:], keys[0])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: gossip key file: %w", ErrInvalidConfig, err)
		}
		m.keys, m.keyFileData = keys, data
	}

	bindIP, bindPort, _ := splitIPPort(cfg.BindAddr, true) // checked by Validate
	mc := memberlist.DefaultLANConfig()
	mc.Name = m.name
	mc.BindAddr = bindIP.String()
	mc.BindPort = int(bindPort)
	mc.AdvertisePort = int(bindPort)
	if cfg.AdvertiseAddr != "" {
		advIP, advPort, _ := splitIPPort(cfg.AdvertiseAddr, false)
		mc.AdvertiseAddr = advIP.String()
		if advPort != 0 {
			mc.AdvertisePort = int(advPort)
		}
	}
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.SuspicionMult = cfg.SuspicionMult
	mc.TCPTimeout = pushPullTimeout
	// A node restarted on a new address takes its name back as soon as
	// its old address is dead. Memberlist's default (0) never allows it
	// until the dead entry is forgotten, about 30 s later. Left nodes are
	// always reclaimable.
	mc.DeadNodeReclaimTime = time.Nanosecond
	mc.Delegate = delegate{m}
	mc.Events = delegate{m}
	mc.Conflict = delegate{m}
	mc.Merge = delegate{m}
	mc.Logger = newMemberlistLogger(cfg.Logger)
	if m.keyring != nil {
		// Encrypt everything sent, refuse everything that is not
		// encrypted with a key of the ring (memberlist encrypts above the
		// transport, so the dial map transport below is covered too).
		mc.Keyring = m.keyring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}

	if len(cfg.DialMap) > 0 {
		// Fault injection: our own transport, so that dials can be
		// redirected. Memberlist then neither binds nor writes the bound
		// port back into mc; do what it would have.
		t, port, err := newDialMapTransport(bindIP, mc.BindPort, cfg.DialMap, mc.Logger)
		if err != nil {
			return nil, fmt.Errorf("membership: start gossip on %s: %w", cfg.BindAddr, err)
		}
		if mc.BindPort == 0 {
			mc.BindPort, mc.AdvertisePort = port, port
		}
		mc.Transport = t
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		if mc.Transport != nil {
			_ = mc.Transport.Shutdown() // ours; memberlist does not always close it
		}
		return nil, fmt.Errorf("membership: start gossip on %s: %w", cfg.BindAddr, err)
	}
	m.ml = ml
	// With port 0, memberlist (or the block above) wrote the bound port
	// back into mc.
	m.bound = net.JoinHostPort(bindIP.String(), strconv.Itoa(mc.BindPort))

	// Memberlist reported this node's join, with its advertised address,
	// from within Create.
	adv := m.advertise.Load()
	if adv == nil {
		_ = ml.Shutdown()
		return nil, errors.New("membership: memberlist did not report the local node")
	}
	advertise := *adv
	advAP, err := netip.ParseAddrPort(advertise)
	if err != nil {
		_ = ml.Shutdown()
		return nil, fmt.Errorf("membership: advertised address: %w", err)
	}
	boundAP := netip.AddrPortFrom(bindIP, uint16(mc.BindPort))
	m.seeds = newSelfAddrs(netip.AddrPortFrom(advAP.Addr().Unmap(), advAP.Port()), boundAP).otherSeeds(cfg.Join)

	logArgs := []any{"node", m.name, "bind", m.bound, "advertise", advertise, "seeds", m.seeds, "encrypted", m.keyring != nil}
	if m.keyring != nil {
		logArgs = append(logArgs, "key_file", cfg.KeyFile, "primary_key_id", keyID(m.keys[0]), "keys", len(m.keys))
	}
	m.log.Info("membership: started", logArgs...)
	if len(m.seeds) > 0 {
		m.join("start", m.seeds)
	}
	if cfg.OnEvent != nil {
		m.goroutines.Go(m.eventLoop)
	}
	if len(m.seeds) > 0 {
		m.goroutines.Go(m.joinLoop)
	}
	if m.keyring != nil && cfg.KeyReloadInterval > 0 {
		m.goroutines.Go(m.keyLoop)
	}
	return m, nil
}

// LocalAddr returns the bound gossip host:port, with the actual port when
// BindAddr asked for port 0. Bound to 0.0.0.0 it says so; the address the
// others use is the advertised one.
func (m *Membership) LocalAddr() string {
	return m.bound
}

// Leave tells the cluster that this node is going away, so the others
// report EventLeave at once instead of after failure detection. It waits
// until the message is gossiped or timeout (DefaultBroadcastTimeout if not
// positive) passes. The node keeps answering gossip until Shutdown, which
// must still be called; it no longer tries to join. Calling Leave again
// does nothing; after Shutdown it returns ErrShutdown.
func (m *Membership) Leave(timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	if timeout <= 0 {
		timeout = DefaultBroadcastTimeout
	}
	m.left.Store(true)
	if err := m.ml.Leave(timeout); err != nil {
		return fmt.Errorf("membership: leave: %w", err)
	}
	m.log.Info("membership: left the cluster", "node", m.name)
	return nil
}

// UpdateMeta replaces this node's Meta and gossips it; the others report
// EventUpdate. meta.NodeID must stay the same and the encoding must fit
// 512 bytes; after Leave it returns ErrLeft, after Shutdown ErrShutdown.
// It waits until the update is gossiped or timeout
// (DefaultBroadcastTimeout if not positive) passes; after a timeout the
// new Meta is still in effect and keeps spreading.
func (m *Membership) UpdateMeta(meta Meta, timeout time.Duration) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return ErrShutdown
	}
	if m.left.Load() {
		return ErrLeft
	}
	if meta.NodeID != m.cfg.Meta.NodeID {
		return fmt.Errorf("%w: node id cannot change from %d to %d", ErrInvalidConfig, m.cfg.Meta.NodeID, meta.NodeID)
	}
	b, err := encodeMeta(meta)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = DefaultBroadcastTimeout
	}
	m.metaMu.Lock()
	m.meta = b
	m.metaMu.Unlock()
	if err := m.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("membership: update meta: %w", err)
	}
	return nil
}

// Shutdown stops the join, event and key reload goroutines (waiting for a
// join attempt in progress, at most 3 s per target, and for an OnEvent call
// in progress) and then memberlist,
// without telling the cluster: the others detect the node as failed unless
// Leave was called first. Events still queued are dropped; OnEvent is not
// called after Shutdown returns. Shutdown is idempotent and safe after
// Leave.
func (m *Membership) Shutdown() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return nil
	}
	m.shutdown = true
	m.stopped.Store(true)
	close(m.stop)
	// Our goroutines end first, so that no join attempt runs against a
	// stopped memberlist (it would announce this node alive again).
	m.goroutines.Wait()
	if err := m.ml.Shutdown(); err != nil {
		return fmt.Errorf("membership: shutdown: %w", err)
	}
	m.log.Info("membership: stopped", "node", m.name)
	return nil
}
