package main

import (
	"flag"

	"github.com/sluice-io/sluice/node"
)

// addTLSFlags defines the listeners' TLS settings (issue 32; node.Config's
// TLS fields, docs/security.md).
func addTLSFlags(fs *flag.FlagSet, cfg *node.Config) {
	for _, f := range []struct {
		v          *string
		name, help string
	}{
		{&cfg.TLSCertFile, "tls-cert-file", "this node's certificate (PEM; `sluice cert create-node`): set with --tls-key-file and --tls-ca-file, it turns on mutual TLS between nodes (internal listener, Raft) and TLS on the client listener; reloaded when the file changes"},
		{&cfg.TLSKeyFile, "tls-key-file", "the key of --tls-cert-file (PEM)"},
		{&cfg.TLSCAFile, "tls-ca-file", "the cluster's CA (PEM): verifies the other nodes' certificates and, unless --client-tls-ca-file is set, clients' certificates"},
		{&cfg.ClusterName, "cluster-name", "the cluster name node certificates carry (sluice://NAME/node/...): a node accepts only nodes of its own cluster (empty: sluice)"},
		{&cfg.ClientTLSCertFile, "client-tls-cert-file", "a certificate for the client listener other than the node's (e.g. one from a public CA)"},
		{&cfg.ClientTLSKeyFile, "client-tls-key-file", "the key of --client-tls-cert-file"},
		{&cfg.ClientTLSCAFile, "client-tls-ca-file", "the CA of client certificates on the client listener (empty: --tls-ca-file)"},
		{&cfg.ClientAuth, "client-auth", "client certificates on the client listener: none, request (verified if given) or require (ssl.client.auth)"},
		{&cfg.HTTPTLSCertFile, "http-tls-cert-file", "with --http-tls, a certificate for the HTTP listener other than the node's"},
		{&cfg.HTTPTLSKeyFile, "http-tls-key-file", "the key of --http-tls-cert-file"},
	} {
		fs.StringVar(f.v, f.name, *f.v, f.help)
	}
	fs.StringVar(&cfg.Authentication, "authentication", cfg.Authentication, "optional (anonymous callers are User:ANONYMOUS) or required (they are refused on the client listener, but for health and the Auth service); required needs TLS (empty: optional)")
	fs.StringVar(&cfg.TLSPrincipalMappingRules, "tls-principal-mapping-rules", cfg.TLSPrincipalMappingRules, "rules from a client certificate's subject to its principal, as Kafka's ssl.principal.mapping.rules: RULE:pattern/replacement/[LU],...,DEFAULT (empty: DEFAULT, the whole subject)")
	fs.StringVar(&cfg.JWTJWKSFile, "jwt-jwks-file", cfg.JWTJWKSFile, "accept bearer JWTs signed by a key of this JWKS file (read again when it changes; Kafka's OAUTHBEARER)")
	fs.StringVar(&cfg.JWTJWKSURL, "jwt-jwks-url", cfg.JWTJWKSURL, "accept bearer JWTs signed by a key of the JWKS at this URL (an OIDC provider's jwks_uri; fetched every 5 min and for an unknown key id)")
	fs.StringVar(&cfg.JWTIssuer, "jwt-issuer", cfg.JWTIssuer, "the iss a JWT must carry (empty: not checked)")
	fs.StringVar(&cfg.JWTAudience, "jwt-audience", cfg.JWTAudience, "an aud a JWT must carry (required with JWT)")
	fs.StringVar(&cfg.JWTPrincipalClaim, "jwt-principal-claim", cfg.JWTPrincipalClaim, "the JWT claim naming the principal (empty: sub)")
	fs.DurationVar(&cfg.SASLSessionLifetime, "sasl-session-lifetime", cfg.SASLSessionLifetime, "how long a SCRAM session lasts before the client authenticates again (0: 1h)")
	fs.StringVar(&cfg.Authorizer, "authorizer", cfg.Authorizer, "acl: the ACLs in the cluster metadata decide what each principal may do, and no ACL matching denies (Kafka's StandardAuthorizer); empty: no authorization")
	fs.BoolVar(&cfg.AuditAllowedAdmin, "audit-allowed-admin", cfg.AuditAllowedAdmin, "log allowed operations on the cluster resource too (denials are always logged)")
	fs.BoolVar(&cfg.HTTPTLS, "http-tls", cfg.HTTPTLS, "serve the HTTP listener (/healthz, /readyz, /metrics) over TLS, with the node's certificate unless --http-tls-cert-file is set")
	fs.BoolVar(&cfg.Pprof, "pprof", cfg.Pprof, "serve /debug/pprof on the HTTP listener (off: a CPU profile is for operators, not whoever reaches the port)")
}
