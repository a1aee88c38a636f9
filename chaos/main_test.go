package chaos

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a copier member process
// (copier_member.go) when the harness starts it as one.
func TestMain(m *testing.M) {
	RunCopierMemberIfAsked()
	os.Exit(m.Run())
}
