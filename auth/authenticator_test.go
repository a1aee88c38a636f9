package auth

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/xdg-go/scram"
)

// users is an in-memory credential store.
type users struct {
	mu    sync.Mutex
	creds map[string]ScramCredential // user/mechanism
}

func (u *users) set(t *testing.T, user string, m ScramMechanism, password string) {
	t.Helper()
	salt := NewSalt()
	salted, err := SaltPassword(m, password, salt, MinScramIterations)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewScramCredential(m, MinScramIterations, salt, salted)
	if err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.creds == nil {
		u.creds = map[string]ScramCredential{}
	}
	u.creds[user+"/"+string(m)] = c
}

func (u *users) remove(user string, m ScramMechanism) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.creds, user+"/"+string(m))
}

func (u *users) lookup(user string, m ScramMechanism) (ScramCredential, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, ok := u.creds[user+"/"+string(m)]
	return c, ok
}

// login runs a client exchange (xdg-go/scram's client, as a Kafka client
// would) against a and returns the session token.
func login(a *Authenticator, m ScramMechanism, user, password string, now time.Time) (string, error) {
	hf := scram.SHA256
	if m == ScramSHA512 {
		hf = scram.SHA512
	}
	cl, err := hf.NewClient(user, password, "")
	if err != nil {
		return "", err
	}
	conv := cl.NewConversation()
	first, err := conv.Step("")
	if err != nil {
		return "", err
	}
	r1, err := a.Step(string(m), "", []byte(first), now)
	if err != nil {
		return "", err
	}
	final, err := conv.Step(string(r1.Message))
	if err != nil {
		return "", err
	}
	r2, err := a.Step("", r1.ConversationID, []byte(final), now)
	if err != nil {
		return "", err
	}
	if _, err := conv.Step(string(r2.Message)); err != nil || !conv.Valid() {
		return "", errors.New("the server's signature did not verify")
	}
	if !r2.Complete || !IsSessionToken(r2.Token) || r2.Principal != User(user) {
		return "", errors.New("incomplete")
	}
	return r2.Token, nil
}

func TestSCRAMLoginAndSessions(t *testing.T) {
	u := &users{}
	u.set(t, "alice", ScramSHA256, "s3cret")
	u.set(t, "bob", ScramSHA512, "hunter2")
	now := time.Unix(1000, 0)
	a := NewAuthenticator(u.lookup, time.Hour)

	tok, err := login(a, ScramSHA256, "alice", "s3cret", now)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.Session(tok, now); err != nil || c.Principal != User("alice") || c.Method != Method(ScramSHA256) {
		t.Fatalf("session: %+v, %v", c, err)
	}
	if _, err := login(a, ScramSHA512, "bob", "hunter2", now); err != nil {
		t.Fatalf("SHA-512: %v", err)
	}
	for _, bad := range []struct {
		what           string
		m              ScramMechanism
		user, password string
	}{
		{"a wrong password", ScramSHA256, "alice", "wrong"},
		{"an unknown user", ScramSHA256, "carol", "x"},
		{"a mechanism the user has no credential for", ScramSHA512, "alice", "s3cret"},
	} {
		if _, err := login(a, bad.m, bad.user, bad.password, now); !errors.Is(err, ErrAuthenticationFailed) {
			t.Errorf("%s: %v, want ErrAuthenticationFailed", bad.what, err)
		}
	}
	if _, err := a.Step("PLAIN", "", []byte("x"), now); !errors.Is(err, ErrUnsupportedMechanism) {
		t.Errorf("PLAIN: %v", err)
	}
	if _, err := a.Step("", "no-such-conversation", []byte("x"), now); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("unknown conversation: %v", err)
	}
	// Expired.
	if _, err := a.Session(tok, now.Add(2*time.Hour)); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("expired session: %v", err)
	}
	// A new password ends the sessions of the old one at their next call.
	tok, _ = login(a, ScramSHA256, "alice", "s3cret", now)
	u.set(t, "alice", ScramSHA256, "new")
	if _, err := a.Session(tok, now); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("after a password change: %v", err)
	}
	// So does a deletion.
	tok, _ = login(a, ScramSHA256, "alice", "new", now)
	u.remove("alice", ScramSHA256)
	if _, err := a.Session(tok, now); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("after deletion: %v", err)
	}
	// A conversation is good for one second step only, and for 30 s.
	u.set(t, "alice", ScramSHA256, "s3cret")
	cl, _ := scram.SHA256.NewClient("alice", "s3cret", "")
	conv := cl.NewConversation()
	first, _ := conv.Step("")
	r1, err := a.Step(string(ScramSHA256), "", []byte(first), now)
	if err != nil {
		t.Fatal(err)
	}
	final, _ := conv.Step(string(r1.Message))
	if _, err := a.Step("", r1.ConversationID, []byte(final), now.Add(time.Minute)); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("a conversation a minute old: %v", err)
	}
	if _, err := a.Step("", r1.ConversationID, []byte(final), now); !errors.Is(err, ErrAuthenticationFailed) {
		t.Errorf("a conversation used twice: %v", err)
	}
}
