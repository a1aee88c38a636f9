//go:build sluicetest

package node

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseHosts(t *testing.T) {
	h, err := ParseHosts(" Sluice-0.sluice-headless.default.svc.cluster.local.=127.0.0.11, b=::1,")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.String(), "b=::1,sluice-0.sluice-headless.default.svc.cluster.local=127.0.0.11"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if h, err := ParseHosts(""); err != nil || h != nil {
		t.Errorf(`ParseHosts("") = %v, %v; want nil, nil`, h, err)
	}
	for _, bad := range []struct{ in, want string }{
		{"a", "want name=ip"},
		{"=127.0.0.1", "want name=ip"},
		{"a=nope", "ParseAddr"},
		{"a=127.0.0.1,A.=127.0.0.2", "a is given twice"},
	} {
		if _, err := ParseHosts(bad.in); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseHosts(%q): %v, want error containing %q", bad.in, err, bad.want)
		}
	}
	if got := h.Rewrite("SLUICE-0.sluice-headless.default.svc.cluster.local:9402"); got != "127.0.0.11:9402" {
		t.Errorf("Rewrite of a known name = %q", got)
	}
	if got := h.Rewrite("other:9402"); got != "other:9402" {
		t.Errorf("Rewrite of an unknown name = %q", got)
	}
}

// The in-process DNS answers the table's names with their IPs and every
// other name "no such host" (a resolver with a Dial of its own, so that
// this test leaves the process's resolver alone; Install sets the same
// Dial on net.DefaultResolver).
func TestHostsResolve(t *testing.T) {
	h, err := ParseHosts("sluice-1.sluice-headless.default.svc.cluster.local=127.0.0.12,v6.example=::1")
	if err != nil {
		t.Fatal(err)
	}
	r := &net.Resolver{PreferGo: true, Dial: h.dial}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := r.LookupNetIP(ctx, "ip", "sluice-1.sluice-headless.default.svc.cluster.local")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("127.0.0.12")}) {
		t.Errorf("lookup of a known name = %v, %v; want [127.0.0.12]", got, err)
	}
	got, err = r.LookupNetIP(ctx, "ip", "v6.example")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("::1")}) {
		t.Errorf("lookup of an IPv6 name = %v, %v; want [::1]", got, err)
	}
	var dnsErr *net.DNSError
	if got, err := r.LookupNetIP(ctx, "ip", "sluice-9.sluice-headless.default.svc.cluster.local"); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("lookup of an unknown name = %v, %v; want not found", got, err)
	}
}
