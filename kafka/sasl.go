package kafka

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/auth"
)

// Kafka's SASL error codes.
const (
	codeUnsupportedSASLMechanism int16 = 33
	codeIllegalSASLState         int16 = 34
	codeSASLAuthenticationFailed int16 = 58
)

// maxSASLMessage bounds one SASL message (SCRAM's are a few hundred
// bytes, a JWT a few KiB), as the gRPC door does.
const maxSASLMessage = 64 << 10

// failedMessage is every SASL_AUTHENTICATION_FAILED's message but the
// ones of a state error: the client learns no more than this (a wrong
// password, an unknown user and a refused token read the same); the
// server's log has the reason.
const failedMessage = "authentication failed: invalid credentials"

// mechanisms are the SASL mechanisms this connection is offered
// (Mechanisms).
func (c *conn) mechanisms() []string { return Mechanisms(c.s.cfg.Auth, c.authn.tls) }

// Mechanisms are the SASL mechanisms a connection with authentication a
// is offered, in preference order: SCRAM-SHA-256 and SCRAM-SHA-512 with
// an Authenticator; PLAIN too on TLS (the password crosses the wire);
// OAUTHBEARER with a JWT validator, on TLS (a bearer token must not
// travel in the clear).
func Mechanisms(a Authentication, tls bool) []string {
	var out []string
	if a.Authenticator != nil {
		for _, m := range auth.ScramMechanisms {
			out = append(out, string(m))
		}
		if tls {
			out = append(out, auth.MechanismPlain)
		}
	}
	if a.JWT != nil && tls {
		out = append(out, auth.MechanismOAuthBearer)
	}
	return out
}

// saslHandshake serves SaslHandshake v1 (KIP-152: the tokens follow in
// SaslAuthenticate requests; v0's raw tokens are not served, as Kafka 4
// no longer does, KIP-896). It chooses the mechanism of the exchange
// that follows — on a connection authenticated already, of a
// re-authentication (KIP-368). A mechanism not offered is answered
// UNSUPPORTED_SASL_MECHANISM with the ones offered, and the connection
// stays open for the client to pick one of them (franz-go does); a
// handshake during an exchange is ILLEGAL_SASL_STATE, and the connection
// closes.
func saslHandshake(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = c.mechanisms()
	a := &c.authn
	switch {
	case a.mechanism != "":
		resp.ErrorCode = codeIllegalSASLState
		c.failAuthentication("illegal_state", fmt.Errorf("a SaslHandshake (%q) during a SASL %s exchange", req.Mechanism, a.mechanism))
	case !slices.Contains(resp.SupportedMechanisms, req.Mechanism):
		resp.ErrorCode = codeUnsupportedSASLMechanism
		c.refuse("unsupported_mechanism", fmt.Errorf("SASL mechanism %q; offered: %v", req.Mechanism, resp.SupportedMechanisms))
	default:
		a.mechanism = req.Mechanism
	}
	return resp
}

// saslAuthenticate serves SaslAuthenticate v0–v2: one message of the
// exchange the SaslHandshake began. A failure is answered
// SASL_AUTHENTICATION_FAILED (ILLEGAL_SASL_STATE without a handshake) and
// closes the connection, as Kafka does. Once complete, the connection's
// requests are the principal's; v1+ answers the session's lifetime
// (KIP-368): an OAUTHBEARER token's remaining lifetime, 0 (no end) for
// SCRAM and PLAIN — their connections end instead when the user is
// deleted or given a new password (admit).
func saslAuthenticate(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	a := &c.authn
	fail := func(code int16, reason, msg string, err error) kmsg.Response {
		c.failAuthentication(reason, err)
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		return resp
	}
	if a.mechanism == "" {
		return fail(codeIllegalSASLState, "illegal_state", "SaslAuthenticate without a SaslHandshake naming the mechanism first",
			errors.New("SaslAuthenticate before SaslHandshake"))
	}
	if len(req.SASLAuthBytes) > maxSASLMessage {
		return fail(codeSASLAuthenticationFailed, "sasl_failed", failedMessage,
			fmt.Errorf("a %d-byte %s message (at most %d)", len(req.SASLAuthBytes), a.mechanism, maxSASLMessage))
	}
	now := c.s.cfg.Now()
	switch a.mechanism {
	case auth.MechanismOAuthBearer:
		return c.oauthBearer(req, resp, now, fail)
	}
	// SCRAM and PLAIN check the users' credentials, which are in the
	// metadata: before a broker has it, an exchange would fail as for
	// an unknown user. The connection closes unanswered instead, which
	// clients retry (the gRPC door answers LEADER_NOT_AVAILABLE).
	if err := c.s.leaders.MetadataLoaded(); err != nil {
		c.s.log.Debug("closing connection: SASL before the first metadata", "remote", c.nc.RemoteAddr().String(), "err", err)
		a.closing = true
		return nil
	}
	authn := c.s.cfg.Auth.Authenticator
	if a.mechanism == auth.MechanismPlain {
		login, err := authn.Plain(req.SASLAuthBytes)
		if err != nil {
			return fail(codeSASLAuthenticationFailed, "sasl_failed", failedMessage, err)
		}
		return c.authenticated(resp, auth.Caller{Principal: login.Principal(), Method: auth.MethodPlain}, &login, time.Time{}, now, fail)
	}
	if a.scram == nil {
		x, err := authn.NewScramExchange(a.mechanism)
		if err != nil { // not reached: the handshake offered it
			return fail(codeSASLAuthenticationFailed, "unsupported_mechanism", failedMessage, err)
		}
		a.scram = x
	}
	out, login, err := a.scram.Step(req.SASLAuthBytes)
	if err != nil {
		return fail(codeSASLAuthenticationFailed, "sasl_failed", failedMessage, err)
	}
	resp.SASLAuthBytes = out
	if login == nil {
		return resp // the server-first message; the client-final comes next
	}
	return c.authenticated(resp, auth.Caller{Principal: login.Principal(), Method: auth.Method(login.Mechanism)}, login, time.Time{}, now, fail)
}

