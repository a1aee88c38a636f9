package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/xdg-go/scram"
)

// Login is who a completed SCRAM exchange or PLAIN check authenticated,
// and the credential it was checked against: a connection or session
// that keeps a Login asks Current before serving on it, so that a
// deleted user or a new password ends it at its next request.
type Login struct {
	User      string
	Mechanism ScramMechanism // the credential's mechanism (for PLAIN, the one checked)
	storedKey []byte
}

// Principal is the login's principal, User:<user>.
func (l Login) Principal() Principal { return User(l.User) }

// Current reports whether l's user still has the credential l was
// checked against (not deleted, no new password since).
func (a *Authenticator) Current(l Login) bool {
	cred, ok := a.lookup(l.User, l.Mechanism)
	return ok && bytes.Equal(cred.StoredKey, l.storedKey)
}

// ScramExchange is the server side of one SCRAM exchange (RFC 5802):
// Step with the client-first message, then with the client-final one.
// Both doors run their exchanges with it — the gRPC door's Auth service
// through Authenticator.Step, the Kafka door per connection. Not safe for
// concurrent use: one exchange belongs to one client.
//
// An unknown user is not told apart from a wrong password: the exchange
// goes on with a made-up salt (the same for the same name on this
// broker) and fails at the proof, as RFC 5802 §5.1 suggests.
type ScramExchange struct {
	a    *Authenticator
	mech ScramMechanism
	conv *scram.ServerConversation
	cred ScramCredential // the credential the first step found (zero: made up)
	step int             // messages stepped so far
	// clientFirst and serverFirst are the first step's messages, and
	// used the credential it went on with (found or made up): what
	// verifyDoubledNonce needs.
	clientFirst, serverFirst string
	used                     ScramCredential
}

// NewScramExchange starts an exchange of mechanism; the error wraps
// ErrUnsupportedMechanism unless it is SCRAM-SHA-256 or SCRAM-SHA-512.
func (a *Authenticator) NewScramExchange(mechanism string) (*ScramExchange, error) {
	mech, err := ParseScramMechanism(mechanism)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedMechanism, err)
	}
	x := &ScramExchange{a: a, mech: mech}
	hf := scram.SHA256
	if mech == ScramSHA512 {
		hf = scram.SHA512
	}
	srv, err := hf.NewServer(func(user string) (scram.StoredCredentials, error) {
		cred, ok := a.lookup(user, mech)
		if ok {
			x.cred = cred
		} else {
			cred = a.madeUpCredential(user, mech)
		}
		x.used = cred
		return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(cred.Salt), Iters: cred.Iterations},
			StoredKey: cred.StoredKey, ServerKey: cred.ServerKey}, nil
	})
	if err != nil {
		return nil, err
	}
	x.conv = srv.NewConversation()
	return x, nil
}

// Mechanism is the exchange's mechanism.
func (x *ScramExchange) Mechanism() ScramMechanism { return x.mech }

// Step answers the client's next message: the server-first message to
// the client-first, the server-final (its signature) to the client-final,
// with the Login then. Errors wrap ErrAuthenticationFailed with the
// reason, for the server's log only: the client must learn no more than
// that it failed.
func (x *ScramExchange) Step(msg []byte) (out []byte, login *Login, err error) {
	x.step++
	first := x.step == 1
	if x.step == 2 {
		if resp, ok, err := x.doubledNonce(string(msg)); ok {
			if err != nil {
				return nil, nil, err
			}
			return x.finish(resp)
		}
	}
	resp, err := x.conv.Step(string(msg))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s, user %q: %v", ErrAuthenticationFailed, x.mech, x.conv.Username(), err)
	}
	user := x.conv.Username()
	if first {
		// Kafka refuses an authorization id other than the user (no
		// impersonation): so does Sluice, on both doors.
		if z := x.conv.AuthzID(); z != "" && z != user {
			return nil, nil, fmt.Errorf("%w: %s, user %q asked for authorization id %q", ErrAuthenticationFailed, x.mech, user, z)
		}
		x.clientFirst, x.serverFirst = string(msg), resp
		return []byte(resp), nil, nil
	}
	if !x.conv.Valid() {
		return nil, nil, fmt.Errorf("%w: %s, user %q: proof refused or unknown user", ErrAuthenticationFailed, x.mech, user)
	}
	return x.finish(resp)
}

