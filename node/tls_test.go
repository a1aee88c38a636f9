package node_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// pki is a test cluster's certificates (nodetest.PKI, shared with the
// other packages' tests).
type pki = nodetest.PKI

func newPKI(t *testing.T) *pki { return nodetest.NewPKI(t) }

// A three-node cluster with TLS on: Raft, registration, replication and
// markers over mutual TLS between nodes, clients over TLS with
// certificates required; it forms, replicates acks=all, and serves a
// client that trusts its CA.
func TestTLSClusterReplicatesOverMutualTLS(t *testing.T) {
	p := newPKI(t)
	for _, n := range []string{"node1", "node2", "node3"} {
		p.Node(n, auth.DefaultClusterName, p.CA)
	}
	p.Client("alice", p.CA, time.Time{})
	c := nodetest.NewCluster(t, []int32{1, 2, 3}, true, nil)
	c.ConfigureAll(func(id int32, cfg *node.Config) {
		p.UseTLS(cfg, fmt.Sprintf("node%d", id))
		cfg.ClientAuth = "require"
	})
	c.StartAll()

	cl, err := client.New([]string{c.Node(1).Addr()}, client.WithTLS(p.ClientTLS("alice")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cx := ctx(t)
	if err := cl.CreateTopic(cx, "secure", 1, 3, nil); err != nil {
		t.Fatal(err)
	}
	c.WaitTopic("secure", 1)
	pr, err := cl.NewProducer(client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	acked := map[int64]string{}
	for i := range 20 {
		v := fmt.Sprintf("v%d", i)
		md, err := pr.SendSync(cx, client.Record{Topic: "secure", Partition: 0, Value: []byte(v)})
		if err != nil {
			t.Fatal(err)
		}
		acked[md.Offset] = v
	}
	checkAcked(t, cx, cl, "secure", acked)
	// acks=all answered: the followers have every record, fetched over
	// mutual TLS.
	for id, n := range c.Nodes() {
		p, err := n.Replicas().Replica("secure", 0)
		if err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
		wait.For(t, 10*time.Second, fmt.Sprintf("node %d has the 20 records", id), func() error {
			if end := p.LogEndOffset(); end != 20 {
				return fmt.Errorf("log end %d", end)
			}
			return nil
		})
	}
}

// Each kind of bad caller is refused with a handshake error, counted by
// reason, and the node keeps serving the others.
func TestTLSRefusesBadCallers(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	p.Node("intruder", "other", p.CA) // a node of another cluster, same CA
	p.Client("alice", p.CA, time.Time{})
	p.Client("old", p.CA, time.Now().Add(-3*time.Hour))  // valid for an hour from four hours ago: expired
	p.Client("early", p.CA, time.Now().Add(3*time.Hour)) // valid from two hours from now
	foreign := p.WriteCA("foreign")
	p.Node("foreignnode", auth.DefaultClusterName, foreign)
	p.Client("mallory", foreign, time.Time{})
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.UseTLS(cfg, "node1")
		cfg.ClientAuth = "require"
		cfg.HTTPListen = "127.0.0.1:0"
	})
	n := s.Node

	// call makes one RPC on addr with creds and returns its error.
	call := func(addr string, creds credentials.TransportCredentials, internal bool) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if internal {
			_, err = internalv1.NewControllerClient(cc).RegisterBroker(cx, &internalv1.RegisterBrokerRequest{BrokerId: 9, Address: "127.0.0.1:1", IncarnationId: "x"})
		} else {
			_, err = sluicev1.NewAdminClient(cc).Metadata(cx, &sluicev1.MetadataRequest{})
		}
		return err
	}
	// always presents cfg's certificate, whatever CAs the server names
	// (Go's client would otherwise send none that the server's CAs did
	// not sign; other clients send theirs).
	always := func(cfg *tls.Config) *tls.Config {
		if len(cfg.Certificates) > 0 {
			cert := cfg.Certificates[0]
			cfg.Certificates = nil
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		}
		return cfg
	}
	tlsWith := func(caFile, cert string) credentials.TransportCredentials {
		cfg := always(p.ClientTLS(cert))
		if caFile != "" {
			pem, _ := os.ReadFile(caFile)
			cfg.RootCAs = x509.NewCertPool()
			cfg.RootCAs.AppendCertsFromPEM(pem)
		}
		cfg.ServerName = "localhost"
		return credentials.NewTLS(cfg)
	}
	// nodeTLS dials a node's inter-node listener as a node would (no host
	// name check), presenting cert.
	nodeTLS := func(cert string) credentials.TransportCredentials {
		cfg := always(p.ClientTLS(cert))
		cfg.InsecureSkipVerify = true
		return credentials.NewTLS(cfg)
	}

	if err := call(n.Addr(), tlsWith("", "alice"), false); err != nil {
		t.Fatalf("a client with a certificate of the CA: %v", err)
	}
	for _, bad := range []struct {
		what     string
		addr     string
		creds    credentials.TransportCredentials
		internal bool
	}{
		{"plaintext on the client listener", n.Addr(), insecure.NewCredentials(), false},
		{"no client certificate (required)", n.Addr(), tlsWith("", ""), false},
		{"a client certificate of another CA", n.Addr(), tlsWith("", "mallory"), false},
		{"an expired client certificate", n.Addr(), tlsWith("", "old"), false},
		{"a client certificate not valid yet", n.Addr(), tlsWith("", "early"), false},
		{"a client that trusts another CA", n.Addr(), tlsWith(p.Path("foreign.crt"), "alice"), false},
		{"plaintext on the internal listener", n.InternalAddr(), insecure.NewCredentials(), true},
		{"a client certificate on the internal listener", n.InternalAddr(), nodeTLS("alice"), true},
		{"a node certificate of another cluster", n.InternalAddr(), nodeTLS("intruder"), true},
		{"a node certificate of another CA", n.InternalAddr(), nodeTLS("foreignnode"), true},
	} {
		err := call(bad.addr, bad.creds, bad.internal)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want UNAVAILABLE (refused at the handshake)", bad.what, err)
		}
	}
	// The Raft port: a client certificate is refused there too.
	cfg := p.ClientTLS("alice")
	cfg.InsecureSkipVerify = true
	if err := rawTLS(n.RaftAddr(), cfg); err == nil {
		t.Error("a client certificate on the Raft port was not refused")
	}

	// Still serving the good caller.
	if err := call(n.Addr(), tlsWith("", "alice"), false); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	// Counted by reason.
	wait.For(t, 5*time.Second, "refusals counted by reason", func() error {
		_, body := httpGet(t, n.HTTPAddr(), "/metrics")
		for _, want := range []string{
			`sluice_tls_handshake_refusals_total{listener="client",reason="not_tls"}`,
			`sluice_tls_handshake_refusals_total{listener="client",reason="no_certificate"}`,
			`sluice_tls_handshake_refusals_total{listener="client",reason="unknown_ca"}`,
			`sluice_tls_handshake_refusals_total{listener="client",reason="expired"}`,
			`sluice_tls_handshake_refusals_total{listener="internal",reason="not_tls"}`,
			`sluice_tls_handshake_refusals_total{listener="internal",reason="not_a_node"}`,
			`sluice_tls_handshake_refusals_total{listener="internal",reason="unknown_ca"}`,
			`sluice_tls_handshake_refusals_total{listener="raft",reason="not_a_node"}`,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})
}

