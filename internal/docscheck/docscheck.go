// Package docscheck finds references in the repository's documentation
// that point nowhere: a markdown link to a file that does not exist or to
// a heading a page does not have, a backticked repository path
// (`cmd/sluiced/main.go`) that was moved or never written, a path named
// in a comment of a deployment file or script. Its test runs in `make
// test` over README.md and docs/*.md (Repo.Docs) and the comments of the
// Makefile, scripts/*.sh, deploy/Dockerfile and deploy/compose.yaml
// (Repo.CommentFiles), so a rename that leaves the docs behind fails.
//
// What counts as a reference (the rules keep prose, commands and
// examples out):
//   - a markdown link [text](target) outside code: target is resolved
//     against the page's directory; URLs (scheme:...) are skipped; an
//     anchor (#heading, page.md#heading) must name a heading of that page,
//     as GitHub computes heading anchors (Slug);
//   - an inline code span holding one path-like word, outside fenced code
//     blocks: a repository path when its first element is a top-level
//     directory of the repository (`storage/log.go`, `./cmd/sluice`,
//     `deploy/kubernetes/`) or it is a top-level file (`Makefile`), and a
//     page when it is a bare NAME.md (`operations.md`, `DESIGN.md`), looked
//     for beside the page and at the top level. Globs (`proto/sluice/v1/*.proto`),
//     elisions (`./...`), absolute and parent paths (`/proc/self/exe`,
//     `../x`) and paths under directories the repository does not have
//     (`./sluice-data`, `data/logs/...`) are not references;
//   - in a comment file (lines starting with #), every word with a "/"
//     whose first element is a top-level directory.
//
// Checking is read-only and needs no network: it is file existence and
// heading lists.
package docscheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Ref is one reference found in a document.
type Ref struct {
	// File is the document, relative to the repository root, and Line
	// its 1-based line.
	File string
	Line int
	// Target is the reference as written: a link target, a code span's
	// content, or a word of a comment.
	Target string
	// Link: a markdown link (its target is relative to the document's
	// directory); else a path named in code or a comment.
	Link bool
}

// Problem is a reference that points nowhere, with the reason.
type Problem struct {
	Ref
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// Repo is a repository checkout to check documents against.
type Repo struct {
	// Root is the repository's directory.
	Root string
	// topDirs are its top-level directories, except .git and those
	// .gitignore lists by name (bin/, sluice-data/: build and run
	// output, not part of the repository); topFiles its top-level files.
	topDirs, topFiles map[string]bool
	// anchors caches each page's heading anchors, by path from Root.
	anchors map[string]map[string]bool
}

// Open reads root's top level and its .gitignore.
func Open(root string) (*Repo, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	ignored := map[string]bool{".git": true}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			name := strings.Trim(l, "/")
			if name != "" && !strings.ContainsAny(name, "*?[!#/") {
				ignored[name] = true
			}
		}
	}
	r := &Repo{Root: root, topDirs: map[string]bool{}, topFiles: map[string]bool{}, anchors: map[string]map[string]bool{}}
	for _, e := range entries {
		switch {
		case ignored[e.Name()]:
		case e.IsDir():
			r.topDirs[e.Name()] = true
		default:
			r.topFiles[e.Name()] = true
		}
	}
	return r, nil
}

// CheckMarkdown checks the references of the markdown document at doc
// (relative to Root).
func (r *Repo) CheckMarkdown(doc string) ([]Problem, error) {
	b, err := os.ReadFile(filepath.Join(r.Root, doc))
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, ref := range MarkdownRefs(doc, string(b)) {
		if reason := r.check(ref); reason != "" {
			out = append(out, Problem{Ref: ref, Reason: reason})
		}
	}
	return out, nil
}

// CheckComments checks the paths named in the comment lines (# ...) of
// the file at path (relative to Root): a Dockerfile, YAML, a Makefile.
func (r *Repo) CheckComments(path string) ([]Problem, error) {
	b, err := os.ReadFile(filepath.Join(r.Root, path))
	if err != nil {
		return nil, err
	}
	var out []Problem
	for _, ref := range CommentRefs(path, string(b)) {
		if !r.repoPath(ref.Target) {
			continue
		}
		if reason := r.check(ref); reason != "" {
			out = append(out, Problem{Ref: ref, Reason: reason})
		}
	}
	return out, nil
}

