package membership

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Roles a node can announce in Meta.Roles.
const (
	// RoleController marks a voter of the Raft metadata quorum.
	RoleController = "controller"
	// RoleBroker marks a node that hosts partition replicas.
	RoleBroker = "broker"
)

// Meta is what a node gossips about itself. It travels as JSON in
// memberlist's node meta, so its encoding must fit memberlist.MetaMaxSize
// (512 bytes); Start and UpdateMeta refuse a Meta that does not.
type Meta struct {
	// NodeID is the node's cluster-wide id. It also names the node in the
	// gossip layer ("node-<id>"), so it must be unique and stable across
	// restarts.
	NodeID int32 `json:"id"`
	// Roles lists what the node does (RoleController, RoleBroker).
	Roles []string `json:"roles"`
	// GRPCAddress is the advertised host:port of the node's client gRPC
	// listener (the public API).
	GRPCAddress string `json:"grpc"`
	// InternalAddress is the advertised host:port of the node's internal
	// gRPC listener, where other nodes call its inter-node services
	// (decision 41); empty from a node that predates it, which serves
	// everything on GRPCAddress (see InterNodeAddress).
	InternalAddress string `json:"internal,omitempty"`
	// RaftAddress is the advertised host:port of the node's Raft transport;
	// set by controllers only.
	RaftAddress string `json:"raft,omitempty"`
	// Rack is the node's failure domain, used by replica placement.
	Rack string `json:"rack,omitempty"`
}

// HasRole reports whether r is among m.Roles.
func (m Meta) HasRole(r string) bool {
	return slices.Contains(m.Roles, r)
}

// InterNodeAddress is where other nodes call m's inter-node services: its
// internal listener, or GRPCAddress when it gossips none.
func (m Meta) InterNodeAddress() string {
	if m.InternalAddress != "" {
		return m.InternalAddress
	}
	return m.GRPCAddress
}

// nodeName is the gossip-layer name of the node with the given id. Two nodes
// with the same id therefore collide in memberlist, which reports it through
// the ConflictDelegate.
func nodeName(id int32) string {
	return fmt.Sprintf("node-%d", id)
}

// encodeMeta returns m's wire form, or an error if it does not fit
// memberlist's node meta.
func encodeMeta(m Meta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("membership: encode meta: %w", err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: meta of node %d encodes to %d bytes, more than the %d memberlist allows",
			ErrInvalidConfig, m.NodeID, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta parses the meta gossiped by the node called name. The id in
// the meta must match the name, so a foreign or corrupt payload is never
// taken for another node.
func decodeMeta(name string, raw []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return Meta{}, fmt.Errorf("membership: meta of %s: %w", name, err)
	}
	if m.NodeID < 0 || nodeName(m.NodeID) != name {
		return Meta{}, fmt.Errorf("membership: meta of %s carries node id %d", name, m.NodeID)
	}
	return m, nil
}
