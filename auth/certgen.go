package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Certificate generation (sluice cert create-ca | create-node |
// create-client): a cluster's CA, node certificates that name their node
// with NodeURI, and client certificates that name a user in their
// subject's CommonName. Keys are ECDSA P-256, written as PKCS#8 PEM
// ("PRIVATE KEY"); certificates as PEM "CERTIFICATE".

const (
	// DefaultCACommonName is the subject CommonName of a CA made
	// without one.
	DefaultCACommonName = "Sluice CA"
	// DefaultCAValidity is how long a CA is valid by default: 10 years.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultCertValidity is how long a node or client certificate is
	// valid by default: 1 year.
	DefaultCertValidity = 365 * 24 * time.Hour
	// clockSkew is how far before its creation a certificate is valid
	// from, so that a peer whose clock is a little behind accepts it.
	clockSkew = time.Hour
)

// CA is a certificate authority: the certificate and the private key
// that sign node and client certificates (LoadCA).
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CAOptions are the options of CreateCA.
type CAOptions struct {
	// CommonName is the CA's subject CommonName; "" is
	// DefaultCACommonName.
	CommonName string
	// Validity is how long the CA is valid from Now; 0 is
	// DefaultCAValidity.
	Validity time.Duration
	// Now is the time the certificate is made at (zero: time.Now); it is
	// valid from Now less an hour (clock skew) to Now plus Validity.
	Now time.Time
}

// NodeOptions are the options of CreateNode.
type NodeOptions struct {
	// Cluster is the cluster name in the node URI; "" is
	// DefaultClusterName. It must pass ValidateClusterName.
	Cluster string
	// Name is the node's name: the subject CommonName and the end of the
	// node URI. Required; no '/', white space or control characters.
	Name string
	// Hosts are the names and addresses the node is reached at: each is
	// an IP address SAN if it parses as one (an IPv6 address may be in
	// brackets), else a DNS name SAN ("*.example.com" allowed).
	Hosts []string
	// NoLocalhost leaves out "localhost" and 127.0.0.1, which are
	// otherwise added to Hosts.
	NoLocalhost bool
	// Validity is how long the certificate is valid from Now; 0 is
	// DefaultCertValidity. It may not outlive the CA.
	Validity time.Duration
	// Now is as in CAOptions.
	Now time.Time
}

// ClientOptions are the options of CreateClient.
type ClientOptions struct {
	// User is the user the certificate names, its subject CommonName.
	// Required; no control characters.
	User string
	// Organization and OrganizationalUnit go into the subject (O and OU),
	// for rules that map a certificate to a principal.
	Organization       []string
	OrganizationalUnit []string
	// Validity is how long the certificate is valid from Now; 0 is
	// DefaultCertValidity. It may not outlive the CA.
	Validity time.Duration
	// Now is as in CAOptions.
	Now time.Time
}

// CreateCA makes a self-signed CA certificate and its key, both PEM.
func CreateCA(opts CAOptions) (certPEM, keyPEM []byte, err error) {
	cn := opts.CommonName
	if cn == "" {
		cn = DefaultCACommonName
	}
	if err := checkText("CA common name", cn); err != nil {
		return nil, nil, err
	}
	notBefore, notAfter, err := validity(opts.Now, opts.Validity, DefaultCAValidity)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves, not intermediate CAs
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	return create(tmpl, nil)
}

// CreateNode makes the certificate and key of node opts.Name of cluster
// opts.Cluster, signed by ca: valid for both ends of TLS (ServerAuth and
// ClientAuth: a node serves and dials its peers), with the URI SAN
// NodeURI(cluster, name) and the DNS and IP SANs of opts.Hosts.
func CreateNode(ca CA, opts NodeOptions) (certPEM, keyPEM []byte, err error) {
	cluster := opts.Cluster
	if cluster == "" {
		cluster = DefaultClusterName
	}
	if err := ValidateClusterName(cluster); err != nil {
		return nil, nil, err
	}
	if err := checkNodeName(opts.Name); err != nil {
		return nil, nil, err
	}
	hosts := opts.Hosts
	if !opts.NoLocalhost {
		hosts = append(slices.Clip(hosts), "localhost", "127.0.0.1")
	}
	dns, ips, err := splitHosts(hosts)
	if err != nil {
		return nil, nil, err
	}
	notBefore, notAfter, err := validity(opts.Now, opts.Validity, DefaultCertValidity)
	if err != nil {
		return nil, nil, err
	}
	if err := ca.check(notAfter); err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: opts.Name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:                  []*url.URL{NodeURI(cluster, opts.Name)},
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	return create(tmpl, &ca)
}

// CreateClient makes the client certificate and key of user opts.User,
// signed by ca: ClientAuth only, the user in the subject's CommonName,
// and no node URI.
func CreateClient(ca CA, opts ClientOptions) (certPEM, keyPEM []byte, err error) {
	if opts.User == "" {
		return nil, nil, errors.New("client certificate: a user name is required")
	}
	if err := checkText("user name", opts.User); err != nil {
		return nil, nil, err
	}
	for _, s := range opts.Organization {
		if err := checkText("organization", s); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range opts.OrganizationalUnit {
		if err := checkText("organizational unit", s); err != nil {
			return nil, nil, err
		}
	}
	notBefore, notAfter, err := validity(opts.Now, opts.Validity, DefaultCertValidity)
	if err != nil {
		return nil, nil, err
	}
	if err := ca.check(notAfter); err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject: pkix.Name{
			CommonName:         opts.User,
			Organization:       opts.Organization,
			OrganizationalUnit: opts.OrganizationalUnit,
		},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return create(tmpl, &ca)
}

// LoadCA parses a CA's certificate and key (PEM). certPEM may hold
// several certificates (a bundle of the old and new CA during a
// rotation): the CA is the one whose public key is keyPEM's. The key may
// be PKCS#8 ("PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS#1 ("RSA
// PRIVATE KEY"). A certificate that is not a CA, or a key that matches no
// certificate, is refused.
func LoadCA(certPEM, keyPEM []byte) (CA, error) {
	key, err := parseKey(keyPEM)
	if err != nil {
		return CA{}, fmt.Errorf("CA key: %w", err)
	}
	var certs []*x509.Certificate
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return CA{}, fmt.Errorf("CA certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return CA{}, errors.New("CA certificate: no PEM CERTIFICATE block")
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return CA{}, fmt.Errorf("CA key: unsupported key type %T", key)
	}
	for _, c := range certs {
		if !pub.Equal(c.PublicKey) {
			continue
		}
		if !c.IsCA || !c.BasicConstraintsValid {
			return CA{}, fmt.Errorf("certificate %q is not a CA (no CA basic constraint)", c.Subject.String())
		}
		if c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 {
			return CA{}, fmt.Errorf("certificate %q is not a CA (its key usage does not include certificate signing)", c.Subject.String())
		}
		return CA{Cert: c, Key: key}, nil
	}
	if len(certs) == 1 {
		return CA{}, fmt.Errorf("the CA key does not match the CA certificate %q", certs[0].Subject.String())
	}
	return CA{}, fmt.Errorf("the CA key matches none of the %d certificates", len(certs))
}

// check refuses to sign with ca a certificate valid until notAfter when
// ca is not a CA or expires before.
func (ca *CA) check(notAfter time.Time) error {
	if ca.Cert == nil || ca.Key == nil {
		return errors.New("no CA certificate or key")
	}
	if !ca.Cert.IsCA {
		return fmt.Errorf("certificate %q is not a CA", ca.Cert.Subject.String())
	}
	if notAfter.After(ca.Cert.NotAfter) {
		return fmt.Errorf("the CA %q expires at %s, before the certificate would (%s): give a shorter validity, or make a new CA",
			ca.Cert.Subject.String(), ca.Cert.NotAfter.UTC().Format(time.RFC3339), notAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

// create makes a new key and the certificate of tmpl with it, signed by
// ca (nil: self-signed), and returns both PEM-encoded.
func create(tmpl *x509.Certificate, ca *CA) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber, err = randomSerial()
	if err != nil {
		return nil, nil, err
	}
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.Cert, ca.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	return certPEM, keyPEM, nil
}

// randomSerial is a random positive serial number of up to 128 bits.
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, err
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// validity is the validity period of a certificate made at now (zero:
// time.Now) valid for d (0: def).
func validity(now time.Time, d, def time.Duration) (notBefore, notAfter time.Time, err error) {
	if d < 0 {
		return time.Time{}, time.Time{}, fmt.Errorf("validity %v: must be positive", d)
	}
	if d == 0 {
		d = def
	}
	if now.IsZero() {
		now = time.Now()
	}
	now = now.Truncate(time.Second) // certificates keep whole seconds
	return now.Add(-clockSkew), now.Add(d), nil
}

// parseKey parses the first private key block of keyPEM.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PEM private key block")
		}
		var key any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue // e.g. openssl's EC PARAMETERS
		}
		if err != nil {
			return nil, err
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported key type %T", key)
		}
		return s, nil
	}
}

// checkNodeName refuses a node name that cannot be the end of a node
// URI's path.
func checkNodeName(name string) error {
	if name == "" {
		return errors.New("node certificate: a node name is required")
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool {
		return r == '/' || unicode.IsSpace(r) || unicode.IsControl(r)
	}) {
		return fmt.Errorf("node name %q: no '/', white space or control characters", name)
	}
	return nil
}

// checkText refuses text with control characters or that is not UTF-8.
func checkText(what, s string) error {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return fmt.Errorf("%s %q: not UTF-8, or has control characters", what, s)
	}
	return nil
}

// splitHosts sorts hosts into DNS names and IP addresses, without
// duplicates, in order.
func splitHosts(hosts []string) (dns []string, ips []net.IP, err error) {
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		if err := checkDNSName(h); err != nil {
			return nil, nil, err
		}
		if !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return dns, ips, nil
}

// checkDNSName refuses a host that is neither an IP address nor a DNS
// name (a wildcard "*." first label allowed): a host:port, a URL, an
// empty name.
func checkDNSName(h string) error {
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(h) > 253 || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("host %q: not an IP address or a DNS name", h)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return fmt.Errorf("host %q: not an IP address or a DNS name (give no port or scheme)", h)
		}
	}
	return nil
}
