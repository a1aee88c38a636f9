package kafka

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/xdg-go/scram"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
)

// The SASL state machine of a connection, request by request, against a
// bare server (no broker behind it: Metadata answers from an empty
// image) whose clock the test moves.

// testUsers is an in-memory credential store.
type testUsers struct {
	mu    sync.Mutex
	creds map[string]auth.ScramCredential // user/mechanism
}

func (u *testUsers) set(t *testing.T, user string, m auth.ScramMechanism, password string) {
	t.Helper()
	salt := auth.NewSalt()
	salted, err := auth.SaltPassword(m, password, salt, auth.MinScramIterations)
	if err != nil {
		t.Fatal(err)
	}
	c, err := auth.NewScramCredential(m, auth.MinScramIterations, salt, salted)
	if err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.creds[user+"/"+string(m)] = c
}

func (u *testUsers) remove(user string, m auth.ScramMechanism) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.creds, user+"/"+string(m))
}

func (u *testUsers) lookup(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.creds[user+"/"+string(m)]
	return c, ok
}

// testClock is the server's clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// saslBench is a bare server with SASL on, its users, clock, JWT issuer
// and what it counted.
type saslBench struct {
	t      *testing.T
	addr   string
	users  *testUsers
	clock  *testClock
	client *tls.Config // nil: plaintext
	key    *ecdsa.PrivateKey

	mu                sync.Mutex
	refused, loggedIn []string
}

type benchOptions struct {
	tls, required bool
	failedDelay   time.Duration
}

