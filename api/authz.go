package api

import (
	"context"
	"log/slog"
	"net"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Authz is the gRPC handlers' authorization (decision 63): auth.Gate
// with the caller's principal from the context (node/authn.go) and host
// from the gRPC peer. Each handler asks it for the operations
// auth.Operations lists for its RPC. Off (nil) it allows everything.
// Safe for concurrent use.
type Authz struct {
	*auth.Gate
}

// NewAuthz returns an Authz that enforces a's decisions (Set replaces
// them as the ACLs change).
func NewAuthz(a *auth.Authorizer, log *slog.Logger) *Authz {
	return &Authz{auth.NewGate(a, log)}
}

// NewAuthzLoading returns an Authz whose checks wait (bounded) for the
// first ACLs: Set, then MarkLoaded. Until then no ACL is in force.
func NewAuthzLoading(log *slog.Logger) *Authz {
	return &Authz{auth.NewGateLoading(log)}
}

// Enabled reports whether z enforces anything.
func (z *Authz) Enabled() bool { return z != nil && z.Gate.Enabled() }

// hostOf is the caller's IP address ("" if unknown).
func hostOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		// As ACLs write hosts: unmapped, without a zone.
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.WithZone("").Unmap().String()
		}
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	return host
}

// Allowed reports whether the caller of ctx may do op on r, logging and
// counting a denial (auth.Gate.Allowed).
func (z *Authz) Allowed(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	if !z.Enabled() {
		return true
	}
	return z.Gate.Allowed(ctx, auth.CallerFrom(ctx).Principal, hostOf(ctx), op, r)
}

// AllowedQuiet is Allowed without the audit line or count: for listings
// that leave out what the caller may not see (a denial there is not an
// attempt to act).
func (z *Authz) AllowedQuiet(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	if !z.Enabled() {
		return true
	}
	return z.Gate.AllowedQuiet(ctx, auth.CallerFrom(ctx).Principal, hostOf(ctx), op, r)
}

// DeniedCode is the error code of a denial on a resource of type t.
func DeniedCode(t auth.ResourceType) sluicev1.ErrorCode { return auth.DeniedCode(t) }

// DeniedMessage says what was denied, naming the resource.
func DeniedMessage(ctx context.Context, op auth.Operation, r auth.Resource) string {
	return auth.DeniedMessage(auth.CallerFrom(ctx).Principal, op, r)
}

// Require is nil when the caller may do op on r, else the request-level
// refusal: gRPC PERMISSION_DENIED with the *_AUTHORIZATION_FAILED code of
// r's type.
func (z *Authz) Require(ctx context.Context, op auth.Operation, r auth.Resource) error {
	if z.Allowed(ctx, op, r) {
		return nil
	}
	return errs.NewStatus(codes.PermissionDenied, DeniedCode(r.Type), DeniedMessage(ctx, op, r), nil)
}

// ItemError is the per-item answer to a denial: its code and message.
func ItemError(ctx context.Context, op auth.Operation, r auth.Resource) (sluicev1.ErrorCode, string) {
	return DeniedCode(r.Type), DeniedMessage(ctx, op, r)
}

// Check is nil when the caller may do op on r, else the refusal as an
// *errs.Error: the *_AUTHORIZATION_FAILED code of r's type and a message
// naming r. It is Require for the handlers that answer a request's
// failure in its response's error_code rather than in a gRPC status
// (Transactions, Groups). A denial is logged and counted as by Allowed.
func (z *Authz) Check(ctx context.Context, op auth.Operation, r auth.Resource) error {
	if z.Allowed(ctx, op, r) {
		return nil
	}
	return errs.New(DeniedCode(r.Type), "%s", DeniedMessage(ctx, op, r))
}

// AllowedAny reports whether the caller may do op on at least one
// resource of type t (auth.Gate.AllowedAny).
func (z *Authz) AllowedAny(ctx context.Context, op auth.Operation, t auth.ResourceType) bool {
	if !z.Enabled() {
		return true
	}
	return z.Gate.AllowedAny(ctx, auth.CallerFrom(ctx).Principal, hostOf(ctx), op, t)
}
