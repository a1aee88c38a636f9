package chaos

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A secured run (Config.Security, sluice-chaos --security; docs/chaos.md):
// the harness makes a PKI in the run directory (pki/), starts every node
// with TLS on its listeners (mutual between nodes) and encrypted gossip,
// and every client of the harness trusts the run's CA. With SCRAM the
// nodes require authentication: the harness creates a SCRAM user with a
// client certificate of its own (User:chaos-admin, the only way in before
// any user exists), and every workload client authenticates as that user.

// Security is how a run's cluster is secured.
type Security string

// The security modes.
const (
	SecurityNone Security = ""
	// SecurityTLS: TLS on the client, internal and Raft listeners (mutual
	// between nodes, node certificates naming the cluster), gossip
	// encrypted; clients trust the run's CA.
	SecurityTLS Security = "tls"
	// SecurityTLSSCRAM: SecurityTLS and --authentication required: the
	// workload's clients authenticate with SCRAM, the harness's own
	// per-node samplers with a client certificate.
	SecurityTLSSCRAM Security = "tls+scram"
	// SecurityTLSSCRAMACL: SecurityTLSSCRAM and --authorizer acl with
	// User:chaos-admin (the harness's client certificate) the only super
	// user: the harness creates, as it, exactly the ACLs the workload's
	// SCRAM user needs (workloadAcls), and any denial fails the run.
	SecurityTLSSCRAMACL Security = "tls+scram+acl"
)

// ParseSecurity parses a --security value: none (or ""), tls, tls+scram,
// tls+scram+acl.
func ParseSecurity(s string) (Security, error) {
	switch Security(s) {
	case SecurityNone, "none":
		return SecurityNone, nil
	case SecurityTLS, SecurityTLSSCRAM, SecurityTLSSCRAMACL:
		return Security(s), nil
	}
	return "", fmt.Errorf("chaos: security %q: want none, %s, %s or %s", s, SecurityTLS, SecurityTLSSCRAM, SecurityTLSSCRAMACL)
}

func (s Security) tls() bool   { return s != SecurityNone }
func (s Security) scram() bool { return s == SecurityTLSSCRAM || s == SecurityTLSSCRAMACL }
func (s Security) acl() bool   { return s == SecurityTLSSCRAMACL }

// String is the mode as --security takes it.
func (s Security) String() string {
	if s == SecurityNone {
		return "none"
	}
	return string(s)
}

// The cluster name the node certificates carry, the SCRAM user the
// workload runs as and the mechanisms it has credentials for, and the
// subject of the harness's own client certificate.
const (
	chaosClusterName = "chaos"
	chaosScramUser   = "chaos"
	chaosAdminUser   = "chaos-admin"
)

// scramMechanisms are the mechanisms the SCRAM user has a credential
// for; the harness's clients alternate between them.
var scramMechanisms = []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}

// ClientSecurity is how the workload's clients reach a secured cluster.
// It holds file names only, never a secret: a copier member process gets
// it in its configuration (an environment variable) and reads the files.
type ClientSecurity struct {
	// CAFile is the run's CA (PEM); empty: plaintext.
	CAFile string `json:",omitempty"`
	// ScramUser, when set, authenticates every client with SCRAM, its
	// password in ScramPasswordFile (mode 0600); a client's mechanism is
	// taken in turn from ScramMechanisms.
	ScramUser         string   `json:",omitempty"`
	ScramPasswordFile string   `json:",omitempty"`
	ScramMechanisms   []string `json:",omitempty"`
}

// clientsMade numbers the clients a process makes, for the alternation
// of SCRAM mechanisms (started at the process id, so that the copier
// member processes, one client each, do not all take the first).
var clientsMade atomic.Uint64

func init() { clientsMade.Store(uint64(os.Getpid())) }

