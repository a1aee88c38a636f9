package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-io/sluice/auth"
)

const certUsage = `usage: sluice cert COMMAND [ARGS]

Commands:
  create-ca --certs-dir DIR [--ca-key-file F] [--validity D] [--overwrite]
      a new certificate authority: DIR/ca.crt and its key (DIR/ca.key, or
      --ca-key-file: keep it apart from the nodes)
  create-node --certs-dir DIR --name NAME [--cluster-name C] [--host H]... [--hosts H,H]
              [--no-localhost] [--validity D] [--cert-file F] [--key-file F] [--overwrite]
      a node's certificate and key, signed by DIR/ca.crt and its key:
      DIR/node.crt and DIR/node.key
  create-client --certs-dir DIR --name USER [--org O]... [--ou U]... [--validity D]
                [--cert-file F] [--key-file F] [--overwrite]
      a user's client certificate and key, signed by the CA:
      DIR/client.USER.crt and DIR/client.USER.key
  list --certs-dir DIR
      every certificate of DIR (*.crt): what it is, whom it names, when it expires

Files are written whole (a temporary file renamed), certificates 0644 and keys
0600; an existing file is replaced only with --overwrite.

Run "sluice cert COMMAND --help" for a command's flags.
`

func (e *env) cert(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "cert", certUsage, args, map[string]func(context.Context, []string) error{
		"create-ca":     e.certCreateCA,
		"create-node":   e.certCreateNode,
		"create-client": e.certCreateClient,
		"list":          e.certList,
	})
}

// certFlags are the flags every cert create command has.
type certFlags struct {
	cmd       string
	dir       string
	caKey     string
	validity  time.Duration
	overwrite bool
}

func (c *certFlags) register(fs *flag.FlagSet, validity time.Duration) {
	c.cmd = "cert " + fs.Name()
	fs.StringVar(&c.dir, "certs-dir", "", "`DIR`, the directory of the certificates (required; created if missing)")
	fs.StringVar(&c.caKey, "ca-key-file", "", "the CA's key `file` (default DIR/ca.key)")
	fs.DurationVar(&c.validity, "validity", validity, "how long the certificate is valid")
	fs.BoolVar(&c.overwrite, "overwrite", false, "replace existing files")
}

func (c *certFlags) check() error {
	if c.dir == "" {
		return fmt.Errorf("%s: --certs-dir is required", c.cmd)
	}
	if c.validity <= 0 {
		return fmt.Errorf("%s: --validity must be > 0, got %v", c.cmd, c.validity)
	}
	return nil
}

func (c *certFlags) caKeyFile() string {
	if c.caKey != "" {
		return c.caKey
	}
	return filepath.Join(c.dir, "ca.key")
}

// loadCA reads DIR/ca.crt and the CA key.
func (c *certFlags) loadCA() (auth.CA, error) {
	crt := filepath.Join(c.dir, "ca.crt")
	certPEM, err := os.ReadFile(crt)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return auth.CA{}, fmt.Errorf("%s: no CA certificate %s (make one with sluice cert create-ca)", c.cmd, crt)
		}
		return auth.CA{}, fmt.Errorf("%s: %w", c.cmd, err)
	}
	keyPEM, err := os.ReadFile(c.caKeyFile())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return auth.CA{}, fmt.Errorf("%s: no CA key %s (give --ca-key-file)", c.cmd, c.caKeyFile())
		}
		return auth.CA{}, fmt.Errorf("%s: %w", c.cmd, err)
	}
	ca, err := auth.LoadCA(certPEM, keyPEM)
	if err != nil {
		return auth.CA{}, fmt.Errorf("%s: %s and %s: %w", c.cmd, crt, c.caKeyFile(), err)
	}
	return ca, nil
}

