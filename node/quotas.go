package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
)

// newNodeQuotas is the handlers' client quota enforcement: always on (a
// cluster without quotas throttles nobody), following the metadata
// image's quotas (refreshQuotas). It registers
// sluice_quota_throttle_time_seconds_total and
// sluice_quota_throttled_requests_total, by principal and kind (produce,
// fetch, request: auth.QuotaKind).
func newNodeQuotas(cfg Config, reg *prometheus.Registry) *api.Quotas {
	throttle := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_quota_throttle_time_seconds_total",
		Help: "Time this broker held answers of callers over their client quotas, by principal and kind (produce, fetch, request). Principals are those with a quota of their own or under a default.",
	}, []string{"principal", "kind"})
	throttled := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_quota_throttled_requests_total",
		Help: "Answers this broker throttled for client quotas, by principal and kind (produce, fetch, request).",
	}, []string{"principal", "kind"})
	reg.MustRegister(throttle, throttled)
	q := api.NewQuotas(auth.NewQuotaManager(auth.QuotaConfig{Samples: cfg.QuotaWindowSamples, SampleWindow: cfg.QuotaWindowSize}), nil)
	q.Throttled = func(principal string, kind auth.QuotaKind, d time.Duration) {
		throttle.WithLabelValues(principal, kind.String()).Add(d.Seconds())
		throttled.WithLabelValues(principal, kind.String()).Inc()
	}
	return q
}

// quotaTable indexes im's quotas for the quota manager.
func quotaTable(im *controller.Image) *auth.QuotaTable {
	limits := map[auth.QuotaEntity]auth.QuotaLimits{}
	for k, v := range im.ClientQuotas {
		e := auth.QuotaEntity{User: auth.QuotaName(k.Entity.User), ClientID: auth.QuotaName(k.Entity.ClientID)}
		l := limits[e]
		switch k.Key {
		case controller.QuotaProducerByteRate:
			l[auth.QuotaProduce] = v
		case controller.QuotaConsumerByteRate:
			l[auth.QuotaFetch] = v
		case controller.QuotaRequestPercentage:
			l[auth.QuotaRequest] = v
		}
		limits[e] = l
	}
	return auth.NewQuotaTable(limits)
}

// refreshQuotas rebuilds the quota table from im's quotas when they
// changed since the last build (QuotasVersion): a quota is in force on
// this broker as soon as the metadata that holds it is applied here.
func (n *Node) refreshQuotas(im *controller.Image) {
	if n.quotas == nil || im.QuotasVersion == n.quotasVersion.Load() {
		return
	}
	t := quotaTable(im)
	n.quotas.Set(t)
	n.quotasVersion.Store(im.QuotasVersion)
	n.log.Info("client quotas in force", "entities", t.Len(), "metadata_offset", im.QuotasVersion)
}