// options are the client options of s: none for a plaintext cluster.
func (s ClientSecurity) options() ([]client.Option, error) {
	if s.CAFile == "" {
		return nil, nil
	}
	tc, err := client.LoadTLSConfig(s.CAFile, "", "")
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithTLS(tc)}
	if s.ScramUser != "" {
		pw, err := os.ReadFile(s.ScramPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("chaos: SCRAM password: %w", err)
		}
		opts = append(opts, client.WithSCRAM(s.nextMechanism(), s.ScramUser, strings.TrimSpace(string(pw))))
	}
	return opts, nil
}

// nextMechanism is the SCRAM mechanism of the next client made: the
// ScramMechanisms taken in turn (clientsMade), the first of
// scramMechanisms when none is given.
func (s ClientSecurity) nextMechanism() string {
	mechs := s.ScramMechanisms
	if len(mechs) == 0 {
		mechs = scramMechanisms[:1]
	}
	return mechs[clientsMade.Add(1)%uint64(len(mechs))]
}

// newClient is client.New with the workload's security options first.
func (wc WorkloadConfig) newClient(addrs []string, opts ...client.Option) (*client.Client, error) {
	sec, err := wc.Security.options()
	if err != nil {
		return nil, err
	}
	return client.New(addrs, append(sec, opts...)...)
}

// kafkaSecurity is ClientSecurity for the franz-go clients of the
// Kafka-client workload, its files read once (ClientSecurity.kafka): the
// nodes' Kafka listeners serve TLS like their client listeners, and SASL
// SCRAM onto the same users (docs/security.md, "The Kafka listener").
// The zero value is plaintext without authentication.
type kafkaSecurity struct {
	sec ClientSecurity
	tls *tls.Config // trusting the run's CA; nil: plaintext
	// pass is the SCRAM user's password (sec.ScramUser; "": no SASL).
	pass string
}

// kafka reads what the franz-go clients need of s.
func (s ClientSecurity) kafka() (kafkaSecurity, error) {
	k := kafkaSecurity{sec: s}
	if s.CAFile == "" {
		return k, nil
	}
	var err error
	if k.tls, err = client.LoadTLSConfig(s.CAFile, "", ""); err != nil {
		return k, err
	}
	if s.ScramUser != "" {
		pw, err := os.ReadFile(s.ScramPasswordFile)
		if err != nil {
			return k, fmt.Errorf("chaos: SCRAM password: %w", err)
		}
		k.pass = strings.TrimSpace(string(pw))
	}
	return k, nil
}

// kafkaDialer is franz-go's dialer signature (kgo.Dialer).
type kafkaDialer = func(ctx context.Context, network, host string) (net.Conn, error)

