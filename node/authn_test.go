package node_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// With --authentication required, a client certificate is a principal
// (through the mapping rules); a caller with none is refused everywhere
// but health and the Auth service, and counted.
func TestAuthenticationRequiredWithClientCertificates(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	c, k, err := auth.CreateClient(p.CA, auth.ClientOptions{User: "alice", OrganizationalUnit: []string{"eng"}})
	p.Write("alice", c, k, err)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.UseTLS(cfg, "node1")
		cfg.ClientAuth = "request"
		cfg.Authentication = node.AuthenticationRequired
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+),OU=eng.*$/$1/L,DEFAULT`
		cfg.HTTPListen = "127.0.0.1:0"
	})
	cx := ctx(t)
	alice, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("alice")))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	who, err := alice.WhoAmI(cx)
	if err != nil {
		t.Fatal(err)
	}
	if who.Principal != "User:alice" || who.AuthenticatedBy != "TLS" || !who.Tls || !who.AuthenticationRequired {
		t.Fatalf("alice: %+v", who)
	}
	var listeners []string
	for _, l := range who.Listeners {
		listeners = append(listeners, fmt.Sprintf("%s:%v:%s", l.Name, l.Encrypted, l.ClientAuth))
		if len(l.SaslMechanisms) > 0 {
			listeners[len(listeners)-1] += ":" + strings.Join(l.SaslMechanisms, ",")
		}
	}
	if got := strings.Join(listeners, " "); got != "client:true:request internal:true:mutual raft:true:mutual gossip:false:none http:false:none "+
		"kafka:true:request:SCRAM-SHA-256,SCRAM-SHA-512,PLAIN" {
		t.Fatalf("listeners: %s", got)
	}
	if _, err := alice.Metadata(cx); err != nil {
		t.Fatalf("alice's metadata: %v", err)
	}

	anon, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("")), client.WithRequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Metadata(cx); status.Code(errorsCause(err)) != codes.Unauthenticated && !strings.Contains(err.Error(), "authentication required") {
		t.Fatalf("anonymous metadata: %v, want UNAUTHENTICATED", err)
	}
	who, err = anon.WhoAmI(cx)
	if err != nil || who.Principal != "User:ANONYMOUS" {
		t.Fatalf("anonymous WhoAmI: %+v, %v", who, err)
	}
	// Health stays open for probes.
	cfg := p.ClientTLS("")
	cfg.ServerName = "localhost"
	cc, err := grpc.NewClient(s.Node.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := healthpb.NewHealthClient(cc).Check(cx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("anonymous health check: %v", err)
	}
	wait.For(t, 5*time.Second, "the refusal counted", func() error {
		_, body := httpGet(t, s.Node.HTTPAddr(), "/metrics")
		if !strings.Contains(body, `sluice_authentication_failures_total{reason="anonymous"}`) {
			return errString("no anonymous refusal counted")
		}
		return nil
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// errorsCause unwraps to the gRPC status error inside err, if any.
func errorsCause(err error) error {
	for e := err; e != nil; {
		if _, ok := status.FromError(e); ok {
			return e
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return err
}

// Bearer JWTs: a good one is its subject's principal; an expired one, one
// for another audience, or one signed by another key is refused.
func TestJWTBearerTokens(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwks := p.Path("jwks.json")
	if err := os.WriteFile(jwks, set, 0o644); err != nil {
		t.Fatal(err)
	}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.UseTLS(cfg, "node1")
		cfg.Authentication = node.AuthenticationRequired
		cfg.JWTJWKSFile, cfg.JWTAudience, cfg.JWTIssuer = jwks, "sluice", "https://idp"
	})
	sign := func(k *ecdsa.PrivateKey, claims map[string]any) string {
		sg, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.Signed(sg).Claims(claims).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	claims := func(aud string, exp time.Duration) map[string]any {
		return map[string]any{"sub": "svc-orders", "iss": "https://idp", "aud": aud, "exp": time.Now().Add(exp).Unix()}
	}
	call := func(tok string) (string, error) {
		cl, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("")), client.WithRequestTimeout(3*time.Second),
			client.WithBearerToken(func(context.Context) (string, error) { return tok, nil }))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, err := cl.Metadata(ctx(t)); err != nil {
			return "", err
		}
		who, err := cl.WhoAmI(ctx(t))
		if err != nil {
			return "", err
		}
		return who.Principal + " " + who.AuthenticatedBy, nil
	}
	if got, err := call(sign(key, claims("sluice", time.Hour))); err != nil || got != "User:svc-orders OAUTHBEARER" {
		t.Fatalf("a good token: %q, %v", got, err)
	}
	for _, bad := range []struct{ what, tok string }{
		{"expired", sign(key, claims("sluice", -time.Hour))},
		{"for another audience", sign(key, claims("billing", time.Hour))},
		{"signed by another key", sign(other, claims("sluice", time.Hour))},
	} {
		if _, err := call(bad.tok); err == nil || !strings.Contains(err.Error(), "bearer token refused") {
			t.Errorf("%s: %v, want the token refused", bad.what, err)
		}
	}
}

// SCRAM end to end: a user stored through the admin API (here by a
// client-certificate principal: with authentication required, the first
// user comes from a certificate) logs in with SCRAM-SHA-256 and -512 and
// produces as User:NAME; a wrong password, a deleted user and a plaintext
// exchange are refused; a new password ends the old sessions.
func TestSCRAMAuthentication(t *testing.T) {
	p := newPKI(t)
	p.Node("node1", auth.DefaultClusterName, p.CA)
	p.Client("admin", p.CA, time.Time{})
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.UseTLS(cfg, "node1")
		cfg.ClientAuth = "request"
		cfg.Authentication = node.AuthenticationRequired
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+)$/$1/`
		cfg.HTTPListen = "127.0.0.1:0"
	})
	cx := ctx(t)
	admin, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("admin")))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.UpsertScramUser(cx, "alice", "SCRAM-SHA-256", "s3cret", 0); err != nil {
		t.Fatal(err)
	}
	if err := admin.UpsertScramUser(cx, "bob", "SCRAM-SHA-512", "hunter2", 4096); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(cx, "scram", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	login := func(mech, user, password string) (*client.Client, error) {
		cl, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.ClientTLS("")), client.WithSCRAM(mech, user, password),
			client.WithRequestTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		who, err := cl.WhoAmI(cx)
		if err != nil {
			cl.Close()
			return nil, err
		}
		if who.Principal != "User:"+user || who.AuthenticatedBy != mech {
			t.Fatalf("%s: %+v", user, who)
		}
		return cl, nil
	}
	alice, err := login("SCRAM-SHA-256", "alice", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	pr, err := alice.NewProducer(client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pr.SendSync(cx, client.Record{Topic: "scram", Value: []byte("by alice")}); err != nil {
		t.Fatalf("alice produces: %v", err)
	}
	pr.Close()
	bob, err := login("SCRAM-SHA-512", "bob", "hunter2")
	if err != nil {
		t.Fatal(err)
	}
	bob.Close()
	for _, bad := range []struct{ what, mech, user, password string }{
		{"a wrong password", "SCRAM-SHA-256", "alice", "wrong"},
		{"an unknown user", "SCRAM-SHA-256", "mallory", "x"},
		{"the other mechanism", "SCRAM-SHA-512", "alice", "s3cret"},
	} {
		if cl, err := login(bad.mech, bad.user, bad.password); err == nil {
			cl.Close()
			t.Errorf("%s: logged in", bad.what)
		} else if !strings.Contains(err.Error(), "authentication failed") {
			t.Errorf("%s: %v", bad.what, err)
		}
	}
	// A new password ends alice's session at its next call; her client
	// authenticates again with the old password and is refused.
	if err := admin.UpsertScramUser(cx, "alice", "SCRAM-SHA-256", "n3w", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Metadata(cx); err == nil {
		t.Fatal("a session of the old password still serves")
	}
	if cl, err := login("SCRAM-SHA-256", "alice", "n3w"); err != nil {
		t.Fatalf("the new password: %v", err)
	} else {
		cl.Close()
	}
	// Deleted: refused.
	if err := admin.DeleteScramUser(cx, "alice", "SCRAM-SHA-256"); err != nil {
		t.Fatal(err)
	}
	if cl, err := login("SCRAM-SHA-256", "alice", "n3w"); err == nil {
		cl.Close()
		t.Fatal("a deleted user logged in")
	}
	// SCRAM over plaintext is refused by the broker itself (a node
	// without TLS; the client library would refuse first).
	plain := nodetest.StartSingle(t, t.TempDir(), nil)
	_, err = sluicev1.NewAuthClient(plain.Conn).SaslAuthenticate(cx, &sluicev1.SaslAuthenticateRequest{Mechanism: "SCRAM-SHA-256", AuthBytes: []byte("n,,n=bob,r=abc")})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "TLS only") {
		t.Fatalf("SCRAM over plaintext: %v", err)
	}
	wait.For(t, 5*time.Second, "logins and refusals counted", func() error {
		_, body := httpGet(t, s.Node.HTTPAddr(), "/metrics")
		for _, want := range []string{`sluice_authentications_total{mechanism="SCRAM-SHA-256"}`, `sluice_authentications_total{mechanism="SCRAM-SHA-512"}`,
			`sluice_authentication_failures_total{reason="sasl_failed"}`, `sluice_authentication_failures_total{reason="session_invalid"}`} {
			if !strings.Contains(body, want) {
				return errString("no " + want)
			}
		}
		return nil
	})
}
