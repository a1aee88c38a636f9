package node_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
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
)

// With --authentication required, a client certificate is a principal
// (through the mapping rules); a caller with none is refused everywhere
// but health and the Auth service, and counted.
func TestAuthenticationRequiredWithClientCertificates(t *testing.T) {
	p := newPKI(t)
	p.node("node1", auth.DefaultClusterName, p.ca)
	c, k, err := auth.CreateClient(p.ca, auth.ClientOptions{User: "alice", OrganizationalUnit: []string{"eng"}})
	p.write("alice", c, k, err)
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.useTLS(cfg, "node1")
		cfg.ClientAuth = "request"
		cfg.Authentication = node.AuthenticationRequired
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+),OU=eng.*$/$1/L,DEFAULT`
		cfg.HTTPListen = "127.0.0.1:0"
	})
	cx := ctx(t)
	alice, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.clientTLS("alice")))
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
	if _, err := alice.Metadata(cx); err != nil {
		t.Fatalf("alice's metadata: %v", err)
	}

	anon, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.clientTLS("")), client.WithRequestTimeout(3*time.Second))
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
	cfg := p.clientTLS("")
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
	p.node("node1", auth.DefaultClusterName, p.ca)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwks := p.path("jwks.json")
	if err := os.WriteFile(jwks, set, 0o644); err != nil {
		t.Fatal(err)
	}
	s := nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		p.useTLS(cfg, "node1")
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
		cl, err := client.New([]string{s.Node.Addr()}, client.WithTLS(p.clientTLS("")), client.WithRequestTimeout(3*time.Second),
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
