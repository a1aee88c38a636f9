package deploy

import (
	"crypto/x509"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sluice-io/sluice/auth"
)

// tlsOverlays are the overlays whose pods must run with TLS on.
var tlsOverlays = map[string]bool{"tls": true, "split-tls": true, "tls-kafka": true}

// The TLS of the manifests (components/tls): wherever the pods turn TLS
// on, their certificate, key and CA files are tls.crt, tls.key and ca.crt
// of one Secret mounted read-only, readable by the pods' group only; a
// cert-manager Certificate of the overlay writes that Secret, names a
// node of the pods' --cluster-name (sluice://<cluster>/node/<name>), is
// valid for both ends of TLS (server and client auth) and for every name
// the pods are reached at (their advertised names, the client Services'),
// and comes from a CA Issuer whose CA is a Certificate of the overlay,
// bootstrapped by a self-signed Issuer. Every other Certificate is a
// client's: it names no node.
func TestManifestTLS(t *testing.T) {
	for _, name := range overlays {
		t.Run(name, func(t *testing.T) {
			m := renderOverlay(t, name)
			nodeSecrets := map[string]bool{}
			for i := range m.StatefulSets {
				sts := &m.StatefulSets[i]
				secret := checkStatefulSetTLS(t, m, sts)
				switch {
				case secret != "":
					nodeSecrets[secret] = true
				case tlsOverlays[name]:
					t.Errorf("%s: TLS is off in the %s overlay", sts.Name, name)
				}
			}
			if len(nodeSecrets) == 0 && (len(m.Certificates) > 0 || len(m.Issuers) > 0) {
				t.Errorf("%d Certificates and %d Issuers, but no pod uses TLS", len(m.Certificates), len(m.Issuers))
			}
			for i := range m.Issuers {
				is := &m.Issuers[i]
				if (is.Spec.SelfSigned == nil) == (is.Spec.CA == nil) {
					t.Errorf("Issuer %s: want exactly one of selfSigned and ca", is.Name)
				}
			}
			for i := range m.Certificates {
				c := &m.Certificates[i]
				checkCertificate(t, m, c)
				if c.Spec.IsCA || nodeSecrets[c.Spec.SecretName] {
					continue
				}
				// A client's certificate: no node URI, client auth.
				for _, u := range c.Spec.URIs {
					if _, _, ok := parseNodeURI(u); ok {
						t.Errorf("Certificate %s (Secret %s, mounted by no pod) names a node: %s", c.Name, c.Spec.SecretName, u)
					}
				}
				if !slices.Contains(c.Spec.Usages, "client auth") {
					t.Errorf("Certificate %s: usages %q, want client auth", c.Name, c.Spec.Usages)
				}
			}
		})
	}
}

