package auth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Authenticator checks the users' SCRAM credentials on one broker
// (docs/security.md, decision 62): for the gRPC door it runs SCRAM
// exchanges and keeps the sessions they open (Step, Session); for the
// Kafka door it gives each connection its exchange (NewScramExchange,
// exchange.go) and checks PLAIN passwords (Plain, plain.go). Safe for
// concurrent use.
//
// A session remembers the StoredKey it was opened with: a call with its
// token is refused once the user's credential is gone or changed (a
// deleted user, a new password), at the next call, not at the session's
// end.
type Authenticator struct {
	lookup   CredentialLookup
	lifetime time.Duration
	secret   []byte // keys the made-up salts of unknown users (exchange.go)

	mu            sync.Mutex // guards the following
	conversations map[string]*conversation
	sessions      map[string]*session
}

// CredentialLookup finds a user's credential for a mechanism (false: none).
// It is called with no lock of the Authenticator's held.
type CredentialLookup func(user string, m ScramMechanism) (ScramCredential, bool)

// Bounds on what an Authenticator holds (a flood of half-done exchanges
// or of sessions cannot take the broker's memory).
const (
	conversationTimeout = 30 * time.Second
	maxConversations    = 10_000
	maxSessions         = 200_000
	// DefaultSessionLifetime is how long a SCRAM session lasts (Kafka's
	// connections.max.reauth.ms is off by default; a bound makes a
	// stolen token expire).
	DefaultSessionLifetime = time.Hour
	// SessionTokenPrefix starts every session token (a JWT never does).
	SessionTokenPrefix = "sst1."
)

type conversation struct {
	x       *ScramExchange
	expires time.Time
}

type session struct {
	login   Login
	expires time.Time
}

// NewAuthenticator returns an Authenticator looking credentials up with
// lookup; sessions last lifetime (DefaultSessionLifetime when 0).
func NewAuthenticator(lookup CredentialLookup, lifetime time.Duration) *Authenticator {
	if lifetime <= 0 {
		lifetime = DefaultSessionLifetime
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return &Authenticator{lookup: lookup, lifetime: lifetime, secret: secret,
		conversations: map[string]*conversation{}, sessions: map[string]*session{}}
}

// Authentication errors: a failed exchange or session (the caller learns
// no more than that), and a mechanism not served.
var (
	ErrAuthenticationFailed = errors.New("authentication failed")
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
)

// StepResult is the answer to one SCRAM step.
type StepResult struct {
	ConversationID string
	Message        []byte
	// Complete, with a Token, when the exchange succeeded.
	Complete  bool
	Mechanism ScramMechanism
	Token     string
	Lifetime  time.Duration
	Principal Principal
}

// Step runs one step of a SCRAM exchange: the first (conversationID "")
// names the mechanism; the second names the conversation the first
// answered. Errors wrap ErrAuthenticationFailed or ErrUnsupportedMechanism
// with a reason for the server's log (not for the client).
func (a *Authenticator) Step(mechanism, conversationID string, msg []byte, now time.Time) (StepResult, error) {
	if conversationID == "" {
		return a.first(mechanism, msg, now)
	}
	a.mu.Lock()
	c := a.conversations[conversationID]
	delete(a.conversations, conversationID) // one use: the second step
	a.mu.Unlock()
	if c == nil || now.After(c.expires) {
		return StepResult{}, fmt.Errorf("%w: unknown or expired conversation", ErrAuthenticationFailed)
	}
	out, login, err := c.x.Step(msg)
	if err != nil {
		return StepResult{}, err
	}
	token, err := a.open(&session{login: *login, expires: now.Add(a.lifetime)}, now)
	if err != nil {
		return StepResult{}, err
	}
	return StepResult{Message: out, Complete: true, Mechanism: login.Mechanism, Token: token, Lifetime: a.lifetime, Principal: login.Principal()}, nil
}

func (a *Authenticator) first(mechanism string, msg []byte, now time.Time) (StepResult, error) {
	x, err := a.NewScramExchange(mechanism)
	if err != nil {
		return StepResult{}, err
	}
	out, _, err := x.Step(msg)
	if err != nil {
		return StepResult{}, err
	}
	id := randomToken()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.conversations) >= maxConversations {
		sweep(a.conversations, now, func(c *conversation) time.Time { return c.expires })
		if len(a.conversations) >= maxConversations {
			return StepResult{}, fmt.Errorf("%w: too many exchanges in progress", ErrAuthenticationFailed)
		}
	}
	a.conversations[id] = &conversation{x: x, expires: now.Add(conversationTimeout)}
	return StepResult{ConversationID: id, Message: out}, nil
}

func (a *Authenticator) open(s *session, now time.Time) (string, error) {
	token := SessionTokenPrefix + randomToken()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sessions) >= maxSessions {
		sweep(a.sessions, now, func(s *session) time.Time { return s.expires })
		if len(a.sessions) >= maxSessions {
			return "", fmt.Errorf("%w: too many sessions open on this broker", ErrAuthenticationFailed)
		}
	}
	a.sessions[token] = s
	return token, nil
}

// sweep removes the expired entries of m.
func sweep[V any](m map[string]V, now time.Time, expires func(V) time.Time) {
	for k, v := range m {
		if now.After(expires(v)) {
			delete(m, k)
		}
	}
}

// IsSessionToken reports whether token is one of Step's (not a JWT).
func IsSessionToken(token string) bool { return strings.HasPrefix(token, SessionTokenPrefix) }

// Session is the caller of a session token: refused (an error wrapping
// ErrAuthenticationFailed) when unknown, expired, or its user's
// credential was deleted or changed since.
func (a *Authenticator) Session(token string, now time.Time) (Caller, error) {
	a.mu.Lock()
	s := a.sessions[token]
	if s != nil && now.After(s.expires) {
		delete(a.sessions, token)
		s = nil
	}
	a.mu.Unlock()
	if s == nil {
		return Caller{}, fmt.Errorf("%w: unknown or expired session", ErrAuthenticationFailed)
	}
	if !a.Current(s.login) {
		a.mu.Lock()
		delete(a.sessions, token)
		a.mu.Unlock()
		return Caller{}, fmt.Errorf("%w: user %q deleted or its password changed", ErrAuthenticationFailed, s.login.User)
	}
	return Caller{Principal: s.login.Principal(), Method: Method(s.login.Mechanism)}, nil
}

// Counts are how many exchanges are in progress and sessions open.
func (a *Authenticator) Counts() (conversations, sessions int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conversations), len(a.sessions)
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
