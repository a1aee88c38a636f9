package node

import (
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
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
	z := api.NewAuthz(auth.NewAuthorizer(nil, cfg.SuperUsers), log)
	z.Denied = func(t auth.ResourceType) { denials.WithLabelValues(strings.ToLower(string(t))).Inc() }
	z.AuditAllowed = cfg.AuditAllowedAdmin
	return z
}
