package membership

import (
	"net/netip"
	"reflect"
	"testing"
)

// A seed list may name this node; such entries are not joined.
func TestOtherSeedsDropsOwnAddress(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name             string
		advertise, bound netip.AddrPort
		seeds, want      []string
	}{
		{
			name:      "bound to loopback",
			advertise: ap("127.0.0.1:7000"), bound: ap("127.0.0.1:7000"),
			seeds: []string{"127.0.0.1:7000", "127.0.0.1:7001", "10.1.2.3:7000", "localhost:7000"},
			want:  []string{"127.0.0.1:7001", "10.1.2.3:7000"},
		},
		{
			name:      "bound to any address",
			advertise: ap("10.9.9.9:7000"), bound: ap("0.0.0.0:7000"),
			seeds: []string{"10.9.9.9:7000", "127.0.0.2:7000", "[::1]:7000", "10.9.9.9:7001", "10.9.9.8:7000"},
			want:  []string{"10.9.9.9:7001", "10.9.9.8:7000"},
		},
		{
			name:      "advertised address differs from bound",
			advertise: ap("192.0.2.1:8000"), bound: ap("127.0.0.1:7000"),
			seeds: []string{"192.0.2.1:8000", "127.0.0.1:7000", "192.0.2.1:7000"},
			want:  []string{"192.0.2.1:7000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newSelfAddrs(tt.advertise, tt.bound).otherSeeds(tt.seeds)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("otherSeeds = %v, want %v", got, tt.want)
			}
		})
	}
}
