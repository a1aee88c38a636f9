package faultnet

import (
	"strings"
	"testing"
)

// The flag value is from=to pairs; every bad item is refused with a message
// that names it and says what is wrong.
func TestParseDialMap(t *testing.T) {
	tests := []struct {
		name, in string
		want     DialMap
		wantErr  string // substring; "" means no error
	}{
		{"empty", "", nil, ""},
		{"only commas and spaces", " , ,", nil, ""},
		{"one pair", "127.0.0.1:9501=127.0.0.1:19501", DialMap{"127.0.0.1:9501": "127.0.0.1:19501"}, ""},
		{"several pairs with spaces", " 127.0.0.1:9501=127.0.0.1:19501 , 127.0.0.1:9502 = 127.0.0.1:19502,",
			DialMap{"127.0.0.1:9501": "127.0.0.1:19501", "127.0.0.1:9502": "127.0.0.1:19502"}, ""},
		{"host names kept as written", "node-2:9400=proxy:19400", DialMap{"node-2:9400": "proxy:19400"}, ""},
		{"IPv6 from is canonical", "[0:0::1]:9400=127.0.0.1:1", DialMap{"[::1]:9400": "127.0.0.1:1"}, ""},
		{"IPv4-mapped from is unmapped", "[::ffff:127.0.0.1]:9400=127.0.0.1:1", DialMap{"127.0.0.1:9400": "127.0.0.1:1"}, ""},
		{"missing =", "127.0.0.1:9501", nil, `item "127.0.0.1:9501": want from=to`},
		{"from without port", "127.0.0.1=127.0.0.1:1", nil, "from address: address 127.0.0.1: missing port"},
		{"to without port", "127.0.0.1:1=127.0.0.1", nil, "to address: address 127.0.0.1: missing port"},
		{"empty to", "127.0.0.1:1=", nil, "to address"},
		{"no host", ":9400=127.0.0.1:1", nil, `":9400" has no host`},
		{"port 0", "127.0.0.1:0=127.0.0.1:1", nil, `port "0" is not in 1-65535`},
		{"port too big", "127.0.0.1:1=127.0.0.1:70000", nil, `port "70000" is not in 1-65535`},
		{"port not a number", "127.0.0.1:x=127.0.0.1:1", nil, `port "x"`},
		{"duplicate from", "127.0.0.1:1=127.0.0.1:2,127.0.0.1:1=127.0.0.1:3", nil, "127.0.0.1:1 is mapped twice"},
		{"duplicate after canonical form", "127.0.0.1:1=127.0.0.1:2,[::ffff:127.0.0.1]:1=127.0.0.1:3", nil, "mapped twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseDialMap(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseDialMap(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDialMap(%q): %v", tc.in, err)
			}
			if got.String() != tc.want.String() || len(got) != len(tc.want) {
				t.Fatalf("ParseDialMap(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("parsed map does not validate: %v", err)
			}
			// String is ParseDialMap's format.
			again, err := ParseDialMap(got.String())
			if err != nil || again.String() != got.String() {
				t.Fatalf("round trip of %q: %v, %v", got.String(), again, err)
			}
		})
	}
}

// Only mapped addresses change; IP literals match in any spelling.
func TestDialMapTarget(t *testing.T) {
	m, err := ParseDialMap("127.0.0.1:9501=127.0.0.1:19501,[::1]:9502=127.0.0.1:19502,node-3:9503=127.0.0.1:19503")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"127.0.0.1:9501":          "127.0.0.1:19501",
		"[::ffff:127.0.0.1]:9501": "127.0.0.1:19501",
		"[::1]:9502":              "127.0.0.1:19502",
		"[0::1]:9502":             "127.0.0.1:19502",
		"node-3:9503":             "127.0.0.1:19503",
		"127.0.0.1:9502":          "127.0.0.1:9502", // another host, same port
		"127.0.0.1:9999":          "127.0.0.1:9999",
		"not-an-address":          "not-an-address",
	} {
		if got := m.Target(addr); got != want {
			t.Errorf("Target(%q) = %q, want %q", addr, got, want)
		}
	}
	var none DialMap
	if got := none.Target("127.0.0.1:9501"); got != "127.0.0.1:9501" {
		t.Errorf("nil map changed the address to %q", got)
	}
}

func TestDialMapValidate(t *testing.T) {
	if err := (DialMap{"127.0.0.1:1": "127.0.0.1:2"}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (DialMap{"127.0.0.1": "127.0.0.1:2"}).Validate(); err == nil || !strings.Contains(err.Error(), "from address") {
		t.Fatalf("bad from accepted: %v", err)
	}
	if err := (DialMap{"127.0.0.1:1": "x"}).Validate(); err == nil || !strings.Contains(err.Error(), "to address for 127.0.0.1:1") {
		t.Fatalf("bad to accepted: %v", err)
	}
}
