package api

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdg-go/scram"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// A broker that has not received cluster metadata since it started knows
// no user yet: a SCRAM exchange then is LEADER_NOT_AVAILABLE (retriable,
// gRPC UNAVAILABLE) and no authentication failure, as every RPC of a
// starting broker (decision 24). Found by the chaos harness (secured
// profile): after a kill-two, the restarted brokers refused every
// exchange as for an unknown user (SASL_AUTHENTICATION_FAILED, not
// retriable) for about a second, and the producers failed their records.
func TestScramExchangeBeforeTheFirstMetadataIsRetriable(t *testing.T) {
	salt := auth.NewSalt()
	salted, err := auth.SaltPassword(auth.ScramSHA256, "secret", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := auth.NewScramCredential(auth.ScramSHA256, 4096, salt, salted)
	if err != nil {
		t.Fatal(err)
	}
	var loaded atomic.Bool
	lookup := func(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
		// The image's users: none before the first metadata.
		return cred, loaded.Load() && user == "alice" && m == auth.ScramSHA256
	}
	var refused []string
	svc := NewAuthService(AuthConfig{Authenticator: auth.NewAuthenticator(lookup, 0), NodeID: 7, Required: true,
		Refused: func(reason string) { refused = append(refused, reason) }, MetadataLoaded: loaded.Load})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{Version: tls.VersionTLS13}}})
	first := func() (*sluicev1.SaslAuthenticateResponse, error) {
		cl, err := scram.SHA256.NewClient("alice", "secret", "")
		if err != nil {
			t.Fatal(err)
		}
		msg, err := cl.NewConversation().Step("")
		if err != nil {
			t.Fatal(err)
		}
		return svc.SaslAuthenticate(ctx, &sluicev1.SaslAuthenticateRequest{Mechanism: string(auth.ScramSHA256), AuthBytes: []byte(msg)})
	}

	_, err = first()
	decoded, _ := errs.FromStatus(err)
	var e *errs.Error
	if status.Code(err) != codes.Unavailable || !errors.As(decoded, &e) || e.Code != sluicev1.ErrorCode_LEADER_NOT_AVAILABLE || !errs.Retriable(e.Code) {
		t.Fatalf("before the first metadata: %v; want UNAVAILABLE, LEADER_NOT_AVAILABLE", err)
	}
	if len(refused) != 0 {
		t.Errorf("before the first metadata, counted as refused: %v", refused)
	}

	loaded.Store(true)
	if r, err := first(); err != nil || r.GetConversationId() == "" {
		t.Fatalf("once loaded: %v, %v", r, err)
	}
}

// A refused exchange is answered FailedDelay late (Kafka's
// connection.failed.authentication.delay.ms), within the call's deadline.
func TestRefusedScramExchangeIsDelayed(t *testing.T) {
	const delay = 300 * time.Millisecond
	lookup := func(string, auth.ScramMechanism) (auth.ScramCredential, bool) { return auth.ScramCredential{}, false }
	svc := NewAuthService(AuthConfig{Authenticator: auth.NewAuthenticator(lookup, 0), NodeID: 7, FailedDelay: delay})
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{Version: tls.VersionTLS13}}})
	start := time.Now()
	_, err := svc.SaslAuthenticate(ctx, &sluicev1.SaslAuthenticateRequest{Mechanism: "PLAIN", AuthBytes: []byte("x")})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unsupported mechanism: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("refused after %v, want at least %v", took, delay)
	}
	// The call's deadline ends the wait.
	long := NewAuthService(AuthConfig{Authenticator: auth.NewAuthenticator(lookup, 0), NodeID: 7, FailedDelay: time.Minute})
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := long.SaslAuthenticate(short, &sluicev1.SaslAuthenticateRequest{Mechanism: "PLAIN", AuthBytes: []byte("x")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("with a short deadline: %v", err)
	}
	if took := time.Since(start); took >= 30*time.Second {
		t.Errorf("the wait outlived the call's deadline: %v", took)
	}
}
