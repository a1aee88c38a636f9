package membership

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultKeyReloadInterval is how often a Membership with a key file reads
// it again to pick up a rotation.
const DefaultKeyReloadInterval = 5 * time.Second

// maxKeyFileSize bounds what ReadKeyFile reads: a key file holds a few
// lines of at most 44 characters.
const maxKeyFileSize = 64 << 10

// ReadKeyFile reads a gossip key file: one key per line, base64 (standard
// encoding, padded, as `head -c 32 /dev/urandom | base64` prints it), each
// 16, 24 or 32 bytes once decoded (AES-128, AES-192 or AES-256). Blank
// lines and lines starting with '#' are ignored, as are spaces around a
// key and a CR before the newline. The first key is the primary, which
// encrypts; the others are accepted when decrypting. A key listed twice
// counts once. A file with no key is an error. Errors name the line, never
// its text.
func ReadKeyFile(path string) ([][]byte, error) {
	_, keys, err := loadKeyFile(path)
	return keys, err
}

// loadKeyFile returns the content of the key file at path and its keys;
// its errors name the path.
func loadKeyFile(path string) ([]byte, [][]byte, error) {
	data, err := readKeyData(path)
	if err != nil {
		return nil, nil, err
	}
	keys, err := parseKeys(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, keys, nil
}

// readKeyData returns the content of the file at path, which must not
// exceed maxKeyFileSize; its errors name the path.
func readKeyData(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxKeyFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes, not a key file", path, maxKeyFileSize)
	}
	return data, nil
}

// parseKeys parses the content of a key file (see ReadKeyFile).
func parseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), maxKeyFileSize)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			// The error says at which byte, not what it holds.
			return nil, fmt.Errorf("line %d: not a base64 key (standard encoding): %w", line, err)
		}
		if err := memberlist.ValidateKey(key); err != nil {
			return nil, fmt.Errorf("line %d: key of %d bytes, want 16, 24 or 32 (AES-128, -192 or -256)", line, len(key))
		}
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) }) {
			keys = append(keys, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no key: want one base64 key per line, the first the primary")
	}
	return keys, nil
}

// keyID names a key in logs without revealing it: the first 8 hex digits
// of its SHA-256.
func keyID(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// installKeys makes ring hold exactly keys, keys[0] as the primary: it
// adds every key, makes keys[0] the primary, then removes the keys no
// longer listed. A peer that already encrypts with a newly listed key is
// understood from the first step; the primary is never removed.
//
// Removal goes from the end of the ring only. Keyring.RemoveKey of a key
// that is not the last shifts the later keys down within the ring's
// slice, which memberlist's readers (GetKeys, then decryption outside the
// keyring's lock) may be iterating: a data race (memberlist v0.7.0). The
// last key's removal writes nothing. So the ring is cut back to just
// before the first key to remove, and the listed keys that followed it are
// added again; between the two they are not accepted for a moment. The
// rotation in docs/operations.md never needs it: its old key is last when
// it goes.
func installKeys(ring *memberlist.Keyring, keys [][]byte) error {
	for _, k := range keys {
		if err := ring.AddKey(k); err != nil {
			return err
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return err
	}
	listed := func(k []byte) bool {
		return slices.ContainsFunc(keys, func(l []byte) bool { return bytes.Equal(k, l) })
	}
	// A copy: GetKeys returns the ring's own slice.
	cur := slices.Clone(ring.GetKeys())
	first := slices.IndexFunc(cur, func(k []byte) bool { return !listed(k) })
	if first < 0 {
		return nil
	}
	if first == 0 {
		return errors.New("membership: the primary key is not listed") // UseKey made keys[0] the primary
	}
	for i := len(cur) - 1; i >= first; i-- {
		if err := ring.RemoveKey(cur[i]); err != nil {
			return err
		}
	}
	for _, k := range cur[first:] {
		if listed(k) {
			if err := ring.AddKey(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyLoop reads the key file every KeyReloadInterval and installs its keys
// when its content changed. It ends on Shutdown.
func (m *Membership) keyLoop() {
	t := time.NewTicker(m.cfg.KeyReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			_ = m.reloadKeys(false) // logged
			m.keyPolls.Add(1)
		}
	}
}

// ReloadKeys reads the key file now and installs its keys (see
// Config.KeyFile), as the periodic reload does. A file that cannot be read
// or parsed is logged at Error and returned, and the keys in force stay.
// Without a key file it does nothing. After Shutdown it returns
// ErrShutdown.
func (m *Membership) ReloadKeys() error {
	if m.stopped.Load() {
		return ErrShutdown
	}
	return m.reloadKeys(true)
}

// reloadKeys reads the key file and, if its content changed since the last
// read (or force), installs its keys. Reads are compared by content, not
// by modification time and size, which may not change when a file is
// rewritten: the order of two keys swapped within one timestamp tick.
func (m *Membership) reloadKeys(force bool) error {
	if m.keyring == nil {
		return nil
	}
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	data, keys, err := loadKeyFile(m.cfg.KeyFile)
	if err != nil {
		msg := err.Error()
		if force || msg != m.keyFileErr {
			m.log.Error("membership: gossip key file not reloaded, the keys in force stay",
				"err", err, "primary_key_id", keyID(m.keys[0]), "keys", len(m.keys))
		}
		m.keyFileErr, m.keyFileData = msg, nil
		return fmt.Errorf("membership: gossip key file: %w", err)
	}
	recovered := m.keyFileErr != ""
	m.keyFileErr = ""
	if !force && bytes.Equal(data, m.keyFileData) {
		return nil
	}
	m.keyFileData = data
	if slices.EqualFunc(keys, m.keys, bytes.Equal) {
		if recovered {
			m.log.Info("membership: gossip key file read again, keys unchanged", "file", m.cfg.KeyFile,
				"primary_key_id", keyID(keys[0]), "keys", len(keys))
		}
		return nil
	}
	if err := installKeys(m.keyring, keys); err != nil {
		// Not expected: parseKeys checked the keys as AddKey does.
		m.log.Error("membership: installing the gossip keys failed", "file", m.cfg.KeyFile, "err", err)
		return fmt.Errorf("membership: gossip keys: %w", err)
	}
	m.keys = keys
	m.log.Info("membership: gossip keys reloaded", "file", m.cfg.KeyFile,
		"primary_key_id", keyID(keys[0]), "keys", len(keys))
	return nil
}

// GossipKeyIDs returns the ids of the keys in force (the first 8 hex
// digits of each key's SHA-256, as the logs name them), the primary
// first; nil without encryption.
func (m *Membership) GossipKeyIDs() []string {
	if m.keyring == nil {
		return nil
	}
	m.keysMu.Lock()
	defer m.keysMu.Unlock()
	ids := make([]string, len(m.keys))
	for i, k := range m.keys {
		ids[i] = keyID(k)
	}
	return ids
}
