//go:build sluicetest

package deploy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
)

// The TLS rehearsal runs the tls overlay's pods as the rehearsal runs the
// combined overlay's, with two more stand-ins:
//
//   - cert-manager: certManager issues each Certificate of the overlay
//     from its spec (its URI, DNS names, IP addresses, duration) with a CA
//     made from the overlay's CA Certificate, as cert-manager's CA Issuer
//     would, and re-issues it on demand (a renewal);
//   - the kubelet's Secret volume: the Secret's files (tls.crt, tls.key,
//     ca.crt) are written as the kubelet writes a mounted Secret, into a
//     new timestamped directory that a symlink swap (..data) puts in place
//     at once, with the volume's defaultMode, in a directory that stands
//     in for the mount path.

// certManager stands in for cert-manager and the kubelet's Secret
// volumes (see above).
type certManager struct {
	m     *manifests
	dir   string // a directory per Secret under it
	ca    auth.CA
	caPEM []byte
	modes map[string]fs.FileMode // Secret name -> the volume's defaultMode
}

// newCertManager makes the overlay's CA (its Certificate with isCA) and
// writes the Secrets under dir.
func newCertManager(t *testing.T, m *manifests, dir string) *certManager {
	t.Helper()
	var caCert *certificate
	for i := range m.Certificates {
		if m.Certificates[i].Spec.IsCA {
			if caCert != nil {
				t.Fatalf("Certificates %s and %s are both CAs", caCert.Name, m.Certificates[i].Name)
			}
			caCert = &m.Certificates[i]
		}
	}
	if caCert == nil {
		t.Fatal("no CA Certificate (isCA: true) in the overlay")
	}
	certPEM, keyPEM, err := auth.CreateCA(auth.CAOptions{CommonName: caCert.Spec.CommonName, Validity: specDur(t, caCert, caCert.Spec.Duration)})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := auth.LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &certManager{m: m, dir: dir, ca: ca, caPEM: certPEM, modes: map[string]fs.FileMode{}}
}

// mounts issues the Certificate of each Secret volume of sts, writes the
// Secret, and returns the stand-in directory of each mount path.
func (cm *certManager) mounts(t *testing.T, sts *appsv1.StatefulSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	spec := sts.Spec.Template.Spec
	for _, v := range spec.Volumes {
		if v.Secret == nil {
			t.Fatalf("%s: volume %s is not a Secret: the rehearsal has no stand-in for it", sts.Name, v.Name)
		}
		if len(v.Secret.Items) > 0 {
			t.Fatalf("%s: volume %s selects items of its Secret: the rehearsal mounts whole Secrets", sts.Name, v.Name)
		}
		mode := fs.FileMode(0o644) // the kubelet's default
		if v.Secret.DefaultMode != nil {
			mode = fs.FileMode(*v.Secret.DefaultMode)
		}
		cm.modes[v.Secret.SecretName] = mode
		cm.issue(t, v.Secret.SecretName)
		for _, vm := range spec.Containers[0].VolumeMounts {
			if vm.Name == v.Name {
				out[vm.MountPath] = filepath.Join(cm.dir, v.Secret.SecretName)
			}
		}
	}
	return out
}

// issue issues (again) the node Certificate whose Secret is secretName
// and writes the Secret; it returns the new certificate.
func (cm *certManager) issue(t *testing.T, secretName string) *x509.Certificate {
	t.Helper()
	var c *certificate
	for i := range cm.m.Certificates {
		if cm.m.Certificates[i].Spec.SecretName == secretName {
			c = &cm.m.Certificates[i]
		}
	}
	if c == nil {
		t.Fatalf("Secret %s is no Certificate's: nothing would create it", secretName)
	}
	if len(c.Spec.URIs) != 1 {
		t.Fatalf("Certificate %s: URIs %q, want one node URI", c.Name, c.Spec.URIs)
	}
	cluster, name, ok := parseNodeURI(c.Spec.URIs[0])
	if !ok {
		t.Fatalf("Certificate %s: %s is not a node URI", c.Name, c.Spec.URIs[0])
	}
	hosts := append(append([]string(nil), c.Spec.DNSNames...), c.Spec.IPAddresses...)
	certPEM, keyPEM, err := auth.CreateNode(cm.ca, auth.NodeOptions{Cluster: cluster, Name: name, Hosts: hosts, NoLocalhost: true,
		Validity: specDur(t, c, c.Spec.Duration)})
	if err != nil {
		t.Fatalf("Certificate %s: %v", c.Name, err)
	}
	err = writeSecret(filepath.Join(cm.dir, secretName), cm.modes[secretName],
		map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": cm.caPEM})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// writeSecret writes files into a Secret volume's directory dir as the
// kubelet does (its AtomicWriter): into a new directory ..<timestamp>,
// then a symlink ..data_tmp to it renamed over ..data, so that every file
// changes at once; each file is a symlink ..data/<file>. The previous
// directory is removed.
func writeSecret(dir string, mode fs.FileMode, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		path := filepath.Join(ts, name)
		if err := os.WriteFile(path, b, mode); err != nil {
			return err
		}
		if err := os.Chmod(path, mode); err != nil { // whatever the umask
			return err
		}
	}
	data, tmp := filepath.Join(dir, "..data"), filepath.Join(dir, "..data_tmp")
	old, _ := os.Readlink(data)
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, data); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

// tlsFiles are the node certificate, key and CA files a pod's sluiced
// reads (the stand-ins' paths).
func tlsFiles(t *testing.T, pp *podProcess) (cert, key, ca string) {
	t.Helper()
	cert, ok1 := flagValue(pp.args, "tls-cert-file")
	key, ok2 := flagValue(pp.args, "tls-key-file")
	ca, ok3 := flagValue(pp.args, "tls-ca-file")
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("%s: TLS is not on (--tls-cert-file, --tls-key-file, --tls-ca-file)", pp.pod.Name)
	}
	return cert, key, ca
}