// checkStatefulSetTLS checks the TLS of sts's pods against m's
// Certificates and returns the Secret of their node certificate ("" if
// TLS is off).
func checkStatefulSetTLS(t *testing.T, m *manifests, sts *appsv1.StatefulSet) string {
	t.Helper()
	ns := namespaceOf(sts)
	p := podOf(t, m, sts, 0, ns, "10.0.0.1")
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	files := []struct{ flag, key string }{{"tls-cert-file", "tls.crt"}, {"tls-key-file", "tls.key"}, {"tls-ca-file", "ca.crt"}}
	set := 0
	for _, f := range files {
		if _, ok := p.setting(f.flag); ok {
			set++
		}
	}
	if set == 0 {
		return ""
	}
	if set != len(files) {
		t.Errorf("%s: TLS needs all of --tls-cert-file, --tls-key-file and --tls-ca-file", sts.Name)
		return ""
	}
	// The files: the keys cert-manager writes, in one mounted Secret.
	secret := ""
	for _, f := range files {
		file, _ := p.setting(f.flag)
		var vm *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if path.Join(c.VolumeMounts[i].MountPath, f.key) == path.Clean(file) {
				vm = &c.VolumeMounts[i]
			}
		}
		if vm == nil {
			t.Errorf("%s: --%s=%s is not the file %s of a mounted volume", sts.Name, f.flag, file, f.key)
			continue
		}
		var vol *corev1.Volume
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == vm.Name {
				vol = &spec.Volumes[i]
			}
		}
		switch {
		case vol == nil || vol.Secret == nil:
			t.Errorf("%s: --%s=%s: volume %s is not a Secret", sts.Name, f.flag, file, vm.Name)
			continue
		case len(vol.Secret.Items) > 0:
			t.Errorf("%s: volume %s selects items of Secret %s: mount the Secret whole (tls.crt, tls.key, ca.crt)", sts.Name, vol.Name, vol.Secret.SecretName)
		case secret != "" && vol.Secret.SecretName != secret:
			t.Errorf("%s: the TLS files come from Secrets %s and %s: a certificate, its key and its CA come from one", sts.Name, secret, vol.Secret.SecretName)
		}
		secret = vol.Secret.SecretName
		if !vm.ReadOnly {
			t.Errorf("%s: Secret volume %s is mounted read-write", sts.Name, vm.Name)
		}
		// The key file: readable by the pods' group (fsGroup owns a
		// Secret volume's files), by no one else.
		mode := fs.FileMode(0o644)
		if vol.Secret.DefaultMode != nil {
			mode = fs.FileMode(*vol.Secret.DefaultMode)
		}
		if mode&0o007 != 0 || mode&0o040 == 0 || spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil {
			t.Errorf("%s: Secret volume %s has mode %v (fsGroup set: %v): want the group's read and nothing for others", sts.Name, vol.Name, mode, spec.SecurityContext != nil && spec.SecurityContext.FSGroup != nil)
		}
	}
	if secret == "" {
		return ""
	}
	var cert *certificate
	for i := range m.Certificates {
		if m.Certificates[i].Spec.SecretName == secret {
			if cert != nil {
				t.Errorf("Certificates %s and %s both write Secret %s", cert.Name, m.Certificates[i].Name, secret)
			}
			cert = &m.Certificates[i]
		}
	}
	if cert == nil {
		t.Errorf("%s: no Certificate writes Secret %s", sts.Name, secret)
		return secret
	}
	if cert.Namespace != sts.Namespace {
		t.Errorf("Certificate %s is in namespace %q, the pods in %q: the Secret must be theirs", cert.Name, cert.Namespace, sts.Namespace)
	}
	if cert.Spec.IsCA {
		t.Errorf("%s: the node certificate %s is a CA", sts.Name, cert.Name)
	}
	// The identity: one node URI of the pods' cluster.
	cluster, ok := p.setting("cluster-name")
	if !ok || cluster == "" {
		cluster = auth.DefaultClusterName
	}
	var named []string
	for _, u := range cert.Spec.URIs {
		if cl, nodeName, ok := parseNodeURI(u); ok {
			named = append(named, u)
			if cl != cluster {
				t.Errorf("Certificate %s names node %q of cluster %q, but the pods' --cluster-name is %q: every peer would refuse them", cert.Name, nodeName, cl, cluster)
			}
		}
	}
	if len(named) != 1 {
		t.Errorf("Certificate %s: node URIs %q, want one sluice://%s/node/<name>", cert.Name, named, cluster)
	}
	for _, u := range []string{"digital signature", "server auth", "client auth"} {
		if !slices.Contains(cert.Spec.Usages, u) {
			t.Errorf("Certificate %s: usages %q lack %q (a node serves and dials with it)", cert.Name, cert.Spec.Usages, u)
		}
	}
	if v, ok := p.setting("client-auth"); ok {
		if _, err := auth.ParseClientAuth(v); err != nil {
			t.Errorf("%s: %v", sts.Name, err)
		}
	}
	// The names: every name the pods are dialed at verifies.
	leaf := &x509.Certificate{DNSNames: cert.Spec.DNSNames}
	for _, ip := range cert.Spec.IPAddresses {
		leaf.IPAddresses = append(leaf.IPAddresses, net.ParseIP(ip))
	}
	var names []string
	for ord := range int(*sts.Spec.Replicas) {
		p := podOf(t, m, sts, ord, ns, "10.0.0.1")
		for _, flag := range []string{"advertise", "internal-advertise", "kafka-advertise"} {
			v, _ := p.setting(flag)
			host, _, _ := net.SplitHostPort(v)
			names = append(names, host)
		}
	}
	for _, svc := range m.Services {
		if svc.Spec.ClusterIP != corev1.ClusterIPNone && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) {
			names = append(names, svc.Name+"."+ns+".svc", svc.Name+"."+ns+".svc.cluster.local")
		}
	}
	for _, n := range names {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("Certificate %s (DNS names %q) is not valid for %s, where the pods of %s are reached: %v", cert.Name, cert.Spec.DNSNames, n, sts.Name, err)
		}
	}
	// Issued by a CA Issuer whose CA is one of the overlay's.
	is := issuerOf(t, m, cert)
	switch {
	case is == nil:
	case is.Spec.CA == nil:
		t.Errorf("Certificate %s: Issuer %s is not a CA Issuer", cert.Name, is.Name)
	default:
		var ca *certificate
		for i := range m.Certificates {
			if m.Certificates[i].Spec.SecretName == is.Spec.CA.SecretName {
				ca = &m.Certificates[i]
			}
		}
		switch {
		case ca == nil:
			t.Errorf("Issuer %s: its CA Secret %s is no Certificate's", is.Name, is.Spec.CA.SecretName)
		case !ca.Spec.IsCA:
			t.Errorf("Issuer %s: Certificate %s of Secret %s is not a CA (isCA)", is.Name, ca.Name, ca.Spec.SecretName)
		default:
			if root := issuerOf(t, m, ca); root != nil && root.Spec.SelfSigned == nil {
				t.Errorf("CA Certificate %s: Issuer %s is not the self-signed bootstrap", ca.Name, root.Name)
			}
			if specDur(t, ca, ca.Spec.Duration) < specDur(t, cert, cert.Spec.Duration) {
				t.Errorf("Certificate %s outlives its CA %s", cert.Name, ca.Name)
			}
		}
	}
	return secret
}