// opts are the security options of one new franz-go client: TLS trusting
// the run's CA, and with a SCRAM user SASL as that user by the next
// mechanism in turn (nextMechanism, as the gRPC clients alternate). dial,
// when not nil, is the client's own dialer (the Kafka copier's
// kafkaConns): its connections are then wrapped in TLS here, since
// franz-go's DialTLSConfig does not combine with a Dialer.
func (k kafkaSecurity) opts(dial kafkaDialer) []kgo.Opt {
	var opts []kgo.Opt
	switch {
	case k.tls == nil && dial != nil:
		opts = append(opts, kgo.Dialer(dial))
	case dial != nil:
		opts = append(opts, kgo.Dialer(k.tlsOver(dial)))
	case k.tls != nil:
		opts = append(opts, kgo.DialTLSConfig(k.tls))
	}
	if k.pass != "" {
		a := scram.Auth{User: k.sec.ScramUser, Pass: k.pass}
		m := a.AsSha256Mechanism()
		if k.sec.nextMechanism() == "SCRAM-SHA-512" {
			m = a.AsSha512Mechanism()
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// tlsOver is dial with a TLS client handshake on each connection, the
// server name the dialed host (the nodes' certificates are valid for
// 127.0.0.1), as kgo.DialTLSConfig does it.
func (k kafkaSecurity) tlsOver(dial kafkaDialer) kafkaDialer {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := dial(ctx, network, host)
		if err != nil {
			return nil, err
		}
		tc := k.tls.Clone()
		if tc.ServerName, _, err = net.SplitHostPort(host); err != nil {
			c.Close()
			return nil, err
		}
		t := tls.Client(c, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return t, nil
	}
}

// pki is a secured run's certificates, keys and secrets, in Dir/pki.
type pki struct {
	mode     Security
	dir      string
	caFile   string
	nodeCert map[int32]string
	nodeKey  map[int32]string
	// adminCert and adminKey are the harness's client certificate
	// (User:chaos-admin with the nodes' mapping rule).
	adminCert, adminKey string
	gossipKeyFile       string
	// password is the SCRAM user's, also in passwordFile (0600).
	password, passwordFile string
}

// newPKI makes the run's CA, a certificate per node (auth.CreateNode,
// naming the cluster chaosClusterName; valid for 127.0.0.1, where the
// nodes are dialed), the harness's client certificate, a gossip key, and
// with SCRAM the user's password. The CA's key is not kept: nothing is
// signed once the run starts.
func newPKI(dir string, mode Security, ids []int32) (*pki, error) {
	p := &pki{mode: mode, dir: filepath.Join(dir, "pki"), nodeCert: map[int32]string{}, nodeKey: map[int32]string{}}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	write := func(name string, data []byte, mode os.FileMode) (string, error) {
		path := filepath.Join(p.dir, name)
		return path, os.WriteFile(path, data, mode)
	}
	caPEM, caKey, err := auth.CreateCA(auth.CAOptions{CommonName: "Sluice chaos CA"})
	if err != nil {
		return nil, err
	}
	ca, err := auth.LoadCA(caPEM, caKey)
	if err != nil {
		return nil, err
	}
	if p.caFile, err = write("ca.crt", caPEM, 0o644); err != nil {
		return nil, err
	}
	for _, id := range ids {
		name := fmt.Sprintf("node-%d", id)
		c, k, err := auth.CreateNode(ca, auth.NodeOptions{Cluster: chaosClusterName, Name: name})
		if err != nil {
			return nil, err
		}
		if p.nodeCert[id], err = write(name+".crt", c, 0o644); err != nil {
			return nil, err
		}
		if p.nodeKey[id], err = write(name+".key", k, 0o600); err != nil {
			return nil, err
		}
	}
	c, k, err := auth.CreateClient(ca, auth.ClientOptions{User: chaosAdminUser})
	if err != nil {
		return nil, err
	}
	if p.adminCert, err = write("client."+chaosAdminUser+".crt", c, 0o644); err != nil {
		return nil, err
	}
	if p.adminKey, err = write("client."+chaosAdminUser+".key", k, 0o600); err != nil {
		return nil, err
	}
	if p.gossipKeyFile, err = write("gossip.key", []byte(randomBase64(32)+"\n"), 0o600); err != nil {
		return nil, err
	}
	if mode.scram() {
		p.password = randomBase64(24)
		if p.passwordFile, err = write("scram-password", []byte(p.password+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func randomBase64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(b)
}

// args are the sluiced flags every node gets.
func (p *pki) args() []string {
	a := []string{"--tls-ca-file", p.caFile, "--cluster-name", chaosClusterName, "--gossip-key-file", p.gossipKeyFile}
	if p.mode.scram() {
		// Client certificates are verified when given: the harness's own
		// (User:chaos-admin by the rule) creates the SCRAM user, then
		// samples each node; the workload authenticates with SCRAM.
		a = append(a, "--authentication", "required", "--client-auth", "request",
			"--tls-principal-mapping-rules", "RULE:^CN=(.*)$/$1/,DEFAULT")
	}
	if p.mode.acl() {
		a = append(a, "--authorizer", "acl", "--super-users", "User:"+chaosAdminUser)
	}
	return a
}

// nodeArgs are node id's certificate flags.
func (p *pki) nodeArgs(id int32) []string {
	return []string{"--tls-cert-file", p.nodeCert[id], "--tls-key-file", p.nodeKey[id]}
}

// clientSecurity is what the workload's clients get.
func (p *pki) clientSecurity() ClientSecurity {
	s := ClientSecurity{CAFile: p.caFile}
	if p.mode.scram() {
		s.ScramUser, s.ScramPasswordFile, s.ScramMechanisms = chaosScramUser, p.passwordFile, scramMechanisms
	}
	return s
}

// adminTLS is the TLS configuration of the harness's own connections that
// do not authenticate with SCRAM: the CA, and with SCRAM the harness's
// client certificate.
func (p *pki) adminTLS() (*tls.Config, error) {
	if p.mode.scram() {
		return client.LoadTLSConfig(p.caFile, p.adminCert, p.adminKey)
	}
	return client.LoadTLSConfig(p.caFile, "", "")
}

// createUsers prepares the clients of a secured run before the workload
// starts: with SCRAM it creates the SCRAM user, a credential per
// mechanism, as the harness (its client certificate); then it checks that
// every node answers every client setting as it should (over TLS, and
// with SCRAM as the user by each mechanism), and logs how.
func (r *runner) createUsers() error {
	p := r.pki
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if p.mode.scram() {
		if err := r.upsertScramUser(ctx); err != nil {
			return err
		}
	}
	mechs := []string{""}
	if p.mode.scram() {
		mechs = scramMechanisms
	}
	for _, id := range r.cluster.IDs() {
		for _, m := range mechs {
			sec := r.cfg.Workload.Security
			sec.ScramMechanisms = []string{m}
			who, err := whoAmI(ctx, r.cluster.Addrs(id)[0], sec)
			if err != nil {
				return fmt.Errorf("chaos: node %d does not answer the secured client (%s): %w", id, cmp.Or(m, "TLS"), err)
			}
			r.log.Info("secured client checked", "node", id, "principal", who.GetPrincipal(), "authenticated_by", who.GetAuthenticatedBy(),
				"tls", who.GetTlsVersion(), "authentication_required", who.GetAuthenticationRequired())
		}
	}
	return nil
}

// whoAmI asks the node at addr, until ctx ends, who a client with sec is,
// and checks the answer: over TLS, and as the SCRAM user when sec has one.
func whoAmI(ctx context.Context, addr string, sec ClientSecurity) (*sluicev1.WhoAmIResponse, error) {
	wc := WorkloadConfig{Security: sec}
	cl, err := wc.newClient([]string{addr}, client.WithRequestTimeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var last error // the last answer that was not the deadline's
	for {
		who, err := cl.WhoAmI(ctx)
		if err == nil {
			switch {
			case !who.GetTls():
				err = errors.New("the connection is not TLS")
			case sec.ScramUser != "" && (who.GetPrincipal() != "User:"+sec.ScramUser || who.GetAuthenticatedBy() != sec.ScramMechanisms[0]):
				err = fmt.Errorf("principal %s authenticated by %s, want User:%s by %s", who.GetPrincipal(), who.GetAuthenticatedBy(), sec.ScramUser, sec.ScramMechanisms[0])
			default:
				return who, nil
			}
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return nil, last
		}
		time.Sleep(200 * time.Millisecond) // retry pacing within ctx (the user reaches every broker within moments)
	}
}

// upsertScramUser creates the SCRAM user, a credential per mechanism with
// the run's password, as the harness (its client certificate: no user
// exists yet to authenticate as), retrying until ctx ends (the controller
// may still be electing).
func (r *runner) upsertScramUser(ctx context.Context) error {
	tc, err := r.pki.adminTLS()
	if err != nil {
		return err
	}
	cl, err := client.New(r.cluster.Addrs(), client.WithTLS(tc), client.WithRequestTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, m := range scramMechanisms {
		for {
			err := cl.UpsertScramUser(ctx, chaosScramUser, m, r.pki.password, 0)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("chaos: create SCRAM user %s (%s): %w", chaosScramUser, m, err)
			}
			r.log.Info("SCRAM user not created yet", "mechanism", m, "err", err)
			time.Sleep(500 * time.Millisecond) // retry pacing within ctx
		}
	}
	r.log.Info("SCRAM user created", "user", chaosScramUser, "mechanisms", scramMechanisms, "password_file", r.pki.passwordFile)
	return nil
}

// SecurityCounts are what the nodes' TLS and authentication did in a
// secured run, summed over the nodes from their /metrics at the end of the
// run: counters since each node's last start (a restart resets them).
type SecurityCounts struct {
	// Authentications are the SCRAM exchanges completed, by mechanism.
	Authentications map[string]int
	// Failures are the calls and exchanges refused, by reason
	// (session_invalid: a session token the node does not know, e.g.
	// one from before its restart; the client authenticates again).
	Failures map[string]int
	// Refusals are the TLS handshakes refused, by "listener/reason"
	// (handshake: a connection cut in the middle, as partitions do).
	Refusals map[string]int
	// With ACLs (tls+scram+acl): Denials are the authorizer's denials
	// (sluice_authorization_denials_total) by resource type, since each
	// node's last start, and DeniedLogLines the "authorization denied"
	// lines in the nodes' logs, every incarnation's. Either nonzero fails
	// the run: the workload's ACLs were not sufficient.
	ACL            bool
	Denials        map[string]int
	DeniedLogLines int
}

// String is the counts for the run's log.
func (s SecurityCounts) String() string {
	f := func(m map[string]int) string {
		if len(m) == 0 {
			return "none"
		}
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
		}
		return strings.Join(parts, " ")
	}
	out := fmt.Sprintf("authentications %s; authentication failures %s; TLS handshake refusals %s",
		f(s.Authentications), f(s.Failures), f(s.Refusals))
	if s.ACL {
		out += fmt.Sprintf("; authorization denials %s (%d logged)", f(s.Denials), s.DeniedLogLines)
	}
	return out
}

// securityCounts reads SecurityCounts from every node that answers.
func (r *runner) securityCounts() (SecurityCounts, error) {
	s := SecurityCounts{Authentications: map[string]int{}, Failures: map[string]int{}, Refusals: map[string]int{},
		ACL: r.pki.mode.acl(), Denials: map[string]int{}}
	hc := &http.Client{Timeout: 5 * time.Second}
	var errs []error
	for _, n := range r.cluster.Nodes {
		mfs, err := scrape(hc, n.HTTP)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", n.ID, err))
			continue
		}
		add := func(into map[string]int, family string, labels ...string) {
			for _, m := range mfs[family].GetMetric() {
				var key []string
				for _, l := range labels {
					for _, lp := range m.GetLabel() {
						if lp.GetName() == l {
							key = append(key, lp.GetValue())
						}
					}
				}
				if v := int(m.GetCounter().GetValue()); v > 0 {
					into[strings.Join(key, "/")] += v
				}
			}
		}
		add(s.Authentications, "sluice_authentications_total", "mechanism")
		add(s.Failures, "sluice_authentication_failures_total", "reason")
		add(s.Refusals, "sluice_tls_handshake_refusals_total", "listener", "reason")
		if s.ACL {
			add(s.Denials, "sluice_authorization_denials_total", "resource_type")
		}
	}
	return s, errors.Join(errs...)
}

// scrape reads the metrics a node serves on its (plaintext) HTTP port.
func scrape(hc *http.Client, httpAddr string) (map[string]*dto.MetricFamily, error) {
	resp, err := hc.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// refusalLines returns up to n lines of the nodes' logs about a refused
// authentication other than a forgotten session (session_invalid, expected
// after a restart), prefixed with the node: what a failure count names.
func (r *runner) refusalLines(n int) []string {
	var out []string
	for _, node := range r.cluster.Nodes {
		data, err := os.ReadFile(node.LogPath)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if (strings.Contains(l, "authentication refused") || strings.Contains(l, "call refused")) && !strings.Contains(l, "reason=session_invalid") {
				out = append(out, fmt.Sprintf("node %d: %s", node.ID, l))
				if len(out) == n {
					return out
				}
			}
		}
	}
	return out
}