// servedCertificate completes a TLS handshake with addr, verifying the
// server's certificate against roots for serverName (the name a client
// dials), presenting clientCert if not nil, and returns the server's
// certificate.
func servedCertificate(addr, serverName string, roots *x509.CertPool, clientCert *tls.Certificate, alpn []string) (*x509.Certificate, error) {
	cfg := &tls.Config{ServerName: serverName, RootCAs: roots, NextProtos: alpn, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

// servedSerials checks what every TLS listener of pp serves, each
// verified against the pod's CA for the name it is reached at: the
// client port (no client certificate: --client-auth=request) for the
// pod's advertised name, the internal port and Raft (mutual TLS, with the
// node's certificate) for theirs (Raft is advertised at the pod IP, and
// nodes do not check peers' names: the advertised name stands for it).
// It returns each listener's certificate serial.
func servedSerials(t *testing.T, pp *podProcess) (map[string]string, error) {
	t.Helper()
	certFile, keyFile, caFile := tlsFiles(t, pp)
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	nodeCert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	host := func(flag string) string {
		v, _ := flagValue(pp.args, flag)
		h, _, _ := net.SplitHostPort(v)
		return h
	}
	bound := func(flag string) string { v, _ := flagValue(pp.args, flag); return v }
	out := map[string]string{}
	for _, l := range []struct {
		name, addr, serverName string
		client                 *tls.Certificate
		alpn                   []string
	}{
		{"client", bound("listen"), host("advertise"), nil, []string{"h2"}},
		{"internal", bound("internal-listen"), host("internal-advertise"), &nodeCert, []string{"h2"}},
		{"raft", bound("raft-listen"), host("advertise"), &nodeCert, nil},
	} {
		c, err := servedCertificate(l.addr, l.serverName, roots, l.client, l.alpn)
		if err != nil {
			return nil, fmt.Errorf("%s: %s listener %s (as %s): %w", pp.pod.Name, l.name, l.addr, l.serverName, err)
		}
		out[l.name] = c.SerialNumber.String()
	}
	return out, nil
}

// waitServing waits (up to 10 s: sluiced checks its files once a second)
// until every TLS listener of every pod serves the certificate of serial
// want.
func waitServing(t *testing.T, pods []*podProcess, want *x509.Certificate, what string) {
	t.Helper()
	wait.For(t, 10*time.Second, what, func() error {
		for _, pp := range pods {
			got, err := servedSerials(t, pp)
			if err != nil {
				return err
			}
			for l, serial := range got {
				if serial != want.SerialNumber.String() {
					return fmt.Errorf("%s: the %s listener serves serial %s, want %s", pp.pod.Name, l, serial, want.SerialNumber)
				}
			}
		}
		return nil
	})
}

// nodeSecret is the Secret of the pods' node certificate.
func nodeSecret(t *testing.T, run *rehearsalRun) string {
	t.Helper()
	certFile, _, _ := tlsFiles(t, run.pods[0])
	return filepath.Base(filepath.Dir(certFile))
}

// tlsClientOptions are the options of the rehearsal's clients: the CA of
// the Secret (ca.crt) and, the overlay's pods authorizing with its
// administrator the only super user, the administrator's client
// certificate (the Secret sluice-admin-tls, issued by clientSecret).
func tlsClientOptions(t *testing.T, run *rehearsalRun) []client.Option {
	t.Helper()
	return clientCertOptions(t, run, "sluice-admin-tls")
}

// clientCertOptions are TLS options with the client Certificate of
// Secret secretName, issued (once) as cert-manager would.
func clientCertOptions(t *testing.T, run *rehearsalRun, secretName string) []client.Option {
	t.Helper()
	dir := run.cm.clientSecret(t, secretName)
	cfg, err := client.LoadTLSConfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	return []client.Option{client.WithTLS(cfg)}
}

// clientSecret issues the client Certificate (no node URI: its
// commonName the user) whose Secret is secretName, unless its directory
// exists, and returns the directory.
func (cm *certManager) clientSecret(t *testing.T, secretName string) string {
	t.Helper()
	dir := filepath.Join(cm.dir, secretName)
	if _, err := os.Stat(filepath.Join(dir, "tls.crt")); err == nil {
		return dir
	}
	var c *certificate
	for i := range cm.m.Certificates {
		if cm.m.Certificates[i].Spec.SecretName == secretName {
			c = &cm.m.Certificates[i]
		}
	}
	if c == nil || c.Spec.CommonName == "" || len(c.Spec.URIs) > 0 {
		t.Fatalf("Secret %s is no client Certificate's", secretName)
	}
	certPEM, keyPEM, err := auth.CreateClient(cm.ca, auth.ClientOptions{User: c.Spec.CommonName, Validity: specDur(t, c, c.Spec.Duration)})
	if err != nil {
		t.Fatalf("Certificate %s: %v", c.Name, err)
	}
	if err := writeSecret(dir, 0o400, map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": cm.caPEM}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStatefulSetRehearsalTLS runs the rehearsal of TestStatefulSetRehearsal
// on the tls overlay: the pods as its manifests say, with the Secret
// cert-manager would write for its node Certificate (issued from the
// Certificate's spec) mounted where the manifests mount it, and HTTP
// probes. Every TLS listener (client, internal, Raft) must serve that
// certificate, verified by the name the pod is reached at (the
// Certificate's DNS names); the client (the CA only) bootstraps, creates
// the topic and produces throughout. After the first pod is recreated,
// the certificate is renewed (a new key and serial, the Secret's files
// swapped as the kubelet does): every pod, restarted or not, must serve
// the new one within seconds, the producer must see no error, the roll
// goes on, and at the end every listener serves the renewed certificate
// and a new client bootstraps from the client Service's name.
//
// The pods authorize (--authorizer acl, the administrator the only super
// user): once they are ready, the overlay's ACL bootstrap Job runs
// against them, its commands as the manifests give them, and its
// principals are checked to be allowed what it grants and nothing more,
// a principal it does not name to be allowed nothing (checkACLBootstrap);
// after the roll, the grants still hold.
func TestStatefulSetRehearsalTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three sluiced processes with TLS and rolls them (about a minute)")
	}
	var issued, renewed *x509.Certificate
	var grants []aclGrant
	rehearseRollingUpdate(t, "tls", rehearsalHooks{
		clientOptions: func(run *rehearsalRun) []client.Option { return tlsClientOptions(t, run) },
		ready: func(run *rehearsalRun) {
			certFile, keyFile, _ := tlsFiles(t, run.pods[0])
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				t.Fatal(err)
			}
			issued = pair.Leaf
			waitServing(t, run.pods, issued, "every listener serves the issued certificate")
			t.Logf("every listener serves certificate %s", issued.SerialNumber)
			grants = checkACLBootstrap(t, run, testBins.Get(t).Sluice)
		},
		available: func(run *rehearsalRun, ord int) {
			if ord != len(run.pods)-1 {
				return
			}
			renewed = run.cm.issue(t, nodeSecret(t, run))
			if renewed.SerialNumber.Cmp(issued.SerialNumber) == 0 {
				t.Fatal("the renewed certificate has the old serial")
			}
			start := time.Now()
			waitServing(t, run.pods, renewed, "every listener serves the renewed certificate")
			t.Logf("certificate renewed (serial %s): served by every pod after %v", renewed.SerialNumber, time.Since(start).Round(time.Millisecond))
		},
		rolled: func(run *rehearsalRun) {
			waitServing(t, run.pods, renewed, "every listener serves the renewed certificate after the roll")
			checkACLsAfterRoll(t, run, grants)
			// A new client, new connections: bootstrap from the client
			// Service's name (one of the Certificate's DNS names).
			var svc string
			for _, s := range run.m.Services {
				if s.Spec.ClusterIP != corev1.ClusterIPNone {
					svc = s.Name
				}
			}
			listen, _ := flagValue(run.pods[0].args, "listen")
			_, port, _ := net.SplitHostPort(listen)
			addr := net.JoinHostPort(svc+"."+namespaceOf(run.sts)+".svc", port)
			cl, err := client.New([]string{addr}, append(tlsClientOptions(t, run), client.WithRequestTimeout(5*time.Second))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			wait.For(t, 30*time.Second, "a new client through "+addr, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := cl.DescribeCluster(ctx)
				return err
			})
		},
	})
}