// oauthBearer serves an OAUTHBEARER message (RFC 7628): the client's
// initial response, whose token the JWT validator checks. A token
// refused is answered, as RFC 7628 §3.2.2 and Kafka do, with an error
// challenge ({"status":"invalid_token"}, error code 0); the client's next
// message (a lone %x01) then fails the exchange.
func (c *conn) oauthBearer(req *kmsg.SASLAuthenticateRequest, resp *kmsg.SASLAuthenticateResponse, now time.Time,
	fail func(int16, string, string, error) kmsg.Response) kmsg.Response {
	a := &c.authn
	if a.oauthError != nil {
		// Refused (counted, logged) with the challenge already.
		msg := "authentication failed: bearer token refused (invalid signature, audience, issuer or expiry): " + string(a.oauthError)
		a.closing = true
		resp.ErrorCode, resp.ErrorMessage = codeSASLAuthenticationFailed, &msg
		return resp
	}
	msg, err := auth.ParseOAuthBearer(req.SASLAuthBytes)
	if err != nil {
		return fail(codeSASLAuthenticationFailed, "jwt_invalid", "authentication failed: "+err.Error(), err)
	}
	caller, exp, err := c.s.cfg.Auth.JWT.ValidateWithExpiry(msg.Token, now)
	switch {
	case err != nil:
	case !exp.After(now):
		// Within the validator's leeway, but a session must have a
		// lifetime to answer.
		err = fmt.Errorf("%w: JWT expired at %s", auth.ErrAuthenticationFailed, exp.Format(time.RFC3339))
	case msg.AuthzID != "" && msg.AuthzID != caller.Principal.Name:
		err = fmt.Errorf("%w: JWT of %s asked for authorization id %q", auth.ErrAuthenticationFailed, caller.Principal, msg.AuthzID)
	}
	if err != nil {
		// Counted and logged now: the client may just close.
		c.refuse("jwt_invalid", err)
		a.oauthError = auth.OAuthBearerError("invalid_token")
		resp.SASLAuthBytes = a.oauthError
		return resp
	}
	return c.authenticated(resp, caller, nil, exp, now, fail)
}

// authenticated completes an exchange as caller: the connection's
// requests are caller's from the next one on. A re-authentication
// (KIP-368) must be of the principal the connection has, or it fails.
func (c *conn) authenticated(resp *kmsg.SASLAuthenticateResponse, caller auth.Caller, login *auth.Login, expires, now time.Time,
	fail func(int16, string, string, error) kmsg.Response) kmsg.Response {
	a := &c.authn
	if a.sasl && caller.Principal != c.caller.Principal {
		return fail(codeSASLAuthenticationFailed, "sasl_failed", "authentication failed: a re-authentication must be of the connection's principal",
			fmt.Errorf("re-authentication of %s as %s", c.caller.Principal, caller.Principal))
	}
	mech := a.mechanism
	c.caller = caller
	*a = connAuth{tls: a.tls, authenticated: true, sasl: true, login: login, expires: expires}
	if !expires.IsZero() {
		resp.SessionLifetimeMillis = max(expires.Sub(now).Milliseconds(), 1)
	}
	if f := c.s.cfg.Auth.Succeeded; f != nil {
		f(mech)
	}
	return resp
}

// failAuthentication refuses the exchange (counted, logged) and closes
// the connection once the answer is written.
func (c *conn) failAuthentication(reason string, err error) {
	c.refuse(reason, err)
	c.authn.closing = true
}

// refuseSaslHandshakeV0 answers SaslHandshake v0, listed in ApiVersions
// but not served (handler.listedFrom): librdkafka turns SASL on only when
// it sees v0 listed (then it speaks v1). A v0 client would send raw
// SASL tokens next, which the door does not read: the answer
// (UNSUPPORTED_VERSION, with the mechanisms) is the last on the
// connection.
func refuseSaslHandshakeV0(c *conn, r *request) kmsg.Response {
	req := r.msg.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.ErrorCode = codeUnsupportedVersion
	resp.SupportedMechanisms = c.mechanisms()
	c.failAuthentication("unsupported_version", fmt.Errorf("SaslHandshake v0 (raw SASL tokens) is not served; v1 is"))
	return resp
}
