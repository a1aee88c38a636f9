package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/grpctls"
	"github.com/sluice-io/sluice/internal/ratelog"
	"github.com/sluice-io/sluice/kafka"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// tlsMaterial is a node's TLS: the certificate files of each listener,
// reloaded when they change (auth.Reloader). Without TLS every field is
// nil and every method answers plaintext.
type tlsMaterial struct {
	cluster string
	// node: this node's certificate and the cluster CA (internal gRPC,
	// Raft, calls to the other nodes).
	node *auth.Reloader
	// clientCert is the client listener's certificate (node's unless
	// configured apart), clientCAs the CA of client certificates.
	clientCert, clientCAs *auth.Reloader
	clientAuth            auth.ClientAuth
	// http is the HTTP listener's certificate; nil: plaintext HTTP.
	http *auth.Reloader

	// refusals counts refused handshakes by listener and reason;
	// refusalLog rate-limits their log lines.
	refusals   *prometheus.CounterVec
	refusalLog *ratelog.Limiter
	log        *slog.Logger
}

var h2 = []string{"h2"}

func newTLSMaterial(cfg Config, log *slog.Logger) (*tlsMaterial, error) {
	m := &tlsMaterial{cluster: cfg.clusterName(), log: log, refusalLog: &ratelog.Limiter{Every: 10 * time.Second},
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_tls_handshake_refusals_total",
			Help: "TLS handshakes refused, by listener (client, internal, raft, kafka) and reason (not_tls, no_certificate, unknown_ca, expired, not_a_node, bad_certificate, handshake).",
		}, []string{"listener", "reason"})}
	if !cfg.TLSEnabled() {
		return m, nil
	}
	m.clientAuth, _ = auth.ParseClientAuth(cfg.ClientAuth) // validated
	var err error
	if m.node, err = auth.NewReloader(auth.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile}, log); err != nil {
		return nil, err
	}
	// A node certificate that does not name this node's cluster would be
	// refused by every peer: say so at start.
	if _, err := auth.NodeName(m.node.Leaf(), m.cluster); err != nil {
		return nil, err
	}
	m.clientCert = m.node
	if cfg.ClientTLSCertFile != "" {
		if m.clientCert, err = auth.NewReloader(auth.Files{CertFile: cfg.ClientTLSCertFile, KeyFile: cfg.ClientTLSKeyFile}, log); err != nil {
			return nil, err
		}
	}
	m.clientCAs = m.node
	if cfg.ClientTLSCAFile != "" {
		if m.clientCAs, err = auth.NewReloader(auth.Files{CAFile: cfg.ClientTLSCAFile}, log); err != nil {
			return nil, err
		}
	}
	if cfg.HTTPTLS {
		m.http = m.node
		if cfg.HTTPTLSCertFile != "" {
			if m.http, err = auth.NewReloader(auth.Files{CertFile: cfg.HTTPTLSCertFile, KeyFile: cfg.HTTPTLSKeyFile}, log); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *tlsMaterial) enabled() bool { return m.node != nil }

// peerConfig is the TLS of one connection to another node.
func (m *tlsMaterial) peerConfig() *tls.Config { return auth.NodeClientConfig(m.node, m.cluster, nil) }

// peerCredentials secure this node's gRPC calls to the other nodes (nil:
// plaintext).
func (m *tlsMaterial) peerCredentials() credentials.TransportCredentials {
	if !m.enabled() {
		return nil
	}
	return grpctls.Credentials(m.peerConfig)
}

// raft is the Raft transport's mutual TLS (nil: plaintext).
func (m *tlsMaterial) raft() *controller.TransportTLS {
	if !m.enabled() {
		return nil
	}
	return &controller.TransportTLS{Server: auth.NodeServerConfig(m.node, m.cluster, nil), Client: m.peerConfig,
		OnRefused: func(peer net.Addr, err error) { m.refused("raft", peer, err) }}
}

// clientServerOptions secure the client listener.
func (m *tlsMaterial) clientServerOptions() []grpc.ServerOption {
	if !m.enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(countingCreds{TransportCredentials: credentials.NewTLS(auth.ServerConfig(m.clientCert, m.clientCAs, m.clientAuth, h2)),
		refused: func(peer net.Addr, err error) { m.refused("client", peer, err) }})}
}

// internalServerOptions secure the internal listener: mutual TLS with
// node certificates of this cluster only.
func (m *tlsMaterial) internalServerOptions() []grpc.ServerOption {
	if !m.enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(countingCreds{TransportCredentials: credentials.NewTLS(auth.NodeServerConfig(m.node, m.cluster, h2)),
		refused: func(peer net.Addr, err error) { m.refused("internal", peer, err) }})}
}

