package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/ratelog"
	"github.com/sluice-io/sluice/kafka"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Authentication settings (Config.Authentication).
const (
	AuthenticationOptional = "optional"
	AuthenticationRequired = "required"
)

// AuthorizerACL is Config.Authorizer's one authorizer.
const AuthorizerACL = "acl"

// authGate finds the caller of each call on the client listener
// (decision 62): a session token in the `authorization` metadata, else a
// verified client certificate through the principal mapping rules, else
// anonymous — refused with --authentication required, but for gRPC
// health (probes) and the Auth service (how one authenticates).
type authGate struct {
	authn    *auth.Authenticator
	jwt      *auth.JWTValidator // nil: bearer JWTs refused
	mapper   auth.PrincipalMapper
	required bool
	log      *slog.Logger
	logs     *ratelog.Limiter

	failures *prometheus.CounterVec // by reason
	logins   *prometheus.CounterVec // by method
}

func newAuthGate(cfg Config, authn *auth.Authenticator, log *slog.Logger) (*authGate, error) {
	mapper, err := auth.ParsePrincipalMappingRules(cfg.TLSPrincipalMappingRules)
	if err != nil {
		return nil, err
	}
	var jwtv *auth.JWTValidator
	if cfg.JWTJWKSFile != "" || cfg.JWTJWKSURL != "" {
		if jwtv, err = auth.NewJWTValidator(auth.JWTConfig{JWKSFile: cfg.JWTJWKSFile, JWKSURL: cfg.JWTJWKSURL, Issuer: cfg.JWTIssuer,
			Audience: cfg.JWTAudience, PrincipalClaim: cfg.JWTPrincipalClaim, Logger: log}); err != nil {
			return nil, err
		}
	}
	return &authGate{authn: authn, jwt: jwtv, mapper: mapper, required: cfg.Authentication == AuthenticationRequired, log: log,
		logs: &ratelog.Limiter{Every: 10 * time.Second},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_authentication_failures_total",
			Help: "Calls, connections and SASL exchanges refused on the client and Kafka listeners, by reason (sasl_failed, unsupported_mechanism, not_tls, session_invalid, jwt_invalid, token_unsupported, anonymous, principal_mapping, illegal_state).",
		}, []string{"reason"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_authentications_total",
			Help: "SASL authentications completed on the client listener (SCRAM) and the Kafka listener (SCRAM, PLAIN, OAUTHBEARER), by mechanism.",
		}, []string{"mechanism"}),
	}, nil
}

// exempt are the methods an anonymous caller may call when
// authentication is required.
func exempt(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/sluice.v1.Auth/")
}

func (g *authGate) refuse(ctx context.Context, reason, msg string, err error) error {
	g.failures.WithLabelValues(reason).Inc()
	if g.logs.Allow(reason) {
		addr := ""
		if p, ok := peer.FromContext(ctx); ok {
			addr = p.Addr.String()
		}
		g.log.Info("call refused: not authenticated", "peer", addr, "reason", reason, "err", err)
	}
	return errs.NewStatus(codes.Unauthenticated, sluicev1.ErrorCode_SASL_AUTHENTICATION_FAILED, msg, nil)
}

// caller finds the caller of a call to method.
func (g *authGate) caller(ctx context.Context, method string) (auth.Caller, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok && !strings.HasPrefix(method, "/sluice.v1.Auth/SaslAuthenticate") {
		if v := md.Get("authorization"); len(v) > 0 {
			token, ok := strings.CutPrefix(v[0], "Bearer ")
			if !ok {
				return auth.Caller{}, g.refuse(ctx, "token_unsupported", "the authorization metadata must be `Bearer <token>`", nil)
			}
			if !auth.IsSessionToken(token) {
				if g.jwt == nil {
					return auth.Caller{}, g.refuse(ctx, "token_unsupported", "bearer token not accepted: this broker takes Sluice session tokens (SaslAuthenticate) only, not JWTs", nil)
				}
				c, err := g.jwt.Validate(token, time.Now())
				if err != nil {
					return auth.Caller{}, g.refuse(ctx, "jwt_invalid", "bearer token refused: invalid signature, audience, issuer or expiry", err)
				}
				return c, nil
			}
			c, err := g.authn.Session(token, time.Now())
			if err != nil {
				return auth.Caller{}, g.refuse(ctx, "session_invalid",
					"session unknown or expired, or its user deleted or given a new password: authenticate again", err)
			}
			return c, nil
		}
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.VerifiedChains) > 0 {
			pr, err := g.mapper.CertificatePrincipal(info.State.PeerCertificates[0])
			if err != nil {
				return auth.Caller{}, g.refuse(ctx, "principal_mapping", "the client certificate maps to no principal", err)
			}
			return auth.Caller{Principal: pr, Method: auth.MethodTLS}, nil
		}
	}
	c := auth.Caller{Principal: auth.Anonymous, Method: auth.MethodNone}
	if g.required && !exempt(method) {
		return auth.Caller{}, g.refuse(ctx, "anonymous", "authentication required: present a client certificate or authenticate with SCRAM (Auth.SaslAuthenticate) and send its session token", nil)
	}
	return c, nil
}

func (g *authGate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c, err := g.caller(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(auth.WithCaller(ctx, c), req)
}

func (g *authGate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, err := g.caller(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, &callerStream{ServerStream: ss, ctx: auth.WithCaller(ss.Context(), c)})
}

// callerStream is a server stream whose context carries the caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *callerStream) Context() context.Context { return s.ctx }

// serverOptions are the client listener's authentication interceptors.
func (g *authGate) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

// kafkaAuthentication is the Kafka listener's authentication (issue 34):
// the same users, JWT validation, principal mapping and requirement as
// the client listener, its refusals and logins counted in the same
// metrics, its refused TLS handshakes as the listener "kafka".
func (g *authGate) kafkaAuthentication(tlsm *tlsMaterial) kafka.Authentication {
	return kafka.Authentication{Authenticator: g.authn, JWT: g.jwt, Mapper: g.mapper, Required: g.required,
		Refused:    func(reason string) { g.failures.WithLabelValues(reason).Inc() },
		Succeeded:  func(mech string) { g.logins.WithLabelValues(mech).Inc() },
		TLSRefused: func(peer net.Addr, err error) { tlsm.refused("kafka", peer, err) }}
}

var errAuthenticationValue = errors.New("authentication must be optional or required")

// scramCredential is a user's SCRAM credential from this node's metadata
// image.
func (n *Node) scramCredential(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	c, ok := n.cache.Image().ScramCredential(user, string(m))
	if !ok {
		return auth.ScramCredential{}, false
	}
	return auth.ScramCredential{Mechanism: m, Iterations: c.Iterations, Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey}, true
}
