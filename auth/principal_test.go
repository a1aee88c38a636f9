package auth

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"
)

// Kafka's ssl.principal.mapping.rules, as its documentation and tests
// give them (KIP-371).
func TestPrincipalMappingRules(t *testing.T) {
	for _, tc := range []struct {
		rules, dn, want string
	}{
		{"", "CN=alice,OU=eng,O=Acme", "CN=alice,OU=eng,O=Acme"},
		{"DEFAULT", "CN=alice,OU=eng,O=Acme", "CN=alice,OU=eng,O=Acme"},
		{`RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, "CN=kafka-svc,OU=ServiceUsers,O=Acme", "kafka-svc"},
		{`RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`, "CN=bob,OU=People,O=Acme", "CN=bob,OU=People,O=Acme"},
		{`RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L`, "CN=Alice,OU=ENG,O=Acme", "alice@eng"},
		{`RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/U`, "CN=Alice,OU=eng,O=Acme", "ALICE@ENG"},
		{`RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT`, "OU=x,CN=Duke.Ellington", "duke.ellington"},
		{`RULE:^CN=([^,]+)$/$1x/`, "CN=a", "ax"},          // $1 then "x", as Java reads it
		{`RULE:^CN=(.*)\/(.*)$/$2/`, "CN=a/b", "b"},       // an escaped '/'
		{`RULE:^O=(.*)$/$1/`, "CN=nomatch", "CN=nomatch"}, // no rule matches: the whole name
	} {
		m, err := ParsePrincipalMappingRules(tc.rules)
		if err != nil {
			t.Fatalf("%q: %v", tc.rules, err)
		}
		got, err := m.Map(tc.dn)
		if err != nil || got != tc.want {
			t.Errorf("rules %q on %q: %q, %v; want %q", tc.rules, tc.dn, got, err, tc.want)
		}
	}
	for _, bad := range []string{"RULE:abc", "RULE:a/b", "NOPE", "RULE:(/x/", "RULE:a/b/Q"} {
		if _, err := ParsePrincipalMappingRules(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	m, _ := ParsePrincipalMappingRules(`RULE:^CN=.*$//`)
	if _, err := m.Map("CN=x"); err == nil {
		t.Error("an empty principal name was accepted")
	}
}

// A certificate's subject reads in RFC 2253 order, most specific first.
func TestCertificatePrincipal(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"Acme"}}}
	m, _ := ParsePrincipalMappingRules(`RULE:^CN=([^,]+),OU=eng,.*$/$1/`)
	if p, err := m.CertificatePrincipal(cert); err != nil || p != User("alice") || p.String() != "User:alice" {
		t.Fatalf("%v, %v", p, err)
	}
	var def PrincipalMapper
	if p, _ := def.CertificatePrincipal(cert); p.Name != "CN=alice,OU=eng,O=Acme" {
		t.Fatalf("default: %q", p.Name)
	}
}
