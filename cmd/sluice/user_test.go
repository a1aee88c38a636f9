package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	"github.com/sluice-io/sluice/node/nodetest"
)

// checkPassword fails t unless the broker's image holds user's credential
// for mech derived from password: the line read, without its end.
func checkPassword(t *testing.T, s *nodetest.Single, user string, mech auth.ScramMechanism, password string) {
	t.Helper()
	got, ok := s.Node.Metadata().Image().ScramCredential(user, string(mech))
	if !ok {
		t.Fatalf("no %s credential of %s on the broker", mech, user)
	}
	salted, err := auth.SaltPassword(mech, password, got.Salt, got.Iterations)
	if err != nil {
		t.Fatal(err)
	}
	want, err := auth.NewScramCredential(mech, got.Iterations, got.Salt, salted)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.StoredKey, want.StoredKey) || !bytes.Equal(got.ServerKey, want.ServerKey) {
		t.Errorf("%s's %s credential is not derived from the password %q", user, mech, password)
	}
}

// sluice user create, list and delete against a node: the password from
// the first line of a file or of stdin, its line end removed, never
// printed; list in text and JSON; delete one mechanism or all.
func TestUserCreateListDelete(t *testing.T) {
	s := nodetest.StartSingle(t, t.TempDir(), nil)
	brokers := "--brokers=" + s.Node.Addr()
	pwFile := filepath.Join(t.TempDir(), "alice.pw")
	if err := os.WriteFile(pwFile, []byte("file secret\nsecond line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runArgs(t, "user", "create", "alice", "--password-file", pwFile, brokers)
	if err != nil || out != "user \"alice\": SCRAM-SHA-256 credential stored (8192 iterations)\n" {
		t.Fatalf("create alice from a file: %q, %q, %v", out, errOut, err)
	}
	checkPassword(t, s, "alice", auth.ScramSHA256, "file secret")
	out, errOut, err = runWithStdin(t, "stdin secret\r\nnot this\n", "user", "create", "alice", "--mechanism", "SCRAM-SHA-512",
		"--iterations", "4096", "--password-stdin", brokers)
	if err != nil || !strings.Contains(out, "SCRAM-SHA-512 credential stored (4096 iterations)") {
		t.Fatalf("create alice from stdin: %q, %q, %v", out, errOut, err)
	}
	checkPassword(t, s, "alice", auth.ScramSHA512, "stdin secret")
	if strings.Contains(out+errOut, "secret") {
		t.Errorf("create shows the password: %q, %q", out, errOut)
	}
	// Without a line end too.
	if _, _, err := runWithStdin(t, "bob's", "user", "create", "bob", "--password-stdin", brokers); err != nil {
		t.Fatal(err)
	}
	checkPassword(t, s, "bob", auth.ScramSHA256, "bob's")

	out, _, err = runArgs(t, "user", "list", brokers)
	want := "USER   MECHANISM      ITERATIONS\n" +
		"alice  SCRAM-SHA-256  8192\n" +
		"alice  SCRAM-SHA-512  4096\n" +
		"bob    SCRAM-SHA-256  8192\n"
	if err != nil || out != want {
		t.Errorf("user list = %q, %v; want %q", out, err, want)
	}
	out, _, err = runArgs(t, "user", "list", "--output", "json", "bob", brokers)
	var rows []output.ScramCredential
	if jerr := json.Unmarshal([]byte(out), &rows); err != nil || jerr != nil ||
		!reflect.DeepEqual(rows, []output.ScramCredential{{User: "bob", Mechanism: "SCRAM-SHA-256", Iterations: 8192}}) {
		t.Errorf("user list --output json bob = %q, %v", out, err)
	}
	// A user named without credentials: the others listed, then exit 1.
	out, _, err = runArgs(t, "user", "list", "nobody", "alice", brokers)
	if err == nil || !strings.Contains(err.Error(), `no SCRAM credential for "nobody"`) || strings.Count(out, "alice") != 2 {
		t.Errorf("user list nobody alice = %q, %v; want alice's two credentials, then an error naming nobody", out, err)
	}

	out, _, err = runArgs(t, "user", "delete", "alice", "--mechanism", "SCRAM-SHA-256", brokers)
	if err != nil || out != "user \"alice\": SCRAM-SHA-256 credential deleted\n" {
		t.Fatalf("delete alice's SCRAM-SHA-256: %q, %v", out, err)
	}
	if _, _, err := runArgs(t, "user", "delete", "alice", "--mechanism", "SCRAM-SHA-256", brokers); err == nil ||
		!strings.Contains(err.Error(), "RESOURCE_NOT_FOUND") {
		t.Errorf("delete it again: %v; want RESOURCE_NOT_FOUND", err)
	}
	if _, _, err := runWithStdin(t, "x\n", "user", "create", "bob", "--mechanism", "SCRAM-SHA-512", "--password-stdin", brokers); err != nil {
		t.Fatal(err)
	}
	out, _, err = runArgs(t, "user", "delete", "bob", brokers)
	if err != nil || out != "user \"bob\": SCRAM-SHA-256 and SCRAM-SHA-512 credentials deleted\n" {
		t.Fatalf("delete bob: %q, %v", out, err)
	}
	if _, _, err := runArgs(t, "user", "delete", "bob", brokers); err == nil || !strings.Contains(err.Error(), `user "bob" has no SCRAM credential`) {
		t.Errorf("delete bob again: %v", err)
	}
	out, _, err = runArgs(t, "user", "list", "--output=json", brokers)
	if err != nil || out != `[{"user":"alice","mechanism":"SCRAM-SHA-512","iterations":4096}]`+"\n" {
		t.Errorf("user list after the deletions = %q, %v", out, err)
	}
}

// user create without a password, with two, or with an empty one is
// refused, naming the flags, before any broker is contacted; so are a
// bad mechanism and iteration count. A refused name is the cluster's
// refusal.
func TestUserCreateRefusesWhatIsNoPassword(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	newline := filepath.Join(dir, "newline")
	_ = os.WriteFile(empty, nil, 0o600)
	_ = os.WriteFile(newline, []byte("\nsecret\n"), 0o600)
	nowhere := "--brokers=127.0.0.1:1"
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{}, "give the password with --password-file F or --password-stdin (it is never taken from the command line)"},
		{"pw\n", []string{"--password-stdin", "--password-file", newline}, "not both"},
		{"", []string{"--password-file", filepath.Join(dir, "missing")}, "--password-file: open"},
		{"", []string{"--password-file", empty}, "the password read from " + empty + " is empty"},
		{"", []string{"--password-file", newline}, "is empty"},
		{"", []string{"--password-stdin"}, "the password read from stdin is empty"},
		{"\r\n", []string{"--password-stdin"}, "the password read from stdin is empty"},
		{strings.Repeat("p", 70000), []string{"--password-stdin"}, "longer than 65536 bytes"},
		{"pw\n", []string{"--password-stdin", "--mechanism", "SCRAM-SHA-1"}, `--mechanism: SASL mechanism "SCRAM-SHA-1"`},
		{"pw\n", []string{"--password-stdin", "--iterations", "100"}, "--iterations must be within 4096..16384, got 100"},
	} {
		args := append([]string{"user", "create", "alice", nowhere}, tc.args...)
		_, _, err := runWithStdin(t, tc.stdin, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
	if _, _, err := runWithStdin(t, "pw\n", "user", "create", "--password-stdin", nowhere); err == nil {
		t.Error("user create without a name succeeded")
	}
}

// A missing or unknown user command, a missing name, a second one and an
// unknown flag are usage errors (exit 2), before any broker is contacted;
// help lists the commands.
func TestUserCommandUsage(t *testing.T) {
	nowhere := "--brokers=127.0.0.1:1"
	for _, args := range [][]string{
		{"user"},
		{"user", "bogus"},
		{"user", "create", "--password-stdin", nowhere},
		{"user", "create", "alice", "bob", "--password-stdin", nowhere},
		{"user", "create", "alice", "--password", "secret", nowhere},
		{"user", "delete", nowhere},
		{"user", "delete", "alice", "bob", nowhere},
	} {
		out, _, err := runWithStdin(t, "pw\n", args...)
		if !errors.Is(err, errUsage) || out != "" {
			t.Errorf("%q: %v, stdout %q; want a usage error", args, err, out)
		}
	}
	out, _, err := runArgs(t, "help")
	for _, cmd := range []string{"user create NAME", "user delete NAME", "user list [NAME...]"} {
		if err != nil || !strings.Contains(out, cmd) {
			t.Errorf("help does not list %q: %v", cmd, err)
		}
	}
}
