package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
)

// ScramMechanism is a SCRAM SASL mechanism (RFC 5802, RFC 7677).
type ScramMechanism string

// The SCRAM mechanisms Sluice serves (Kafka's two).
const (
	ScramSHA256 ScramMechanism = "SCRAM-SHA-256"
	ScramSHA512 ScramMechanism = "SCRAM-SHA-512"
)

// ScramMechanisms are the mechanisms served, in preference order.
var ScramMechanisms = []ScramMechanism{ScramSHA256, ScramSHA512}

// The iteration counts a SCRAM credential may have (Kafka's bounds).
const (
	MinScramIterations     = 4096
	MaxScramIterations     = 16384
	DefaultScramIterations = 8192
	// MinScramSaltLen is the shortest salt accepted.
	MinScramSaltLen = 16
)

// ParseScramMechanism parses a mechanism name.
func ParseScramMechanism(s string) (ScramMechanism, error) {
	switch m := ScramMechanism(s); m {
	case ScramSHA256, ScramSHA512:
		return m, nil
	}
	return "", fmt.Errorf("SASL mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", s)
}

func (m ScramMechanism) hash() func() hash.Hash {
	if m == ScramSHA512 {
		return sha512.New
	}
	return sha256.New
}

// KeyLen is the length of the mechanism's keys and salted password.
func (m ScramMechanism) KeyLen() int {
	if m == ScramSHA512 {
		return sha512.Size
	}
	return sha256.Size
}

// ScramCredential is what a server keeps of a SCRAM password: never the
// password, only the keys derived from it (RFC 5802 §3).
type ScramCredential struct {
	Mechanism  ScramMechanism
	Iterations int
	Salt       []byte
	StoredKey  []byte // H(HMAC(SaltedPassword, "Client Key"))
	ServerKey  []byte // HMAC(SaltedPassword, "Server Key")
}

// NewSalt is a random salt for a new credential.
func NewSalt() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail
	return b
}

// SaltPassword is Hi(password, salt, iterations) of RFC 5802: what a
// client sends to store a credential (the password stays with it).
func SaltPassword(m ScramMechanism, password string, salt []byte, iterations int) ([]byte, error) {
	return pbkdf2.Key(m.hash(), password, salt, iterations, m.KeyLen())
}

// NewScramCredential derives the credential of a salted password, after
// checking the mechanism, iteration count, salt and length.
func NewScramCredential(m ScramMechanism, iterations int, salt, saltedPassword []byte) (ScramCredential, error) {
	if _, err := ParseScramMechanism(string(m)); err != nil {
		return ScramCredential{}, err
	}
	if iterations < MinScramIterations || iterations > MaxScramIterations {
		return ScramCredential{}, fmt.Errorf("%d iterations: must be within %d..%d", iterations, MinScramIterations, MaxScramIterations)
	}
	if len(salt) < MinScramSaltLen {
		return ScramCredential{}, fmt.Errorf("salt of %d bytes: at least %d", len(salt), MinScramSaltLen)
	}
	if len(saltedPassword) != m.KeyLen() {
		return ScramCredential{}, fmt.Errorf("salted password of %d bytes: %s's is %d", len(saltedPassword), m, m.KeyLen())
	}
	h := m.hash()
	clientKey := hmacOf(h, saltedPassword, "Client Key")
	stored := h()
	stored.Write(clientKey)
	return ScramCredential{Mechanism: m, Iterations: iterations, Salt: append([]byte(nil), salt...),
		StoredKey: stored.Sum(nil), ServerKey: hmacOf(h, saltedPassword, "Server Key")}, nil
}

func hmacOf(h func() hash.Hash, key []byte, msg string) []byte {
	mac := hmac.New(h, key)
	mac.Write([]byte(msg))
	return mac.Sum(nil)
}
