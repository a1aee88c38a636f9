// Package grpctls is gRPC transport credentials whose tls.Config is made
// afresh for each handshake, so that a connection dialed after a
// certificate or CA file changed uses the new one (auth.Reloader), while
// connections open keep theirs.
package grpctls

import (
	"context"
	"crypto/tls"
	"net"

	"google.golang.org/grpc/credentials"
)

// Credentials returns transport credentials that call config for each
// handshake. config must return a new tls.Config each time (it is
// modified: gRPC's "h2" is added to its ALPN list).
func Credentials(config func() *tls.Config) credentials.TransportCredentials {
	return creds{config: config}
}

type creds struct{ config func() *tls.Config }

func (c creds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, conn)
}

func (c creds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ServerHandshake(conn)
}

func (c creds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (c creds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is deprecated in gRPC and unused.
func (c creds) OverrideServerName(string) error { return nil }
