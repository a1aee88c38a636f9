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

// Decision 41: a node gossips its internal listener, where the others call
// its inter-node services; the meta of a node that predates it has none,
// and its one gRPC address serves them.
func TestMetaInterNodeAddressFallsBack(t *testing.T) {
	in := Meta{NodeID: 4, Roles: []string{RoleBroker}, GRPCAddress: "10.0.0.4:9400", InternalAddress: "10.0.0.4:9404"}
	b, err := encodeMeta(in)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := decodeMeta("node-4", b); err != nil || out.InterNodeAddress() != "10.0.0.4:9404" || out.GRPCAddress != "10.0.0.4:9400" {
		t.Fatalf("decode = %+v, %v; want inter-node address 10.0.0.4:9404", out, err)
	}
	old, err := decodeMeta("node-4", []byte(`{"id":4,"roles":["broker"],"grpc":"10.0.0.4:9400"}`))
	if err != nil || old.InternalAddress != "" || old.InterNodeAddress() != "10.0.0.4:9400" {
		t.Fatalf("old meta = %+v, %v; want inter-node address 10.0.0.4:9400", old, err)
	}
}
