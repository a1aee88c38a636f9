package auth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// newCA makes a CA with opts and loads it.
func newCA(t *testing.T, opts CAOptions) (CA, []byte) {
	t.Helper()
	certPEM, keyPEM, err := CreateCA(opts)
	if err != nil {
		t.Fatalf("CreateCA: %v", err)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	return ca, certPEM
}

// parseCert parses a PEM certificate and checks that it goes with keyPEM.
func parseCert(t *testing.T, certPEM, keyPEM []byte) *x509.Certificate {
	t.Helper()
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("certificate and key do not pair: %v", err)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("key is not a PKCS#8 PEM block")
	}
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("no PEM CERTIFICATE block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(ca CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func verify(c *x509.Certificate, ca CA, usage x509.ExtKeyUsage) error {
	_, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// A CA is self-signed, a CA that signs only leaves, named "Sluice CA",
// valid for 10 years from an hour ago, with a random positive serial.
func TestCreateCADefaults(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	certPEM, keyPEM, err := CreateCA(CAOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM, keyPEM)
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("not a leaf-signing CA: IsCA %v, basic constraints %v, max path len %d (zero %v)", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 || c.KeyUsage&x509.KeyUsageCRLSign == 0 {
		t.Errorf("key usage %b lacks cert sign or CRL sign", c.KeyUsage)
	}
	if c.Subject.CommonName != DefaultCACommonName {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if !c.NotBefore.Equal(now.Add(-time.Hour)) || !c.NotAfter.Equal(now.Add(DefaultCAValidity)) {
		t.Errorf("valid %v to %v, want %v to %v", c.NotBefore, c.NotAfter, now.Add(-time.Hour), now.Add(DefaultCAValidity))
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
		t.Errorf("serial %v", c.SerialNumber)
	}
	certPEM, keyPEM, err = CreateCA(CAOptions{CommonName: "Other CA", Validity: 48 * time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if c := parseCert(t, certPEM, keyPEM); c.Subject.CommonName != "Other CA" || !c.NotAfter.Equal(now.Add(48*time.Hour)) {
		t.Errorf("CN %q, not after %v", c.Subject.CommonName, c.NotAfter)
	}
}

// A node certificate verifies against its CA as a server and as a client,
// names its node in its cluster, and no node in another.
func TestCreateNodeVerifiesAsServerAndClient(t *testing.T) {
	ca, _ := newCA(t, CAOptions{})
	certPEM, keyPEM, err := CreateNode(ca, NodeOptions{Cluster: "prod", Name: "n1", Hosts: []string{"n1.example.com", "10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM, keyPEM)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := verify(c, ca, u); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), DNSName: "n1.example.com"}); err != nil {
		t.Errorf("as n1.example.com: %v", err)
	}
	if c.Subject.CommonName != "n1" {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "sluice://prod/node/n1" {
		t.Errorf("URIs = %v", c.URIs)
	}
	if name, err := NodeName(c, "prod"); err != nil || name != "n1" {
		t.Errorf("NodeName(prod) = %q, %v", name, err)
	}
	if _, err := NodeName(c, "staging"); !errors.Is(err, ErrNotANode) {
		t.Errorf("NodeName(staging) = %v, want ErrNotANode", err)
	}
	if c.NotAfter.Sub(c.NotBefore) != DefaultCertValidity+time.Hour {
		t.Errorf("valid %v to %v, want a year and an hour", c.NotBefore, c.NotAfter)
	}

	// The default cluster name.
	certPEM, keyPEM, err = CreateNode(ca, NodeOptions{Name: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if name, err := NodeName(parseCert(t, certPEM, keyPEM), DefaultClusterName); err != nil || name != "n2" {
		t.Errorf("NodeName(%s) = %q, %v", DefaultClusterName, name, err)
	}
}

// A client certificate verifies as a client only, names its user and
// organization in its subject, and no node.
func TestCreateClientIsClientOnly(t *testing.T) {
	ca, _ := newCA(t, CAOptions{})
	certPEM, keyPEM, err := CreateClient(ca, ClientOptions{User: "alice", Organization: []string{"acme"}, OrganizationalUnit: []string{"payments", "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM, keyPEM)
	if err := verify(c, ca, x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("as a client: %v", err)
	}
	if err := verify(c, ca, x509.ExtKeyUsageServerAuth); err == nil {
		t.Errorf("a client certificate verifies as a server")
	}
	if c.Subject.CommonName != "alice" || !slices.Equal(c.Subject.Organization, []string{"acme"}) ||
		!slices.Equal(slices.Sorted(slices.Values(c.Subject.OrganizationalUnit)), []string{"ops", "payments"}) { // one RDN: a DER SET, sorted
		t.Errorf("subject = %v", c.Subject)
	}
	if len(c.URIs) != 0 || len(c.DNSNames) != 0 || len(c.IPAddresses) != 0 {
		t.Errorf("SANs %v %v %v, want none", c.URIs, c.DNSNames, c.IPAddresses)
	}
	if _, err := NodeName(c, DefaultClusterName); !errors.Is(err, ErrNotANode) {
		t.Errorf("NodeName = %v, want ErrNotANode", err)
	}

	for _, user := range []string{"", "bob\n", "a\x00b", "\xff"} {
		if _, _, err := CreateClient(ca, ClientOptions{User: user}); err == nil {
			t.Errorf("user %q accepted", user)
		}
	}
	if _, _, err := CreateClient(ca, ClientOptions{User: "bob", Organization: []string{"a\tb"}}); err == nil {
		t.Errorf("organization with a tab accepted")
	}
}

// A certificate of another CA does not verify.
func TestCertOfAnotherCAFails(t *testing.T) {
	ca, _ := newCA(t, CAOptions{})
	other, _ := newCA(t, CAOptions{CommonName: "Other CA"})
	certPEM, keyPEM, err := CreateNode(other, NodeOptions{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM, keyPEM)
	var unknown x509.UnknownAuthorityError
	if err := verify(c, ca, x509.ExtKeyUsageServerAuth); !errors.As(err, &unknown) {
		t.Errorf("verify = %v, want an unknown authority", err)
	}
	if err := verify(c, other, x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("against its own CA: %v", err)
	}
}

// An expired certificate, or one not yet valid, does not verify.
func TestExpiredOrNotYetValidCertFails(t *testing.T) {
	now := time.Now()
	ca, _ := newCA(t, CAOptions{Now: now.Add(-3 * 365 * 24 * time.Hour)})
	tests := []struct {
		name   string
		now    time.Time
		reason x509.InvalidReason
	}{
		{"expired", now.Add(-2 * 365 * 24 * time.Hour), x509.Expired},
		{"not yet valid", now.Add(48 * time.Hour), x509.Expired}, // Go reports both as Expired
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := CreateClient(ca, ClientOptions{User: "u", Now: tc.now})
			if err != nil {
				t.Fatal(err)
			}
			var inv x509.CertificateInvalidError
			if err := verify(parseCert(t, certPEM, keyPEM), ca, x509.ExtKeyUsageClientAuth); !errors.As(err, &inv) || inv.Reason != tc.reason {
				t.Errorf("verify = %v, want reason %v", err, tc.reason)
			}
		})
	}
}

// A certificate that would outlive its CA is refused, as is an invalid
// validity.
func TestCreateRefusesOutlivingTheCA(t *testing.T) {
	ca, _ := newCA(t, CAOptions{Validity: 30 * 24 * time.Hour})
	if _, _, err := CreateNode(ca, NodeOptions{Name: "n1"}); err == nil || !strings.Contains(err.Error(), "expires") {
		t.Errorf("a year-long node certificate from a 30-day CA: %v", err)
	}
	if _, _, err := CreateClient(ca, ClientOptions{User: "u", Validity: 24 * time.Hour}); err != nil {
		t.Errorf("a day-long client certificate: %v", err)
	}
	if _, _, err := CreateClient(ca, ClientOptions{User: "u", Validity: -time.Hour}); err == nil {
		t.Errorf("negative validity accepted")
	}
}

// LoadCA refuses a leaf certificate and a key that is not the
// certificate's, and picks the CA of its key out of a bundle.
func TestLoadCARefusesLeafAndMismatchedKey(t *testing.T) {
	caPEM, caKey, err := CreateCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherPEM, otherKey, err := CreateCA(CAOptions{CommonName: "Other CA"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(caPEM, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM, leafKey, err := CreateNode(ca, NodeOptions{Name: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(leafPEM, leafKey); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("LoadCA(leaf) = %v, want not a CA", err)
	}
	if _, err := LoadCA(caPEM, otherKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("LoadCA(mismatched key) = %v, want does not match", err)
	}
	if _, err := LoadCA(caPEM, caPEM); err == nil {
		t.Errorf("LoadCA with a certificate for a key succeeded")
	}
	if _, err := LoadCA(caKey, caKey); err == nil {
		t.Errorf("LoadCA with a key for a certificate succeeded")
	}
	bundle := append(append([]byte{}, caPEM...), otherPEM...)
	got, err := LoadCA(bundle, otherKey)
	if err != nil || got.Cert.Subject.CommonName != "Other CA" {
		t.Errorf("LoadCA(bundle, other key) = %v, %v", got.Cert, err)
	}
}

// A node certificate's hosts are its DNS names and IP addresses,
// localhost and 127.0.0.1 added unless NoLocalhost; a host that is
// neither is refused, as are a bad cluster name and node name.
func TestCreateNodeHosts(t *testing.T) {
	ca, _ := newCA(t, CAOptions{})
	certPEM, keyPEM, err := CreateNode(ca, NodeOptions{Name: "n1",
		Hosts: []string{"n1.example.com", "*.sluice.svc", "10.0.0.1", "[2001:db8::1]", "n1.example.com", " 10.0.0.1 "}})
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, certPEM, keyPEM)
	if want := []string{"n1.example.com", "*.sluice.svc", "localhost"}; !slices.Equal(c.DNSNames, want) {
		t.Errorf("DNSNames = %q, want %q", c.DNSNames, want)
	}
	wantIPs := []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("2001:db8::1"), net.ParseIP("127.0.0.1")}
	if !slices.EqualFunc(c.IPAddresses, wantIPs, net.IP.Equal) {
		t.Errorf("IPAddresses = %v, want %v", c.IPAddresses, wantIPs)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), DNSName: "10.0.0.1"}); err != nil {
		t.Errorf("as 10.0.0.1: %v", err)
	}

	certPEM, keyPEM, err = CreateNode(ca, NodeOptions{Name: "n1", Hosts: []string{"n1.example.com"}, NoLocalhost: true})
	if err != nil {
		t.Fatal(err)
	}
	c = parseCert(t, certPEM, keyPEM)
	if !slices.Equal(c.DNSNames, []string{"n1.example.com"}) || len(c.IPAddresses) != 0 {
		t.Errorf("NoLocalhost: DNSNames %q, IPAddresses %v", c.DNSNames, c.IPAddresses)
	}

	for _, h := range []string{"n1:9400", "https://n1", "", "a..b", "a b"} {
		if _, _, err := CreateNode(ca, NodeOptions{Name: "n1", Hosts: []string{h}}); err == nil {
			t.Errorf("host %q accepted", h)
		}
	}
	for _, cluster := range []string{"Prod", "-x", "a_b", strings.Repeat("a", 64)} {
		if _, _, err := CreateNode(ca, NodeOptions{Cluster: cluster, Name: "n1"}); err == nil {
			t.Errorf("cluster %q accepted", cluster)
		}
	}
	for _, name := range []string{"", "a/b", "a b", "a\nb"} {
		if _, _, err := CreateNode(ca, NodeOptions{Name: name}); err == nil {
			t.Errorf("node name %q accepted", name)
		}
	}
}

// ParseNodeURI reads back NodeURI, and nothing else.
func TestParseNodeURI(t *testing.T) {
	if c, n, ok := ParseNodeURI(NodeURI("prod", "n1")); !ok || c != "prod" || n != "n1" {
		t.Errorf("ParseNodeURI(NodeURI(prod, n1)) = %q, %q, %v", c, n, ok)
	}
	for _, s := range []string{"https://prod/node/n1", "sluice://prod/user/n1", "sluice://prod/node/", "sluice:///node/n1"} {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok := ParseNodeURI(u); ok {
			t.Errorf("ParseNodeURI(%s) ok", s)
		}
	}
}
