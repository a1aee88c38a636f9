package client_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/client"
	"github.com/sluice-io/sluice/node/nodetest"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// ScramUpsertion salts the password here, with a new salt each time; the
// password itself is in no field.
func TestScramUpsertionSaltsThePassword(t *testing.T) {
	u, err := client.ScramUpsertion("alice", "SCRAM-SHA-512", "secret", 0)
	if err != nil {
		t.Fatal(err)
	}
	want, err := auth.SaltPassword(auth.ScramSHA512, "secret", u.Salt, auth.DefaultScramIterations)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "alice" || u.Mechanism != "SCRAM-SHA-512" || u.Iterations != auth.DefaultScramIterations ||
		len(u.Salt) < auth.MinScramSaltLen || !bytes.Equal(u.SaltedPassword, want) || strings.Contains(u.String(), "secret") {
		t.Errorf("upsertion %v; want alice's SCRAM-SHA-512 at %d iterations, salted %x", u, auth.DefaultScramIterations, want)
	}
	again, _ := client.ScramUpsertion("alice", "SCRAM-SHA-512", "secret", 0)
	if bytes.Equal(again.Salt, u.Salt) {
		t.Error("two upsertions share a salt")
	}
	for _, tc := range []struct {
		mech, password string
		iterations     int
		says           string
	}{
		{"SCRAM-SHA-1", "secret", 0, `"SCRAM-SHA-1"`},
		{"SCRAM-SHA-256", "", 0, "password is empty"},
		{"SCRAM-SHA-256", "secret", 4095, "4095 iterations"},
		{"SCRAM-SHA-256", "secret", 16385, "16385 iterations"},
	} {
		if _, err := client.ScramUpsertion("alice", tc.mech, tc.password, tc.iterations); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s, %q, %d iterations: %v; want an error saying %s", tc.mech, tc.password, tc.iterations, err, tc.says)
		}
	}
}

// Through a node: a user stored, described and deleted, each refusal an
// *errs.Error with its code.
func TestScramUsersThroughANode(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	c, err := client.New([]string{s.Node.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.UpsertScramUser(ctx, "alice", "SCRAM-SHA-256", "secret", 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.UpsertScramUser(ctx, "alice", "SCRAM-SHA-512", "secret", 0); err != nil {
		t.Fatal(err)
	}
	users, err := c.DescribeScramUsers(ctx, "alice", "bob")
	if err != nil || len(users) != 2 || len(users[0].Credentials) != 2 || users[0].Credentials[0].Iterations != 4096 ||
		users[0].Credentials[1].Iterations != auth.DefaultScramIterations || users[1].ErrorCode != sluicev1.ErrorCode_RESOURCE_NOT_FOUND {
		t.Fatalf("describe alice, bob: %v, %v", users, err)
	}
	if err := c.UpsertScramUser(ctx, "bad\nname", "SCRAM-SHA-256", "secret", 0); errs.Code(err) != sluicev1.ErrorCode_UNACCEPTABLE_CREDENTIAL {
		t.Errorf("a name with a newline: %v; want UNACCEPTABLE_CREDENTIAL", err)
	}
	if err := c.DeleteScramUser(ctx, "bob", "SCRAM-SHA-256"); errs.Code(err) != sluicev1.ErrorCode_RESOURCE_NOT_FOUND {
		t.Errorf("delete bob: %v; want RESOURCE_NOT_FOUND", err)
	}
	for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		if err := c.DeleteScramUser(ctx, "alice", m); err != nil {
			t.Fatal(err)
		}
	}
	if users, err := c.DescribeScramUsers(ctx); err != nil || len(users) != 0 {
		t.Errorf("describe all after the deletions: %v, %v", users, err)
	}
}
