package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xdg-go/scram"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/auth"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// WithSCRAM authenticates as user with password over SCRAM (mechanism
// "SCRAM-SHA-256" or "SCRAM-SHA-512"; Kafka's SASL/SCRAM) to each broker
// the client calls: one exchange per broker, whose session token then
// goes with every call to it (docs/security.md), renewed before it
// expires and after the broker refuses it (a restart, a new password).
// It needs WithTLS: the token must not travel in the clear.
func WithSCRAM(mechanism, user, password string) Option {
	return func(c *clientConfig) error {
		m, err := auth.ParseScramMechanism(mechanism)
		if err != nil {
			return fmt.Errorf("sluice: %w", err)
		}
		if user == "" {
			return errors.New("sluice: SCRAM user must not be empty")
		}
		c.scram = &scramLogin{mech: m, user: user, password: password}
		return nil
	}
}

// scramLogin is the SCRAM identity of a client.
type scramLogin struct {
	mech           auth.ScramMechanism
	user, password string
}

// sessionRenewBefore is how long before its end a session is renewed.
const sessionRenewBefore = time.Minute

// scramSession is a client's SCRAM session with one broker, sent by the
// interceptors of that broker's connection.
type scramSession struct {
	login *scramLogin
	cc    *grpc.ClientConn // set once the connection is made

	mu      sync.Mutex // guards the following; held during an exchange
	token   string
	expires time.Time
}

// saslMethod is the one call made without a session.
const saslMethod = "/sluice.v1.Auth/SaslAuthenticate"

// withToken is ctx carrying the session token for method (none for
// SaslAuthenticate), after an exchange if there is no token or it is
// about to end; it returns the token sent.
func (s *scramSession) withToken(ctx context.Context, method string) (context.Context, string, error) {
	if method == saslMethod {
		return ctx, "", nil
	}
	tok, err := s.get(ctx)
	if err != nil {
		return nil, "", err
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), tok, nil
}

func (s *scramSession) get(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token != "" && time.Until(s.expires) > sessionRenewBefore {
		return s.token, nil
	}
	tok, life, err := s.exchange(ctx)
	if err != nil {
		return "", err
	}
	s.token, s.expires = tok, time.Now().Add(life)
	return tok, nil
}

// invalidate forgets token (the broker refused it).
func (s *scramSession) invalidate(token string) {
	s.mu.Lock()
	if s.token == token {
		s.token = ""
	}
	s.mu.Unlock()
}

func (s *scramSession) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.token
}

// exchange runs SCRAM with the broker and returns the session token and
// its lifetime.
func (s *scramSession) exchange(ctx context.Context) (string, time.Duration, error) {
	hf := scram.SHA256
	if s.login.mech == auth.ScramSHA512 {
		hf = scram.SHA512
	}
	cl, err := hf.NewClient(s.login.user, s.login.password, "")
	if err != nil {
		return "", 0, fmt.Errorf("sluice: SCRAM: %w", err)
	}
	conv := cl.NewConversation()
	first, err := conv.Step("")
	if err != nil {
		return "", 0, fmt.Errorf("sluice: SCRAM: %w", err)
	}
	ac := sluicev1.NewAuthClient(s.cc)
	r1, err := ac.SaslAuthenticate(ctx, &sluicev1.SaslAuthenticateRequest{Mechanism: string(s.login.mech), AuthBytes: []byte(first)})
	if err != nil {
		return "", 0, rpcError(err)
	}
	final, err := conv.Step(string(r1.AuthBytes))
	if err != nil {
		return "", 0, fmt.Errorf("sluice: SCRAM: %w", err)
	}
	r2, err := ac.SaslAuthenticate(ctx, &sluicev1.SaslAuthenticateRequest{ConversationId: r1.ConversationId, AuthBytes: []byte(final)})
	if err != nil {
		return "", 0, rpcError(err)
	}
	if _, err := conv.Step(string(r2.AuthBytes)); err != nil || !conv.Valid() || !r2.Complete || r2.SessionToken == "" {
		return "", 0, errors.New("sluice: SCRAM: the broker did not prove it knows the credential")
	}
	return r2.SessionToken, time.Duration(r2.SessionLifetimeMs) * time.Millisecond, nil
}

// unary sends the session token with each call and retries a call once
// after a new exchange when the broker refused the session (a restart
// lost it, or the user's password changed since).
func (s *scramSession) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	tctx, tok, err := s.withToken(ctx, method)
	if err != nil {
		return err
	}
	err = invoker(tctx, method, req, reply, cc, opts...)
	if status.Code(err) != codes.Unauthenticated || tok == "" {
		return err
	}
	s.invalidate(tok)
	if tctx, _, err = s.withToken(ctx, method); err != nil {
		return err
	}
	return invoker(tctx, method, req, reply, cc, opts...)
}

// stream sends the session token when a stream opens, and forgets a
// session the broker refused: the stream opened again authenticates
// anew.
func (s *scramSession) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tctx, tok, err := s.withToken(ctx, method)
	if err != nil {
		return nil, err
	}
	cs, err := streamer(tctx, desc, cc, method, opts...)
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			s.invalidate(tok)
		}
		return nil, err
	}
	return &sessionStream{ClientStream: cs, s: s, token: tok}, nil
}

type sessionStream struct {
	grpc.ClientStream
	s     *scramSession
	token string
}

func (st *sessionStream) RecvMsg(m any) error {
	err := st.ClientStream.RecvMsg(m)
	if status.Code(err) == codes.Unauthenticated {
		st.s.invalidate(st.token)
	}
	return err
}

// dialOptions are the options of a connection to one broker.
func (s *scramSession) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(s.unary), grpc.WithChainStreamInterceptor(s.stream)}
}

// WhoAmI asks a broker which principal the client calls as, how it was
// authenticated, and whether the connection is TLS.
func (c *Client) WhoAmI(ctx context.Context) (*sluicev1.WhoAmIResponse, error) {
	var resp *sluicev1.WhoAmIResponse
	err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
		r, err := sluicev1.NewAuthClient(cc).WhoAmI(ctx, &sluicev1.WhoAmIRequest{})
		resp = r
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("who am i: %w", err)
	}
	return resp, nil
}

// WithBearerToken sends a bearer token (a JWT from an OAuth 2 / OIDC
// provider; Kafka's OAUTHBEARER) with every call: token is asked for one
// at each call, so it may cache and renew as it likes. Brokers check it
// against their JWKS (sluiced --jwt-jwks-file or --jwt-jwks-url). It needs
// WithTLS.
func WithBearerToken(token func(ctx context.Context) (string, error)) Option {
	return func(c *clientConfig) error {
		if token == nil {
			return errors.New("sluice: bearer token source must not be nil")
		}
		c.bearer = token
		return nil
	}
}

// bearerOptions send the token of source with every call.
func bearerOptions(source func(context.Context) (string, error)) []grpc.DialOption {
	with := func(ctx context.Context) (context.Context, error) {
		tok, err := source(ctx)
		if err != nil {
			return nil, fmt.Errorf("sluice: bearer token: %w", err)
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok), nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			ctx, err := with(ctx)
			if err != nil {
				return err
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			ctx, err := with(ctx)
			if err != nil {
				return nil, err
			}
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}
