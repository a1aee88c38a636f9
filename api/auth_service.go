package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/internal/ratelog"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// AuthConfig configures the Auth service.
type AuthConfig struct {
	Authenticator *auth.Authenticator
	NodeID        int32
	// Required: anonymous callers are refused (told in WhoAmI).
	Required bool
	// Refused, if set, is told of each failed exchange, with a reason
	// for metrics (sasl_failed, unsupported_mechanism, not_tls).
	Refused func(reason string)
	// Succeeded, if set, is told of each completed exchange.
	Succeeded func(mechanism string)
	// MetadataLoaded, if set, says whether the broker has received
	// cluster metadata since it started: the users' credentials are in
	// it, so before it an exchange is answered LEADER_NOT_AVAILABLE
	// (retriable), not refused as for an unknown user.
	MetadataLoaded func() bool
	// Listeners says how the broker's listeners are secured (WhoAmI).
	Listeners []*sluicev1.ListenerSecurity
	Logger    *slog.Logger
	// FailedDelay holds a refused exchange's answer this long (within the
	// call's deadline): Kafka's connection.failed.authentication.delay.ms,
	// one guess per call per delay. 0: answered at once.
	FailedDelay time.Duration
}

// maxSaslMessage bounds one SCRAM message (a few hundred bytes in
// practice).
const maxSaslMessage = 64 << 10

type authService struct {
	sluicev1.UnimplementedAuthServer
	cfg  AuthConfig
	logs ratelog.Limiter // one refusal line per reason every 10 s
}

// NewAuthService returns the Auth service (SCRAM exchanges, WhoAmI).
func NewAuthService(cfg AuthConfig) sluicev1.AuthServer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &authService{cfg: cfg, logs: ratelog.Limiter{Every: 10 * time.Second}}
}

func (s *authService) refuse(reason string, code sluicev1.ErrorCode, msg string, ctx context.Context, err error) error {
	if s.cfg.Refused != nil {
		s.cfg.Refused(reason)
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	if s.logs.Allow(reason) {
		s.cfg.Logger.Info("authentication refused", "peer", addr, "reason", reason, "err", err)
	}
	if d := s.cfg.FailedDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return errs.NewStatus(codes.Unauthenticated, code, msg, nil)
}

// SaslAuthenticate implements sluicev1.AuthServer.
func (s *authService) SaslAuthenticate(ctx context.Context, req *sluicev1.SaslAuthenticateRequest) (*sluicev1.SaslAuthenticateResponse, error) {
	if _, ok := tlsState(ctx); !ok {
		return nil, s.refuse("not_tls", sluicev1.ErrorCode_SASL_AUTHENTICATION_FAILED,
			"SCRAM is served over TLS only (the session token would travel in the clear): connect with TLS", ctx, nil)
	}
	if len(req.GetAuthBytes()) > maxSaslMessage || len(req.GetMechanism()) > 64 || len(req.GetConversationId()) > 128 {
		return nil, s.refuse("sasl_failed", sluicev1.ErrorCode_SASL_AUTHENTICATION_FAILED,
			"authentication failed: a SASL message above 64 KiB", ctx, nil)
	}
	if s.cfg.MetadataLoaded != nil && !s.cfg.MetadataLoaded() {
		// As every RPC of a broker starting up (decision 24): an empty
		// image must not make a user look unknown. Found by the chaos
		// harness: after two of three nodes restarted, clients were told
		// SASL_AUTHENTICATION_FAILED (not retriable) for about a second
		// and the producers failed their records.
		return nil, errs.NewStatus(codes.Unavailable, sluicev1.ErrorCode_LEADER_NOT_AVAILABLE,
			fmt.Sprintf("broker %d has no cluster metadata yet (starting up): its users are not known yet", s.cfg.NodeID), nil)
	}
	res, err := s.cfg.Authenticator.Step(req.GetMechanism(), req.GetConversationId(), req.GetAuthBytes(), time.Now())
	switch {
	case errors.Is(err, auth.ErrUnsupportedMechanism):
		return nil, s.refuse("unsupported_mechanism", sluicev1.ErrorCode_UNSUPPORTED_SASL_MECHANISM,
			"unsupported SASL mechanism: SCRAM-SHA-256 and SCRAM-SHA-512 are served", ctx, err)
	case err != nil:
		// The caller learns no more than this (a wrong password and an
		// unknown user read the same); the log has the reason.
		return nil, s.refuse("sasl_failed", sluicev1.ErrorCode_SASL_AUTHENTICATION_FAILED,
			"authentication failed: invalid credentials, or the exchange is out of order or expired", ctx, err)
	}
	if res.Complete && s.cfg.Succeeded != nil {
		s.cfg.Succeeded(string(res.Mechanism))
	}
	return &sluicev1.SaslAuthenticateResponse{ConversationId: res.ConversationID, AuthBytes: res.Message, Complete: res.Complete,
		SessionToken: res.Token, SessionLifetimeMs: res.Lifetime.Milliseconds(), Principal: principalString(res)}, nil
}

func principalString(res auth.StepResult) string {
	if !res.Complete {
		return ""
	}
	return res.Principal.String()
}

// WhoAmI implements sluicev1.AuthServer.
func (s *authService) WhoAmI(ctx context.Context, _ *sluicev1.WhoAmIRequest) (*sluicev1.WhoAmIResponse, error) {
	c := auth.CallerFrom(ctx)
	resp := &sluicev1.WhoAmIResponse{Principal: c.Principal.String(), AuthenticatedBy: string(c.Method),
		NodeId: s.cfg.NodeID, AuthenticationRequired: s.cfg.Required, Listeners: s.cfg.Listeners}
	if st, ok := tlsState(ctx); ok {
		resp.Tls, resp.TlsVersion = true, tls.VersionName(st.Version)
	}
	return resp, nil
}

// tlsState is the TLS state of the call's connection (false: plaintext).
func tlsState(ctx context.Context) (tls.ConnectionState, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return tls.ConnectionState{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return tls.ConnectionState{}, false
	}
	return info.State, true
}
