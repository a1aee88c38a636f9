package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// issuer signs tokens with its own key and publishes it as a JWKS.
type issuer struct {
	t   *testing.T
	key *ecdsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T, kid string) *issuer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{t: t, key: k, kid: kid}
}

func (i *issuer) jwks(others ...*issuer) []byte {
	set := jose.JSONWebKeySet{}
	for _, x := range append([]*issuer{i}, others...) {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &x.key.PublicKey, KeyID: x.kid, Algorithm: string(jose.ES256), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		i.t.Fatal(err)
	}
	return b
}

func (i *issuer) sign(claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: i.key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", i.kid))
	if err != nil {
		i.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		i.t.Fatal(err)
	}
	return tok
}

func TestJWTValidation(t *testing.T) {
	now := time.Now()
	iss := newIssuer(t, "k1")
	dir := t.TempDir()
	file := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(file, iss.jwks(), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTValidator(JWTConfig{JWKSFile: file, Issuer: "https://idp", Audience: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]any{"sub": "svc-orders", "iss": "https://idp", "aud": "sluice", "exp": now.Add(time.Hour).Unix()}
	c, err := v.Validate(iss.sign(good), now)
	if err != nil || c.Principal != User("svc-orders") || c.Method != MethodJWT {
		t.Fatalf("a good token: %+v, %v", c, err)
	}
	with := func(k string, val any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		if val == nil {
			delete(m, k)
		} else {
			m[k] = val
		}
		return m
	}
	other := newIssuer(t, "k1") // same key id, another key
	for _, bad := range []struct{ what, token string }{
		{"expired", iss.sign(with("exp", now.Add(-time.Hour).Unix()))},
		{"no expiry", iss.sign(with("exp", nil))},
		{"another audience", iss.sign(with("aud", "billing"))},
		{"another issuer", iss.sign(with("iss", "https://evil"))},
		{"no principal claim", iss.sign(with("sub", nil))},
		{"signed by another key", other.sign(good)},
		{"unsigned (alg none)", unsigned(good)},
		{"not a JWT", "abc.def"},
	} {
		if _, err := v.Validate(bad.token, now); !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%s: %v, want ErrAuthenticationFailed", bad.what, err)
		}
	}
	// A rotated JWKS file (a new key added) is read again.
	iss2 := newIssuer(t, "k2")
	if err := os.WriteFile(file, iss.jwks(iss2), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Validate(iss2.sign(good), now.Add(2*time.Second)); err != nil {
		t.Fatalf("a token of the key rotated in: %v", err)
	}

	// A JWKS URL, fetched again for a key id it does not know.
	var served atomic.Value
	served.Store(iss.jwks())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(served.Load().([]byte)) }))
	defer srv.Close()
	u, err := NewJWTValidator(JWTConfig{JWKSURL: srv.URL, Audience: "sluice", PrincipalClaim: "client_id"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := u.Validate(iss.sign(with("client_id", "etl")), now); err != nil || c.Principal != User("etl") {
		t.Fatalf("from the URL, principal claim client_id: %+v, %v", c, err)
	}
	served.Store(iss.jwks(iss2))
	if _, err := u.Validate(iss2.sign(with("client_id", "etl")), now); err != nil {
		t.Fatalf("a key id the URL's set did not have at first: %v", err)
	}
	if _, err := NewJWTValidator(JWTConfig{JWKSFile: file}); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("no audience: %v", err)
	}
}

// unsigned is claims as a JWT with algorithm "none".
func unsigned(claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none", "typ": "JWT"}) + "." + enc(claims) + "."
}