// checkCertificate checks what every Certificate needs: a Secret, an
// Issuer of the overlay in its namespace, a key, and a renewal before it
// expires.
func checkCertificate(t *testing.T, m *manifests, c *certificate) {
	t.Helper()
	if c.APIVersion != certManagerV1 {
		t.Errorf("Certificate %s: apiVersion %s", c.Name, c.APIVersion)
	}
	if c.Spec.SecretName == "" {
		t.Errorf("Certificate %s: no secretName", c.Name)
	}
	if c.Spec.CommonName == "" && len(c.Spec.DNSNames) == 0 && len(c.Spec.URIs) == 0 {
		t.Errorf("Certificate %s: no subject name (commonName, dnsNames, uris)", c.Name)
	}
	if is := issuerOf(t, m, c); is != nil && is.Namespace != c.Namespace {
		t.Errorf("Certificate %s (namespace %q): Issuer %s is in %q", c.Name, c.Namespace, is.Name, is.Namespace)
	}
	if c.Spec.PrivateKey.Algorithm != "ECDSA" && c.Spec.PrivateKey.Algorithm != "RSA" && c.Spec.PrivateKey.Algorithm != "Ed25519" {
		t.Errorf("Certificate %s: private key algorithm %q", c.Name, c.Spec.PrivateKey.Algorithm)
	}
	if d, rb := specDur(t, c, c.Spec.Duration), specDur(t, c, c.Spec.RenewBefore); d < time.Hour || rb <= 0 || rb >= d {
		t.Errorf("Certificate %s: duration %v, renewBefore %v: want both, renewal before expiry", c.Name, d, rb)
	}
	for _, ip := range c.Spec.IPAddresses {
		if net.ParseIP(ip) == nil {
			t.Errorf("Certificate %s: ipAddresses: %q is not an IP address", c.Name, ip)
		}
	}
}

// issuerOf is the Issuer c's issuerRef names (nil, and an error, if it is
// none of the overlay's).
func issuerOf(t *testing.T, m *manifests, c *certificate) *issuer {
	t.Helper()
	ref := c.Spec.IssuerRef
	if (ref.Kind != "" && ref.Kind != "Issuer") || (ref.Group != "" && ref.Group != "cert-manager.io") {
		t.Errorf("Certificate %s: issuerRef %+v is not an Issuer of cert-manager.io", c.Name, ref)
		return nil
	}
	for i := range m.Issuers {
		if m.Issuers[i].Name == ref.Name {
			return &m.Issuers[i]
		}
	}
	t.Errorf("Certificate %s: issuerRef names Issuer %q, which the overlay does not have", c.Name, ref.Name)
	return nil
}

// specDur parses a Certificate's duration field (0 when unset).
func specDur(t *testing.T, c *certificate, s string) time.Duration {
	t.Helper()
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Errorf("Certificate %s: duration %q: %v", c.Name, s, err)
	}
	return d
}

// parseNodeURI is auth.ParseNodeURI of a URI's text.
func parseNodeURI(s string) (cluster, name string, ok bool) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", false
	}
	return auth.ParseNodeURI(u)
}