func startSASL(t *testing.T, o benchOptions) *saslBench {
	t.Helper()
	b := &saslBench{t: t, users: &testUsers{creds: map[string]auth.ScramCredential{}}, clock: &testClock{now: time.Now()}}
	cache := cluster.NewMetadataCache()
	if err := cache.Update(1, nil, nil); err != nil {
		t.Fatal(err)
	}
	cache.MarkApplied(1)
	cfg := Config{Metadata: cache, Now: b.clock.Now, FailedAuthenticationDelay: o.failedDelay, Auth: Authentication{
		Authenticator: auth.NewAuthenticator(b.users.lookup, 0), Required: o.required,
		Refused: func(r string) {
			b.mu.Lock()
			b.refused = append(b.refused, r)
			b.mu.Unlock()
		},
		Succeeded: func(m string) {
			b.mu.Lock()
			b.loggedIn = append(b.loggedIn, m)
			b.mu.Unlock()
		},
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.tls {
		var srv *tls.Config
		srv, b.client = testTLS(t)
		ln = tls.NewListener(ln, srv)
		// OAUTHBEARER: tokens of b.key, for audience "sluice".
		b.key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &b.key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
		file := filepath.Join(t.TempDir(), "jwks.json")
		if err := os.WriteFile(file, set, 0o644); err != nil {
			t.Fatal(err)
		}
		if cfg.Auth.JWT, err = auth.NewJWTValidator(auth.JWTConfig{JWKSFile: file, Audience: "sluice"}); err != nil {
			t.Fatal(err)
		}
	}
	s := NewServer(cfg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(ln)
	}()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	b.addr = ln.Addr().String()
	return b
}

// testTLS is a server configuration (a node certificate of a new CA,
// client certificates verified when given) and a client one trusting it.
func testTLS(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	caPEM, caKey, err := auth.CreateCA(auth.CAOptions{CommonName: "ca"})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := auth.LoadCA(caPEM, caKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := auth.CreateNode(ca, auth.NodeOptions{Cluster: auth.DefaultClusterName, Name: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven},
		&tls.Config{RootCAs: pool, ServerName: "localhost"}
}

func (b *saslBench) dial() net.Conn {
	c := dial(b.t, b.addr)
	if b.client != nil {
		tc := tls.Client(c, b.client)
		if err := tc.Handshake(); err != nil {
			b.t.Fatal(err)
		}
		return tc
	}
	return c
}

// token is a JWT of subject sub for audience "sluice", expiring at exp.
func (b *saslBench) token(sub, aud string, exp time.Time) string {
	b.t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: b.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		b.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(map[string]any{"sub": sub, "aud": aud, "exp": exp.Unix()}).Serialize()
	if err != nil {
		b.t.Fatal(err)
	}
	return tok
}

func (b *saslBench) counted() (refused, loggedIn []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.refused), slices.Clone(b.loggedIn)
}

// call sends req on c and reads its answer.
func call[R kmsg.Response](t *testing.T, c net.Conn, req kmsg.Request) R {
	t.Helper()
	if _, err := c.Write(frame(req, 1)); err != nil {
		t.Fatal(err)
	}
	_, body := readAnswer(t, c)
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != apiVersionsKey {
		body = body[1:] // the response header's (empty) tagged fields
	}
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	return resp.(R)
}

func handshake(t *testing.T, c net.Conn, mech string) *kmsg.SASLHandshakeResponse {
	t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = 1, mech
	return call[*kmsg.SASLHandshakeResponse](t, c, req)
}

func authenticate(t *testing.T, c net.Conn, msg []byte) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version, req.SASLAuthBytes = 2, msg
	return call[*kmsg.SASLAuthenticateResponse](t, c, req)
}

func metadataRequest() *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 12
	return req
}

// scramLogin runs a SCRAM exchange on c; it returns the failing answer,
// or the last one.
func scramLogin(t *testing.T, c net.Conn, m auth.ScramMechanism, user, password string) *kmsg.SASLAuthenticateResponse {
	t.Helper()
	if r := handshake(t, c, string(m)); r.ErrorCode != 0 {
		t.Fatalf("handshake %s: error %d", m, r.ErrorCode)
	}
	hf := scram.SHA256
	if m == auth.ScramSHA512 {
		hf = scram.SHA512
	}
	cl, _ := hf.NewClient(user, password, "")
	conv := cl.NewConversation()
	first, _ := conv.Step("")
	r := authenticate(t, c, []byte(first))
	if r.ErrorCode != 0 {
		return r
	}
	final, err := conv.Step(string(r.SASLAuthBytes))
	if err != nil {
		t.Fatal(err)
	}
	r = authenticate(t, c, []byte(final))
	if r.ErrorCode != 0 {
		return r
	}
	if _, err := conv.Step(string(r.SASLAuthBytes)); err != nil || !conv.Valid() {
		t.Fatalf("the server's signature: %v", err)
	}
	return r
}

// SaslAuthenticate before a SaslHandshake is ILLEGAL_SASL_STATE, and the
// connection closes; so is a second SaslHandshake during an exchange.
func TestSASLOutOfOrderIsIllegalState(t *testing.T) {
	b := startSASL(t, benchOptions{})
	c := b.dial()
	if r := authenticate(t, c, []byte("n,,n=alice,r=x")); r.ErrorCode != codeIllegalSASLState || r.ErrorMessage == nil {
		t.Fatalf("SaslAuthenticate first: error %d (%v), want ILLEGAL_SASL_STATE", r.ErrorCode, r.ErrorMessage)
	}
	expectClosed(t, c)

	c = b.dial()
	if r := handshake(t, c, "SCRAM-SHA-256"); r.ErrorCode != 0 {
		t.Fatalf("handshake: %d", r.ErrorCode)
	}
	if r := handshake(t, c, "SCRAM-SHA-512"); r.ErrorCode != codeIllegalSASLState {
		t.Fatalf("a second handshake: error %d, want ILLEGAL_SASL_STATE", r.ErrorCode)
	}
	expectClosed(t, c)

	// A request other than SaslAuthenticate during the exchange closes
	// the connection unanswered.
	c = b.dial()
	handshake(t, c, "SCRAM-SHA-256")
	if _, err := c.Write(frame(metadataRequest(), 2)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	if refused, _ := b.counted(); !slices.Equal(refused, []string{"illegal_state", "illegal_state", "illegal_state"}) {
		t.Errorf("refusals counted: %v", refused)
	}
}

// A mechanism not offered is UNSUPPORTED_SASL_MECHANISM with the ones
// offered — PLAIN and OAUTHBEARER on TLS only — and the client may go on
// with one of them on the same connection. SaslHandshake v0 (raw
// tokens) is not served: the connection closes.
func TestSASLMechanismsOffered(t *testing.T) {
	for _, tc := range []struct {
		tls  bool
		want []string
	}{
		{false, []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}},
		{true, []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"}},
	} {
		b := startSASL(t, benchOptions{tls: tc.tls})
		c := b.dial()
		for _, m := range []string{"GSSAPI", "PLAIN", "OAUTHBEARER"} {
			if slices.Contains(tc.want, m) {
				continue
			}
			r := handshake(t, c, m)
			if r.ErrorCode != codeUnsupportedSASLMechanism || !slices.Equal(r.SupportedMechanisms, tc.want) {
				t.Errorf("TLS %v, %s: error %d, offered %v; want UNSUPPORTED_SASL_MECHANISM, %v", tc.tls, m, r.ErrorCode, r.SupportedMechanisms, tc.want)
			}
		}
		b.users.set(t, "alice", auth.ScramSHA256, "s3cret")
		if r := scramLogin(t, c, auth.ScramSHA256, "alice", "s3cret"); r.ErrorCode != 0 || r.SessionLifetimeMillis != 0 {
			t.Fatalf("TLS %v: SCRAM after a refused mechanism: error %d, lifetime %d", tc.tls, r.ErrorCode, r.SessionLifetimeMillis)
		}
	}
	b := startSASL(t, benchOptions{})
	c := b.dial()
	// SaslHandshake v0 is listed (librdkafka turns SASL on only then) but
	// refused: UNSUPPORTED_VERSION with the mechanisms, the last answer
	// on the connection.
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = 0, "PLAIN"
	if _, err := c.Write(frame(req, 1)); err != nil {
		t.Fatal(err)
	}
	_, body := readAnswer(t, c)
	resp := kmsg.NewPtrSASLHandshakeResponse()
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != codeUnsupportedVersion || len(resp.SupportedMechanisms) == 0 {
		t.Fatalf("SaslHandshake v0: error %d, mechanisms %v", resp.ErrorCode, resp.SupportedMechanisms)
	}
	expectClosed(t, c)
}

// SCRAM: the connection's requests are the user's; a wrong password or an
// unknown user is SASL_AUTHENTICATION_FAILED with the same message and
// closes the connection; a deleted user or a new password closes it at
// its next request.
func TestSASLScram(t *testing.T) {
	b := startSASL(t, benchOptions{required: true})
	b.users.set(t, "alice", auth.ScramSHA256, "s3cret")
	b.users.set(t, "bob", auth.ScramSHA512, "hunter2")
	var messages []string
	for _, bad := range []struct {
		m              auth.ScramMechanism
		user, password string
	}{{auth.ScramSHA256, "alice", "wrong"}, {auth.ScramSHA256, "mallory", "x"}, {auth.ScramSHA512, "alice", "s3cret"}} {
		c := b.dial()
		r := scramLogin(t, c, bad.m, bad.user, bad.password)
		if r.ErrorCode != codeSASLAuthenticationFailed || r.ErrorMessage == nil {
			t.Fatalf("%s %s/%s: error %d", bad.m, bad.user, bad.password, r.ErrorCode)
		}
		messages = append(messages, *r.ErrorMessage)
		expectClosed(t, c)
	}
	if messages[0] != messages[1] || messages[1] != messages[2] || strings.Contains(messages[0], "alice") {
		t.Errorf("refusals tell apart what was wrong: %q", messages)
	}

	c := b.dial()
	if r := scramLogin(t, c, auth.ScramSHA512, "bob", "hunter2"); r.ErrorCode != 0 {
		t.Fatalf("bob: %d", r.ErrorCode)
	}
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
	b.users.set(t, "bob", auth.ScramSHA512, "n3w")
	if _, err := c.Write(frame(metadataRequest(), 3)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)

	// Re-authentication (KIP-368) as the same user is served; as another
	// one, refused.
	c = b.dial()
	b.users.set(t, "carol", auth.ScramSHA256, "pw")
	scramLogin(t, c, auth.ScramSHA256, "alice", "s3cret")
	if r := scramLogin(t, c, auth.ScramSHA256, "alice", "s3cret"); r.ErrorCode != 0 {
		t.Fatalf("re-authentication: %d", r.ErrorCode)
	}
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
	if r := scramLogin(t, c, auth.ScramSHA256, "carol", "pw"); r.ErrorCode != codeSASLAuthenticationFailed {
		t.Fatalf("re-authentication as another user: %d", r.ErrorCode)
	}
	expectClosed(t, c)
	refused, loggedIn := b.counted()
	if want := []string{"sasl_failed", "sasl_failed", "sasl_failed", "session_invalid", "sasl_failed"}; !slices.Equal(refused, want) {
		t.Errorf("refusals %v, want %v", refused, want)
	}
	if want := []string{"SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-256"}; !slices.Equal(loggedIn, want) {
		t.Errorf("logins %v, want %v", loggedIn, want)
	}
}

// With authentication required, a connection that has not authenticated
// may send ApiVersions, SaslHandshake and SaslAuthenticate only: anything
// else closes it unanswered. Optional, it is User:ANONYMOUS.
func TestSASLRequired(t *testing.T) {
	b := startSASL(t, benchOptions{required: true})
	c := b.dial()
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	if r := call[*kmsg.ApiVersionsResponse](t, c, av); r.ErrorCode != 0 {
		t.Fatalf("ApiVersions: %d", r.ErrorCode)
	}
	if _, err := c.Write(frame(metadataRequest(), 2)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	if refused, _ := b.counted(); !slices.Equal(refused, []string{"anonymous"}) {
		t.Errorf("refusals %v", refused)
	}

	b = startSASL(t, benchOptions{})
	c = b.dial()
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
}

// PLAIN (TLS only) checks the password against the SCRAM credential.
func TestSASLPlain(t *testing.T) {
	b := startSASL(t, benchOptions{tls: true, required: true})
	b.users.set(t, "alice", auth.ScramSHA256, "s3cret")
	c := b.dial()
	handshake(t, c, "PLAIN")
	if r := authenticate(t, c, []byte("\x00alice\x00s3cret")); r.ErrorCode != 0 || r.SessionLifetimeMillis != 0 {
		t.Fatalf("PLAIN: error %d, lifetime %d", r.ErrorCode, r.SessionLifetimeMillis)
	}
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
	c = b.dial()
	handshake(t, c, "PLAIN")
	if r := authenticate(t, c, []byte("\x00alice\x00wrong")); r.ErrorCode != codeSASLAuthenticationFailed || *r.ErrorMessage != failedMessage {
		t.Fatalf("a wrong password: error %d (%v)", r.ErrorCode, r.ErrorMessage)
	}
	expectClosed(t, c)
}

// OAUTHBEARER: a good token's session lasts until its expiry (KIP-368's
// session_lifetime_ms), after which a request closes the connection and
// a re-authentication renews it; a refused token is answered with RFC
// 7628's error challenge, then SASL_AUTHENTICATION_FAILED.
func TestSASLOAuthBearer(t *testing.T) {
	b := startSASL(t, benchOptions{tls: true, required: true})
	bearer := func(tok string) []byte { return []byte("n,,\x01auth=Bearer " + tok + "\x01\x01") }
	now := b.clock.Now()
	c := b.dial()
	handshake(t, c, "OAUTHBEARER")
	r := authenticate(t, c, bearer(b.token("svc", "sluice", now.Add(time.Hour))))
	if r.ErrorCode != 0 || r.SessionLifetimeMillis <= 59*60*1000 || r.SessionLifetimeMillis > 60*60*1000 {
		t.Fatalf("a good token: error %d, lifetime %d ms", r.ErrorCode, r.SessionLifetimeMillis)
	}
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
	b.clock.advance(50 * time.Minute)
	handshake(t, c, "OAUTHBEARER")
	if r := authenticate(t, c, bearer(b.token("svc", "sluice", b.clock.Now().Add(time.Hour)))); r.ErrorCode != 0 {
		t.Fatalf("re-authentication: %d", r.ErrorCode)
	}
	b.clock.advance(50 * time.Minute) // past the first token, not the second
	call[*kmsg.MetadataResponse](t, c, metadataRequest())
	b.clock.advance(20 * time.Minute)
	if _, err := c.Write(frame(metadataRequest(), 5)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)

	now = b.clock.Now()
	for what, tok := range map[string]string{
		"expired":        b.token("svc", "sluice", now.Add(-time.Hour)),
		"other audience": b.token("svc", "other", now.Add(time.Hour)),
		"not a JWT":      "abc",
	} {
		c := b.dial()
		handshake(t, c, "OAUTHBEARER")
		r := authenticate(t, c, bearer(tok))
		if r.ErrorCode != 0 || string(r.SASLAuthBytes) != `{"status":"invalid_token"}` {
			t.Fatalf("%s: error %d, challenge %q; want RFC 7628's error challenge", what, r.ErrorCode, r.SASLAuthBytes)
		}
		r = authenticate(t, c, []byte{1})
		if r.ErrorCode != codeSASLAuthenticationFailed {
			t.Fatalf("%s, after the client's %%x01: error %d", what, r.ErrorCode)
		}
		expectClosed(t, c)
	}
	c = b.dial()
	handshake(t, c, "OAUTHBEARER")
	if r := authenticate(t, c, []byte("n,,auth=Bearer x")); r.ErrorCode != codeSASLAuthenticationFailed {
		t.Fatalf("a malformed message: error %d", r.ErrorCode)
	}
	expectClosed(t, c)
	refused, _ := b.counted()
	if want := []string{"session_invalid", "jwt_invalid", "jwt_invalid", "jwt_invalid", "jwt_invalid"}; !slices.Equal(refused, want) {
		t.Errorf("refusals %v, want %v", refused, want)
	}
}

// A failed authentication's connection is closed
// FailedAuthenticationDelay after the answer, not at once (Kafka's
// connection.failed.authentication.delay.ms): one guess per connection
// per delay.
func TestSASLFailedAuthenticationDelaysTheClose(t *testing.T) {
	const delay = 300 * time.Millisecond
	b := startSASL(t, benchOptions{required: true, failedDelay: delay})
	b.users.set(t, "alice", auth.ScramSHA256, "s3cret")
	c := b.dial()
	r := scramLogin(t, c, auth.ScramSHA256, "alice", "wrong")
	answered := time.Now()
	if r.ErrorCode != codeSASLAuthenticationFailed {
		t.Fatalf("error %d", r.ErrorCode)
	}
	expectClosed(t, c)
	if held := time.Since(answered); held < delay-50*time.Millisecond {
		t.Errorf("closed %v after the refusal, want about %v", held, delay)
	}
}
