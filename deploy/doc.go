// Package deploy holds Sluice's deployment files and their tests: the
// image (Dockerfile), the Kubernetes manifests (kubernetes/, kustomize
// base and overlays), a compose file for a local three-node cluster
// (compose.yaml), and the Go tests that check them against sluiced itself
// (strict decoding into the Kubernetes API types, every flag and port, the
// DNS names of the quorum) and rehearse the StatefulSet with real sluiced
// processes on loopback (docs/kubernetes.md). It has no code of its own.
package deploy