var (
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan = regexp.MustCompile("(`+)([^`]|[^`].*?[^`])(`+)")
	// mdLink is an inline link or image, [text](target "title"); the
	// target may hold one level of parentheses.
	mdLink   = regexp.MustCompile(`\]\(\s*<?([^()\s>]*(?:\([^()\s]*\)[^()\s>]*)*)>?(?:\s+"[^"]*")?\s*\)`)
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	pathWord = regexp.MustCompile(`^[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]*)*(#[A-Za-z0-9_-]+)?$`)
	bareMD   = regexp.MustCompile(`^[A-Za-z0-9_-]+\.md(#[A-Za-z0-9_-]+)?$`)
)

// MarkdownRefs returns the references of a markdown document named doc:
// its links, and its inline code spans that hold a single path-like word
// (which of those are repository paths is Repo's to decide). Fenced code
// blocks are skipped.
func MarkdownRefs(doc, text string) []Ref {
	var out []Ref
	inFence := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case m[1] == inFence:
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		// Code spans first; links are looked for in what is left.
		rest := codeSpan.ReplaceAllStringFunc(line, func(span string) string {
			m := codeSpan.FindStringSubmatch(span)
			if len(m[1]) == len(m[3]) {
				if w := strings.TrimSpace(m[2]); pathWord.MatchString(w) {
					out = append(out, Ref{File: doc, Line: i + 1, Target: w})
				}
			}
			return strings.Repeat(" ", len(span))
		})
		for _, m := range mdLink.FindAllStringSubmatch(rest, -1) {
			if m[1] != "" {
				out = append(out, Ref{File: doc, Line: i + 1, Target: m[1], Link: true})
			}
		}
	}
	return out
}

// CommentRefs returns the words containing a "/" in the comment lines of
// a file named path, trimmed of surrounding punctuation.
func CommentRefs(path, text string) []Ref {
	var out []Ref
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "#") {
			continue
		}
		for _, w := range strings.Fields(strings.TrimLeft(t, "#")) {
			w = strings.Trim(w, "`'\"()[]{},;:!?")
			w = strings.TrimSuffix(w, ".")
			if strings.Contains(w, "/") && pathWord.MatchString(w) {
				out = append(out, Ref{File: path, Line: i + 1, Target: w})
			}
		}
	}
	return out
}

// repoPath reports whether a code span or comment word names something
// in the repository (see the package comment).
func (r *Repo) repoPath(w string) bool {
	w, _, _ = strings.Cut(w, "#")
	if strings.Contains(w, "..") || strings.HasPrefix(w, "/") {
		return false
	}
	w = strings.TrimPrefix(w, "./")
	first, _, slash := strings.Cut(w, "/")
	if slash {
		return r.topDirs[first]
	}
	return r.topFiles[w] || bareMD.MatchString(w)
}

// check returns why ref points nowhere, or "".
func (r *Repo) check(ref Ref) string {
	target, anchor, hasAnchor := strings.Cut(ref.Target, "#")
	var path string
	switch {
	case ref.Link:
		if scheme.MatchString(ref.Target) {
			return ""
		}
		if target == "" {
			path = ref.File // #anchor: this page
		} else {
			path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(ref.File), target)))
		}
	case !r.repoPath(ref.Target):
		return ""
	case bareMD.MatchString(ref.Target):
		// A page named alone: beside the document, or at the top level.
		path = filepath.ToSlash(filepath.Join(filepath.Dir(ref.File), target))
		if _, err := os.Stat(filepath.Join(r.Root, path)); err != nil {
			path = target
		}
	default:
		path = strings.TrimPrefix(target, "./")
	}
	if strings.HasPrefix(path, "../") {
		return "outside the repository"
	}
	fi, err := os.Stat(filepath.Join(r.Root, path))
	if err != nil {
		if pkg, sym, ok := goSymbol(path); ok && !ref.Link {
			return r.checkSymbol(pkg, sym)
		}
		return "no such file or directory"
	}
	if !hasAnchor {
		return ""
	}
	if fi.IsDir() || !strings.HasSuffix(path, ".md") {
		return "an anchor on something that is not a markdown page"
	}
	anchors, err := r.pageAnchors(path)
	if err != nil {
		return err.Error()
	}
	if !anchors[anchor] {
		return fmt.Sprintf("%s has no heading with anchor #%s", path, anchor)
	}
	return ""
}

