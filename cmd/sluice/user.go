package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cmd/sluice/output"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

const userUsage = `usage: sluice user COMMAND [ARGS]

Commands:
  create NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N] (--password-file F | --password-stdin)
      stores (or replaces) the user's SCRAM credential for the mechanism; the
      password is read from the first line of F or of stdin, never from the
      command line, and salted here: the cluster keeps only keys derived from it
  delete NAME [--mechanism M]
      deletes the user's credential for M (default: every one it has)
  list [NAME...]
      users (every user, or those named) with their mechanisms and iteration
      counts

Run "sluice user COMMAND --help" for a command's flags.
`

func (e *env) user(ctx context.Context, args []string) error {
	return e.subcommand(ctx, "user", userUsage, args, map[string]func(context.Context, []string) error{
		"create": e.userCreate,
		"delete": e.userDelete,
		"list":   e.userList,
	})
}

// maxPasswordLine bounds the line a password is read from.
const maxPasswordLine = 64 << 10

func (e *env) userCreate(ctx context.Context, args []string) error {
	fs := e.newFlags("user create", "user create NAME [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N] (--password-file F | --password-stdin)\n\n"+
		"Stores (or replaces) user NAME's SCRAM credential for the mechanism. The password is the first line of\n"+
		"--password-file F or of stdin (--password-stdin: a pipe or a file, not a terminal), its line end removed;\n"+
		"it is never taken from the command line nor printed. It is salted here with a new random salt: the\n"+
		"cluster receives the salted password and stores only the keys derived from it.")
	mech := fs.String("mechanism", string(auth.ScramSHA256), "the SCRAM mechanism: SCRAM-SHA-256 or SCRAM-SHA-512")
	iterations := fs.Int("iterations", auth.DefaultScramIterations,
		fmt.Sprintf("the salting's iteration count (%d to %d)", auth.MinScramIterations, auth.MaxScramIterations))
	passwordFile := fs.String("password-file", "", "read the password from the first line of `file`")
	passwordStdin := fs.Bool("password-stdin", false, "read the password from the first line of stdin")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if _, err := auth.ParseScramMechanism(*mech); err != nil {
		return fmt.Errorf("user create: --mechanism: %w", err)
	}
	if *iterations < auth.MinScramIterations || *iterations > auth.MaxScramIterations {
		return fmt.Errorf("user create: --iterations must be within %d..%d, got %d", auth.MinScramIterations, auth.MaxScramIterations, *iterations)
	}
	password, err := e.readPassword(*passwordFile, *passwordStdin)
	if err != nil {
		return fmt.Errorf("user create: %w", err)
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.UpsertScramUser(ctx, name, *mech, password, *iterations); err != nil {
		return fmt.Errorf("user create: %w", err)
	}
	fmt.Fprintf(e.stdout, "user %q: %s credential stored (%d iterations)\n", name, *mech, *iterations)
	return nil
}

// readPassword reads the password from the first line of file, or of
// stdin: exactly one of them. The line's end ("\n" or "\r\n") is not part
// of it, and an empty password is refused.
func (e *env) readPassword(file string, stdin bool) (string, error) {
	var r io.Reader
	from := "stdin"
	switch {
	case file != "" && stdin:
		return "", errors.New("give the password with --password-file or --password-stdin, not both")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--password-file: %w", err)
		}
		defer f.Close()
		r, from = f, file
	case stdin:
		if f, ok := e.stdin.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				// A terminal would show the password as it is typed.
				return "", errors.New("--password-stdin reads a pipe or a file, and stdin is a terminal (or another device): " +
					"pipe the password in, or use --password-file")
			}
		}
		r = e.stdin
	default:
		return "", errors.New("give the password with --password-file F or --password-stdin (it is never taken from the command line)")
	}
	return firstLine(r, from)
}

