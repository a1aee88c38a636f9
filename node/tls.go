package node

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/internal/grpctls"
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
}

var h2 = []string{"h2"}

func newTLSMaterial(cfg Config, log *slog.Logger) (*tlsMaterial, error) {
	m := &tlsMaterial{cluster: cfg.clusterName()}
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
	return &controller.TransportTLS{Server: auth.NodeServerConfig(m.node, m.cluster, nil), Client: m.peerConfig}
}

// clientServerOptions secure the client listener.
func (m *tlsMaterial) clientServerOptions() []grpc.ServerOption {
	if !m.enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(auth.ServerConfig(m.clientCert, m.clientCAs, m.clientAuth, h2)))}
}

// internalServerOptions secure the internal listener: mutual TLS with
// node certificates of this cluster only.
func (m *tlsMaterial) internalServerOptions() []grpc.ServerOption {
	if !m.enabled() {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(auth.NodeServerConfig(m.node, m.cluster, h2)))}
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
