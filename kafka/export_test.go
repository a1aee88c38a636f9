package kafka

import (
	"net"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ParseRequestFrame parses a request frame (header and body, without
// the 4-byte size) as a connection does. kip511 reports an ApiVersions of
// a version the door does not serve, which it answers (in v0) rather than
// closing; err is what closes the connection otherwise.
func ParseRequestFrame(b []byte) (kip511 bool, err error) {
	r, err := parseRequest(b)
	if err != nil && r != nil && r.key == apiVersionsKey {
		return true, nil
	}
	return false, err
}

// Test helpers for the external tests (conn_test.go, limits_test.go).
var (
	Frame = frame
	Keys  = keys
)

func Dial(t *testing.T, addr string) net.Conn { t.Helper(); return dial(t, addr) }

func ReadAnswer(t *testing.T, c net.Conn) (int32, []byte) { t.Helper(); return readAnswer(t, c) }

// Probe is a request over a limit, built with n entries.
type Probe struct {
	Name string
	Req  func(n int) kmsg.Request
}

// Probes are limits_test.go's requests over a limit.
var Probes = func() []Probe {
	out := make([]Probe, len(kafkaProbes))
	for i, p := range kafkaProbes {
		out[i] = Probe{p.name, p.req}
	}
	return out
}()