// goSymbol splits a Go identifier named by its package directory,
// "proto/batch.Canonicalize" or "storage.Log.Append" after a directory,
// into the directory and the first identifier (Canonicalize, Log).
func goSymbol(path string) (pkg, sym string, ok bool) {
	dir, last := filepath.Split(path)
	name, rest, dot := strings.Cut(last, ".")
	if !dot || dir == "" || name == "" {
		return "", "", false
	}
	sym, _, _ = strings.Cut(rest, ".")
	if sym == "" || !unicode.IsUpper([]rune(sym)[0]) {
		return "", "", false
	}
	return dir + name, sym, true
}

// checkSymbol returns why package directory pkg declares no sym, or "".
func (r *Repo) checkSymbol(pkg, sym string) string {
	files, err := filepath.Glob(filepath.Join(r.Root, pkg, "*.go"))
	if err != nil || len(files) == 0 {
		return "no such file, directory or Go package"
	}
	decl := regexp.MustCompile(`(?m)^(?:(?:func|type|var|const)\s+(?:\([^)]*\)\s*)?|\t)` + regexp.QuoteMeta(sym) + `\b`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		if b, err := os.ReadFile(f); err == nil && decl.Match(b) {
			return ""
		}
	}
	return fmt.Sprintf("package %s declares no %s", pkg, sym)
}

func (r *Repo) pageAnchors(path string) (map[string]bool, error) {
	if a, ok := r.anchors[path]; ok {
		return a, nil
	}
	b, err := os.ReadFile(filepath.Join(r.Root, path))
	if err != nil {
		return nil, err
	}
	a := Anchors(string(b))
	r.anchors[path] = a
	return a, nil
}

var (
	heading  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	htmlID   = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// Anchors returns the anchors of a markdown page: one per ATX heading
// outside fenced code (Slug, with GitHub's -1, -2 suffixes for repeats)
// and one per <a name="..."> or <a id="...">.
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case m[1] == inFence:
				inFence = ""
			}
			continue
		}
		if inFence != "" {
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			s := Slug(m[2])
			if n := seen[s]; n > 0 {
				seen[s] = n + 1
				s = fmt.Sprintf("%s-%d", s, n)
			} else {
				seen[s] = 1
			}
			out[s] = true
		}
	}
	return out
}

// Slug is the anchor GitHub gives a heading: the text as rendered (links
// become their text, code and emphasis marks go), lower-cased, every
// character other than a letter, digit, space, "-" or "_" dropped, and
// spaces turned into "-".
func Slug(heading string) string {
	t := linkText.ReplaceAllString(heading, "$1")
	t = strings.NewReplacer("`", "", "*", "").Replace(t)
	var b strings.Builder
	for _, c := range strings.ToLower(t) {
		switch {
		case c == ' ':
			b.WriteByte('-')
		case c == '-' || c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c):
			b.WriteRune(c)
		}
	}
	return b.String()
}

// CommentFiles returns the files whose comments the repository's check
// covers, relative to Root: the Makefile, scripts/*.sh, deploy/Dockerfile
// and deploy/compose.yaml (those that exist), sorted.
func (r *Repo) CommentFiles() ([]string, error) {
	scripts, err := filepath.Glob(filepath.Join(r.Root, "scripts", "*.sh"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range append(scripts, filepath.Join(r.Root, "Makefile"),
		filepath.Join(r.Root, "deploy", "Dockerfile"), filepath.Join(r.Root, "deploy", "compose.yaml")) {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		rel, err := filepath.Rel(r.Root, f)
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.ToSlash(rel))
	}
	slices.Sort(out)
	return out, nil
}

// Docs returns the documents the repository's check covers, relative to
// Root: README.md and docs/*.md, sorted.
func (r *Repo) Docs() ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(r.Root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(r.Root, d)
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.ToSlash(rel))
	}
	slices.Sort(out[1:])
	return out, nil
}
