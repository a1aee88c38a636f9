package auth

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
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

// librdkafka before 2.6.1 (confluentinc/librdkafka#4895) sends its own
// nonce again before the server nonce in its final message. The exchange
// accepts exactly that form with a right password (the server's signature
// verifies), refuses it with a wrong one or an unknown user, and still
// refuses any other nonce: its own nonce alone, the server nonce with
// something else before it, a truncated server nonce.
func TestScramLibrdkafkaDoubledNonce(t *testing.T) {
	u := &users{}
	u.set(t, "alice", ScramSHA256, "s3cret")
	u.set(t, "bob", ScramSHA512, "hunter2")
	a := NewAuthenticator(u.lookup, 0)
	// run plays a client that builds its final message's nonce with
	// nonce(cNonce, sNonce) and proves password.
	run := func(m ScramMechanism, user, password string, nonce func(c, s string) string) (*Login, error) {
		x, err := a.NewScramExchange(string(m))
		if err != nil {
			t.Fatal(err)
		}
		const cNonce = "fyko+d2lbbFgONRv9qkxdawL"
		clientFirstBare := "n=" + user + ",r=" + cNonce
		out, _, err := x.Step([]byte("n,," + clientFirstBare))
		if err != nil {
			t.Fatal(err)
		}
		serverFirst := string(out)
		sNonce, salt64, iters := scramAttr(serverFirst, 'r'), scramAttr(serverFirst, 's'), scramAttr(serverFirst, 'i')
		salt, _ := base64.StdEncoding.DecodeString(salt64)
		n, _ := strconv.Atoi(iters)
		salted, err := SaltPassword(m, password, salt, n)
		if err != nil {
			t.Fatal(err)
		}
		hm := func(key []byte, msg string) []byte {
			mac := hmac.New(m.hash(), key)
			mac.Write([]byte(msg))
			return mac.Sum(nil)
		}
		clientKey := hm(salted, "Client Key")
		h := m.hash()()
		h.Write(clientKey)
		storedKey := h.Sum(nil)
		withoutProof := "c=biws,r=" + nonce(cNonce, sNonce)
		authMessage := clientFirstBare + "," + serverFirst + "," + withoutProof
		sig := hm(storedKey, authMessage)
		proof := make([]byte, len(clientKey))
		for i := range proof {
			proof[i] = clientKey[i] ^ sig[i]
		}
		out, login, err := x.Step([]byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)))
		if err != nil {
			return nil, err
		}
		want := "v=" + base64.StdEncoding.EncodeToString(hm(hm(salted, "Server Key"), authMessage))
		if string(out) != want {
			t.Errorf("%s %s: server signature %q, want %q", m, user, out, want)
		}
		return login, nil
	}
	doubled := func(c, s string) string { return c + s }
	for _, c := range []struct {
		m              ScramMechanism
		user, password string
		nonce          func(c, s string) string
		ok             bool
	}{
		{ScramSHA256, "alice", "s3cret", func(_, s string) string { return s }, true}, // RFC 5802
		{ScramSHA256, "alice", "s3cret", doubled, true},
		{ScramSHA512, "bob", "hunter2", doubled, true},
		{ScramSHA256, "alice", "wrong", doubled, false},
		{ScramSHA256, "mallory", "x", doubled, false},
		{ScramSHA256, "alice", "s3cret", func(c, _ string) string { return c }, false},
		{ScramSHA256, "alice", "s3cret", func(_, s string) string { return "xyz" + s }, false},
		{ScramSHA256, "alice", "s3cret", func(c, s string) string { return c + s[:len(s)-1] }, false},
	} {
		login, err := run(c.m, c.user, c.password, c.nonce)
		got := err == nil && login != nil && login.User == c.user
		if got != c.ok {
			t.Errorf("%s %s/%s nonce %q: login %v, %v; want ok=%v", c.m, c.user, c.password, c.nonce("C", "CS"), login, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("refused with %v, want ErrAuthenticationFailed", err)
		}
	}
}
