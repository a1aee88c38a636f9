package docscheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/proccluster"
)

// The binaries that ship (README documents their flags; the testing
// ones, docs/operations.md), built once per test binary by the first
// test that needs them; TestMain removes them.
var bins = proccluster.NewShippedBuildCache("sluice-docscheck-bin-")

// testBins are the binaries built with the test machinery's tag: their
// extra flags are the testing-only ones.
var testBins = proccluster.NewBuildCache("sluice-docscheck-testbin-")

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Remove()
	testBins.Remove()
	os.Exit(code)
}

// help runs a built binary with args (ending in --help) and returns what
// it printed; the exit status does not matter.
func help(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = proccluster.Env()
	out, _ := cmd.CombinedOutput()
	if len(out) == 0 {
		t.Fatalf("%s %s printed nothing", filepath.Base(bin), strings.Join(args, " "))
	}
	return string(out)
}

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// README's table of sluiced's settings lists every flag of sluiced
// --help, and no flag sluiced does not have.
func TestREADMEListsEverySluicedFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	flags := HelpFlags(help(t, bins.Get(t).Sluiced, "--help"))
	if len(flags) < 10 {
		t.Fatalf("sluiced --help lists %d flags: %v", len(flags), flags)
	}
	rows := SectionTable(readme(t), "## Running `sluiced`")
	if len(rows) == 0 {
		t.Fatal("README.md: no table under \"## Running `sluiced`\"")
	}
	var documented []string
	for _, r := range rows {
		documented = append(documented, CellFlags(r[0])...)
	}
	for _, f := range flags {
		if !slices.Contains(documented, f) {
			t.Errorf("README.md, Running `sluiced`: sluiced --%s has no row", f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(flags, f) {
			t.Errorf("README.md, Running `sluiced`: --%s is not a sluiced flag", f)
		}
	}
}

// Decision 52: the testing-only flags, those a sluiced built with the
// sluicetest tag has beyond the shipped one, each have a row in
// docs/operations.md's table under "## Fault injection (testing only)",
// and that table names no other flag.
func TestOperationsListsEveryTestingFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	shipped := HelpFlags(help(t, bins.Get(t).Sluiced, "--help"))
	var testOnly []string
	for _, f := range HelpFlags(help(t, testBins.Get(t).Sluiced, "--help")) {
		if !slices.Contains(shipped, f) {
			testOnly = append(testOnly, f)
		}
	}
	if len(testOnly) < 4 {
		t.Fatalf("sluiced -tags sluicetest has %d flags beyond the shipped ones: %v", len(testOnly), testOnly)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, r := range SectionTable(string(b), "## Fault injection (testing only)") {
		documented = append(documented, CellFlags(r[0])...)
	}
	for _, f := range testOnly {
		if !slices.Contains(documented, f) {
			t.Errorf("docs/operations.md, Fault injection (testing only): the testing flag --%s has no row", f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(testOnly, f) {
			t.Errorf("docs/operations.md, Fault injection (testing only): --%s is not a testing-only flag of sluiced", f)
		}
	}
}

// globalFlags are the CLI's flags of every command, documented once
// above README's table of commands.
var globalFlags = []string{"brokers", "output", "request-timeout", "tls", "tls-ca-file", "tls-cert-file", "tls-key-file", "tls-server-name", "command-config", "sasl-mechanism", "sasl-username", "sasl-password-file", "sasl-token-file"}

// README's table of CLI commands has a row for every command of sluice
// --help, and the rows of a command name every flag of sluice COMMAND
// --help but the global ones, and no flag the command does not have.
func TestREADMEListsEveryCLICommandAndFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	sluice := bins.Get(t).Sluice
	page := readme(t)
	for _, f := range globalFlags {
		if !strings.Contains(page, "`--"+f) {
			t.Errorf("README.md: the global flag --%s is not named", f)
		}
	}
	rows := SectionTable(page, "## CLI")
	documented := map[string][]string{} // command -> flags its rows name
	var order []string
	for _, r := range rows {
		synopsis := strings.Trim(r[0], "`")
		fields := strings.Fields(synopsis)
		if len(fields) < 2 || fields[0] != "sluice" {
			t.Errorf("README.md, CLI: row %q does not start with `sluice COMMAND`", r[0])
			continue
		}
		cmd := CommandWords(fields[1:])
		if _, ok := documented[cmd]; !ok {
			order = append(order, cmd)
		}
		documented[cmd] = append(documented[cmd], CellFlags(synopsis)...)
	}
	if len(order) < 10 {
		t.Fatalf("README.md, CLI: %d commands in the table: %v", len(order), order)
	}
	for _, cmd := range HelpCommands(help(t, sluice, "--help")) {
		if _, ok := documented[cmd]; !ok {
			t.Errorf("README.md, CLI: sluice %s has no row", cmd)
		}
	}
	for _, cmd := range order {
		flags := HelpFlags(help(t, sluice, append(strings.Fields(cmd), "--help")...))
		if len(flags) == 0 {
			t.Errorf("sluice %s --help lists no flags: not a command?", cmd)
			continue
		}
		for _, f := range flags {
			if !slices.Contains(globalFlags, f) && !slices.Contains(documented[cmd], f) {
				t.Errorf("README.md, CLI: sluice %s --%s is in no row of the command", cmd, f)
			}
		}
		for _, f := range documented[cmd] {
			if !slices.Contains(flags, f) {
				t.Errorf("README.md, CLI: sluice %s has no flag --%s", cmd, f)
			}
		}
	}
}
