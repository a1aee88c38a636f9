package membership

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestMetaHasRole(t *testing.T) {
	m := Meta{Roles: []string{RoleController}}
	if !m.HasRole(RoleController) || m.HasRole(RoleBroker) {
		t.Errorf("HasRole wrong for %v", m.Roles)
	}
}

// The wire form round-trips, and a meta is only taken for the node whose
// name carries its id.
func TestMetaEncoding(t *testing.T) {
	in := Meta{NodeID: 4, Roles: []string{RoleBroker, RoleController}, GRPCAddress: "10.0.0.4:9092", RaftAddress: "10.0.0.4:9093", Rack: "a"}
	b, err := encodeMeta(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeMeta("node-4", b)
	if err != nil || out.GRPCAddress != in.GRPCAddress || out.RaftAddress != in.RaftAddress || !out.HasRole(RoleController) {
		t.Fatalf("decode = %+v, %v; want %+v", out, err, in)
	}
	for _, tt := range []struct {
		name string
		raw  string
	}{
		{"node-5", string(b)},
		{"node-4", "not json"},
		{"node--1", `{"id":-1}`},
	} {
		if _, err := decodeMeta(tt.name, []byte(tt.raw)); err == nil {
			t.Errorf("decodeMeta(%q, %q) accepted", tt.name, tt.raw)
		}
	}
	big := in
	big.Rack = strings.Repeat("x", memberlist.MetaMaxSize)
	if _, err := encodeMeta(big); err == nil {
		t.Error("encodeMeta accepted a meta over memberlist.MetaMaxSize")
	}
}
