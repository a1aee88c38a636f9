package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/auth"
)

// runCert runs sluice with args and returns its stdout.
func runCert(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, nil, &out, &errb)
	return out.String(), err
}

func mustRunCert(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCert(t, args...)
	if err != nil {
		t.Fatalf("sluice %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// loadPair loads a certificate and key as a TLS server would, and checks
// their modes.
func loadPair(t *testing.T, certPath, keyPath string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatalf("LoadX509KeyPair(%s, %s): %v", certPath, keyPath, err)
	}
	for path, want := range map[string]os.FileMode{certPath: 0o644, keyPath: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	return pair.Leaf
}

func caPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Fatal("ca.crt holds no certificate")
	}
	return p
}

// create-ca, create-node and create-client write a CA and certificates it
// signed: a node's for both ends of TLS, naming its node; a client's for
// clients only, naming its user. Keys are 0600, never printed.
func TestCertCreateCANodeClient(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs") // created by create-ca
	out := mustRunCert(t, "cert", "create-ca", "--certs-dir", dir)
	out += mustRunCert(t, "cert", "create-node", "--certs-dir", dir, "--name", "n1", "--cluster-name", "prod",
		"--host", "n1.example.com", "--hosts", "10.0.0.1,n1")
	out += mustRunCert(t, "cert", "create-client", "--certs-dir", dir, "--name", "alice", "--org", "acme", "--ou", "ops")

	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("certs dir: %v, %v", fi.Mode().Perm(), err)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("a key was printed:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n != 6 || strings.Count(out, "wrote ") != 6 {
		t.Errorf("want one line per file written, got:\n%s", out)
	}
	ca := loadPair(t, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if !ca.IsCA {
		t.Errorf("ca.crt is not a CA")
	}
	roots := caPool(t, dir)

	node := loadPair(t, filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key"))
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := node.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("node.crt as %v: %v", usage, err)
		}
	}
	for _, host := range []string{"n1.example.com", "n1", "10.0.0.1", "localhost", "127.0.0.1"} {
		if _, err := node.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("node.crt for %s: %v", host, err)
		}
	}
	if name, err := auth.NodeName(node, "prod"); err != nil || name != "n1" {
		t.Errorf("NodeName = %q, %v", name, err)
	}

	client := loadPair(t, filepath.Join(dir, "client.alice.crt"), filepath.Join(dir, "client.alice.key"))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client cert as a client: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots}); err == nil {
		t.Errorf("client cert verifies as a server")
	}
	if client.Subject.CommonName != "alice" || len(client.Subject.Organization) != 1 || client.Subject.OrganizationalUnit[0] != "ops" {
		t.Errorf("client subject = %v", client.Subject)
	}

	// No temporary file is left behind.
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "ca.crt ca.key client.alice.crt client.alice.key node.crt node.key" {
		t.Errorf("files = %s", got)
	}

	list := mustRunCert(t, "cert", "list", "--certs-dir", dir)
	for _, want := range []string{"ca.crt  ", "client.alice.crt  client", "user alice", "node.crt  ", "sluice://prod/node/n1"} {
		if !strings.Contains(list, want) {
			t.Errorf("cert list lacks %q:\n%s", want, list)
		}
	}
}

// create-ca (or any create) refuses to replace existing files without
// --overwrite, naming the file and leaving it as it was; with --overwrite
// it replaces them.
func TestCertCreateRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	mustRunCert(t, "cert", "create-ca", "--certs-dir", dir)
	crt, key := readFile(t, dir, "ca.crt"), readFile(t, dir, "ca.key")
	_, err := runCert(t, "cert", "create-ca", "--certs-dir", dir)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "ca.key")+" already exists") || !strings.Contains(err.Error(), "--overwrite") {
		t.Errorf("second create-ca: %v", err)
	}
	if !bytes.Equal(crt, readFile(t, dir, "ca.crt")) || !bytes.Equal(key, readFile(t, dir, "ca.key")) {
		t.Errorf("the refused create-ca changed the files")
	}

	mustRunCert(t, "cert", "create-node", "--certs-dir", dir, "--name", "n1")
	nodeCrt := readFile(t, dir, "node.crt")
	if _, err := runCert(t, "cert", "create-node", "--certs-dir", dir, "--name", "n2"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second create-node: %v", err)
	}
	if !bytes.Equal(nodeCrt, readFile(t, dir, "node.crt")) {
		t.Errorf("the refused create-node changed node.crt")
	}

	mustRunCert(t, "cert", "create-ca", "--certs-dir", dir, "--overwrite")
	if bytes.Equal(crt, readFile(t, dir, "ca.crt")) || bytes.Equal(key, readFile(t, dir, "ca.key")) {
		t.Errorf("create-ca --overwrite left the files")
	}
	loadPair(t, filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
}

