// Package cluster is the broker's side of the cluster (DESIGN §6–§8): the
// metadata cache built from the controller's metadata stream, the broker
// lifecycle (registration, heartbeats, controlled shutdown), the replica
// manager that hosts this node's partition logs as the image assigns them,
// and topic config rules. The controller quorum itself is in
// cluster/controller and membership in cluster/membership.
package cluster
