package auth

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Gate is the doors' authorization (decision 63): the gRPC door (api)
// and the Kafka door (kafka) ask it for the operations Operations lists
// for a request, naming the caller's principal and host. Off (the zero
// Gate, or nil) it allows everything. Safe for concurrent use.
type Gate struct {
	on  bool
	cur atomic.Pointer[Authorizer]
	// loaded is closed once the node's first metadata image has set the
	// ACLs (MarkLoaded): until then a check waits (a restarted broker
	// would otherwise deny every caller with an empty ACL set, as
	// Kafka's authorizer answers "not ready" before its initial load).
	loaded     chan struct{}
	loadedOnce sync.Once
	log        *slog.Logger
	// Denied, if set, is told of each denial (a metric by resource type).
	Denied func(ResourceType)
	// AuditAllowed logs allowed operations on the cluster (admin
	// operations) too.
	AuditAllowed bool
}

// NewGate returns a Gate that enforces a's decisions (Set replaces them
// as the ACLs change).
func NewGate(a *Authorizer, log *slog.Logger) *Gate {
	g := NewGateLoading(log)
	g.Set(a)
	g.MarkLoaded()
	return g
}

// NewGateLoading returns a Gate whose checks wait (bounded) for the first
// ACLs: Set, then MarkLoaded. Until then no ACL is in force.
func NewGateLoading(log *slog.Logger) *Gate {
	if log == nil {
		log = slog.Default()
	}
	g := &Gate{on: true, log: log, loaded: make(chan struct{})}
	g.cur.Store(NewAuthorizer(nil, nil))
	return g
}

// MarkLoaded says the ACLs of the node's metadata are in (Set has been
// called with them, or there are none): checks stop waiting.
func (g *Gate) MarkLoaded() { g.loadedOnce.Do(func() { close(g.loaded) }) }

// gateLoadWait bounds how long a check waits for the first ACLs.
const gateLoadWait = 10 * time.Second

// current is the authorizer in force, once the first ACLs are in (or
// after ctx ends or gateLoadWait passes: then the ACLs known, none,
// decide — a denial).
func (g *Gate) current(ctx context.Context) *Authorizer {
	select {
	case <-g.loaded:
	default:
		t := time.NewTimer(gateLoadWait)
		select {
		case <-g.loaded:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	return g.cur.Load()
}

// Set replaces the authorizer (the ACLs changed).
func (g *Gate) Set(a *Authorizer) { g.cur.Store(a) }

// Enabled reports whether g enforces anything.
func (g *Gate) Enabled() bool { return g != nil && g.on }

// Allowed reports whether p calling from host may do op on r, logging
// and counting a denial (the audit line: principal, host, operation,
// resource).
func (g *Gate) Allowed(ctx context.Context, p Principal, host string, op Operation, r Resource) bool {
	if !g.Enabled() {
		return true
	}
	if g.current(ctx).Authorize(p, host, op, r) {
		if g.AuditAllowed && r.Type == ResourceCluster {
			g.log.Info("authorization allowed", "principal", p.String(), "host", host, "operation", op,
				"resource_type", r.Type, "resource", r.Name)
		}
		return true
	}
	g.log.Info("authorization denied", "principal", p.String(), "host", host, "operation", op,
		"resource_type", r.Type, "resource", r.Name)
	if g.Denied != nil {
		g.Denied(r.Type)
	}
	return false
}

// AllowedQuiet is Allowed without the audit line or count: for listings
// that leave out what the caller may not see (a denial there is not an
// attempt to act).
func (g *Gate) AllowedQuiet(ctx context.Context, p Principal, host string, op Operation, r Resource) bool {
	if !g.Enabled() {
		return true
	}
	return g.current(ctx).Authorize(p, host, op, r)
}

// AllowedAny reports whether p may do op on at least one resource of type
// t (Authorizer.AuthorizeAny, Kafka's authorizeByResourceType). No audit
// line: it is the alternative of a check whose denial the handler logs
// (InitProducerId: IDEMPOTENT_WRITE on the cluster, or WRITE on any
// topic).
func (g *Gate) AllowedAny(ctx context.Context, p Principal, host string, op Operation, t ResourceType) bool {
	if !g.Enabled() {
		return true
	}
	return g.current(ctx).AuthorizeAny(p, host, op, t)
}

// Check is nil when p may do op on r, else the refusal as an *errs.Error:
// the *_AUTHORIZATION_FAILED code of r's type and a message naming r. A
// denial is logged and counted as by Allowed.
func (g *Gate) Check(ctx context.Context, p Principal, host string, op Operation, r Resource) error {
	if g.Allowed(ctx, p, host, op, r) {
		return nil
	}
	return errs.New(DeniedCode(r.Type), "%s", DeniedMessage(p, op, r))
}

// DeniedCode is the error code of a denial on a resource of type t.
func DeniedCode(t ResourceType) sluicev1.ErrorCode {
	switch t {
	case ResourceTopic:
		return sluicev1.ErrorCode_TOPIC_AUTHORIZATION_FAILED
	case ResourceGroup:
		return sluicev1.ErrorCode_GROUP_AUTHORIZATION_FAILED
	case ResourceTransactionalID:
		return sluicev1.ErrorCode_TRANSACTIONAL_ID_AUTHORIZATION_FAILED
	}
	return sluicev1.ErrorCode_CLUSTER_AUTHORIZATION_FAILED
}

// DeniedMessage says what p was denied, naming the resource.
func DeniedMessage(p Principal, op Operation, r Resource) string {
	return fmt.Sprintf("%s may not %s %s %q", p, strings.ToLower(strings.ReplaceAll(string(op), "_", " ")),
		strings.ToLower(strings.ReplaceAll(string(r.Type), "_", " ")), errs.Echo(r.Name))
}
