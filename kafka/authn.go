package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// Authentication is how the door's connections authenticate (docs/kafka.md,
// "Authentication"), onto the same principals as the gRPC door: SASL if
// the client does it (sasl.go), else a verified TLS client certificate
// through the principal mapping rules, else User:ANONYMOUS.
type Authentication struct {
	// Authenticator checks SCRAM exchanges and PLAIN passwords against
	// the users' SCRAM credentials (nil: SCRAM and PLAIN are not offered).
	Authenticator *auth.Authenticator
	// JWT checks OAUTHBEARER tokens (nil: OAUTHBEARER is not offered).
	JWT *auth.JWTValidator
	// Mapper names the principal of a verified client certificate.
	Mapper auth.PrincipalMapper
	// Required: a connection that has not authenticated (SASL or a
	// client certificate) may send ApiVersions, SaslHandshake and
	// SaslAuthenticate only; anything else closes it, as a Kafka broker
	// closes a SASL listener's connection that skips authentication.
	Required bool
	// Refused, if set, is told of each refusal, with the gRPC door's
	// reasons (sasl_failed, unsupported_mechanism, jwt_invalid,
	// session_invalid, anonymous, principal_mapping) and illegal_state.
	// Succeeded is told of each completed SASL authentication, by
	// mechanism. TLSRefused is told of each failed TLS handshake. Each
	// may be called from any connection's goroutine, concurrently.
	Refused    func(reason string)
	Succeeded  func(mechanism string)
	TLSRefused func(peer net.Addr, err error)
}

// connAuth is a connection's authentication: how it authenticated, and
// the SASL exchange in progress. Owned by the connection's reader.
type connAuth struct {
	// setupEnds is when the first request must have arrived by: the
	// setup timeout from the accept, a TLS handshake included (start).
	setupEnds time.Time
	tls       bool // the connection is TLS
	// authenticated: by SASL (sasl) or a verified client certificate.
	authenticated, sasl bool
	// login is a SCRAM or PLAIN authentication's credential, checked
	// again before each request (nil: none to check).
	login *auth.Login
	// expires ends the session (OAUTHBEARER: the token's expiry; zero:
	// never): a request other than the three of authentication after it
	// closes the connection (KIP-368).
	expires time.Time

	// The exchange in progress (sasl.go): mechanism is the one the
	// SaslHandshake chose ("" when none is in progress).
	mechanism string
	scram     *auth.ScramExchange
	// oauthError is the RFC 7628 error challenge sent; the exchange
	// fails at the client's next message.
	oauthError []byte
	// closing: an authentication failed; the connection closes once its
	// answer is written.
	closing bool
}

// errClosingAfterAnswers ends a connection's reading once a failed
// authentication's answer is queued: the answers queued are written,
// then the connection closes (Kafka's behaviour).
var errClosingAfterAnswers = errors.New("authentication failed: closing after the answer")

// delayFailedClose holds a connection whose authentication failed open
// for Config.FailedAuthenticationDelay after its answer, reading nothing
// (Kafka's connection.failed.authentication.delay.ms): a client guessing
// passwords gets one guess per connection per delay. The server's close
// ends the wait.
func (c *conn) delayFailedClose() {
	d := c.s.cfg.FailedAuthenticationDelay
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.s.ctx.Done():
	}
}

// start does a TLS connection's handshake before the first request is
// read, within the setup timeout (which bounds the first request's
// arrival too, from the accept), and takes a verified client
// certificate's principal. An error closes the connection.
func (c *conn) start() error {
	c.authn.setupEnds = time.Now().Add(c.s.cfg.SetupTimeout)
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return nil
	}
	tc.SetDeadline(c.authn.setupEnds)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		if f := c.s.cfg.Auth.TLSRefused; f != nil && c.ctx.Err() == nil {
			f(c.nc.RemoteAddr(), err)
		}
		return closing(handshakeRefusal(c, err), fmt.Errorf("TLS handshake: %w", err))
	}
	tc.SetDeadline(time.Time{})
	c.authn.tls = true
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 {
		return nil
	}
	p, err := c.s.cfg.Auth.Mapper.CertificatePrincipal(st.PeerCertificates[0])
	if err != nil {
		c.refuse("principal_mapping", err)
		return closing(CloseAuthentication, err)
	}
	c.caller = auth.Caller{Principal: p, Method: auth.MethodTLS}
	c.authn.authenticated = true
	return nil
}

// The requests a connection may send before it authenticates.
const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// admit decides whether r may be served on this connection; an error
// closes it (nothing answered), logged and counted:
//   - during a SASL exchange of a connection not yet authenticated, only
//     SaslAuthenticate (Kafka: ILLEGAL_SASL_STATE, the connection closed);
//   - once a session expired (an OAUTHBEARER token's exp), or its SCRAM
//     or PLAIN user was deleted or given a new password, only a new
//     authentication (KIP-368: Kafka closes it at its next request; a
//     deleted user ends its gRPC sessions the same way);
//   - with authentication required, before authenticating, only
//     ApiVersions, SaslHandshake and SaslAuthenticate.
func (c *conn) admit(r *request) error {
	switch r.key {
	case apiVersionsKey, saslHandshakeKey, saslAuthenticateKey:
		return nil
	}
	a := &c.authn
	var reason, why string
	switch {
	case a.mechanism != "" && !a.authenticated:
		reason, why = "illegal_state", fmt.Sprintf("%s during a SASL %s exchange", r.name(), a.mechanism)
	case !a.expires.IsZero() && !c.s.cfg.Now().Before(a.expires):
		reason, why = "session_invalid", fmt.Sprintf("%s after the session expired at %s", r.name(), a.expires.Format(time.RFC3339))
	case a.login != nil && c.s.leaders.MetadataLoaded() == nil && !c.s.cfg.Auth.Authenticator.Current(*a.login):
		// (Without metadata, as while the cache reloads, the user is not
		// known to be gone: its requests are answered as any then.)
		reason, why = "session_invalid", fmt.Sprintf("%s after user %q was deleted or given a new password", r.name(), a.login.User)
	case !a.authenticated && c.s.cfg.Auth.Required:
		reason, why = "anonymous", fmt.Sprintf("%s before authenticating (authentication is required)", r.name())
	default:
		return nil
	}
	err := errors.New(why)
	c.refuse(reason, err)
	return err
}

// name is the request's API name and version, for logs.
func (r *request) name() string { return fmt.Sprintf("%s v%d", kmsg.NameForKey(r.key), r.version) }

// refuse counts a refusal and logs it, at most one line per reason every
// 10 s (a client can provoke them at will).
func (c *conn) refuse(reason string, err error) {
	if f := c.s.cfg.Auth.Refused; f != nil {
		f(reason)
	}
	if c.s.authLogs.Allow(reason) {
		c.s.log.Info("authentication refused", "remote", c.nc.RemoteAddr().String(), "reason", reason,
			"principal", c.caller.Principal.String(), "err", err)
	}
}
