package membership

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluice-io/sluice/cluster/faultnet"
	"github.com/sluice-io/sluice/internal/wait"
)

// testKeyReloadInterval is the key file poll of the tests' nodes.
const testKeyReloadInterval = 50 * time.Millisecond

// newKey returns a random key of size bytes.
func newKey(t *testing.T, size int) []byte {
	t.Helper()
	k := make([]byte, size)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// keyFileText is a key file listing keys, the first the primary.
func keyFileText(keys ...[]byte) string {
	var b strings.Builder
	b.WriteString("# gossip keys, the first encrypts\n")
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	return b.String()
}

// writeFileAtomic replaces path with text in one rename, as an operator's
// tooling should, so that a poll never reads half a file.
func writeFileAtomic(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// newKeyFile writes a key file listing keys into a new temporary directory
// and returns its path.
func newKeyFile(t *testing.T, keys ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gossip.keys")
	writeFileAtomic(t, path, keyFileText(keys...))
	return path
}

// withKeyFile makes a node encrypt with the key file at path, polled every
// testKeyReloadInterval.
func withKeyFile(path string) func(*Config) {
	return func(c *Config) {
		c.KeyFile = path
		c.KeyReloadInterval = testKeyReloadInterval
	}
}

// ringHolds reports nil if ring's primary is want[0] and it holds exactly
// the keys of want.
func ringHolds(ring *memberlist.Keyring, want [][]byte) error {
	got := slices.Clone(ring.GetKeys())
	has := func(keys [][]byte, k []byte) bool {
		return slices.ContainsFunc(keys, func(l []byte) bool { return bytes.Equal(k, l) })
	}
	ok := len(got) == len(want) && len(got) > 0 && bytes.Equal(got[0], want[0])
	for _, k := range want {
		ok = ok && has(got, k)
	}
	if !ok {
		return fmt.Errorf("keyring holds %v, want %v", ids(got), ids(want))
	}
	return nil
}

// ids names keys as the logs do.
func ids(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = keyID(k)
	}
	return out
}

// allHold waits until every node's keyring is want (primary first).
func allHold(t *testing.T, nodes []*testNode, want [][]byte) {
	t.Helper()
	wait.For(t, convergeTimeout, "every node reloaded its key file", func() error {
		for _, n := range nodes {
			if err := ringHolds(n.keyring, want); err != nil {
				return fmt.Errorf("node %d: %w", n.meta.NodeID, err)
			}
		}
		return nil
	})
}

// gossipFlows checks that gossip gets through from every node to every
// other: each in turn updates its Meta (a new rack), and the others report
// the update.
func gossipFlows(t *testing.T, nodes []*testNode, round string) {
	t.Helper()
	for _, n := range nodes {
		since := time.Now()
		n.meta.Rack = fmt.Sprintf("rack-%d-%s", n.meta.NodeID, round)
		if err := n.UpdateMeta(n.meta, 2*time.Second); err != nil {
			t.Fatalf("%s: node %d: update meta: %v", round, n.meta.NodeID, err)
		}
		for _, other := range nodes {
			if other == n {
				continue
			}
			wait.For(t, convergeTimeout, round+": update event for the new rack", func() error {
				ev, err := other.events.find(EventUpdate, n.meta.NodeID, n.LocalAddr(), since)
				if err == nil && ev.Meta.Rack != n.meta.Rack {
					err = fmt.Errorf("node %d saw rack %q, want %q", other.meta.NodeID, ev.Meta.Rack, n.meta.Rack)
				}
				return err
			})
		}
	}
}

// noLeaves fails if a node reported another one gone since since.
func noLeaves(t *testing.T, nodes []*testNode, since time.Time) {
	t.Helper()
	for _, n := range nodes {
		for _, other := range nodes {
			if ev, err := n.events.find(EventLeave, other.meta.NodeID, "", since); err == nil {
				t.Errorf("node %d reported node %d gone at %v", n.meta.NodeID, other.meta.NodeID, ev.at.Format(time.StampMilli))
			}
		}
	}
}

// refusedGossip returns the Warn records of n (memberlist's errors) that
// say a packet or stream was not encrypted with a key n holds.
func refusedGossip(n *testNode) []logRecord {
	var out []logRecord
	for _, s := range []string{"Decrypt packet failed", "no installed keys could decrypt", "remote state is not encrypted", "remote state is encrypted"} {
		out = append(out, n.logs.find(slog.LevelWarn, s)...)
	}
	return out
}

// isRefused waits until outsider has tried to join the seed at least
// twice in vain and the seed has logged why it refused, and then checks
// that neither side took the other in.
func isRefused(t *testing.T, outsider *testNode, seed *testNode, refusal string, members []*testNode) {
	t.Helper()
	wait.For(t, convergeTimeout, "the outsider's joins refused", func() error {
		if len(outsider.logs.find(slog.LevelWarn, "no seed reachable")) == 0 || len(outsider.logs.find(slog.LevelDebug, "no seed reachable")) == 0 {
			return errors.New("the outsider has not failed to join twice")
		}
		if len(seed.logs.find(slog.LevelWarn, refusal)) == 0 {
			return fmt.Errorf("the seed logged no %q", refusal)
		}
		return nil
	})
	for _, n := range members {
		if err := sameMembers(n.Membership, metas(members...)); err != nil {
			t.Error(err)
		}
	}
	if err := sameMembers(outsider.Membership, metas(outsider)); err != nil {
		t.Error(err)
	}
}

// The key file's format: base64 keys of 16, 24 or 32 bytes, one a line,
// comments and blank lines ignored, the first the primary; errors name the
// line and never its text.
func TestReadKeyFile(t *testing.T) {
	k16, k24, k32 := newKey(t, 16), newKey(t, 24), newKey(t, 32)
	enc := base64.StdEncoding.EncodeToString
	good := "# primary first\n\n  " + enc(k32) + "  \r\n#" + enc(k16) + "\n" + enc(k24) + "\n" + enc(k16) + "\n" + enc(k24) + "\n"
	keys, err := ReadKeyFile(newKeyFileText(t, good))
	if err != nil {
		t.Fatal(err)
	}
	if want := [][]byte{k32, k24, k16}; !slices.EqualFunc(keys, want, bytes.Equal) {
		t.Errorf("keys %v, want %v", ids(keys), ids(want))
	}

	secret := enc(k16)
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "no key"},
		{"only comments", "# " + secret + "\n\n", "no key"},
		{"bad base64", enc(k32) + "\n" + secret[:10] + "!" + secret[11:] + "\n", "line 2: not a base64 key"},
		{"url encoding", strings.NewReplacer("+", "-", "/", "_").Replace(enc(bytes.Repeat([]byte{0xfb, 0xff}, 8))) + "\n", "line 1: not a base64 key"},
		{"20 bytes", "\n" + enc(newKey(t, 20)) + "\n", "line 2: key of 20 bytes, want 16, 24 or 32"},
		{"two keys on a line", secret + " " + secret + "\n", "line 1: not a base64 key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := newKeyFileText(t, tc.text)
			_, err := ReadKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadKeyFile = %v, want an error naming the file and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret[:8]) {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadKeyFile of a missing file = %v, want ErrNotExist", err)
	}
}

