package node_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/cluster/membership"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
)

// writeGossipKeyFile writes a key file of one random key of size bytes
// into dir and returns its path.
func writeGossipKeyFile(t *testing.T, dir string, size int) string {
	t.Helper()
	key := make([]byte, size)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gossip.keys")
	if err := os.WriteFile(path, []byte("# gossip key\n"+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A node given a key file it cannot use does not start, and says which
// file and line; given a good one, it gossips encrypted: a member with
// the same key file joins it (a plaintext node would refuse it).
func TestGossipKeyFile(t *testing.T) {
	dir := t.TempDir()
	keys := writeGossipKeyFile(t, t.TempDir(), 20)
	cfg := nodetest.Config(t, dir)
	cfg.GossipKeyFile = keys
	if n, err := node.Start(cfg); err == nil {
		n.Abort()
		t.Fatal("a node started with a key of 20 bytes")
	} else if msg := err.Error(); !strings.Contains(msg, "gossip key file") || !strings.Contains(msg, keys+": line 2: key of 20 bytes") {
		t.Errorf("start error %q does not name the key file, its line and the problem", msg)
	}

	keys = writeGossipKeyFile(t, t.TempDir(), 32)
	var gossip string
	n := nodetest.StartSingle(t, dir, func(c *node.Config) {
		c.GossipKeyFile = keys
		gossip = c.GossipListen
	})
	other, err := membership.Start(membership.Config{
		Meta: membership.Meta{NodeID: 99}, BindAddr: "127.0.0.1:0", Join: []string{gossip},
		JoinRetryInterval: 100 * time.Millisecond, KeyFile: keys,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Shutdown() })
	wait.For(t, 10*time.Second, "the member with the key seen by the node", func() error {
		for _, m := range n.Node.GossipMembers() {
			if m.NodeID == 99 {
				return nil
			}
		}
		return fmt.Errorf("node sees %v", n.Node.GossipMembers())
	})
	if err := other.Leave(time.Second); err != nil {
		t.Error(err)
	}
}
