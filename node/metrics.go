package node

import (
	"log/slog"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-io/sluice/cluster/controller"
)

// metrics is a node's Prometheus registry and the metrics the node
// updates itself (gRPC and Kafka requests, ISR changes); the rest is read at scrape
// time by stateCollector. Each node has its own registry, never the
// global default one: tests run several nodes in one process. See
// docs/operations.md, "Health and metrics", for every name.
type metrics struct {
	reg   *prometheus.Registry
	grpc  *grpcMetrics
	kafka *kafkaMetrics // the Kafka door's (kafka.Config.Metrics)

	isrShrinks prometheus.Counter
	isrExpands prometheus.Counter
	// prevImage is the last image observeImage saw; owned by the
	// metadata goroutine that calls it (BrokerConfig.OnImage).
	prevImage *controller.Image
}

// newMetrics builds n's registry: the Go runtime and process collectors,
// the gRPC and Kafka request metrics, the ISR change counters and n's
// stateCollector. Call it before the gRPC and Kafka servers are built
// (the interceptors and kafka.Config.Metrics use the result).
func newMetrics(n *Node) *metrics {
	m := &metrics{
		reg:   prometheus.NewRegistry(),
		grpc:  newGRPCMetrics(),
		kafka: newKafkaMetrics(),
		isrShrinks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_isr_shrinks_total",
			Help: "ISR changes that removed a replica, of partitions this broker leads, as this broker applied them from the metadata log (AlterPartition after replica.lag.time.max.ms, or the controller fencing a follower's broker).",
		}),
		isrExpands: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_isr_expands_total",
			Help: "ISR changes that added a replica (a follower caught up), of partitions this broker leads, as this broker applied them from the metadata log.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.isrShrinks, m.isrExpands, n.tls.refusals, newReloadCollector(n.tls),
		newStateCollector(n), newLimitsCollector(n),
	)
	m.reg.MustRegister(m.grpc.collectors()...)
	m.reg.MustRegister(m.kafka.collectors()...)
	return m
}

// handler serves the registry in the Prometheus text (or negotiated)
// format. A collector's error is logged and the rest still served.
func (m *metrics) handler(logger *slog.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// observeImage counts the ISR changes between the previous image and im
// of the partitions self leads in both (sluice_isr_shrinks_total,
// sluice_isr_expands_total). Call it from the goroutine that applies
// images, after each; the first call only remembers im. Changes the
// metadata stream delivers in one update are seen as one.
func (m *metrics) observeImage(self int32, im *controller.Image) {
	if m.prevImage != nil {
		shrinks, expands := isrChanges(m.prevImage, im, self)
		m.isrShrinks.Add(float64(shrinks))
		m.isrExpands.Add(float64(expands))
	}
	m.prevImage = im
}

// isrChanges compares each partition's ISR in prev and next, for the
// partitions self leads in both with the same leader epoch (a new leader
// starts from the ISR it was elected with: that is an election, not an
// ISR change of this leader's). It returns how many partitions lost a
// replica from the ISR and how many gained one (a partition whose ISR
// did both counts in each). Pure.
func isrChanges(prev, next *controller.Image, self int32) (shrinks, expands int) {
	for name, t := range next.Topics {
		pt := prev.Topics[name]
		if pt == nil || pt == t || pt.ID != t.ID {
			continue // new, or untouched (copy-on-write images share it)
		}
		for i, p := range t.Partitions {
			if i >= len(pt.Partitions) {
				break
			}
			q := pt.Partitions[i]
			if p == q || p.Leader != self || q.Leader != self || p.LeaderEpoch != q.LeaderEpoch {
				continue
			}
			if slices.ContainsFunc(q.ISR, func(id int32) bool { return !slices.Contains(p.ISR, id) }) {
				shrinks++
			}
			if slices.ContainsFunc(p.ISR, func(id int32) bool { return !slices.Contains(q.ISR, id) }) {
				expands++
			}
		}
	}
	return shrinks, expands
}
