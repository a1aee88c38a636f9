package node

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/sluice-io/sluice/cluster/membership"
)

// Remembered gossip peers (issue 18, "rejoin without seeds"): the node
// keeps the gossip addresses of the other members it has seen in its data
// dir, and joins them at the next start besides --join. A node started
// without --join (as the first node of a cluster often is) and restarted
// the same way then finds the others at once, instead of waiting, alone,
// until one of them happens to gossip to it (about 30 s).

// gossipPeersFile is the file, in the data dir, holding the peers.
const gossipPeersFile = "gossip-peers.json"

// maxGossipPeers bounds the peers remembered (the newest win).
const maxGossipPeers = 64

// gossipPeers is the remembered peers of one node. Safe for concurrent
// use.
type gossipPeers struct {
	path string
	self int32
	log  *slog.Logger

	mu    sync.Mutex // guards the following
	addrs map[int32]string
	order []int32 // ids, oldest first, for the bound
}

// gossipPeersDoc is the file's JSON.
type gossipPeersDoc struct {
	Peers []gossipPeer `json:"peers"`
}

type gossipPeer struct {
	NodeID int32  `json:"node_id"`
	Addr   string `json:"addr"`
}

// loadGossipPeers reads the peers remembered in dataDir. A missing file is
// no peer; an unreadable one is logged and ignored (the file is a hint,
// rewritten at the next member event).
func loadGossipPeers(dataDir string, self int32, log *slog.Logger) *gossipPeers {
	g := &gossipPeers{path: filepath.Join(dataDir, gossipPeersFile), self: self, log: log, addrs: map[int32]string{}}
	data, err := os.ReadFile(g.path)
	if errors.Is(err, os.ErrNotExist) {
		return g
	}
	var doc gossipPeersDoc
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil {
		log.Warn("remembered gossip peers ignored", "path", g.path, "err", err)
		return g
	}
	for _, p := range doc.Peers {
		if p.NodeID != self && p.Addr != "" {
			g.setLocked(p.NodeID, p.Addr)
		}
	}
	return g
}

// seeds returns the remembered addresses, oldest first.
func (g *gossipPeers) seeds() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.order))
	for _, id := range g.order {
		out = append(out, g.addrs[id])
	}
	return out
}

// observe remembers the address of a member that joined or changed, and
// rewrites the file when it learnt something new.
func (g *gossipPeers) observe(ev membership.Event) {
	if ev.Type == membership.EventLeave || ev.Meta.NodeID == g.self || ev.Addr == "" {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.addrs[ev.Meta.NodeID] == ev.Addr {
		return
	}
	g.setLocked(ev.Meta.NodeID, ev.Addr)
	if err := g.writeLocked(); err != nil {
		g.log.Warn("remembering gossip peers failed", "path", g.path, "err", err)
	}
}

func (g *gossipPeers) setLocked(id int32, addr string) {
	g.order = slices.DeleteFunc(g.order, func(x int32) bool { return x == id })
	g.order = append(g.order, id)
	g.addrs[id] = addr
	for len(g.order) > maxGossipPeers {
		delete(g.addrs, g.order[0])
		g.order = g.order[1:]
	}
}

// writeLocked replaces the file (write to a temporary file, rename).
func (g *gossipPeers) writeLocked() error {
	doc := gossipPeersDoc{Peers: make([]gossipPeer, 0, len(g.order))}
	for _, id := range g.order {
		doc.Peers = append(doc.Peers, gossipPeer{NodeID: id, Addr: g.addrs[id]})
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp := g.path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, g.path)
}

// joinSeeds is join followed by the remembered peers not already in it.
func joinSeeds(join []string, peers *gossipPeers) []string {
	out := slices.Clone(join)
	for _, a := range peers.seeds() {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}