// newKeyFileText writes text as a key file and returns its path.
func newKeyFileText(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gossip.keys")
	writeFileAtomic(t, path, text)
	return path
}

// installKeys leaves the ring holding exactly the listed keys with the
// first as primary, whatever it held before, and never shifts keys within
// the ring's slice while memberlist may read it (-race checks the readers
// below).
func TestInstallKeys(t *testing.T) {
	a, b, c, d := newKey(t, 16), newKey(t, 24), newKey(t, 32), newKey(t, 16)
	for _, tc := range []struct {
		name      string
		from, set [][]byte
	}{
		{"same", [][]byte{a}, [][]byte{a}},
		{"add a secondary", [][]byte{a}, [][]byte{a, b}},
		{"promote it", [][]byte{a, b}, [][]byte{b, a}},
		{"drop the old one", [][]byte{b, a}, [][]byte{b}},
		{"replace the primary at once", [][]byte{a}, [][]byte{b}},
		{"drop a middle key", [][]byte{a, b, c}, [][]byte{a, c}},
		{"drop several, add one", [][]byte{a, b, c, d}, [][]byte{c, a, d}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Often enough that -race sees a reader between two writes.
			for range 20 {
				installWhileReading(t, tc.from, tc.set)
			}
		})
	}
}

// installWhileReading makes a ring holding from, installs set while
// readers read it as memberlist does, and checks the result.
func installWhileReading(t *testing.T, from, set [][]byte) {
	t.Helper()
	ring, err := memberlist.NewKeyring(from[1:], from[0])
	if err != nil {
		t.Fatal(err)
	}
	// Memberlist's way of reading: GetKeys, then the keys outside the
	// ring's lock (a decryption tries each in turn).
	stop := make(chan struct{})
	var readers, reading sync.WaitGroup
	for range 2 {
		readers.Add(1)
		reading.Add(1)
		go func() {
			defer readers.Done()
			for i := 0; ; i++ {
				for _, k := range ring.GetKeys() {
					_ = k[len(k)-1]
				}
				if i == 0 {
					reading.Done()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	reading.Wait()
	err = installKeys(ring, set)
	close(stop)
	readers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := ringHolds(ring, set); err != nil {
		t.Fatal(err)
	}
}

// Nodes with the same key join and see each other; a node with another
// key, or with none, is refused: it stays alone and the others do not
// take it in. The seed has a dial map (for no address in use), so it
// gossips over this package's transport: encryption, above the transport,
// applies there too (node 2 refuses plaintext).
func TestEncryptedGossipRefusesOtherKeysAndPlaintext(t *testing.T) {
	key := newKey(t, 32)
	n1 := startNode(t, 1, nil, withKeyFile(newKeyFile(t, key)), withDialMap(faultnet.DialMap{"127.0.0.1:1": "127.0.0.1:2"}))
	n2 := startNode(t, 2, []string{n1.LocalAddr()}, withKeyFile(newKeyFile(t, key)))
	members := []*testNode{n1, n2}
	allSee(t, convergeTimeout, members, metas(n1, n2))

	t.Run("another key", func(t *testing.T) {
		outsider := startNode(t, 3, []string{n1.LocalAddr(), n2.LocalAddr()}, withKeyFile(newKeyFile(t, newKey(t, 32))))
		isRefused(t, outsider, n1, "no installed keys could decrypt", members)
	})
	t.Run("no key", func(t *testing.T) {
		outsider := startNode(t, 4, []string{n1.LocalAddr(), n2.LocalAddr()})
		isRefused(t, outsider, n1, "remote state is not encrypted", members)
	})
	t.Run("the key as a secondary", func(t *testing.T) {
		// It decrypts with the cluster's key, but encrypts with its own
		// primary, which the cluster does not hold.
		outsider := startNode(t, 5, []string{n1.LocalAddr()}, withKeyFile(newKeyFile(t, newKey(t, 16), key)))
		isRefused(t, outsider, n1, "no installed keys could decrypt", members)
	})
	allSee(t, convergeTimeout, members, metas(n1, n2))
	// Meta updates travel by UDP gossip, which node 2 accepts from node 1
	// only encrypted (the outsiders only tried TCP joins).
	gossipFlows(t, members, "after")
	if refused := n2.logs.find(slog.LevelWarn, "Decrypt packet failed"); len(refused) > 0 {
		t.Errorf("node 2 refused UDP packets: %v", refused)
	}
}

// The three-step rotation of docs/operations.md, with the key files
// rewritten under running nodes: add the new key second, make it first,
// drop the old one. The nodes stay members throughout and refuse nothing
// of each other's; at the end a node with only the new key joins, and one
// with only the old key is refused.
func TestKeyRotationWithoutRestart(t *testing.T) {
	oldKey, newK := newKey(t, 32), newKey(t, 32)
	f1, f2 := newKeyFile(t, oldKey), newKeyFile(t, oldKey)
	started := time.Now()
	n1 := startNode(t, 1, nil, withKeyFile(f1))
	n2 := startNode(t, 2, []string{n1.LocalAddr()}, withKeyFile(f2))
	nodes := []*testNode{n1, n2}
	allSee(t, convergeTimeout, nodes, metas(n1, n2))
	gossipFlows(t, nodes, "before")

	for _, step := range []struct {
		name string
		keys [][]byte
	}{
		{"1 add the new key second", [][]byte{oldKey, newK}},
		{"2 make it the primary", [][]byte{newK, oldKey}},
		{"3 remove the old key", [][]byte{newK}},
	} {
		for _, f := range []string{f1, f2} {
			writeFileAtomic(t, f, keyFileText(step.keys...))
		}
		allHold(t, nodes, step.keys)
		gossipFlows(t, nodes, step.name)
		for _, n := range nodes {
			if got, want := n.GossipKeyIDs(), ids(step.keys); !slices.Equal(got, want) {
				t.Errorf("%s: node %d GossipKeyIDs = %v, want %v", step.name, n.meta.NodeID, got, want)
			}
		}
	}
	noLeaves(t, nodes, started)
	for _, n := range nodes {
		if refused := refusedGossip(n); len(refused) > 0 {
			t.Errorf("node %d refused gossip during the rotation: %v", n.meta.NodeID, refused)
		}
		if reloads := n.logs.find(slog.LevelInfo, "gossip keys reloaded"); len(reloads) != 3 {
			t.Errorf("node %d logged %d reloads, want 3: %v", n.meta.NodeID, len(reloads), reloads)
		}
		if errs := n.logs.find(slog.LevelError, ""); len(errs) > 0 {
			t.Errorf("node %d logged errors: %v", n.meta.NodeID, errs)
		}
	}

	n3 := startNode(t, 3, []string{n1.LocalAddr()}, withKeyFile(newKeyFile(t, newK)))
	allSee(t, convergeTimeout, []*testNode{n1, n2, n3}, metas(n1, n2, n3))
	old := startNode(t, 4, []string{n1.LocalAddr()}, withKeyFile(newKeyFile(t, oldKey)))
	isRefused(t, old, n1, "no installed keys could decrypt", []*testNode{n1, n2, n3})
}

// A key file that breaks (bad base64, a key of the wrong size, no key,
// gone) is logged at Error on the next poll and by ReloadKeys, which
// returns the error; the keys in force stay and gossip goes on. Fixed, the
// file is read again.
func TestBrokenKeyFileKeepsTheKeys(t *testing.T) {
	key := newKey(t, 24)
	f2 := newKeyFile(t, key)
	started := time.Now()
	n1 := startNode(t, 1, nil, withKeyFile(newKeyFile(t, key)))
	n2 := startNode(t, 2, []string{n1.LocalAddr()}, withKeyFile(f2))
	nodes := []*testNode{n1, n2}
	allSee(t, convergeTimeout, nodes, metas(n1, n2))

	for i, tc := range []struct {
		name, text string
	}{
		{"bad base64", "not base64!\n"},
		{"wrong size", keyFileText(newKey(t, 20))},
		{"no key", "# rotated\n"},
		{"gone", ""},
	} {
		if tc.name == "gone" {
			if err := os.Remove(f2); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFileAtomic(t, f2, tc.text)
		}
		wait.For(t, convergeTimeout, tc.name+": the poll logs the broken file at Error", func() error {
			if n := len(n2.logs.find(slog.LevelError, "gossip key file not reloaded")); n != i+1 {
				return fmt.Errorf("%d errors logged, want %d", n, i+1)
			}
			return nil
		})
		if err := n2.ReloadKeys(); err == nil || !strings.Contains(err.Error(), f2) {
			t.Errorf("%s: ReloadKeys = %v, want an error naming the file", tc.name, err)
		}
		if n := len(n2.logs.find(slog.LevelError, "gossip key file not reloaded")); n != i+2 {
			t.Errorf("%s: ReloadKeys logged %d errors in all, want %d", tc.name, n, i+2)
		}
		if err := ringHolds(n2.keyring, [][]byte{key}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		gossipFlows(t, nodes, tc.name)
		// The next polls read the same broken file and log nothing more.
		errs, polls := len(n2.logs.find(slog.LevelError, "")), n2.keyPolls.Load()
		wait.For(t, convergeTimeout, tc.name+": three more polls", func() error {
			if n := n2.keyPolls.Load() - polls; n < 3 {
				return fmt.Errorf("%d polls", n)
			}
			return nil
		})
		if n := len(n2.logs.find(slog.LevelError, "")); n != errs {
			t.Errorf("%s: the same broken file logged again (%d errors, had %d)", tc.name, n, errs)
		}
	}

	writeFileAtomic(t, f2, keyFileText(key))
	wait.For(t, convergeTimeout, "the fixed file read again", func() error {
		if len(n2.logs.find(slog.LevelInfo, "gossip key file read again")) == 0 {
			return errors.New("not logged")
		}
		return nil
	})
	if err := n2.ReloadKeys(); err != nil {
		t.Fatalf("ReloadKeys of the fixed file: %v", err)
	}
	noLeaves(t, nodes, started)
	allSee(t, convergeTimeout, nodes, metas(n1, n2))
}

// A node whose key file loses the cluster's key drops out: its UDP
// packets and TCP streams are refused both ways, and each side reports
// the other gone. Once both files accept both keys again, it rejoins
// through its seed, without a restart.
func TestMismatchedKeysSplitAndHeal(t *testing.T) {
	a, b := newKey(t, 16), newKey(t, 16)
	f1, f2 := newKeyFile(t, a), newKeyFile(t, a)
	n1 := startNode(t, 1, nil, withKeyFile(f1))
	n2 := startNode(t, 2, []string{n1.LocalAddr()}, withKeyFile(f2))
	nodes := []*testNode{n1, n2}
	allSee(t, convergeTimeout, nodes, metas(n1, n2))

	split := time.Now()
	writeFileAtomic(t, f2, keyFileText(b))
	for _, c := range []struct {
		n     *testNode
		other int32
	}{{n1, 2}, {n2, 1}} {
		wait.For(t, detectTimeout, "leave event after the keys diverged", func() error {
			_, err := c.n.events.find(EventLeave, c.other, "", split)
			return err
		})
	}
	for _, n := range nodes {
		if len(n.logs.find(slog.LevelWarn, "Decrypt packet failed")) == 0 {
			t.Errorf("node %d logged no refused UDP packet", n.meta.NodeID)
		}
	}

	writeFileAtomic(t, f1, keyFileText(a, b))
	writeFileAtomic(t, f2, keyFileText(b, a))
	allSee(t, convergeTimeout, nodes, metas(n1, n2))
	gossipFlows(t, nodes, "healed")
}

// ReloadKeys without a key file does nothing; after Shutdown it says
// ErrShutdown.
func TestReloadKeysWithoutKeyFileAndAfterShutdown(t *testing.T) {
	plain := startNode(t, 1, nil)
	if err := plain.ReloadKeys(); err != nil {
		t.Errorf("ReloadKeys without a key file = %v", err)
	}
	if ids := plain.GossipKeyIDs(); ids != nil {
		t.Errorf("GossipKeyIDs without a key file = %v", ids)
	}
	enc := startNode(t, 2, nil, withKeyFile(newKeyFile(t, newKey(t, 32))))
	if err := enc.ReloadKeys(); err != nil {
		t.Errorf("ReloadKeys of an unchanged file = %v", err)
	}
	if err := enc.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := enc.ReloadKeys(); !errors.Is(err, ErrShutdown) {
		t.Errorf("ReloadKeys after Shutdown = %v, want ErrShutdown", err)
	}
	if n := enc.goroutines.Running(); n != 0 {
		t.Errorf("%d goroutines still running after Shutdown", n)
	}
}
