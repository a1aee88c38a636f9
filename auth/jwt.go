package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// JWTConfig configures bearer-token (JWT) authentication, Kafka's
// OAUTHBEARER (KIP-768): tokens signed by a key of a JWKS, from a file
// (read again when it changes) or an OIDC provider's jwks_uri (fetched
// again every JWKSRefresh, and when a token names a key id not in it).
type JWTConfig struct {
	JWKSFile string
	JWKSURL  string
	// Issuer, if set, must equal the token's "iss"; Audience must be in
	// its "aud" (required: a token meant for another service is refused).
	Issuer, Audience string
	// PrincipalClaim names the claim whose value is the principal's name
	// ("sub" when empty).
	PrincipalClaim string
	// JWKSRefresh is how often a JWKS URL is fetched again (5 min when 0).
	JWKSRefresh time.Duration
	Logger      *slog.Logger
}

// jwtAlgorithms are the signature algorithms accepted (no "none", no
// HMAC: the verifier holds public keys only).
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// JWTValidator checks bearer tokens. A token is checked once: its
// outcome is remembered (by the token's hash) until it expires, so a
// client sending the same token on every call costs a map lookup. Safe
// for concurrent use.
type JWTValidator struct {
	cfg JWTConfig
	log *slog.Logger

	mu        sync.Mutex // guards the following
	keys      *jose.JSONWebKeySet
	stamp     fileStamp
	checked   time.Time // last look at the file or fetch of the URL
	lastFetch time.Time // last fetch for an unknown key id
	cache     map[[32]byte]cachedToken
}

type cachedToken struct {
	caller  Caller
	expires time.Time
}

const maxCachedTokens = 100_000

// NewJWTValidator loads the JWKS of cfg (failing if it does not load).
func NewJWTValidator(cfg JWTConfig) (*JWTValidator, error) {
	if (cfg.JWKSFile == "") == (cfg.JWKSURL == "") {
		return nil, errors.New("JWT authentication needs one of a JWKS file and a JWKS URL")
	}
	if cfg.Audience == "" {
		return nil, errors.New("JWT authentication needs the audience tokens must be for (--jwt-audience)")
	}
	if cfg.PrincipalClaim == "" {
		cfg.PrincipalClaim = "sub"
	}
	if cfg.JWKSRefresh <= 0 {
		cfg.JWKSRefresh = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v := &JWTValidator{cfg: cfg, log: cfg.Logger, cache: map[[32]byte]cachedToken{}}
	keys, stamp, err := v.load()
	if err != nil {
		return nil, err
	}
	v.keys, v.stamp, v.checked = keys, stamp, time.Now()
	return v, nil
}

func (v *JWTValidator) load() (*jose.JSONWebKeySet, fileStamp, error) {
	var data []byte
	var stamp fileStamp
	if v.cfg.JWKSFile != "" {
		fi, err := os.Stat(v.cfg.JWKSFile)
		if err != nil {
			return nil, stamp, fmt.Errorf("JWKS file: %w", err)
		}
		stamp = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		if data, err = os.ReadFile(v.cfg.JWKSFile); err != nil {
			return nil, stamp, fmt.Errorf("JWKS file: %w", err)
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.cfg.JWKSURL, nil)
		if err != nil {
			return nil, stamp, fmt.Errorf("JWKS URL: %w", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, stamp, fmt.Errorf("JWKS URL: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, stamp, fmt.Errorf("JWKS URL %s: %s", v.cfg.JWKSURL, resp.Status)
		}
		if data, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err != nil {
			return nil, stamp, fmt.Errorf("JWKS URL: %w", err)
		}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, stamp, fmt.Errorf("JWKS: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, stamp, errors.New("JWKS: no key in it")
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return nil, stamp, fmt.Errorf("JWKS: key %q is not a public key", k.KeyID)
		}
	}
	return &set, stamp, nil
}

// keySet is the JWKS in force, read again if due (or, with unknownKid,
// fetched again if the last such fetch is 10 s old).
func (v *JWTValidator) keySet(now time.Time, unknownKid bool) *jose.JSONWebKeySet {
	v.mu.Lock()
	defer v.mu.Unlock()
	due := false
	switch {
	case v.cfg.JWKSFile != "":
		due = now.Sub(v.checked) >= reloadCheckEvery
	case unknownKid:
		due = now.Sub(v.lastFetch) >= 10*time.Second
		if due {
			v.lastFetch = now
		}
	default:
		due = now.Sub(v.checked) >= v.cfg.JWKSRefresh
	}
	if !due {
		return v.keys
	}
	v.checked = now
	if v.cfg.JWKSFile != "" {
		if fi, err := os.Stat(v.cfg.JWKSFile); err == nil && (fileStamp{mod: fi.ModTime(), size: fi.Size()}) == v.stamp {
			return v.keys
		}
	}
	keys, stamp, err := v.load()
	if err != nil {
		v.log.Error("JWKS changed but does not load; the last good keys stay in use", "err", err)
		return v.keys
	}
	v.keys, v.stamp = keys, stamp
	return v.keys
}

// Validate checks token: signed by a key of the JWKS with an accepted
// algorithm, the audience (and issuer) expected, an expiry not passed, a
// principal claim that is a non-empty string. Errors wrap
// ErrAuthenticationFailed with the reason (for the server's log).
func (v *JWTValidator) Validate(token string, now time.Time) (Caller, error) {
	c, _, err := v.ValidateWithExpiry(token, now)
	return c, err
}

// ValidateWithExpiry is Validate, also returning the token's expiry (its
// "exp"): a Kafka connection's session lasts until then (KIP-368).
func (v *JWTValidator) ValidateWithExpiry(token string, now time.Time) (Caller, time.Time, error) {
	key := sha256.Sum256([]byte(token))
	v.mu.Lock()
	c, ok := v.cache[key]
	v.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.caller, c.expires, nil
	}
	caller, exp, err := v.verify(token, now)
	if err != nil {
		return Caller{}, time.Time{}, fmt.Errorf("%w: JWT: %v", ErrAuthenticationFailed, err)
	}
	v.mu.Lock()
	if len(v.cache) >= maxCachedTokens {
		for k, c := range v.cache {
			if !now.Before(c.expires) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCachedTokens {
			clear(v.cache)
		}
	}
	v.cache[key] = cachedToken{caller: caller, expires: exp}
	v.mu.Unlock()
	return caller, exp, nil
}

func (v *JWTValidator) verify(token string, now time.Time) (Caller, time.Time, error) {
	tok, err := jwt.ParseSigned(token, jwtAlgorithms)
	if err != nil {
		return Caller{}, time.Time{}, err
	}
	var std jwt.Claims
	var all map[string]any
	keys := v.keySet(now, false)
	if err := tok.Claims(keys, &std, &all); err != nil {
		// A key rotated in at the provider: fetch again, then retry.
		if fresh := v.keySet(now, true); fresh != keys {
			err = tok.Claims(fresh, &std, &all)
		}
		if err != nil {
			return Caller{}, time.Time{}, err
		}
	}
	if std.Expiry == nil {
		return Caller{}, time.Time{}, errors.New("no expiry (exp)")
	}
	expected := jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Audience}, Time: now}
	if err := std.ValidateWithLeeway(expected, 30*time.Second); err != nil {
		return Caller{}, time.Time{}, err
	}
	name, _ := all[v.cfg.PrincipalClaim].(string)
	if name == "" {
		return Caller{}, time.Time{}, fmt.Errorf("no string claim %q for the principal", v.cfg.PrincipalClaim)
	}
	return Caller{Principal: User(name), Method: MethodJWT}, std.Expiry.Time(), nil
}
