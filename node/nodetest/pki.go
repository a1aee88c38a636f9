package nodetest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node"
)

// PKI is a test cluster's certificates (auth's certgen, as `sluice cert`
// makes them), written as PEM files in a temporary directory: a CA
// (ca.crt, ca.key), node certificates naming a cluster, client
// certificates naming a user.
type PKI struct {
	t   testing.TB
	dir string
	// CA signs the certificates unless a method is given another.
	CA auth.CA
}

// NewPKI writes a CA ("ca") in a new temporary directory.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{t: t, dir: t.TempDir()}
	p.CA = p.WriteCA("ca")
	return p
}

// Path is the path of the file name in p's directory.
func (p *PKI) Path(name string) string { return filepath.Join(p.dir, name) }

// Write writes name.crt and name.key (failing the test on err), each
// replaced as Kubernetes replaces a mounted Secret's files: written
// aside, then renamed.
func (p *PKI) Write(name string, certPEM, keyPEM []byte, err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{name + ".crt", certPEM}, {name + ".key", keyPEM}} {
		tmp := p.Path(f.name + ".tmp")
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			p.t.Fatal(err)
		}
		if err := os.Rename(tmp, p.Path(f.name)); err != nil {
			p.t.Fatal(err)
		}
	}
}

// WriteCA writes a new CA as name.crt and name.key and returns it.
func (p *PKI) WriteCA(name string) auth.CA {
	p.t.Helper()
	certPEM, keyPEM, err := auth.CreateCA(auth.CAOptions{CommonName: name})
	p.Write(name, certPEM, keyPEM, err)
	ca, err := auth.LoadCA(certPEM, keyPEM)
	if err != nil {
		p.t.Fatal(err)
	}
	return ca
}

// Node writes a node certificate of cluster signed by ca as name.crt and
// name.key.
func (p *PKI) Node(name, cluster string, ca auth.CA) {
	p.t.Helper()
	c, k, err := auth.CreateNode(ca, auth.NodeOptions{Cluster: cluster, Name: name})
	p.Write(name, c, k, err)
}

// Client writes a client certificate of user name (CN=name), signed by ca
// and valid for an hour from now (time.Now when zero), as name.crt and
// name.key.
func (p *PKI) Client(name string, ca auth.CA, now time.Time) {
	p.t.Helper()
	c, k, err := auth.CreateClient(ca, auth.ClientOptions{User: name, Now: now, Validity: time.Hour})
	p.Write(name, c, k, err)
}

// UseTLS points cfg at the node certificate name and the CA.
func (p *PKI) UseTLS(cfg *node.Config, name string) {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = p.Path(name+".crt"), p.Path(name+".key"), p.Path("ca.crt")
}

// ClientTLS is a client configuration trusting the CA, presenting the
// client certificate cert unless cert is "".
func (p *PKI) ClientTLS(cert string) *tls.Config {
	p.t.Helper()
	crt, key := "", ""
	if cert != "" {
		crt, key = p.Path(cert+".crt"), p.Path(cert+".key")
	}
	cfg, err := client.LoadTLSConfig(p.Path("ca.crt"), crt, key)
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}
