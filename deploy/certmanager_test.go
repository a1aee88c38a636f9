package deploy

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cert-manager's resources (https://cert-manager.io/docs/reference/api-docs/),
// which k8s.io/api does not have: the fields the manifests use, with the
// API's JSON names, so that render's strict decoding refuses a field that
// is misspelt or not among these. Add a field here only after checking it
// in cert-manager's API reference.

const certManagerV1 = "cert-manager.io/v1"

// certificate is a cert-manager.io/v1 Certificate.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              certificateSpec `json:"spec"`
}

type certificateSpec struct {
	SecretName  string     `json:"secretName"`
	CommonName  string     `json:"commonName,omitempty"`
	DNSNames    []string   `json:"dnsNames,omitempty"`
	IPAddresses []string   `json:"ipAddresses,omitempty"`
	URIs        []string   `json:"uris,omitempty"`
	Usages      []string   `json:"usages,omitempty"`
	Duration    string     `json:"duration,omitempty"`    // a Go duration: "2160h"
	RenewBefore string     `json:"renewBefore,omitempty"` // likewise
	IsCA        bool       `json:"isCA,omitempty"`
	PrivateKey  privateKey `json:"privateKey"`
	IssuerRef   issuerRef  `json:"issuerRef"`
}

type privateKey struct {
	Algorithm      string `json:"algorithm,omitempty"` // RSA, ECDSA, Ed25519
	Size           int    `json:"size,omitempty"`
	RotationPolicy string `json:"rotationPolicy,omitempty"` // Never, Always
}

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`  // Issuer (default) or ClusterIssuer
	Group string `json:"group,omitempty"` // cert-manager.io (default)
}

// issuer is a cert-manager.io/v1 Issuer: self-signed or a CA.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              issuerSpec `json:"spec"`
}

type issuerSpec struct {
	SelfSigned *struct{}     `json:"selfSigned,omitempty"`
	CA         *caIssuerSpec `json:"ca,omitempty"`
}

type caIssuerSpec struct {
	SecretName string `json:"secretName"`
}
