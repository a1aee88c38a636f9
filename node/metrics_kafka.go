package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/kafka"
)

// kafkaMetrics are the Kafka door's request metrics (kafka.Metrics): the
// counterpart of grpcMetrics for the second door. The label api is
// Kafka's name of an API the door serves (kafka.APIName), each resolved
// once when the Kafka server is built (kafka.Metrics.API); outcome,
// reason and code are bounded by package kafka's enums and Kafka's error
// table. Safe for concurrent use.
type kafkaMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	received prometheus.Counter
	sent     prometheus.Counter
	closed   [kafka.NumCloseReasons]prometheus.Counter
	closedBy *prometheus.CounterVec
}

// newKafkaMetrics creates the metrics, unregistered (see collectors),
// with a series at 0 for each close reason.
func newKafkaMetrics() *kafkaMetrics {
	m := &kafkaMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_kafka_requests_total",
			Help: "Requests read on the Kafka listener per API (Kafka's name) and outcome: ok (answered without an error code; an acks=0 produce done), error (answered with an error code: sluice_kafka_errors_total), refused (not admitted by authentication: the connection closed instead), closed (the connection closed before the answer was written).",
		}, []string{"api", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_kafka_request_duration_seconds",
			Help:    "Time to answer a Kafka request per API, from its frame read whole to its answer written to the connection (queueing behind the connection's earlier requests, acks=all and long-poll waits and quota holds included); requests answered ok or with an error.",
			Buckets: requestDurationBuckets,
		}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_kafka_errors_total",
			Help: "Error codes in the Kafka listener's answers per API and code (Kafka's name): each at an answer's top, per topic or resource and per partition, as Kafka's ErrorsPerSec counts them.",
		}, []string{"api", "code"}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_kafka_received_bytes_total",
			Help: "Bytes of the request frames read whole on the Kafka listener (size prefix included; TLS records not counted), served or refused.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_kafka_sent_bytes_total",
			Help: "Bytes of the answer frames the Kafka listener wrote (size prefix included; TLS records not counted).",
		}),
		closedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_kafka_connections_closed_total",
			Help: "Kafka connections the broker closed because of the client, per reason: too_large (a frame over socket.request.max.bytes), malformed, unknown_api, unsupported_version, authentication, tls_handshake, setup_timeout, idle_timeout, over_limits (a request over the request limits). Closes by the client and at shutdown are not counted.",
		}, []string{"reason"}),
	}
	for _, r := range kafka.CloseReasons {
		m.closed[r] = m.closedBy.WithLabelValues(r.String())
	}
	return m
}

// collectors lists every metric of m, for registration.
func (m *kafkaMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.errors, m.received, m.sent, m.closedBy}
}

// API resolves the series of one API (each outcome's counter at 0).
func (m *kafkaMetrics) API(name string) kafka.APIMeter {
	a := &kafkaAPIMetrics{duration: m.duration.WithLabelValues(name), errors: m.errors.MustCurryWith(prometheus.Labels{"api": name})}
	for o := range kafka.NumOutcomes {
		a.requests[o] = m.requests.WithLabelValues(name, o.String())
	}
	return a
}

// Received implements kafka.Metrics.
func (m *kafkaMetrics) Received(n int) { m.received.Add(float64(n)) }

// Sent implements kafka.Metrics.
func (m *kafkaMetrics) Sent(n int) { m.sent.Add(float64(n)) }

// Closed implements kafka.Metrics.
func (m *kafkaMetrics) Closed(r kafka.CloseReason) {
	if int(r) < len(m.closed) && m.closed[r] != nil {
		m.closed[r].Inc()
	}
}

// kafkaAPIMetrics are one API's series.
type kafkaAPIMetrics struct {
	requests [kafka.NumOutcomes]prometheus.Counter
	duration prometheus.Observer
	errors   *prometheus.CounterVec // curried with the API
}

// Done implements kafka.APIMeter.
func (a *kafkaAPIMetrics) Done(o kafka.Outcome, took time.Duration) {
	if o >= kafka.NumOutcomes {
		return
	}
	a.requests[o].Inc()
	if o == kafka.OutcomeOK || o == kafka.OutcomeError {
		a.duration.Observe(took.Seconds())
	}
}

// Errors implements kafka.APIMeter. Only answers with errors get here:
// the series is looked up per call.
func (a *kafkaAPIMetrics) Errors(code string, n int) {
	a.errors.WithLabelValues(code).Add(float64(n))
}
