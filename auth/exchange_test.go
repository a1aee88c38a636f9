package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdg-go/scram"
)

// exchange runs a SCRAM client (xdg-go's, as Kafka clients use) against
// one ScramExchange, with authzid; it returns the Login and the step at
// which the server refused (0: none).
func exchange(a *Authenticator, m ScramMechanism, user, password, authzid string) (*Login, int, error) {
	hf := scram.SHA256
	if m == ScramSHA512 {
		hf = scram.SHA512
	}
	cl, err := hf.NewClient(user, password, authzid)
	if err != nil {
		return nil, 0, err
	}
	conv := cl.NewConversation()
	x, err := a.NewScramExchange(string(m))
	if err != nil {
		return nil, 1, err
	}
	first, _ := conv.Step("")
	out, login, err := x.Step([]byte(first))
	if err != nil {
		return nil, 1, err
	}
	if login != nil {
		return nil, 1, errors.New("a login after the first message")
	}
	final, err := conv.Step(string(out))
	if err != nil {
		return nil, 0, err
	}
	out, login, err = x.Step([]byte(final))
	if err != nil {
		return nil, 2, err
	}
	if _, err := conv.Step(string(out)); err != nil || !conv.Valid() {
		return nil, 0, errors.New("the server's signature did not verify")
	}
	return login, 0, nil
}

// RFC 5802 §5.1: an unknown user goes through the exchange as a wrong
// password does, with a salt that does not change between attempts, and
// is refused at the proof — the first answer shows nothing.
func TestScramUnknownUserReadsAsAWrongPassword(t *testing.T) {
	u := &users{}
	u.set(t, "alice", ScramSHA256, "s3cret")
	a := NewAuthenticator(u.lookup, 0)
	for _, c := range []struct{ what, user, password string }{
		{"a wrong password", "alice", "wrong"},
		{"an unknown user", "mallory", "x"},
	} {
		login, step, err := exchange(a, ScramSHA256, c.user, c.password, "")
		if !errors.Is(err, ErrAuthenticationFailed) || step != 2 || login != nil {
			t.Errorf("%s: refused at step %d with %v; want ErrAuthenticationFailed at the proof (step 2)", c.what, step, err)
		}
	}
	salt := func(user string) string {
		x, err := a.NewScramExchange(string(ScramSHA256))
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := x.Step([]byte("n,,n=" + user + ",r=abcdefgh"))
		if err != nil {
			t.Fatal(err)
		}
		_, s, _ := strings.Cut(string(out), ",s=")
		s, _, _ = strings.Cut(s, ",")
		return s
	}
	if s1, s2 := salt("mallory"), salt("mallory"); s1 != s2 || s1 == salt("trudy") {
		t.Errorf("made-up salts: %q then %q for one name, %q for another; want one per name, stable", s1, s2, salt("trudy"))
	}
	login, _, err := exchange(a, ScramSHA256, "alice", "s3cret", "")
	if err != nil || login == nil || login.Principal() != User("alice") || login.Mechanism != ScramSHA256 {
		t.Fatalf("alice: %+v, %v", login, err)
	}
	if !a.Current(*login) {
		t.Fatal("a fresh login is not current")
	}
	u.set(t, "alice", ScramSHA256, "new")
	if a.Current(*login) {
		t.Error("a login of the old password is current after a new one")
	}
}

// Kafka refuses an authorization id other than the user; so do both
// doors (there is no impersonation).
func TestScramAuthorizationIDMustBeTheUser(t *testing.T) {
	u := &users{}
	u.set(t, "alice", ScramSHA512, "s3cret")
	a := NewAuthenticator(u.lookup, 0)
	if _, step, err := exchange(a, ScramSHA512, "alice", "s3cret", "admin"); !errors.Is(err, ErrAuthenticationFailed) || step != 1 {
		t.Errorf("authzid admin: step %d, %v", step, err)
	}
	if login, _, err := exchange(a, ScramSHA512, "alice", "s3cret", "alice"); err != nil || login.User != "alice" {
		t.Errorf("authzid alice: %+v, %v", login, err)
	}
	if _, err := a.NewScramExchange("PLAIN"); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Errorf("a SCRAM exchange of PLAIN: %v", err)
	}
}

