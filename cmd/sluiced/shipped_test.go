package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testMachineryFlagNames are the flags only a sluicetest build has.
var testMachineryFlagNames = []string{"fault-injection", "fault-dial-map", "fault-drop-produce-responses", "hosts"}

// testMachinerySymbols are symbols of the test machinery (go tool nm
// names): the fault injector and its /debug/faults handler, and the
// in-process DNS server of --hosts. (storage.FaultSet, which only tests
// use, is not linked into sluiced in either build.)
var testMachinerySymbols = []string{
	"node.(*faultInjector)",
	"node.decodeFaultRules",
	"node.Hosts.serveDNS",
	"node.Hosts.Install",
}

// buildWithTags builds this command with the build tags (none: the
// shipped binary) into a temporary directory, whatever GOFLAGS says.
func buildWithTags(t *testing.T, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluiced")
	build := exec.Command("go", "build", "-tags", tags, "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %q: %v\n%s", tags, err, out)
	}
	return bin
}

// testMachineryIn returns the testing flags that bin --help lists and
// the test machinery's symbols that bin holds.
func testMachineryIn(t *testing.T, bin string) (flags, symbols []string) {
	t.Helper()
	help, _ := exec.Command(bin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "  -data-dir") {
		t.Fatalf("%s --help lists no -data-dir:\n%s", bin, help)
	}
	for _, f := range testMachineryFlagNames {
		if strings.Contains(string(help), "\n  -"+f+" ") || strings.Contains(string(help), "\n  -"+f+"\n") {
			flags = append(flags, f)
		}
	}
	nm, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm %s: %v", bin, err)
	}
	for _, s := range testMachinerySymbols {
		if strings.Contains(string(nm), "sluice-io/sluice/"+s) {
			symbols = append(symbols, s)
		}
	}
	return flags, symbols
}

// Decision 52 (issue 30): the sluiced that ships holds no test machinery:
// its --help lists no testing flag, and it contains none of the fault
// injector or the in-process DNS server. A build with
// the sluicetest tag has all of them (so that the check can fail).
func TestShippedBinaryHasNoTestMachinery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	flags, symbols := testMachineryIn(t, buildWithTags(t, ""))
	if len(flags) > 0 || len(symbols) > 0 {
		t.Errorf("the default sluiced has test machinery: flags %v, symbols %v", flags, symbols)
	}
	flags, symbols = testMachineryIn(t, buildWithTags(t, "sluicetest"))
	if len(flags) != len(testMachineryFlagNames) || len(symbols) != len(testMachinerySymbols) {
		t.Errorf("sluiced -tags sluicetest: flags %v of %v, symbols %v of %v", flags, testMachineryFlagNames, symbols, testMachinerySymbols)
	}
}
