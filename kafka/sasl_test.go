package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/node"
	"github.com/sluice-io/sluice/node/nodetest"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// secured is a single TLS node with authentication required and ACLs
// on: SCRAM users, JWTs of key for audience "sluice", client
// certificates of its PKI named by their CN, User:admin a super user.
type secured struct {
	t     *testing.T
	s     *nodetest.Single
	pki   *nodetest.PKI
	key   *ecdsa.PrivateKey
	admin *client.Client
}

func startSecured(t *testing.T) *secured {
	t.Helper()
	x := &secured{t: t, pki: nodetest.NewPKI(t)}
	x.pki.Node("node1", auth.DefaultClusterName, x.pki.CA)
	for _, name := range []string{"admin", "carol"} {
		x.pki.Client(name, x.pki.CA, time.Time{})
	}
	x.key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &x.key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	jwks := x.pki.Path("jwks.json")
	if err := os.WriteFile(jwks, set, 0o644); err != nil {
		t.Fatal(err)
	}
	x.s = nodetest.StartSingle(t, t.TempDir(), func(cfg *node.Config) {
		x.pki.UseTLS(cfg, "node1")
		cfg.KafkaListen = "127.0.0.1:0"
		cfg.HTTPListen = "127.0.0.1:0"
		cfg.ClientAuth = "request"
		cfg.TLSPrincipalMappingRules = `RULE:^CN=([^,]+)$/$1/`
		cfg.Authentication = node.AuthenticationRequired
		cfg.Authorizer = node.AuthorizerACL
		cfg.SuperUsers = []string{"User:admin"}
		cfg.JWTJWKSFile, cfg.JWTAudience = jwks, "sluice"
	})
	var err error
	if x.admin, err = client.New([]string{x.s.Node.Addr()}, client.WithTLS(x.pki.ClientTLS("admin"))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.admin.Close() })
	return x
}

// kafka is a franz-go client of the node's Kafka listener over TLS,
// presenting the client certificate cert unless "", authenticating with
// mech unless nil.
func (x *secured) kafka(cert string, mech sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	x.t.Helper()
	opts = append([]kgo.Opt{kgo.DialTLSConfig(x.pki.ClientTLS(cert)), kgo.RetryTimeout(5 * time.Second)}, opts...)
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return newClient(x.t, x.s.Node.KafkaAddr(), opts...)
}

// token is a JWT of sub for aud, expiring at exp.
func (x *secured) token(sub, aud string, exp time.Time) string {
	return x.tokenOf(x.key, sub, aud, exp)
}

// tokenOf is token signed by key.
func (x *secured) tokenOf(key *ecdsa.PrivateKey, sub, aud string, exp time.Time) string {
	x.t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	if err != nil {
		x.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(map[string]any{"sub": sub, "aud": aud, "exp": exp.Unix()}).Serialize()
	if err != nil {
		x.t.Fatal(err)
	}
	return tok
}

func (x *secured) oauth(sub, aud string, exp time.Time) sasl.Mechanism {
	return oauth.Auth{Token: x.token(sub, aud, exp)}.AsMechanism()
}

// allow gives principal op on topic.
func (x *secured) allow(ctx context.Context, principal string, op sluicev1.AclOperation, topic string) {
	x.t.Helper()
	res, err := x.admin.CreateAcls(ctx, []*sluicev1.AclBinding{{ResourceType: sluicev1.ResourceType_RESOURCE_TYPE_TOPIC, ResourceName: topic,
		PatternType: sluicev1.PatternType_PATTERN_TYPE_LITERAL, Principal: principal, Host: "*", Operation: op,
		Permission: sluicev1.AclPermission_ACL_PERMISSION_ALLOW}})
	if err == nil {
		err = errors.Join(res...)
	}
	if err != nil {
		x.t.Fatal(err)
	}
}

// metrics is the node's /metrics.
func (x *secured) metrics() string {
	x.t.Helper()
	resp, err := http.Get("http://" + x.s.Node.HTTPAddr() + "/metrics")
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		x.t.Fatal(err)
	}
	return string(b)
}

// counter is the value of the series line in the node's metrics (0 if
// absent).
func (x *secured) counter(series string) int {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(x.metrics())
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return int(v)
}

