package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
)

// Before the node's first ACLs are in, a check waits for them instead of
// denying with an empty set (a restarted broker would deny everyone); a
// check whose request ends first is denied.
func TestAuthzWaitsForTheFirstACLs(t *testing.T) {
	z := NewAuthzLoading(slog.New(slog.DiscardHandler))
	ctx := auth.WithCaller(context.Background(), auth.Caller{Principal: auth.User("alice")})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if z.Allowed(short, auth.OpRead, auth.Topic("t")) {
		t.Fatal("allowed before any ACL")
	}
	done := make(chan bool, 1)
	go func() { done <- z.Allowed(ctx, auth.OpRead, auth.Topic("t")) }()
	select {
	case <-done:
		t.Fatal("a check did not wait for the first ACLs")
	case <-time.After(50 * time.Millisecond):
	}
	z.Set(auth.NewAuthorizer([]auth.ACL{{ResourceType: auth.ResourceTopic, Name: "t", Pattern: auth.PatternLiteral,
		Principal: "User:alice", Host: "*", Operation: auth.OpRead, Permission: auth.Allow}}, nil))
	z.MarkLoaded()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("denied once the ACL that allows it was in")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting check was not released")
	}
}