// write writes a key and its certificate (key first: a reader that
// watches the certificate finds its key there), refusing to replace
// either unless --overwrite; both are checked before either is written.
func (c *certFlags) write(e *env, keyPath string, keyPEM []byte, certPath string, certPEM []byte, what string) error {
	if err := c.checkPaths(keyPath, certPath); err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600, c.overwrite); err != nil {
		return fmt.Errorf("%s: %w", c.cmd, err)
	}
	fmt.Fprintf(e.stdout, "wrote %s\n", keyPath)
	if err := writeFileAtomic(certPath, certPEM, 0o644, c.overwrite); err != nil {
		return fmt.Errorf("%s: %w", c.cmd, err)
	}
	fmt.Fprintf(e.stdout, "wrote %s (%s)\n", certPath, what)
	return nil
}

// checkPaths refuses output paths that exist (unless --overwrite) or are
// the same file.
func (c *certFlags) checkPaths(paths ...string) error {
	for i, p := range paths {
		for _, q := range paths[:i] {
			if filepath.Clean(p) == filepath.Clean(q) {
				return fmt.Errorf("%s: the certificate and the key would both be %s", c.cmd, p)
			}
		}
		if c.overwrite {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s: %s already exists (give --overwrite to replace it)", c.cmd, p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", c.cmd, err)
		}
	}
	return nil
}

func (e *env) certCreateCA(_ context.Context, args []string) error {
	fs := e.newFlags("create-ca", "cert create-ca --certs-dir DIR [--ca-key-file F] [--validity D] [--overwrite]\n\n"+
		"Makes a certificate authority: DIR/ca.crt (0644) and its key, DIR/ca.key or --ca-key-file (0600).\n"+
		"The CA signs node and client certificates; whoever holds its key can make them: keep it apart from\n"+
		"the nodes (--ca-key-file) once they have their certificates.")
	var c certFlags
	c.register(fs, auth.DefaultCAValidity)
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	certPath, keyPath := filepath.Join(c.dir, "ca.crt"), c.caKeyFile()
	if err := c.checkPaths(keyPath, certPath); err != nil {
		return err
	}
	certPEM, keyPEM, err := auth.CreateCA(auth.CAOptions{Validity: c.validity})
	if err != nil {
		return fmt.Errorf("%s: %w", c.cmd, err)
	}
	return c.write(e, keyPath, keyPEM, certPath, certPEM, describeCertPEM(certPEM))
}

func (e *env) certCreateNode(_ context.Context, args []string) error {
	fs := e.newFlags("create-node", "cert create-node --certs-dir DIR --name NAME [--cluster-name C] [--host H]... [--hosts H,H]\n"+
		"                 [--no-localhost] [--validity D] [--cert-file F] [--key-file F] [--overwrite]\n\n"+
		"Makes a node's certificate and key, signed by the CA of DIR/ca.crt and its key: DIR/node.crt (0644)\n"+
		"and DIR/node.key (0600). The certificate names the node sluice://CLUSTER/node/NAME and is valid\n"+
		"for serving and for dialing other nodes; --host names and addresses (and localhost, 127.0.0.1)\n"+
		"are those clients may reach it at.")
	var c certFlags
	c.register(fs, auth.DefaultCertValidity)
	name := fs.String("name", "", "the node's `NAME` (required)")
	cluster := fs.String("cluster-name", auth.DefaultClusterName, "the cluster's `name`, as the nodes are configured with")
	var hosts hostsFlag
	fs.Var(&hosts, "host", "a DNS name or IP address of the node (repeatable, or comma separated)")
	fs.Var(&hosts, "hosts", "DNS names and IP addresses of the node, comma separated")
	noLocalhost := fs.Bool("no-localhost", false, "do not add localhost and 127.0.0.1 to the hosts")
	certFile := fs.String("cert-file", "", "write the certificate to `file` (default DIR/node.crt)")
	keyFile := fs.String("key-file", "", "write the key to `file` (default DIR/node.key)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if *name == "" {
		return fmt.Errorf("%s: --name is required", c.cmd)
	}
	if err := auth.ValidateClusterName(*cluster); err != nil { // "" too, which auth.CreateNode would default
		return fmt.Errorf("%s: --cluster-name: %w", c.cmd, err)
	}
	certPath, keyPath := orDefault(*certFile, filepath.Join(c.dir, "node.crt")), orDefault(*keyFile, filepath.Join(c.dir, "node.key"))
	if err := c.checkPaths(keyPath, certPath); err != nil {
		return err
	}
	ca, err := c.loadCA()
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := auth.CreateNode(ca, auth.NodeOptions{Cluster: *cluster, Name: *name, Hosts: hosts,
		NoLocalhost: *noLocalhost, Validity: c.validity})
	if err != nil {
		return fmt.Errorf("%s: %w", c.cmd, err)
	}
	return c.write(e, keyPath, keyPEM, certPath, certPEM, describeCertPEM(certPEM))
}