// PLAIN is checked against the SCRAM credential (SHA-256's, else
// SHA-512's): the password must derive its StoredKey.
func TestPlainAgainstScramCredentials(t *testing.T) {
	u := &users{}
	u.set(t, "alice", ScramSHA256, "s3cret")
	u.set(t, "bob", ScramSHA512, "hunter2")
	a := NewAuthenticator(u.lookup, 0)
	plain := func(parts ...string) []byte { return []byte(strings.Join(parts, "\x00")) }
	for _, c := range []struct {
		user string
		mech ScramMechanism
		msg  []byte
	}{
		{"alice", ScramSHA256, plain("", "alice", "s3cret")},
		{"alice", ScramSHA256, plain("alice", "alice", "s3cret")},
		{"bob", ScramSHA512, plain("", "bob", "hunter2")},
	} {
		login, err := a.Plain(c.msg)
		if err != nil || login.User != c.user || login.Mechanism != c.mech || !a.Current(login) {
			t.Errorf("%q: %+v, %v", c.msg, login, err)
		}
	}
	for _, c := range []struct {
		what string
		msg  []byte
	}{
		{"a wrong password", plain("", "alice", "wrong")},
		{"an unknown user", plain("", "mallory", "x")},
		{"another authorization id", plain("admin", "alice", "s3cret")},
		{"no password", plain("", "alice", "")},
		{"no user", plain("", "", "s3cret")},
		{"two fields", plain("alice", "s3cret")},
		{"four fields", plain("", "alice", "s3cret", "x")},
		{"not UTF-8", plain("", "alice", "\xff")},
		{"an overlong user", plain("", strings.Repeat("a", 256), "x")},
	} {
		if login, err := a.Plain(c.msg); !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%s: %+v, %v; want ErrAuthenticationFailed", c.what, login, err)
		}
	}
	login, _ := a.Plain(plain("", "alice", "s3cret"))
	u.remove("alice", ScramSHA256)
	if a.Current(login) {
		t.Error("a PLAIN login of a deleted user is current")
	}
}

// RFC 7628 §3.1's client response, as franz-go, librdkafka and the Java
// client send it.
func TestParseOAuthBearer(t *testing.T) {
	good := []struct {
		msg            string
		authzid, token string
		ext            map[string]string
	}{
		{"n,,\x01auth=Bearer abc.def.ghi\x01\x01", "", "abc.def.ghi", nil},
		{"n,a=svc,\x01auth=bearer  tok\x01\x01", "svc", "tok", nil},
		{"n,a=a=2Cb=3D,\x01host=h\x01auth=Bearer t\x01port=9092\x01\x01", "a,b=", "t", map[string]string{"host": "h", "port": "9092"}},
	}
	for _, c := range good {
		r, err := ParseOAuthBearer([]byte(c.msg))
		if err != nil || r.AuthzID != c.authzid || r.Token != c.token || len(r.Extensions) != len(c.ext) {
			t.Errorf("%q: %+v, %v", c.msg, r, err)
		}
		for k, v := range c.ext {
			if r.Extensions[k] != v {
				t.Errorf("%q: extension %s=%q, want %q", c.msg, k, r.Extensions[k], v)
			}
		}
	}
	for _, bad := range []string{
		"", "\x01", "n,,", "y,,\x01auth=Bearer t\x01\x01", "p=tls-unique,,\x01auth=Bearer t\x01\x01",
		"n,,\x01auth=Bearer t\x01", "n,,auth=Bearer t\x01\x01", "n,,\x01\x01", "n,,\x01auth=Basic t\x01\x01",
		"n,,\x01auth=Bearer \x01\x01", "n,,\x01auth=Bearer a b\x01\x01", "n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
		"n,,\x01k1=v\x01auth=Bearer t\x01\x01", "n,,\x01auth=Bearer t\x01k=\x00\x01\x01", "n,x,\x01auth=Bearer t\x01\x01",
	} {
		if r, err := ParseOAuthBearer([]byte(bad)); err == nil {
			t.Errorf("%q parsed: %+v", bad, r)
		}
	}
	if got := string(OAuthBearerError("invalid_token")); got != `{"status":"invalid_token"}` {
		t.Errorf("error challenge %s", got)
	}
}

// ValidateWithExpiry gives the token's exp, from the cache as from a
// first check.
func TestJWTValidateWithExpiry(t *testing.T) {
	now := time.Now()
	iss := newIssuer(t, "k1")
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, iss.jwks(), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := NewJWTValidator(JWTConfig{JWKSFile: file, Audience: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(time.Hour).Truncate(time.Second)
	tok := iss.sign(map[string]any{"sub": "svc", "aud": "sluice", "exp": exp.Unix()})
	for i := range 2 {
		c, got, err := v.ValidateWithExpiry(tok, now)
		if err != nil || c.Principal != User("svc") || !got.Equal(exp) {
			t.Fatalf("check %d: %+v, expiry %v, %v; want %v", i, c, got, err, exp)
		}
	}
	if _, _, err := v.ValidateWithExpiry(tok, exp.Add(time.Minute)); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("after its expiry: %v", err)
	}
}
