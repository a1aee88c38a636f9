package errs

import (
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// MaxEcho is the most bytes of a client-supplied string that an error
// message repeats (Echo): every legal topic name (249 bytes) and group id
// (255) still appears whole.
const MaxEcho = 256

// Echo is a string a client sent — a topic name, a config key or value, a
// group, member or transactional id — as an error message names it.
// Formatted with %s, %v or %q it is the string (quoted for %q), cut after
// its first MaxEcho bytes (at a UTF-8 boundary) and followed by
// "… (N bytes)" when longer, so that a 30 MB config value does not come
// back as a 30 MB error (issue 29):
//
//	errs.New(code, "topic %q does not exist", errs.Echo(name))
type Echo string

// Format implements fmt.Formatter.
func (e Echo) Format(f fmt.State, verb rune) {
	s, more := string(e), ""
	if len(s) > MaxEcho {
		cut := MaxEcho
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, more = s[:cut], "… ("+strconv.Itoa(len(e))+" bytes)"
	}
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	io.WriteString(f, s+more)
}
