// Package auth is who a caller is, and (as it grows) what it may do:
// TLS identities of nodes and clients, the certificate files a listener
// presents and reloads, and the principals that authentication produces
// (DESIGN §3). It is pure where it can be: no gRPC, no Kafka framing; the
// doors (api, node) translate.
package auth
