package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository: this package is internal/docscheck.
const root = "../.."

// Every repository path and page anchor that README.md and docs/*.md
// name exists, and so does every path named in the comments of the
// Makefile, the scripts and the deployment files: a file moved or renamed
// without its docs fails here, naming the document and line.
func TestDocumentedPathsAndAnchorsExist(t *testing.T) {
	r, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := r.Docs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(docs, "docs/design.md") {
		t.Fatalf("documents %v: docs/design.md missing; is the root %s right?", docs, root)
	}
	var problems []Problem
	for _, d := range docs {
		p, err := r.CheckMarkdown(d)
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, p...)
	}
	commented, err := r.CommentFiles()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(commented, "deploy/Dockerfile") {
		t.Fatalf("commented files %v: deploy/Dockerfile missing", commented)
	}
	for _, f := range commented {
		p, err := r.CheckComments(f)
		if err != nil {
			t.Fatal(err)
		}
		problems = append(problems, p...)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The rules on a repository of their own: what is a reference, and what
// makes one point nowhere (the stale references issue 28 found are among
// the cases).
func TestCheckFindsWhatPointsNowhere(t *testing.T) {
	dir := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".gitignore", "bin/\n/sluice\n*.test\n")
	write("Makefile", "")
	write("bin/sluice", "")
	write("cmd/sluiced/main.go", "")
	write("node/deploy_test.go", "")
	write("docs/design.md", "# Design\n\n## Decisions\n\n## Decisions\n\n### `sluice topic` and [links](x.md)\n```\n# not a heading\n```\n")
	write("docs/transactions.md", ""+
		"The broker side is in `DESIGN.md` §10.\n"+ // stale: no such page
		"See [design](design.md#decisions), [again](design.md#decisions-1), [code](design.md#sluice-topic-and-links).\n"+
		"See [gone](design.md#what-exists) and [self](#nowhere).\n"+ // stale anchors
		"Paths: `cmd/sluiced/main.go`, `./cmd/sluiced`, `node/`, `Makefile`, `design.md`.\n"+
		"Stale: `deploy/deploy_test.go`, [img](../deploy/x.png), `cmd/sluice/nothing.go`.\n"+
		"Not paths: `./sluice-data`, `/proc/self/exe`, `proto/sluice/v1/*.proto`, `./...`, `bin/sluice`, "+
		"`data/logs/x.log`, `sluice/v1/sluice.proto`, `0.10`, `make run`, [web](https://example.com/a.md#b).\n"+
		"```sh\ncat deploy/nothing.yaml `deploy/nothing.yaml` [x](nothing.md)\n```\n"+
		"Outside: [up](../../etc/passwd).\n")
	write("deploy/Dockerfile", "# deploy/deploy_test.go checks this file (node/deploy_test.go).\n"+
		"# Data in /var/lib/sluice; see docs/design.md, ./sluice-data.\nRUN cmd/nothing.go\n")

	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	md, err := r.CheckMarkdown("docs/transactions.md")
	if err != nil {
		t.Fatal(err)
	}
	comments, err := r.CheckComments("deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range append(md, comments...) {
		got = append(got, p.String())
	}
	want := []string{
		"docs/transactions.md:1: DESIGN.md: no such file or directory",
		"docs/transactions.md:3: design.md#what-exists: docs/design.md has no heading with anchor #what-exists",
		"docs/transactions.md:3: #nowhere: docs/transactions.md has no heading with anchor #nowhere",
		"docs/transactions.md:5: deploy/deploy_test.go: no such file or directory",
		"docs/transactions.md:5: cmd/sluice/nothing.go: no such file or directory",
		"docs/transactions.md:5: ../deploy/x.png: no such file or directory",
		"docs/transactions.md:10: ../../etc/passwd: outside the repository",
		"deploy/Dockerfile:1: deploy/deploy_test.go: no such file or directory",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Heading anchors as GitHub computes them.
func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Compacted topics", "compacted-topics"},
		{"1. The files and the include root", "1-the-files-and-the-include-root"},
		{"2. Finding leaders: Metadata and `NOT_LEADER_OR_FOLLOWER`", "2-finding-leaders-metadata-and-not_leader_or_follower"},
		{"Per-RPC fault rules: `--fault-injection` and `/debug/faults`", "per-rpc-fault-rules---fault-injection-and-debugfaults"},
		{"`--output json`", "--output-json"},
		{"What the issue-16 runs found (held requests, zombies, phase kills)", "what-the-issue-16-runs-found-held-requests-zombies-phase-kills"},
		{"**Bold** and [a link](x.md)", "bold-and-a-link"},
		{"Transactions (transaction version 2)", "transactions-transaction-version-2"},
		{"Día – 2", "día--2"},
	} {
		if got := Slug(tc.heading); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}