// TestManifestACLBootstrap checks the tls overlay's ACL bootstrap
// (overlays/tls/acl-bootstrap.yaml): the pods authorize with one super
// user, the principal the administrator's Certificate maps to by the pods'
// own mapping rules; the Job's containers are `sluice acl create`
// commands whose every flag `sluice acl create --help` lists, run as the administrator (the Secret of
// that Certificate mounted where their TLS flags point, read-only) through
// the client Service; and each principal they grant is a client
// Certificate's.
func TestManifestACLBootstrap(t *testing.T) {
	m := renderOverlay(t, "tls")
	sts := &m.StatefulSets[0]
	p := podOf(t, m, sts, 0, namespaceOf(sts), "10.0.0.1")
	if v, _ := p.setting("authorizer"); v != "acl" {
		t.Fatalf("--authorizer=%q, want acl", v)
	}
	rules, _ := p.setting("tls-principal-mapping-rules")
	mapper, err := auth.ParsePrincipalMappingRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	principalOf := map[string]string{} // Secret -> principal
	for _, c := range m.Certificates {
		if c.Spec.CommonName != "" && !c.Spec.IsCA {
			name, err := mapper.Map("CN=" + c.Spec.CommonName)
			if err != nil {
				t.Fatalf("Certificate %s: %v", c.Name, err)
			}
			principalOf[c.Spec.SecretName] = "User:" + name
		}
	}
	supers, _ := p.setting("super-users")
	if principalOf["sluice-admin-tls"] == "" || supers != principalOf["sluice-admin-tls"] {
		t.Fatalf("--super-users=%q, but the administrator's Certificate maps to %q", supers, principalOf["sluice-admin-tls"])
	}
	if len(m.Jobs) != 1 {
		t.Fatalf("%d Jobs, want the ACL bootstrap", len(m.Jobs))
	}
	job := &m.Jobs[0]
	if job.Namespace != sts.Namespace {
		t.Errorf("Job %s in namespace %q, the pods in %q", job.Name, job.Namespace, sts.Namespace)
	}
	help := aclCreateFlags(t)
	granted := map[string]bool{}
	spec := job.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if len(c.Command) != 1 || path.Base(c.Command[0]) != "sluice" || len(c.Args) < 2 || c.Args[0] != "acl" || c.Args[1] != "create" {
			t.Errorf("Job container %s: %q %q, want sluice acl create", c.Name, c.Command, c.Args)
			continue
		}
		for _, a := range c.Args[2:] {
			name := strings.SplitN(strings.TrimLeft(a, "-"), "=", 2)[0]
			if !strings.HasPrefix(a, "--") || !help[name] {
				t.Errorf("Job container %s: %q is not a flag of sluice acl create", c.Name, a)
			}
		}
		args := c.Args[2:]
		if b, _ := flagValue(args, "brokers"); !strings.HasPrefix(b, "sluice:") || m.service("sluice") == nil {
			t.Errorf("Job container %s: --brokers=%q, want the client Service sluice", c.Name, b)
		}
		for _, f := range []struct{ flag, key string }{{"tls-ca-file", "ca.crt"}, {"tls-cert-file", "tls.crt"}, {"tls-key-file", "tls.key"}} {
			file, _ := flagValue(args, f.flag)
			ok := false
			for _, vm := range c.VolumeMounts {
				for _, v := range spec.Volumes {
					if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == "sluice-admin-tls" && vm.ReadOnly && path.Join(vm.MountPath, f.key) == file {
						ok = true
					}
				}
			}
			if !ok {
				t.Errorf("Job container %s: --%s=%q is not %s of the administrator's Secret, mounted read-only", c.Name, f.flag, file, f.key)
			}
		}
		who, _ := flagValue(args, "allow-principal")
		if !slices.Contains(slices.Collect(maps.Values(principalOf)), who) || who == supers {
			t.Errorf("Job container %s: --allow-principal=%q is no application Certificate's principal", c.Name, who)
		}
		granted[who] = true
	}
	for _, want := range []string{"User:orders-producer", "User:orders-consumer"} {
		if !granted[want] {
			t.Errorf("the Job grants nothing to %s", want)
		}
	}
}

// aclCreateFlags are the flags `sluice acl create --help` lists.
func aclCreateFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(binaries(t).Sluice, "acl", "create", "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) == 0 {
		t.Fatalf("sluice acl create --help lists no flag:\n%s", out)
	}
	return flags
}