func produce(ctx context.Context, cl *kgo.Client, topic, value string) error {
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// consume reads n records of topic from the start.
func consume(ctx context.Context, t *testing.T, cl *kgo.Client, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %v, want %d records: %v", got, n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

// Issue 34: Kafka clients authenticate on the Kafka listener onto the
// same principals as the gRPC door — SCRAM-SHA-256 and -512 and PLAIN
// against the SCRAM users, OAUTHBEARER with the JWT validation, a client
// certificate through the principal mapping rules — and the same ACLs
// decide: each principal produces to or consumes the topic it is allowed,
// and is answered TOPIC_AUTHORIZATION_FAILED on the other.
func TestKafkaSASLPrincipalsAndACLs(t *testing.T) {
	x := startSecured(t)
	ctx := testContext(t, 90*time.Second)
	for _, topic := range []string{"a", "b"} {
		if err := x.admin.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.admin.UpsertScramUser(ctx, "alice", "SCRAM-SHA-256", "alice-pw", 0); err != nil {
		t.Fatal(err)
	}
	if err := x.admin.UpsertScramUser(ctx, "bob", "SCRAM-SHA-512", "bob-pw", 0); err != nil {
		t.Fatal(err)
	}
	write, read := sluicev1.AclOperation_ACL_OPERATION_WRITE, sluicev1.AclOperation_ACL_OPERATION_READ
	x.allow(ctx, "User:alice", write, "a")
	x.allow(ctx, "User:bob", read, "a")
	x.allow(ctx, "User:carol", write, "b")
	x.allow(ctx, "User:svc", read, "b")

	alice := x.kafka("", scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha256Mechanism())
	wait.For(t, 10*time.Second, "alice (SCRAM-SHA-256) produces to a", func() error { return produce(ctx, alice, "a", "by alice") })
	if err := produce(ctx, alice, "b", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice produces to b: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	alicePlain := x.kafka("", plain.Auth{User: "alice", Pass: "alice-pw"}.AsMechanism())
	if err := produce(ctx, alicePlain, "a", "by alice, PLAIN"); err != nil {
		t.Fatalf("alice (PLAIN) produces to a: %v", err)
	}
	carol := x.kafka("carol", nil)
	wait.For(t, 10*time.Second, "carol (client certificate) produces to b", func() error { return produce(ctx, carol, "b", "by carol") })
	if err := produce(ctx, carol, "a", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("carol produces to a: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	start := kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())
	bob := x.kafka("", scram.Auth{User: "bob", Pass: "bob-pw"}.AsSha512Mechanism(), kgo.ConsumeTopics("a"), start)
	if got := consume(ctx, t, bob, 2); strings.Join(got, "|") != "by alice|by alice, PLAIN" {
		t.Fatalf("bob (SCRAM-SHA-512) reads a: %q", got)
	}
	svc := x.kafka("", x.oauth("svc", "sluice", time.Now().Add(time.Hour)), kgo.ConsumeTopics("b"), start)
	if got := consume(ctx, t, svc, 1); strings.Join(got, "|") != "by carol" {
		t.Fatalf("svc (OAUTHBEARER) reads b: %q", got)
	}
	if err := produce(ctx, svc, "b", "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("svc produces to b: %v, want an authorization failure", err)
	}
	for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"} {
		if n := x.counter(`sluice_authentications_total{mechanism="` + m + `"}`); n == 0 {
			t.Errorf("no %s authentication counted", m)
		}
	}
}

// gssapi is a mechanism the broker does not offer.
type gssapi struct{}

func (gssapi) Name() string { return "GSSAPI" }
func (gssapi) Authenticate(context.Context, string) (sasl.Session, []byte, error) {
	return nil, nil, errors.New("not reached: the handshake refuses GSSAPI")
}

// Each way of not authenticating gets Kafka's answer: a wrong password
// and an unknown user SASL_AUTHENTICATION_FAILED with one message; a JWT
// expired, for another audience or of another key RFC 7628's error
// challenge (then the same); a mechanism not offered UNSUPPORTED_SASL_MECHANISM; a
// client that skips authentication its connection closed at its first
// request past ApiVersions. Each is counted; nothing is served.
func TestKafkaSASLRefusals(t *testing.T) {
	x := startSecured(t)
	ctx := testContext(t, 60*time.Second)
	if err := x.admin.UpsertScramUser(ctx, "alice", "SCRAM-SHA-256", "alice-pw", 0); err != nil {
		t.Fatal(err)
	}
	metadata := func(cl *kgo.Client) error {
		_, err := cl.Request(ctx, kmsg.NewPtrMetadataRequest())
		return err
	}
	var messages []string
	for what, mech := range map[string]sasl.Mechanism{
		"a wrong password": scram.Auth{User: "alice", Pass: "wrong"}.AsSha256Mechanism(),
		"an unknown user":  scram.Auth{User: "mallory", Pass: "x"}.AsSha256Mechanism(),
		"PLAIN, wrong":     plain.Auth{User: "alice", Pass: "wrong"}.AsMechanism(),
	} {
		err := metadata(x.kafka("", mech))
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s: %v, want SASL_AUTHENTICATION_FAILED", what, err)
		}
		messages = append(messages, strings.TrimPrefix(err.Error(), "SASL_AUTHENTICATION_FAILED: "))
	}
	if messages[0] != messages[1] || messages[1] != messages[2] {
		t.Errorf("the refusals tell apart what was wrong: %q", messages)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for what, mech := range map[string]sasl.Mechanism{
		"an expired JWT":          x.oauth("svc", "sluice", time.Now().Add(-time.Hour)),
		"a JWT for someone else":  x.oauth("svc", "other", time.Now().Add(time.Hour)),
		"a JWT of another key":    oauth.Auth{Token: x.tokenOf(other, "svc", "sluice", time.Now().Add(time.Hour))}.AsMechanism(),
		"a token that is not JWT": oauth.Auth{Token: "abc"}.AsMechanism(),
	} {
		// franz-go from v1.22.3 answers the error challenge (RFC 7628
		// §3.2.2) and gets SASL_AUTHENTICATION_FAILED; before, it fails
		// at the challenge itself ("unexpected data in oauth response").
		err := metadata(x.kafka("", mech))
		if !(errors.Is(err, kerr.SaslAuthenticationFailed) && strings.Contains(err.Error(), "invalid_token")) &&
			!strings.Contains(fmt.Sprint(err), "unexpected data in oauth response") {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED (invalid_token), or the error challenge refused by the client", what, err)
		}
	}
	if err := metadata(x.kafka("", gssapi{})); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
		t.Errorf("GSSAPI: %v, want UNSUPPORTED_SASL_MECHANISM", err)
	}
	// No SASL, no certificate: ApiVersions is answered, a Metadata
	// request closes the connection, unanswered (franz-go: "is SASL
	// missing?").
	if _, err := x.kafka("", nil).Request(ctx, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatalf("an anonymous ApiVersions: %v", err)
	}
	var answered *kerr.Error
	if err := metadata(x.kafka("", nil)); err == nil || errors.As(err, &answered) {
		t.Errorf("an anonymous Metadata: %v, want the connection closed", err)
	}
	// A plaintext client on the TLS port: a refused handshake, counted.
	nc, err := net.DialTimeout("tcp", x.s.Node.KafkaAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write([]byte{0, 0, 0, 20, 0, 18, 0, 3, 0, 0, 0, 1})
	io.Copy(io.Discard, nc)
	nc.Close()

	for _, series := range []string{
		`sluice_authentication_failures_total{reason="sasl_failed"}`,
		`sluice_authentication_failures_total{reason="jwt_invalid"}`,
		`sluice_authentication_failures_total{reason="unsupported_mechanism"}`,
		`sluice_authentication_failures_total{reason="anonymous"}`,
		`sluice_tls_handshake_refusals_total{listener="kafka",reason="not_tls"}`,
	} {
		wait.For(t, 5*time.Second, series, func() error {
			if x.counter(series) == 0 {
				return fmt.Errorf("%s not counted", series)
			}
			return nil
		})
	}
	if n := x.counter(`sluice_authentications_total{mechanism="SCRAM-SHA-256"}`); n != 0 {
		t.Errorf("%d SCRAM-SHA-256 authentications counted, none succeeded", n)
	}
}

// KIP-368: the broker answers an OAUTHBEARER session's lifetime (the
// token's), and franz-go authenticates again on its connection before it
// ends, with a new token, without an error.
func TestKafkaSASLReauthenticatesBeforeTheTokenExpires(t *testing.T) {
	x := startSecured(t)
	ctx := testContext(t, 60*time.Second)
	if err := x.admin.CreateTopic(ctx, "t", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	x.allow(ctx, "User:svc", sluicev1.AclOperation_ACL_OPERATION_WRITE, "t")
	cl := x.kafka("", oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		return oauth.Auth{Token: x.token("svc", "sluice", time.Now().Add(3*time.Second))}, nil
	}))
	wait.For(t, 10*time.Second, "svc produces", func() error { return produce(ctx, cl, "t", "first") })
	before := x.counter(`sluice_authentications_total{mechanism="OAUTHBEARER"}`)
	wait.For(t, 20*time.Second, "a re-authentication", func() error {
		if err := produce(ctx, cl, "t", "again"); err != nil {
			t.Fatalf("a produce across the token's expiry: %v", err)
		}
		if n := x.counter(`sluice_authentications_total{mechanism="OAUTHBEARER"}`); n <= before {
			return fmt.Errorf("%d OAUTHBEARER authentications", n)
		}
		return nil
	})
	if n := x.counter(`sluice_authentication_failures_total{reason="session_invalid"}`); n != 0 {
		t.Errorf("%d connections closed for an expired session: franz-go should re-authenticate first", n)
	}
}
