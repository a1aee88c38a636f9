package proccluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Binaries are the paths of the built programs.
type Binaries struct {
	Sluiced string // the server
	Sluice  string // the CLI
}

// ModuleRoot returns the directory holding go.mod, searching up from the
// working directory (a test's working directory is its package's).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("proccluster: go.mod not found above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// TestTag is the build tag of the test machinery (docs/design.md
// decision 52): fault injection, the --fault-* flags and --hosts exist
// only in a sluiced built with it.
const TestTag = "sluicetest"

// Build builds ./cmd/sluiced and ./cmd/sluice of the module at root (""
// means ModuleRoot) into dir, which must exist, with the TestTag (the
// harnesses inject faults), and returns their paths. ctx bounds both
// builds. Build once per test binary or run: every Cluster may share the
// result.
func Build(ctx context.Context, root, dir string) (Binaries, error) {
	return build(ctx, root, dir, TestTag)
}

// BuildShipped is Build without the TestTag: the binaries that ship, for
// tests of what they offer (their --help).
func BuildShipped(ctx context.Context, root, dir string) (Binaries, error) {
	return build(ctx, root, dir, "")
}

// build is Build with the build tags tags (comma-separated; "" for none),
// whatever GOFLAGS says.
func build(ctx context.Context, root, dir, tags string) (Binaries, error) {
	if root == "" {
		var err error
		if root, err = ModuleRoot(); err != nil {
			return Binaries{}, err
		}
	}
	b := Binaries{Sluiced: filepath.Join(dir, "sluiced"), Sluice: filepath.Join(dir, "sluice")}
	for name, out := range map[string]string{"sluiced": b.Sluiced, "sluice": b.Sluice} {
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", out, "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("proccluster: go build -tags %q ./cmd/%s: %w\n%s", tags, name, err, strings.TrimSpace(string(msg)))
		}
	}
	return b, nil
}

// Env returns this process's environment without any SLUICE_* variable,
// followed by extra ("KEY=VALUE"). It is the environment of every process
// the harness starts, so that a SLUICE_* variable set where the tests run
// (sluiced reads every flag from one; the CLI reads SLUICE_BROKERS) never
// changes what they do; a caller that wants one passes it in extra.
func Env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// TB is the part of testing.TB that BuildCache needs.
type TB interface {
	Helper()
	Fatal(args ...any)
}

// BuildCache builds the binaries once per test binary: the first Get
// builds them into a new temporary directory (bounded by 5 minutes), later
// calls return the same paths or the same failure. Call Remove from
// TestMain after m.Run. Safe for concurrent use.
type BuildCache struct {
	prefix  string
	shipped bool // BuildShipped rather than Build

	once sync.Once
	dir  string
	bins Binaries
	err  error
}

// NewBuildCache returns a cache whose directory name starts with prefix.
// The binaries are built with the TestTag (Build).
func NewBuildCache(prefix string) *BuildCache { return &BuildCache{prefix: prefix} }

// NewShippedBuildCache returns a cache of the binaries that ship
// (BuildShipped), whose directory name starts with prefix.
func NewShippedBuildCache(prefix string) *BuildCache {
	return &BuildCache{prefix: prefix, shipped: true}
}

// Get returns sluiced and sluice built from this module, failing tb when
// they cannot be built.
func (c *BuildCache) Get(tb TB) Binaries {
	tb.Helper()
	c.once.Do(func() {
		if c.dir, c.err = os.MkdirTemp("", c.prefix); c.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if c.shipped {
			c.bins, c.err = BuildShipped(ctx, "", c.dir)
		} else {
			c.bins, c.err = Build(ctx, "", c.dir)
		}
	})
	if c.err != nil {
		tb.Fatal(c.err)
	}
	return c.bins
}

// Remove deletes the binaries' directory, if Get made one.
func (c *BuildCache) Remove() {
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}
