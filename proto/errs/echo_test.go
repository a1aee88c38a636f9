package errs_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
)

// Issue 29: a client-supplied string in an error message is repeated up
// to MaxEcho bytes, then cut with its length; shorter ones are formatted
// exactly as the plain string would be.
func TestEchoBoundsClientStrings(t *testing.T) {
	long := strings.Repeat("x", 30<<20)
	for _, c := range []struct {
		format, s, want string
	}{
		{"%q", "topic-a", `"topic-a"`},
		{"%s", "topic-a", "topic-a"},
		{"%v", "", ""},
		{"%q", "a\xffb", `"a\xffb"`},
		{"%q", strings.Repeat("t", errs.MaxEcho), `"` + strings.Repeat("t", errs.MaxEcho) + `"`},
		{"%q", long, `"` + strings.Repeat("x", errs.MaxEcho) + `"… (31457280 bytes)`},
		{"%s", long, strings.Repeat("x", errs.MaxEcho) + "… (31457280 bytes)"},
		// Cut at a rune boundary: "é" is 2 bytes and would straddle it.
		{"%s", strings.Repeat("x", errs.MaxEcho-1) + "é" + "tail", strings.Repeat("x", errs.MaxEcho-1) + "… (261 bytes)"},
	} {
		if got := fmt.Sprintf(c.format, errs.Echo(c.s)); got != c.want {
			t.Errorf("Sprintf(%s, Echo(%d bytes)) = %.80q…, want %.80q…", c.format, len(c.s), got, c.want)
		}
	}
	err := errs.New(0, "min.insync.replicas must be an integer >= 1, got %q", errs.Echo(long))
	if n := len(err.Error()); n > 512 {
		t.Fatalf("an error naming a 30 MB value is %d bytes", n)
	}
}
