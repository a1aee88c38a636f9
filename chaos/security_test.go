package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/sluice-io/sluice/auth"
)

func TestParseSecurity(t *testing.T) {
	for in, want := range map[string]Security{"": SecurityNone, "none": SecurityNone, "tls": SecurityTLS, "tls+scram": SecurityTLSSCRAM, "tls+scram+acl": SecurityTLSSCRAMACL} {
		got, err := ParseSecurity(in)
		if err != nil || got != want {
			t.Errorf("ParseSecurity(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseSecurity("scram"); err == nil {
		t.Error("ParseSecurity(scram): no error")
	}
}

// TestPKIOfASecuredRun checks the run's certificates (each node's names
// the chaos cluster and 127.0.0.1, signed by the run's CA), that keys and
// the password are readable by the owner only, and that what a copier
// member process is given (its JSON configuration, in its environment)
// names the password file but holds no secret.
func TestPKIOfASecuredRun(t *testing.T) {
	dir := t.TempDir()
	p, err := newPKI(dir, SecurityTLSSCRAM, []int32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	caPEM, err := os.ReadFile(p.caFile)
	if err != nil || !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA file: %v", err)
	}
	for id := int32(1); id <= 3; id++ {
		cert := readCert(t, p.nodeCert[id])
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("node %d certificate: %v", id, err)
		}
		if name, err := auth.NodeName(cert, chaosClusterName); err != nil || name != fmt.Sprintf("node-%d", id) {
			t.Errorf("node %d certificate names node %q (%v)", id, name, err)
		}
	}
	if _, err := auth.NodeName(readCert(t, p.adminCert), chaosClusterName); err == nil {
		t.Error("the harness's client certificate names a node")
	}
	for _, f := range []string{p.nodeKey[1], p.adminKey, p.gossipKeyFile, p.passwordFile} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	wc := DefaultConfig().Workload
	wc.Security = p.clientSecurity()
	raw, err := json.Marshal(memberConfig{Addrs: []string{"127.0.0.1:1"}, Workload: wc})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), p.password) || !strings.Contains(string(raw), p.passwordFile) {
		t.Errorf("member configuration %s: want the password file's name, not the password", raw)
	}
	for _, a := range append(p.args(), p.nodeArgs(1)...) {
		if strings.Contains(a, p.password) {
			t.Errorf("node flag %q carries the password", a)
		}
	}
	if _, err := wc.Security.options(); err != nil {
		t.Errorf("client options: %v", err)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The franz-go clients of a tls+scram run authenticate as the run's
// SCRAM user by SCRAM-SHA-256 and SCRAM-SHA-512 in turn, as the gRPC
// clients do, and a client with a dialer of its own (the Kafka copier's)
// gets TLS through it: a node's certificate verifies against the run's
// CA, another run's CA refuses it.
func TestKafkaClientsOfASecuredRun(t *testing.T) {
	p, ks := kafkaSecurityOf(t, SecurityTLSSCRAM)
	if ks.tls == nil || ks.pass != p.password {
		t.Fatalf("kafka security %+v: want TLS and the run's password", ks)
	}
	seen := map[string]int{}
	for range 4 {
		cl, err := kgo.NewClient(append(ks.opts(nil), kgo.SeedBrokers("127.0.0.1:1"))...)
		if err != nil {
			t.Fatal(err)
		}
		mechs := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
		cl.Close()
		if len(mechs) != 1 {
			t.Fatalf("%d SASL mechanisms", len(mechs))
		}
		seen[mechs[0].Name()]++
	}
	if seen["SCRAM-SHA-256"] != 2 || seen["SCRAM-SHA-512"] != 2 {
		t.Errorf("mechanisms of 4 clients: %v", seen)
	}

	cert, err := tls.LoadX509KeyPair(p.nodeCert[1], p.nodeKey[1])
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	var d net.Dialer
	plain := func(ctx context.Context, network, host string) (net.Conn, error) {
		return d.DialContext(ctx, network, host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ks.tlsOver(plain)(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("TLS through the client's dialer: %v", err)
	}
	if st := c.(*tls.Conn).ConnectionState(); !st.HandshakeComplete || len(st.VerifiedChains) == 0 {
		t.Errorf("connection state %+v", st)
	}
	c.Close()
	_, oks := kafkaSecurityOf(t, SecurityTLS)
	if oks.pass != "" {
		t.Error("a tls run's Kafka clients have a SCRAM password")
	}
	if c, err := oks.tlsOver(plain)(ctx, "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("a node certificate of another CA accepted")
	}
}

// kafkaSecurityOf makes a PKI of mode for one node and its Kafka clients'
// security.
func kafkaSecurityOf(t *testing.T, mode Security) (*pki, kafkaSecurity) {
	t.Helper()
	p, err := newPKI(t.TempDir(), mode, []int32{1})
	if err != nil {
		t.Fatal(err)
	}
	ks, err := p.clientSecurity().kafka()
	if err != nil {
		t.Fatal(err)
	}
	return p, ks
}