// finish ends a valid exchange: the Login, once the user is known and its
// credential still the one the proof was of.
func (x *ScramExchange) finish(resp string) ([]byte, *Login, error) {
	user := x.conv.Username()
	if x.cred.StoredKey == nil {
		return nil, nil, fmt.Errorf("%w: %s, user %q: proof refused or unknown user", ErrAuthenticationFailed, x.mech, user)
	}
	// The user was deleted or given a new password during the exchange:
	// the proof was of a credential no longer in force.
	if !x.a.Current(Login{User: user, Mechanism: x.mech, storedKey: x.cred.StoredKey}) {
		return nil, nil, fmt.Errorf("%w: %s, user %q deleted or given a new password during the exchange", ErrAuthenticationFailed, x.mech, user)
	}
	return []byte(resp), &Login{User: user, Mechanism: x.mech, storedKey: x.cred.StoredKey}, nil
}

// madeUpCredential is the credential an exchange goes on with for a user
// that has none: a salt derived from the name and this Authenticator's
// secret (stable, so that asking twice shows nothing), the default
// iteration count, and keys no password derives.
func (a *Authenticator) madeUpCredential(user string, m ScramMechanism) ScramCredential {
	mac := hmac.New(sha256.New, a.secret)
	mac.Write([]byte(string(m) + "\x00" + user))
	salt := mac.Sum(nil)
	return ScramCredential{Mechanism: m, Iterations: DefaultScramIterations, Salt: salt,
		StoredKey: make([]byte, m.KeyLen()), ServerKey: make([]byte, m.KeyLen())}
}

// doubledNonce serves the client-final message of librdkafka before
// 2.6.1 (confluentinc/librdkafka#4895): its nonce is its own nonce
// followed by the whole server nonce, which already starts with it. RFC
// 5802 wants the server nonce alone; Kafka 3.8.1 to 3.9 accepted a nonce
// ending with it (KAFKA-17593's fix of CVE-2024-56128 with endsWith), Kafka 4
// refuses it — and with it every librdkafka SCRAM client of the Debian
// and Ubuntu releases in use. Sluice accepts exactly that form: the
// server nonce is echoed whole (what the check is for: the proof covers
// this exchange's fresh server nonce, so it cannot be replayed) and the
// prefix is the client's own nonce. The proof is verified here, over the
// message as sent, since xdg-go's conversation refuses the nonce. ok is
// false for any other message (xdg-go's path, RFC 5802 to the letter).
func (x *ScramExchange) doubledNonce(msg string) (resp string, ok bool, err error) {
	cNonce, sNonce := scramAttr(bare(x.clientFirst), 'r'), scramAttr(x.serverFirst, 'r')
	if cNonce == "" || sNonce == "" || !strings.HasPrefix(sNonce, cNonce) {
		return "", false, nil
	}
	withoutProof, proof, found := strings.Cut(msg, ",p=")
	if !found || scramAttr(withoutProof, 'r') != cNonce+sNonce {
		return "", false, nil
	}
	user := x.conv.Username()
	refused := fmt.Errorf("%w: %s, user %q: proof refused or unknown user", ErrAuthenticationFailed, x.mech, user)
	gs2 := strings.TrimSuffix(x.clientFirst, bare(x.clientFirst))
	if scramAttr(withoutProof, 'c') != base64.StdEncoding.EncodeToString([]byte(gs2)) {
		return "", true, fmt.Errorf("%w: %s, user %q: channel binding does not match the first message", ErrAuthenticationFailed, x.mech, user)
	}
	p, err := base64.StdEncoding.DecodeString(proof)
	if err != nil || len(p) != x.mech.KeyLen() {
		return "", true, refused
	}
	authMessage := bare(x.clientFirst) + "," + x.serverFirst + "," + withoutProof
	mac := hmac.New(x.mech.hash(), x.used.StoredKey)
	mac.Write([]byte(authMessage))
	clientKey := mac.Sum(nil)
	for i := range clientKey {
		clientKey[i] ^= p[i]
	}
	h := x.mech.hash()()
	h.Write(clientKey)
	if !hmac.Equal(h.Sum(nil), x.used.StoredKey) {
		return "", true, refused
	}
	mac = hmac.New(x.mech.hash(), x.used.ServerKey)
	mac.Write([]byte(authMessage))
	return "v=" + base64.StdEncoding.EncodeToString(mac.Sum(nil)), true, nil
}

// bare is a client-first message without its GS2 header ("n,," or
// "n,a=id,"): what follows its second comma.
func bare(clientFirst string) string {
	if j := nthIndex(clientFirst, ',', 2); j >= 0 {
		return clientFirst[j+1:]
	}
	return ""
}

// nthIndex is the index of the n-th sep in s (-1: fewer).
func nthIndex(s string, sep byte, n int) int {
	for i := range len(s) {
		if s[i] == sep {
			if n--; n == 0 {
				return i
			}
		}
	}
	return -1
}

// scramAttr is attribute key's value in a SCRAM message ("" if absent).
func scramAttr(msg string, key byte) string {
	for _, a := range strings.Split(msg, ",") {
		if len(a) >= 2 && a[0] == key && a[1] == '=' {
			return a[2:]
		}
	}
	return ""
}
