package auth

import (
	"bytes"
	"crypto/hmac"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MechanismPlain is SASL PLAIN (RFC 4616), which the Kafka door serves
// against the users' SCRAM credentials.
const MechanismPlain = "PLAIN"

// MethodPlain is a caller authenticated with SASL PLAIN.
const MethodPlain Method = MechanismPlain

// ParsePlain parses a PLAIN message (RFC 4616 §2): authzid NUL authcid
// NUL passwd, the authorization id optional, the others not empty, none
// longer than 255 bytes or other than UTF-8.
func ParsePlain(msg []byte) (authzid, user, password string, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return "", "", "", errors.New("PLAIN: not authzid NUL authcid NUL passwd")
	}
	for i, p := range parts {
		if len(p) > 255 || !utf8.Valid(p) || (i > 0 && len(p) == 0) {
			return "", "", "", errors.New("PLAIN: an empty, overlong or non-UTF-8 field")
		}
	}
	return string(parts[0]), string(parts[1]), string(parts[2]), nil
}

// Plain checks a PLAIN message against its user's SCRAM credential, as
// Redpanda does: the password salted with the credential's salt and
// iterations must derive its StoredKey (compared in constant time). The
// user's SCRAM-SHA-256 credential is checked, or its SCRAM-SHA-512 one if
// it has only that. An unknown user costs the same derivation (with a
// made-up salt) and reads as a wrong password; an authorization id other
// than the user is refused, as Kafka does. Errors wrap
// ErrAuthenticationFailed with the reason, for the server's log only.
//
// The derivation (PBKDF2, thousands of iterations) runs on every call:
// a client authenticates once per connection.
func (a *Authenticator) Plain(msg []byte) (Login, error) {
	authzid, user, password, err := ParsePlain(msg)
	if err != nil {
		return Login{}, fmt.Errorf("%w: %v", ErrAuthenticationFailed, err)
	}
	if authzid != "" && authzid != user {
		return Login{}, fmt.Errorf("%w: PLAIN, user %q asked for authorization id %q", ErrAuthenticationFailed, user, authzid)
	}
	mech := ScramSHA256
	cred, known := a.lookup(user, mech)
	if !known {
		mech = ScramSHA512
		cred, known = a.lookup(user, mech)
	}
	if !known {
		mech = ScramSHA256
		cred = a.madeUpCredential(user, mech)
	}
	salted, err := SaltPassword(mech, password, cred.Salt, cred.Iterations)
	if err != nil {
		return Login{}, fmt.Errorf("%w: PLAIN, user %q: %v", ErrAuthenticationFailed, user, err)
	}
	derived, err := NewScramCredential(mech, cred.Iterations, cred.Salt, salted)
	if err != nil {
		return Login{}, fmt.Errorf("%w: PLAIN, user %q: %v", ErrAuthenticationFailed, user, err)
	}
	if !hmac.Equal(derived.StoredKey, cred.StoredKey) || !known {
		return Login{}, fmt.Errorf("%w: PLAIN, user %q: wrong password or unknown user", ErrAuthenticationFailed, user)
	}
	return Login{User: user, Mechanism: mech, storedKey: cred.StoredKey}, nil
}
