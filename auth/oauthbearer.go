package auth

import (
	"encoding/json"
	"errors"
	"strings"
)

// MechanismOAuthBearer is SASL OAUTHBEARER (RFC 7628): a bearer token,
// for Sluice a JWT checked by a JWTValidator (Kafka's KIP-768).
const MechanismOAuthBearer = string(MethodJWT)

// OAuthBearerResponse is a client's initial response of RFC 7628 §3.1.
type OAuthBearerResponse struct {
	// AuthzID is the gs2 header's authorization id ("" when none).
	AuthzID string
	// Token is the bearer token of the auth key ("auth=Bearer <token>").
	Token string
	// Extensions are the other key/value pairs (Kafka's SASL extensions,
	// KIP-342), not interpreted by Sluice.
	Extensions map[string]string
}

var errOAuthBearerMessage = errors.New("OAUTHBEARER: not an RFC 7628 client response (n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A]...^A)")

// ParseOAuthBearer parses a client's initial response (RFC 7628 §3.1):
//
//	gs2-header kvsep *kvpair kvsep
//	gs2-header = "n," [ "a=" saslname ] ","   (no channel binding, as Kafka)
//	kvpair     = key "=" value kvsep, key = 1*ALPHA
//	auth       = "auth=" "Bearer" 1*SP b64token (the scheme in any case)
func ParseOAuthBearer(msg []byte) (OAuthBearerResponse, error) {
	s, ok := strings.CutPrefix(string(msg), "n,")
	if !ok {
		return OAuthBearerResponse{}, errOAuthBearerMessage
	}
	authz, rest, ok := strings.Cut(s, ",")
	if !ok {
		return OAuthBearerResponse{}, errOAuthBearerMessage
	}
	var r OAuthBearerResponse
	if authz != "" {
		name, ok := strings.CutPrefix(authz, "a=")
		if !ok || name == "" {
			return OAuthBearerResponse{}, errOAuthBearerMessage
		}
		// saslname (RFC 5801): "," and "=" written =2C and =3D.
		r.AuthzID = strings.NewReplacer("=2C", ",", "=3D", "=").Replace(name)
	}
	if len(rest) < 2 || rest[0] != 1 || rest[len(rest)-1] != 1 {
		return OAuthBearerResponse{}, errOAuthBearerMessage
	}
	pairs := strings.Split(rest[1:len(rest)-1], "\x01")
	if pairs[len(pairs)-1] != "" { // each pair ends with its kvsep
		return OAuthBearerResponse{}, errOAuthBearerMessage
	}
	for _, kv := range pairs[:len(pairs)-1] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validKey(k) || !validValue(v) {
			return OAuthBearerResponse{}, errOAuthBearerMessage
		}
		if k != "auth" {
			if r.Extensions == nil {
				r.Extensions = map[string]string{}
			}
			r.Extensions[k] = v
			continue
		}
		scheme, token, ok := strings.Cut(v, " ")
		token = strings.TrimLeft(token, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t\r\n") || r.Token != "" {
			return OAuthBearerResponse{}, errOAuthBearerMessage
		}
		r.Token = token
	}
	if r.Token == "" {
		return OAuthBearerResponse{}, errOAuthBearerMessage
	}
	return r, nil
}

func validKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// validValue: VCHAR, SP, HTAB, CR, LF.
func validValue(v string) bool {
	for _, c := range []byte(v) {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// OAuthBearerError is the server's error challenge of RFC 7628 §3.2.2,
// a JSON object with the status (RFC 6750's "invalid_token", "invalid_request").
// The client answers it with a lone %x01, and the server then fails the
// authentication (Kafka: SASL_AUTHENTICATION_FAILED, the JSON as its
// message).
func OAuthBearerError(status string) []byte {
	b, _ := json.Marshal(struct {
		Status string `json:"status"`
	}{status})
	return b
}
