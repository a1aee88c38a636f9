package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// A node's certificate names it with a URI SAN
// sluice://<cluster>/node/<name> (docs/security.md, decision 61): the
// cluster's CA signs it, and a node accepts on its internal listener and
// its Raft port only a certificate of its own cluster's CA that names a
// node of its cluster. A client certificate from the same CA names no
// node, and so cannot call the inter-node services; a node certificate of
// another cluster names another cluster. The node's name is for logs and
// principals (Node:<name>); identity is the CA and the cluster name.
const nodeURIScheme = "sluice"

// DefaultClusterName is the cluster name node certificates carry when
// none is configured.
const DefaultClusterName = "sluice"

var clusterNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateClusterName checks that name can be a cluster name: a DNS label
// (lower-case letters, digits and '-', at most 63).
func ValidateClusterName(name string) error {
	if !clusterNameRE.MatchString(name) {
		return fmt.Errorf("cluster name %q: must be a DNS label (lower-case letters, digits and '-', 1-63 characters)", name)
	}
	return nil
}

// NodeURI is the URI SAN of the certificate of node name in cluster.
func NodeURI(cluster, name string) *url.URL {
	return &url.URL{Scheme: nodeURIScheme, Host: cluster, Path: "/node/" + name}
}

// ErrNotANode is returned for a certificate that names no node of the
// cluster.
var ErrNotANode = errors.New("certificate names no node of this cluster")

// NodeName is the name of the node cert names in cluster; ErrNotANode
// (wrapped, with what it does name) when it names none.
func NodeName(cert *x509.Certificate, cluster string) (string, error) {
	var others []string
	for _, u := range cert.URIs {
		if u.Scheme != nodeURIScheme {
			continue
		}
		name, ok := strings.CutPrefix(u.Path, "/node/")
		if ok && name != "" && u.Host == cluster {
			return name, nil
		}
		others = append(others, u.String())
	}
	if len(others) > 0 {
		return "", fmt.Errorf("%w %q (it names %s)", ErrNotANode, cluster, strings.Join(others, ", "))
	}
	return "", fmt.Errorf("%w %q (subject %q, no %s:// URI)", ErrNotANode, cluster, cert.Subject.String(), nodeURIScheme)
}

// ParseNodeURI is the cluster and node name of a node URI (NodeURI), ok
// false for any other URI.
func ParseNodeURI(u *url.URL) (cluster, name string, ok bool) {
	if u.Scheme != nodeURIScheme {
		return "", "", false
	}
	name, ok = strings.CutPrefix(u.Path, "/node/")
	if !ok || name == "" || u.Host == "" {
		return "", "", false
	}
	return u.Host, name, true
}
