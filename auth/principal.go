package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Principal is who a caller is, as ACLs and quotas name it: a type and a
// name, written TYPE:NAME (User:alice), as Kafka's KafkaPrincipal.
type Principal struct {
	Type, Name string
}

// Principal types.
const (
	// UserType is every authenticated client, and the anonymous one.
	UserType = "User"
	// NodeType is a node of the cluster, on the inter-node listeners.
	NodeType = "Node"
)

// Anonymous is the principal of a caller that did not authenticate.
var Anonymous = Principal{Type: UserType, Name: "ANONYMOUS"}

// User is the principal User:name.
func User(name string) Principal { return Principal{Type: UserType, Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }

// IsAnonymous reports whether p is Anonymous.
func (p Principal) IsAnonymous() bool { return p == Anonymous }

// Method is how a caller was authenticated.
type Method string

// Authentication methods.
const (
	MethodNone Method = "NONE"
	MethodTLS  Method = "TLS" // a verified client certificate
	MethodJWT  Method = "OAUTHBEARER"
)

// Caller is an authenticated (or anonymous) caller of one request.
type Caller struct {
	Principal Principal
	Method    Method // or a SCRAM mechanism's name
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller ctx carries (anonymous when none).
func CallerFrom(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Principal: Anonymous, Method: MethodNone}
}

// PrincipalMapper turns a client certificate's subject into a principal
// name with rules in the syntax of Kafka's ssl.principal.mapping.rules
// (KIP-371): a comma-separated list of RULE:pattern/replacement/[LU] and
// DEFAULT, tried in order on the subject's distinguished name in RFC 2253
// form ("CN=alice,OU=eng,O=Acme"); the first whose pattern matches the
// whole name gives it (L: lower case, U: upper case); DEFAULT, and no rule
// matching, give the whole name. The zero PrincipalMapper is DEFAULT.
type PrincipalMapper struct {
	rules []mappingRule
}

type mappingRule struct {
	isDefault   bool
	re          *regexp.Regexp
	replacement string
	toLower     bool
	toUpper     bool
}

// ParsePrincipalMappingRules parses rules (Kafka's syntax, see
// PrincipalMapper); "" is DEFAULT.
func ParsePrincipalMappingRules(rules string) (PrincipalMapper, error) {
	var m PrincipalMapper
	s := rules
	for {
		s = strings.TrimLeft(s, " \t\r\n,")
		if s == "" {
			return m, nil
		}
		switch {
		case strings.HasPrefix(s, "DEFAULT"):
			m.rules = append(m.rules, mappingRule{isDefault: true})
			s = s[len("DEFAULT"):]
		case strings.HasPrefix(s, "RULE:"):
			s = s[len("RULE:"):]
			pattern, rest, ok := cutUnescaped(s)
			if !ok {
				return PrincipalMapper{}, fmt.Errorf("principal mapping rule %q: no '/' after the pattern", "RULE:"+s)
			}
			replacement, rest, ok := cutUnescaped(rest)
			if !ok {
				return PrincipalMapper{}, fmt.Errorf("principal mapping rule %q: no '/' after the replacement", "RULE:"+s)
			}
			r := mappingRule{replacement: javaReplacement(replacement)}
			if strings.HasPrefix(rest, "L") || strings.HasPrefix(rest, "U") {
				r.toLower, r.toUpper = rest[0] == 'L', rest[0] == 'U'
				rest = rest[1:]
			}
			re, err := regexp.Compile("^(?:" + pattern + ")$")
			if err != nil {
				return PrincipalMapper{}, fmt.Errorf("principal mapping rule pattern %q: %w", pattern, err)
			}
			r.re = re
			m.rules = append(m.rules, r)
			s = rest
		default:
			return PrincipalMapper{}, fmt.Errorf("principal mapping rules: %q is not RULE:pattern/replacement/[LU] or DEFAULT", s)
		}
		if s != "" && !strings.ContainsRune(" \t\r\n,", rune(s[0])) {
			return PrincipalMapper{}, fmt.Errorf("principal mapping rules: unexpected %q after a rule", s)
		}
	}
}

// cutUnescaped cuts s at its first '/' not escaped by '\', unescaping
// "\/" in what comes before.
func cutUnescaped(s string) (before, after string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '/':
			b.WriteByte('/')
			i++
		case s[i] == '/':
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", false
}

var javaGroupRef = regexp.MustCompile(`\$(\d)`)

// javaReplacement turns Java's $1 group references into Go's ${1} (Go
// would read "$1x" as a group named "1x").
func javaReplacement(r string) string { return javaGroupRef.ReplaceAllString(r, "$${$1}") }

// ErrNoPrincipal is returned when a mapping rule gives an empty name.
var ErrNoPrincipal = errors.New("the principal mapping rules give an empty name")

// Map is the principal name of a certificate subject dn (RFC 2253).
func (m PrincipalMapper) Map(dn string) (string, error) {
	for _, r := range m.rules {
		if r.isDefault {
			return dn, nil
		}
		if !r.re.MatchString(dn) {
			continue
		}
		name := r.re.ReplaceAllString(dn, r.replacement)
		switch {
		case r.toLower:
			name = strings.ToLower(name)
		case r.toUpper:
			name = strings.ToUpper(name)
		}
		if name == "" {
			return "", fmt.Errorf("%w for %q", ErrNoPrincipal, dn)
		}
		return name, nil
	}
	return dn, nil
}

// CertificatePrincipal is the principal of a verified client certificate.
func (m PrincipalMapper) CertificatePrincipal(cert *x509.Certificate) (Principal, error) {
	name, err := m.Map(cert.Subject.String())
	if err != nil {
		return Principal{}, err
	}
	return User(name), nil
}
