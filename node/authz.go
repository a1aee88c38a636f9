package node

import (
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
)

// newNodeAuthz is the handlers' authorization with --authorizer acl (nil
// without): it starts with no ACL (only the super users may act) and
// follows the metadata image's ACLs (refreshAuthorizer).
func newNodeAuthz(cfg Config, log *slog.Logger, reg *prometheus.Registry) *api.Authz {
	if cfg.Authorizer != AuthorizerACL {
		return nil
	}
	denials := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_authorization_denials_total",
		Help: "Operations the authorizer denied, by resource type (topic, group, transactional_id, cluster); each is logged with principal, host, operation and resource.",
	}, []string{"resource_type"})
	reg.MustRegister(denials)
	z := api.NewAuthzLoading(log)
	z.Set(auth.NewAuthorizer(nil, cfg.SuperUsers))
	z.Denied = func(t auth.ResourceType) { denials.WithLabelValues(strings.ToLower(string(t))).Inc() }
	z.AuditAllowed = cfg.AuditAllowedAdmin
	return z
}

// refreshAuthorizer rebuilds the authorizer from im's ACLs when they
// changed since the last build (their version is the offset of the last
// record that changed them): a new ACL is in force on this broker as soon
// as the metadata that holds it is applied here.
func (n *Node) refreshAuthorizer(im *controller.Image) {
	if n.authz == nil {
		return
	}
	if im.AclsVersion == n.aclsVersion.Load() {
		if im.Offset > 0 {
			n.authz.MarkLoaded() // no ACL at all: in force as it is
		}
		return
	}
	list := im.AclList()
	acls := make([]auth.ACL, len(list))
	for i, a := range list {
		acls[i] = auth.ACL{ResourceType: auth.ResourceType(a.ResourceType), Name: a.ResourceName, Pattern: auth.PatternType(a.PatternType),
			Principal: a.Principal, Host: a.Host, Operation: auth.Operation(a.Operation), Permission: auth.Permission(a.Permission)}
	}
	n.authz.Set(auth.NewAuthorizer(acls, n.cfg.SuperUsers))
	n.aclsVersion.Store(im.AclsVersion)
	n.authz.MarkLoaded()
	n.log.Info("ACLs in force", "acls", len(acls), "metadata_offset", im.AclsVersion)
}
