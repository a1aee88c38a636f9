package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Files are the PEM files of one TLS identity: a certificate (chain) and
// its key, and a CA bundle that verifies the other side. Either half may
// be empty (a listener that verifies no client has no CA; a CA-only
// bundle presents nothing).
type Files struct {
	CertFile, KeyFile string
	CAFile            string
}

// reloadCheckEvery is how often, at most, a Reloader looks at its files
// again (on use: a handshake asks for the certificate).
const reloadCheckEvery = time.Second

// Reloader holds what Files hold, read again when the files change
// (Kubernetes replaces a mounted Secret's files in place): a handshake
// after the change uses the new certificate and CA, connections open
// keep theirs. A change that does not load (a certificate written before
// its key, a broken file) keeps the last good pair and is logged; it is
// tried again at the next check. Safe for concurrent use.
type Reloader struct {
	files Files
	log   *slog.Logger

	mu      sync.Mutex // guards the following
	checked time.Time
	stamps  [3]fileStamp
	failed  string // the last reload failure logged (not repeated)

	cur atomic.Pointer[loaded]

	// Reloads and ReloadFailures count loads after the first.
	Reloads, ReloadFailures atomic.Int64
}

// loaded is one good load of the files.
type loaded struct {
	cert *tls.Certificate // nil without CertFile
	leaf *x509.Certificate
	pool *x509.CertPool // nil without CAFile
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader loads f, failing if any named file does not load.
func NewReloader(f Files, log *slog.Logger) (*Reloader, error) {
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("a TLS certificate file needs its key file, and a key file its certificate")
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{files: f, log: log}
	stamps := r.stat()
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	r.stamps, r.checked = stamps, time.Now()
	r.cur.Store(l)
	return r, nil
}

func (r *Reloader) stat() (s [3]fileStamp) {
	for i, name := range []string{r.files.CertFile, r.files.KeyFile, r.files.CAFile} {
		if name == "" {
			continue
		}
		if fi, err := os.Stat(name); err == nil {
			s[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		}
	}
	return s
}

func (r *Reloader) load() (*loaded, error) {
	l := &loaded{}
	if r.files.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate %s, key %s: %w", r.files.CertFile, r.files.KeyFile, err)
		}
		l.cert, l.leaf = &cert, cert.Leaf
	}
	if r.files.CAFile != "" {
		pem, err := os.ReadFile(r.files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", r.files.CAFile)
		}
		l.pool = pool
	}
	return l, nil
}

// current is the files' content, read again first if they changed and
// the last check is reloadCheckEvery old.
func (r *Reloader) current() *loaded {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= reloadCheckEvery {
		r.checked = now
		if s := r.stat(); s != r.stamps {
			l, err := r.load()
			if err != nil {
				r.ReloadFailures.Add(1)
				if msg := err.Error(); msg != r.failed {
					r.failed = msg
					r.log.Error("TLS files changed but do not load; the last good ones stay in use", "err", err)
				}
			} else {
				r.stamps, r.failed = s, ""
				r.cur.Store(l)
				r.Reloads.Add(1)
				r.log.Info("TLS files reloaded", "cert", r.files.CertFile, "ca", r.files.CAFile, "not_after", notAfter(l.leaf))
			}
		}
	}
	return r.cur.Load()
}

func notAfter(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	return c.NotAfter.UTC().Format(time.RFC3339)
}

// Certificate is the certificate to present now (nil without one).
func (r *Reloader) Certificate() *tls.Certificate { return r.current().cert }

// Leaf is the parsed certificate presented now (nil without one).
func (r *Reloader) Leaf() *x509.Certificate { return r.current().leaf }

// Pool is the CA pool in force now (nil without a CA file).
func (r *Reloader) Pool() *x509.CertPool { return r.current().pool }

// ClientAuth is how a listener asks for client certificates, as Kafka's
// ssl.client.auth: none, requested (verified if given) or required.
type ClientAuth string

// ClientAuth values.
const (
	ClientAuthNone    ClientAuth = "none"
	ClientAuthRequest ClientAuth = "request"
	ClientAuthRequire ClientAuth = "require"
)

// ParseClientAuth parses a ClientAuth ("" is none).
func ParseClientAuth(s string) (ClientAuth, error) {
	switch ClientAuth(s) {
	case "", ClientAuthNone:
		return ClientAuthNone, nil
	case ClientAuthRequest, ClientAuthRequire:
		return ClientAuth(s), nil
	}
	return "", fmt.Errorf("client auth %q: want none, request or require", s)
}

func (a ClientAuth) tlsType() tls.ClientAuthType {
	switch a {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// ServerConfig is the configuration of a listener presenting cert's
// certificate and verifying client certificates (as auth asks) against
// clientCAs' pool, both as they are at each handshake. nextProtos is the
// ALPN list ("h2" for gRPC).
func ServerConfig(cert, clientCAs *Reloader, auth ClientAuth, nextProtos []string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos, ClientAuth: auth.tlsType()}
			if l := cert.current(); l.cert != nil {
				c.Certificates = []tls.Certificate{*l.cert}
			}
			if auth != ClientAuthNone && clientCAs != nil {
				c.ClientCAs = clientCAs.Pool()
			}
			return c, nil
		},
	}
}

// NodeServerConfig is the configuration of a node's inter-node listener
// (internal gRPC, Raft): mutual TLS, the peer's certificate from the CA of
// node's files naming a node of cluster.
func NodeServerConfig(node *Reloader, cluster string, nextProtos []string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := node.current()
			c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos,
				ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: l.pool,
				VerifyConnection: func(cs tls.ConnectionState) error { return verifyNodePeer(cs, cluster) }}
			if l.cert != nil {
				c.Certificates = []tls.Certificate{*l.cert}
			}
			return c, nil
		},
	}
}

// NodeClientConfig is the configuration of one connection from this
// node to another node's inter-node listener, with node's files as they
// are now: this node's certificate presented, the peer's verified against
// the cluster CA and required to name a node of cluster. The peer's host
// name is not checked: nodes are dialed at whatever address they
// advertise, and their identity is the node URI (as SPIFFE does).
func NodeClientConfig(node *Reloader, cluster string, nextProtos []string) *tls.Config {
	l := node.current()
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		// Verification is VerifyConnection's: the chain against the
		// pool, without a host name, then the node URI.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyChain(cs, l.pool, x509.ExtKeyUsageServerAuth); err != nil {
				return err
			}
			return verifyNodePeer(cs, cluster)
		},
	}
	if l.cert != nil {
		c.Certificates = []tls.Certificate{*l.cert}
	}
	return c
}

// verifyChain verifies the peer's chain against pool for usage.
func verifyChain(cs tls.ConnectionState, pool *x509.CertPool, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// verifyNodePeer checks that the peer's (verified) certificate names a
// node of cluster.
func verifyNodePeer(cs tls.ConnectionState, cluster string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer presented no certificate")
	}
	_, err := NodeName(cs.PeerCertificates[0], cluster)
	return err
}