// rawTLS opens a TLS connection to addr and sends a byte: the error of the
// handshake or of the exchange that shows the server refused it (with TLS
// 1.3 a client learns of a refused certificate at its first read).
func rawTLS(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte{0}); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil // accepted: the server waits for more
	}
	return err
}

// A node's certificate files replaced under it (as Kubernetes rotates a
// mounted Secret) are used for new connections, without a restart; a
// connection open keeps working.
func TestTLSCertificateReloadsWithoutRestart(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { p.UseTLS(cfg, "node1"); cfg.HTTPListen = "127.0.0.1:0" })
	n := s.Node
	cl, err := client.New([]string{n.Addr()}, client.WithTLS(p.ClientTLS("")))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cx := ctx(t)
	if err := cl.CreateTopic(cx, "r", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	served := func() *x509.Certificate {
		cfg := p.ClientTLS("")
		cfg.ServerName, cfg.NextProtos = "localhost", []string{"h2"}
		conn, err := tls.Dial("tcp", n.Addr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	before := served()
	p.Node("node1", auth.DefaultClusterName, p.CA) // a new certificate, same identity
	wait.For(t, 10*time.Second, "the new certificate served", func() error {
		if got := served(); got.SerialNumber.Cmp(before.SerialNumber) == 0 {
			return errors.New("still the old one")
		}
		return nil
	})
	// The open connection, made with the old certificate, still serves.
	if _, err := cl.Metadata(cx); err != nil {
		t.Fatalf("the connection open before the rotation: %v", err)
	}

	// A half-written rotation (a key that is not the certificate's) keeps
	// the last good pair in use.
	good := served()
	if err := os.WriteFile(p.Path("node1.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Handshakes until the node has looked at the changed files and
	// counted the failed reload; the certificate served is the good one.
	wait.For(t, 10*time.Second, "the failed reload counted", func() error {
		if got := served(); got.SerialNumber.Cmp(good.SerialNumber) != 0 {
			t.Fatal("a broken key file replaced the certificate in use")
		}
		_, body := httpGet(t, n.HTTPAddr(), "/metrics")
		if !strings.Contains(body, `sluice_tls_reloads_total{result="failed"} 1`) {
			return errors.New("no failed reload counted yet")
		}
		return nil
	})
	if got := served(); got.SerialNumber.Cmp(good.SerialNumber) != 0 {
		t.Fatal("a broken key file replaced the certificate in use")
	}
	if _, body := httpGet(t, n.HTTPAddr(), "/metrics"); !strings.Contains(body, `sluice_tls_reloads_total{result="ok"} 1`) {
		t.Fatal("the good rotation was not counted")
	}
}

// TLS settings that cannot work are refused at start with a clear error.
func TestTLSBadSettingsRefusedAtStart(t *testing.T) {
	p := newPKI(t)
	p.Node("other", "other", p.CA)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	for _, bad := range []struct {
		what string
		edit func(*node.Config)
		want string
	}{
		{"a certificate without its CA", func(c *node.Config) { p.UseTLS(c, "node1"); c.TLSCAFile = "" }, "all three"},
		{"client auth without TLS", func(c *node.Config) { c.ClientAuth = "require" }, "needs TLS"},
		{"an unknown client auth", func(c *node.Config) { p.UseTLS(c, "node1"); c.ClientAuth = "maybe" }, "none, request or require"},
		{"a node certificate of another cluster", func(c *node.Config) { p.UseTLS(c, "other") }, "names no node"},
		{"a key that is not the certificate's", func(c *node.Config) { p.UseTLS(c, "node1"); c.TLSKeyFile = p.Path("other.key") }, "private key does not match"},
	} {
		cfg := nodetest.Config(t, t.TempDir())
		bad.edit(&cfg)
		n, err := node.Start(cfg)
		if err == nil {
			n.Abort()
			t.Errorf("%s: started", bad.what)
			continue
		}
		if !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want it to say %q", bad.what, err, bad.want)
		}
	}
}

// /debug/pprof is served only when --pprof asks for it.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) { cfg.HTTPListen = "127.0.0.1:0"; cfg.Pprof = true })
	if code, _ := httpGet(t, s.Node.HTTPAddr(), "/debug/pprof/"); code != 200 {
		t.Fatalf("/debug/pprof/ with --pprof: %d", code)
	}
}
