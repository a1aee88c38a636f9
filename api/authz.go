package api

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Authz is the public handlers' authorization (decision 63): each
// handler asks it for the operations auth.Operations lists for its RPC.
// Off (the zero Authz, or nil) it allows everything. Safe for concurrent
// use.
type Authz struct {
	on  bool
	cur atomic.Pointer[auth.Authorizer]
	// loaded is closed once the node's first metadata image has set the
	// ACLs (MarkLoaded): until then a check waits (a restarted broker
	// would otherwise deny every caller with an empty ACL set, as
	// Kafka's authorizer answers "not ready" before its initial load).
	loaded     chan struct{}
	loadedOnce sync.Once
	log        *slog.Logger
	// Denied, if set, is told of each denial (a metric by resource type).
	Denied func(auth.ResourceType)
	// AuditAllowed logs allowed operations on the cluster (admin
	// operations) too.
	AuditAllowed bool
}

// NewAuthz returns an Authz that enforces a's decisions (Set replaces
// them as the ACLs change).
func NewAuthz(a *auth.Authorizer, log *slog.Logger) *Authz {
	if log == nil {
		log = slog.Default()
	}
	z := NewAuthzLoading(log)
	z.Set(a)
	z.MarkLoaded()
	return z
}

// NewAuthzLoading returns an Authz whose checks wait (bounded) for the
// first ACLs: Set, then MarkLoaded. Until then no ACL is in force.
func NewAuthzLoading(log *slog.Logger) *Authz {
	if log == nil {
		log = slog.Default()
	}
	z := &Authz{on: true, log: log, loaded: make(chan struct{})}
	z.cur.Store(auth.NewAuthorizer(nil, nil))
	return z
}

// MarkLoaded says the ACLs of the node's metadata are in (Set has been
// called with them, or there are none): checks stop waiting.
func (z *Authz) MarkLoaded() { z.loadedOnce.Do(func() { close(z.loaded) }) }

// authzLoadWait bounds how long a check waits for the first ACLs.
const authzLoadWait = 10 * time.Second

// current is the authorizer in force, once the first ACLs are in (or
// after ctx ends or authzLoadWait passes: then the ACLs known, none,
// decide — a denial).
func (z *Authz) current(ctx context.Context) *auth.Authorizer {
	select {
	case <-z.loaded:
	default:
		t := time.NewTimer(authzLoadWait)
		select {
		case <-z.loaded:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return z.cur.Load()
}

// Set replaces the authorizer (the ACLs changed).
func (z *Authz) Set(a *auth.Authorizer) { z.cur.Store(a) }

// Enabled reports whether z enforces anything.
func (z *Authz) Enabled() bool { return z != nil && z.on }

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
// counting a denial (the audit line: principal, host, operation,
// resource).
func (z *Authz) Allowed(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	if !z.Enabled() {
		return true
	}
	c := auth.CallerFrom(ctx)
	host := hostOf(ctx)
	if z.current(ctx).Authorize(c.Principal, host, op, r) {
		if z.AuditAllowed && r.Type == auth.ResourceCluster {
			z.log.Info("authorization allowed", "principal", c.Principal.String(), "host", host, "operation", op,
				"resource_type", r.Type, "resource", r.Name)
		}
		return true
	}
	z.log.Info("authorization denied", "principal", c.Principal.String(), "host", host, "operation", op,
		"resource_type", r.Type, "resource", r.Name)
	if z.Denied != nil {
		z.Denied(r.Type)
	}
	return false
}

// AllowedQuiet is Allowed without the audit line or count: for listings
// that leave out what the caller may not see (a denial there is not an
// attempt to act).
func (z *Authz) AllowedQuiet(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	if !z.Enabled() {
		return true
	}
	return z.current(ctx).Authorize(auth.CallerFrom(ctx).Principal, hostOf(ctx), op, r)
}

// DeniedCode is the error code of a denial on a resource of type t.
func DeniedCode(t auth.ResourceType) sluicev1.ErrorCode {
	switch t {
	case auth.ResourceTopic:
		return sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED
	case auth.ResourceGroup:
		return sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED
	case auth.ResourceTransactionalID:
		return sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	}
	return sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED
}

// DeniedMessage says what was denied, naming the resource.
func DeniedMessage(ctx context.Context, op auth.Operation, r auth.Resource) string {
	return fmt.Sprintf("%s may not %s %s %q", auth.CallerFrom(ctx).Principal, strings.ToLower(strings.ReplaceAll(string(op), "_", " ")),
		strings.ToLower(strings.ReplaceAll(string(r.Type), "_", " ")), errs.Echo(r.Name))
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
// resource of type t (auth.Authorizer.AuthorizeAny, Kafka's
// authorizeByResourceType). No audit line: it is the alternative of a
// check whose denial the handler logs (InitProducerId: IDEMPOTENT_WRITE
// on the cluster, or WRITE on any topic).
func (z *Authz) AllowedAny(ctx context.Context, op auth.Operation, t auth.ResourceType) bool {
	if !z.Enabled() {
		return true
	}
	return z.current(ctx).AuthorizeAny(auth.CallerFrom(ctx).Principal, hostOf(ctx), op, t)
}