func (e *env) certCreateClient(_ context.Context, args []string) error {
	fs := e.newFlags("create-client", "cert create-client --certs-dir DIR --name USER [--org O]... [--ou U]... [--validity D]\n"+
		"                   [--cert-file F] [--key-file F] [--overwrite]\n\n"+
		"Makes a user's client certificate and key, signed by the CA of DIR/ca.crt and its key:\n"+
		"DIR/client.USER.crt (0644) and DIR/client.USER.key (0600). The certificate names the user in its\n"+
		"subject's common name, and is valid for clients only.")
	var c certFlags
	c.register(fs, auth.DefaultCertValidity)
	user := fs.String("name", "", "the `USER` the certificate names (required)")
	var orgs, ous multiFlag
	fs.Var(&orgs, "org", "an organization (O) of the subject (repeatable)")
	fs.Var(&ous, "ou", "an organizational unit (OU) of the subject (repeatable)")
	certFile := fs.String("cert-file", "", "write the certificate to `file` (default DIR/client.USER.crt)")
	keyFile := fs.String("key-file", "", "write the key to `file` (default DIR/client.USER.key)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if *user == "" {
		return fmt.Errorf("%s: --name is required", c.cmd)
	}
	if (*certFile == "" || *keyFile == "") && (strings.ContainsAny(*user, `/\`) || *user == "." || *user == "..") {
		return fmt.Errorf("%s: user name %q cannot be part of a file name: give --cert-file and --key-file", c.cmd, *user)
	}
	certPath := orDefault(*certFile, filepath.Join(c.dir, "client."+*user+".crt"))
	keyPath := orDefault(*keyFile, filepath.Join(c.dir, "client."+*user+".key"))
	if err := c.checkPaths(keyPath, certPath); err != nil {
		return err
	}
	ca, err := c.loadCA()
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := auth.CreateClient(ca, auth.ClientOptions{User: *user, Organization: orgs,
		OrganizationalUnit: ous, Validity: c.validity})
	if err != nil {
		return fmt.Errorf("%s: %w", c.cmd, err)
	}
	return c.write(e, keyPath, keyPEM, certPath, certPEM, describeCertPEM(certPEM))
}

// certListing is one certificate of cert list --output json (an array,
// by file, then by position in the file).
type certListing struct {
	File    string `json:"file"`
	Type    string `json:"type"` // ca, node, client or other
	Subject string `json:"subject"`
	Issuer  string `json:"issuer"`
	// Node is the node's URI (sluice://CLUSTER/node/NAME) for a node
	// certificate; User the user for a client certificate.
	Node        string    `json:"node,omitempty"`
	User        string    `json:"user,omitempty"`
	DNSNames    []string  `json:"dns_names,omitempty"`
	IPAddresses []string  `json:"ip_addresses,omitempty"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	Expired     bool      `json:"expired"`
}

func (e *env) certList(_ context.Context, args []string) error {
	fs := e.newFlags("list", "cert list --certs-dir DIR\n\n"+
		"Lists the certificates of DIR's .crt files: what each is (ca, node or client), its subject, the node\n"+
		"or user it names and when it expires. Keys are not read.")
	dir := fs.String("certs-dir", "", "`DIR`, the directory of the certificates (required)")
	if _, err := e.parse(fs, args, 0); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("cert list: --certs-dir is required")
	}
	entries, err := os.ReadDir(*dir)
	if err != nil {
		return fmt.Errorf("cert list: %w", err)
	}
	now := time.Now()
	rows := []certListing{}
	var bad []string
	for _, ent := range entries {
		if ent.IsDir() || !strings.HasSuffix(ent.Name(), ".crt") {
			continue
		}
		certs, err := readCerts(filepath.Join(*dir, ent.Name()))
		if err != nil {
			fmt.Fprintf(e.stderr, "sluice: cert list: %s: %v\n", ent.Name(), err)
			bad = append(bad, ent.Name())
			continue
		}
		for _, c := range certs {
			rows = append(rows, listCert(ent.Name(), c, now))
		}
	}
	if e.g.json() {
		if err := json.NewEncoder(e.stdout).Encode(rows); err != nil {
			return err
		}
	} else if len(rows) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FILE\tTYPE\tSUBJECT\tNAMES\tNOT_AFTER")
		for _, r := range rows {
			names := r.Node
			if r.User != "" {
				names = "user " + r.User
			}
			if hosts := append(append([]string{}, r.DNSNames...), r.IPAddresses...); len(hosts) > 0 {
				names += " " + strings.Join(hosts, ",")
			}
			expiry := r.NotAfter.UTC().Format(time.RFC3339)
			if r.Expired {
				expiry += " (expired)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.File, r.Type, r.Subject, orDefault(strings.TrimSpace(names), "-"), expiry)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("cert list: %s not read: %s", plural(len(bad), "file"), strings.Join(bad, ", "))
	}
	return nil
}

// listCert is c's row of cert list.
func listCert(file string, c *x509.Certificate, now time.Time) certListing {
	r := certListing{File: file, Type: "other", Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		DNSNames: c.DNSNames, NotBefore: c.NotBefore, NotAfter: c.NotAfter, Expired: now.After(c.NotAfter)}
	for _, ip := range c.IPAddresses {
		r.IPAddresses = append(r.IPAddresses, ip.String())
	}
	var nodes []string
	for _, u := range c.URIs {
		if _, _, ok := auth.ParseNodeURI(u); ok {
			nodes = append(nodes, u.String())
		}
	}
	switch {
	case c.IsCA:
		r.Type = "ca"
	case len(nodes) > 0:
		r.Type, r.Node = "node", strings.Join(nodes, ",")
	case len(c.ExtKeyUsage) == 1 && c.ExtKeyUsage[0] == x509.ExtKeyUsageClientAuth:
		r.Type, r.User = "client", c.Subject.CommonName
	}
	return r
}

// readCerts parses the PEM certificates of a file.
func readCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return certs, nil
}

// describeCertPEM is what create prints of the certificate it wrote.
func describeCertPEM(certPEM []byte) string {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return "?"
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return err.Error()
	}
	r := listCert("", c, time.Now())
	var s string
	switch r.Type {
	case "ca":
		s = fmt.Sprintf("CA %q", c.Subject.CommonName)
	case "node":
		s = r.Node
		if hosts := append(append([]string{}, r.DNSNames...), r.IPAddresses...); len(hosts) > 0 {
			s += ", hosts " + strings.Join(hosts, ",")
		}
	case "client":
		s = "user " + r.User
		if len(c.Subject.Organization) > 0 || len(c.Subject.OrganizationalUnit) > 0 {
			s += ", " + c.Subject.String()
		}
	default:
		s = r.Subject
	}
	return s + ", expires " + r.NotAfter.UTC().Format(time.RFC3339)
}

// hostsFlag collects a repeated flag of comma-separated hosts.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, ",") }

func (h *hostsFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*h = append(*h, part)
		}
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// writeFileAtomic writes data to path with mode through a temporary file
// in the same directory, fsynced, then renamed over path (overwrite) or
// linked to it (so that a file created meanwhile is not replaced): a
// reader sees no file, the old one or the whole new one, never part of
// one. path's directory is created (0755) if missing.
func writeFileAtomic(path string, data []byte, mode os.FileMode, overwrite bool) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp") // 0600 from the start
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone already once renamed
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if overwrite {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s already exists (give --overwrite to replace it)", path)
	} else if err != nil {
		// No hard links here: check, then rename.
		if _, serr := os.Lstat(path); serr == nil {
			return fmt.Errorf("%s already exists (give --overwrite to replace it)", path)
		}
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
