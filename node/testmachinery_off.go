//go:build !sluicetest

package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"

	"google.golang.org/grpc"
)

// The default build, the one that ships, has no test machinery
// (docs/design.md decision 52): no fault injector (faults.go), no
// /debug/faults, no in-process DNS server (hosts.go). Those files build
// only with the sluicetest tag; this file stands in for them. The
// Config fields that would use them stay, as fields production never
// fills, and Validate refuses them here.

// errNoTestMachinery is the error of a testing-only setting in the
// default build.
var errNoTestMachinery = errors.New("this sluiced is built without test machinery: build it with -tags sluicetest (docs/operations.md, Fault injection)")

// faultInjector does not exist in the default build; Node.faults is
// always nil.
type faultInjector struct{}

// Hosts is the table of sluiced --hosts (hosts.go). In the default build
// there is no in-process DNS server to serve it: it is always empty
// (Validate refuses anything else).
type Hosts map[string]netip.Addr

// validateTestMachinery refuses the testing-only settings whose machinery
// this build lacks: FaultInjection, FaultDropProduceResponses and Hosts.
// FaultDialMap and FaultStorage stay: they are hooks of the lower layers
// that production leaves nil, not machinery of their own.
func (c Config) validateTestMachinery() error {
	switch {
	case c.FaultInjection:
		return fmt.Errorf("fault injection: %w", errNoTestMachinery)
	case c.FaultDropProduceResponses != 0:
		return fmt.Errorf("fault drop produce responses: %w", errNoTestMachinery)
	case len(c.Hosts) > 0:
		return fmt.Errorf("hosts: %w", errNoTestMachinery)
	}
	return nil
}

// withHosts returns c: there is no hosts table to install.
func (c Config) withHosts(*slog.Logger) Config { return c }

// faultServerOptions returns no interceptor.
func (n *Node) faultServerOptions() []grpc.ServerOption { return nil }

// startFaultRules does nothing.
func (n *Node) startFaultRules() {}

// registerFaults serves no /debug/faults.
func (n *Node) registerFaults(*http.ServeMux) {}