// create-node refuses an invalid cluster name (and writes nothing), a
// missing --name, and a missing CA.
func TestCertCreateNodeRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := runCert(t, "cert", "create-node", "--certs-dir", dir, "--name", "n1"); err == nil || !strings.Contains(err.Error(), "create-ca") {
		t.Errorf("create-node without a CA: %v", err)
	}
	mustRunCert(t, "cert", "create-ca", "--certs-dir", dir)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--name", "n1", "--cluster-name", "Prod_1"}, "cluster name"},
		{[]string{"--name", "n1", "--cluster-name", ""}, "cluster name"},
		{[]string{}, "--name is required"},
		{[]string{"--name", "n1", "--host", "n1:9400"}, "not an IP address or a DNS name"},
		{[]string{"--name", "n1", "--validity", "87601h"}, "expires"}, // outlives the 10-year CA
		{[]string{"--name", "n1", "--validity", "-1h"}, "--validity must be > 0"},
	}
	for _, tc := range tests {
		_, err := runCert(t, append([]string{"cert", "create-node", "--certs-dir", dir}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("create-node %v: %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, f := range []string{"node.crt", "node.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written by a refused create-node (%v)", f, err)
		}
	}
	if _, err := runCert(t, "cert", "create-ca"); err == nil || !strings.Contains(err.Error(), "--certs-dir is required") {
		t.Errorf("create-ca without --certs-dir: %v", err)
	}
}

// The CA key may be kept apart (--ca-key-file), and several nodes'
// certificates made in one directory with --cert-file and --key-file.
func TestCertCAKeyFileAndOutputFiles(t *testing.T) {
	dir, secret := t.TempDir(), t.TempDir()
	caKey := filepath.Join(secret, "ca.key")
	mustRunCert(t, "cert", "create-ca", "--certs-dir", dir, "--ca-key-file", caKey)
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ca.key written to the certs dir (%v)", err)
	}
	if _, err := runCert(t, "cert", "create-node", "--certs-dir", dir, "--name", "n1"); err == nil || !strings.Contains(err.Error(), "--ca-key-file") {
		t.Errorf("create-node without the CA key: %v", err)
	}
	for _, n := range []string{"n1", "n2"} {
		mustRunCert(t, "cert", "create-node", "--certs-dir", dir, "--ca-key-file", caKey, "--name", n,
			"--cert-file", filepath.Join(dir, n+".crt"), "--key-file", filepath.Join(dir, n+".key"))
		c := loadPair(t, filepath.Join(dir, n+".crt"), filepath.Join(dir, n+".key"))
		if got, err := auth.NodeName(c, auth.DefaultClusterName); err != nil || got != n {
			t.Errorf("NodeName = %q, %v; want %s", got, err, n)
		}
	}
	if _, err := runCert(t, "cert", "create-client", "--certs-dir", dir, "--ca-key-file", caKey, "--name", "a/b"); err == nil || !strings.Contains(err.Error(), "file name") {
		t.Errorf("create-client with a '/' in the name: %v", err)
	}
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeFileAtomic creates a file with its mode, refuses to replace one
// without overwrite (even one created after the caller checked), replaces
// it with, and leaves no temporary file.
func TestCertWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "x.key")
	if err := writeFileAtomic(path, []byte("one"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, []byte("two"), 0o600, false); err == nil || !strings.Contains(err.Error(), path+" already exists") {
		t.Errorf("second write: %v", err)
	}
	if got := readFile(t, filepath.Dir(path), "x.key"); string(got) != "one" {
		t.Errorf("after the refused write: %q", got)
	}
	if err := writeFileAtomic(path, []byte("three"), 0o644, true); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if got := readFile(t, filepath.Dir(path), "x.key"); string(got) != "three" || err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("after overwrite: %q, mode %v (%v)", got, fi.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d files in the directory, want 1", len(entries))
	}
}

// A missing or unknown cert command and extra arguments are usage errors
// (exit 2); cert --help lists the commands.
func TestCertCommandUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args      []string
		wantUsage bool
	}{
		{[]string{"cert"}, true},
		{[]string{"cert", "bogus"}, true},
		{[]string{"cert", "create-ca", "--certs-dir", dir, "extra"}, true},
		{[]string{"cert", "create-node", "--no-such-flag"}, true},
		{[]string{"cert", "list"}, false},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, nil, &out, &errb)
		if err == nil || errors.Is(err, errUsage) != tc.wantUsage {
			t.Errorf("%q: err = %v, want usage error %v", tc.args, err, tc.wantUsage)
		}
		if out.Len() != 0 {
			t.Errorf("%q: wrote to stdout: %q", tc.args, out.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused command wrote %d files", len(entries))
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"cert", "--help"}, nil, &out, &errb); err != nil || !strings.Contains(errb.String(), "create-client --certs-dir DIR --name USER") {
		t.Errorf("cert --help: err %v, stderr %q", err, errb.String())
	}
	out.Reset()
	if err := run(context.Background(), []string{"help"}, nil, &out, &errb); err != nil || !strings.Contains(out.String(), "cert create-node") {
		t.Errorf("help does not list cert create-node: %v", err)
	}
}
