package auth

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// docs/security.md's table of what each request needs is this table:
// every RPC has its row, in the words Describe gives.
func TestSecurityDocHasTheOperationTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	methods := make([]string, 0, len(Operations))
	for m := range Operations {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	for _, m := range methods {
		row := fmt.Sprintf("| `%s` | %s |", m, Describe(Operations[m]))
		if !strings.Contains(string(doc), row) {
			missing = append(missing, row)
		}
	}
	if len(missing) > 0 {
		t.Errorf("docs/security.md lacks these rows of the operation table (or has them otherwise):\n%s", strings.Join(missing, "\n"))
	}
}
