package kafka

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A connection must have sent its first request, whole, within
// SetupTimeout of being accepted — one that sends nothing, or part of a
// frame, is closed then — and after that may wait IdleTimeout between
// requests: a connection answered once outlives SetupTimeout.
func TestFirstRequestMustArriveWithinSetupTimeout(t *testing.T) {
	const setup = 300 * time.Millisecond
	addr := startBare(t, Config{SetupTimeout: setup, IdleTimeout: time.Minute})
	apiVersions := func() []byte {
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = 3
		return frame(req, 1)
	}
	for name, first := range map[string][]byte{
		"nothing":           nil,
		"part of a size":    {0, 0},
		"part of a frame":   apiVersions()[:10],
		"a frame, answered": apiVersions(),
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, addr) // a 10 s deadline for every read below
			start := time.Now()
			if _, err := c.Write(first); err != nil {
				t.Fatal(err)
			}
			if name == "a frame, answered" {
				readAnswer(t, c)
				// Open past the setup timeout: answered again.
				c.SetReadDeadline(time.Now().Add(3 * setup))
				var b [1]byte
				var ne net.Error
				if n, err := c.Read(b[:]); n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("read %d bytes, %v; want nothing until the deadline", n, err)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(apiVersions()); err != nil {
					t.Fatal(err)
				}
				readAnswer(t, c)
				return
			}
			expectClosed(t, c)
			if took := time.Since(start); took < setup-50*time.Millisecond {
				t.Fatalf("closed %v after the dial, before the setup timeout %v", took, setup)
			}
		})
	}
}