// kafkaListener wraps the Kafka listener (issue 34) in TLS when the node
// has TLS: the client listener's certificate, client CAs and
// client-certificate policy, reloaded as theirs are, without ALPN (Kafka
// clients offer none). Package kafka does each handshake before reading
// and reports a refused one (kafkaAuthentication), counted in
// sluice_tls_handshake_refusals_total{listener="kafka"}.
func (m *tlsMaterial) kafkaListener(l net.Listener) net.Listener {
	if !m.enabled() {
		return l
	}
	return tls.NewListener(l, auth.ServerConfig(m.clientCert, m.clientCAs, m.clientAuth, nil))
}

// httpListener wraps the HTTP listener in TLS when HTTP TLS is on.
func (m *tlsMaterial) httpListener(l net.Listener) net.Listener {
	if m.http == nil {
		return l
	}
	return tls.NewListener(l, auth.ServerConfig(m.http, nil, auth.ClientAuthNone, []string{"h2", "http/1.1"}))
}

// describe says which listeners are encrypted (the start log line).
func (m *tlsMaterial) describe() string {
	if !m.enabled() {
		return "off"
	}
	parts := []string{"client(" + string(m.clientAuth) + ")", "internal(mutual)", "raft(mutual)"}
	if m.http != nil {
		parts = append(parts, "http")
	}
	return strings.Join(parts, ",")
}

// refused counts and logs (rate-limited, with the peer's address) a
// handshake listener refused.
func (m *tlsMaterial) refused(listener string, peer net.Addr, err error) {
	reason := refusalReason(err)
	m.refusals.WithLabelValues(listener, reason).Inc()
	if m.refusalLog.Allow(listener + "/" + reason) {
		m.log.Warn("TLS handshake refused", "listener", listener, "peer", peer.String(), "reason", reason, "err", err)
	}
}

// refusalReason classifies a failed server handshake.
func refusalReason(err error) string {
	var rec tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &rec):
		return "not_tls" // a plaintext client on a TLS port
	case errors.Is(err, auth.ErrNotANode):
		return "not_a_node"
	case errors.As(err, &unknown):
		return "unknown_ca"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "expired"
	case errors.As(err, &invalid):
		return "bad_certificate"
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return "no_certificate"
	}
	return "handshake"
}

// countingCreds reports each refused server handshake.
type countingCreds struct {
	credentials.TransportCredentials
	refused func(peer net.Addr, err error)
}

func (c countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.refused(conn.RemoteAddr(), err)
	}
	return out, info, err
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{TransportCredentials: c.TransportCredentials.Clone(), refused: c.refused}
}

// listeners says how each listener is secured (WhoAmI); kafkaAuth is the
// Kafka listener's authentication (nil: the node has none).
func (m *tlsMaterial) listeners(cfg Config, kafkaAuth *kafka.Authentication) []*sluicev1.ListenerSecurity {
	on := m.enabled()
	client := string(auth.ClientAuthNone)
	if on {
		client = string(m.clientAuth)
	}
	mutual := "none"
	if on {
		mutual = "mutual"
	}
	out := []*sluicev1.ListenerSecurity{
		{Name: "client", Encrypted: on, ClientAuth: client},
		{Name: "internal", Encrypted: on, ClientAuth: mutual},
	}
	if cfg.hasRole(RoleController) {
		out = append(out, &sluicev1.ListenerSecurity{Name: "raft", Encrypted: on, ClientAuth: mutual})
	}
	out = append(out, &sluicev1.ListenerSecurity{Name: "gossip", Encrypted: cfg.GossipKeyFile != "", ClientAuth: "none"})
	if cfg.HTTPListen != "" {
		out = append(out, &sluicev1.ListenerSecurity{Name: "http", Encrypted: m.http != nil, ClientAuth: "none"})
	}
	if kafkaAuth != nil {
		out = append(out, &sluicev1.ListenerSecurity{Name: "kafka", Encrypted: on, ClientAuth: client,
			SaslMechanisms: kafka.Mechanisms(*kafkaAuth, on)})
	}
	return out
}

// reloadCollector exposes the certificate files' reloads
// (sluice_tls_reloads_total{result}): a failed one keeps the last good
// files in use and is logged; a count that grows says a rotation is stuck.
type reloadCollector struct {
	m    *tlsMaterial
	desc *prometheus.Desc
}

func newReloadCollector(m *tlsMaterial) *reloadCollector {
	return &reloadCollector{m: m, desc: prometheus.NewDesc("sluice_tls_reloads_total",
		"Reloads of changed TLS certificate, key and CA files, by result (ok, failed: the last good files stay in use).",
		[]string{"result"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *reloadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *reloadCollector) Collect(ch chan<- prometheus.Metric) {
	var ok, failed int64
	seen := map[*auth.Reloader]bool{}
	for _, r := range []*auth.Reloader{c.m.node, c.m.clientCert, c.m.clientCAs, c.m.http} {
		if r == nil || seen[r] {
			continue
		}
		seen[r] = true
		ok += r.Reloads.Load()
		failed += r.ReloadFailures.Load()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(ok), "ok")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(failed), "failed")
}
