package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"

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
		return []byte(resp), nil, nil
	}
	if !x.conv.Valid() || x.cred.StoredKey == nil {
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