// firstLine is the first line of r (a password or a token, from where
// from says), without its end ("\n" or "\r\n"); empty and overlong
// lines are refused.
func firstLine(r io.Reader, from string) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, maxPasswordLine+2)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("reading the password from %s: %w", from, err)
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	switch {
	case line == "":
		return "", fmt.Errorf("the password read from %s is empty", from)
	case len(line) > maxPasswordLine:
		return "", fmt.Errorf("the first line of %s is longer than %d bytes: not a password", from, maxPasswordLine)
	}
	return line, nil
}

func (e *env) userDelete(ctx context.Context, args []string) error {
	fs := e.newFlags("user delete", "user delete NAME [--mechanism M]\n\n"+
		"Deletes user NAME's SCRAM credential for the mechanism, or (without --mechanism) every credential it\n"+
		"has; a user without credentials is gone.")
	mech := fs.String("mechanism", "", "the mechanism whose credential to delete: SCRAM-SHA-256 or SCRAM-SHA-512 (default: every one)")
	pos, err := e.parse(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if *mech != "" {
		if _, err := auth.ParseScramMechanism(*mech); err != nil {
			return fmt.Errorf("user delete: --mechanism: %w", err)
		}
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	mechs := []string{*mech}
	if *mech == "" {
		users, err := c.DescribeScramUsers(ctx, name)
		if err != nil {
			return fmt.Errorf("user delete: %w", err)
		}
		mechs = nil
		for _, u := range users {
			for _, cr := range u.Credentials {
				mechs = append(mechs, cr.Mechanism)
			}
		}
		if len(mechs) == 0 {
			return fmt.Errorf("user delete: user %q has no SCRAM credential", name)
		}
	}
	dels := make([]*sluicev1.ScramCredentialDeletion, len(mechs))
	for i, m := range mechs {
		dels[i] = &sluicev1.ScramCredentialDeletion{Name: name, Mechanism: m}
	}
	res, err := c.AlterUserScramCredentials(ctx, nil, dels)
	if err != nil {
		return fmt.Errorf("user delete: %w", err)
	}
	if err := res[name]; err != nil {
		return fmt.Errorf("user delete: %w", err)
	}
	fmt.Fprintf(e.stdout, "user %q: %s deleted\n", name, credentialsWord(mechs))
	return nil
}

// credentialsWord is "SCRAM-SHA-256 credential", "SCRAM-SHA-256 and
// SCRAM-SHA-512 credentials".
func credentialsWord(mechs []string) string {
	if len(mechs) == 1 {
		return mechs[0] + " credential"
	}
	return strings.Join(mechs, " and ") + " credentials"
}

func (e *env) userList(ctx context.Context, args []string) error {
	fs := e.newFlags("user list", "user list [NAME...]\n\n"+
		"Lists the users with SCRAM credentials (or those named), one line per credential: user, mechanism and\n"+
		"iteration count; never a key or salt. A user named without credentials fails the command (exit 1)\n"+
		"after the others are listed.")
	names, err := e.parse(fs, args, -1)
	if err != nil {
		return err
	}
	c, err := e.g.client()
	if err != nil {
		return err
	}
	defer c.Close()
	users, err := c.DescribeScramUsers(ctx, names...)
	if err != nil {
		return fmt.Errorf("user list: %w", err)
	}
	rows, missing := userRows(users)
	if e.g.json() {
		if err := json.NewEncoder(e.stdout).Encode(rows); err != nil {
			return err
		}
	} else if len(rows) > 0 {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tMECHANISM\tITERATIONS")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", r.User, r.Mechanism, r.Iterations)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("user list: no SCRAM credential for %s", quoteAll(missing))
	}
	return nil
}

// userRows flattens a describe answer: one row per credential, and the
// users answered without any.
func userRows(users []*sluicev1.UserScramCredentials) (rows []output.ScramCredential, missing []string) {
	rows = []output.ScramCredential{}
	for _, u := range users {
		if u.ErrorCode != sluicev1.ErrorCode_NONE || len(u.Credentials) == 0 {
			missing = append(missing, u.User)
			continue
		}
		for _, cr := range u.Credentials {
			rows = append(rows, output.ScramCredential{User: u.User, Mechanism: cr.Mechanism, Iterations: cr.Iterations})
		}
	}
	return rows, missing
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
