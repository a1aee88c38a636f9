package node

import "testing"

// The internal and Kafka listeners' advertised addresses (decision 41,
// issue 34): configured, else bound; a wildcard bind takes the client
// listener's advertised host.
func TestAdvertisedAddressDerivation(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		configured, advertise, bound string
		want                         string
	}{
		{"configured wins", "n1.internal:7000", "n1:9400", "0.0.0.0:9404", "n1.internal:7000"},
		{"specific bind as bound", "", "n1:9400", "127.0.0.1:9404", "127.0.0.1:9404"},
		{"kernel-picked port as bound", "", "127.0.0.1:9400", "127.0.0.1:41234", "127.0.0.1:41234"},
		{"wildcard bind takes the advertised host", "", "sluice-0.sluice-headless.default.svc:9400", "0.0.0.0:9404", "sluice-0.sluice-headless.default.svc:9404"},
		{"IPv6 wildcard bind", "", "10.0.0.7:9400", "[::]:9404", "10.0.0.7:9404"},
		{"wildcard advertise helps nothing", "", "0.0.0.0:9400", "0.0.0.0:9404", "0.0.0.0:9404"},
		{"Kafka wildcard bind takes the advertised host", "", "sluice-0.sluice-headless.default.svc:9400", "0.0.0.0:9092", "sluice-0.sluice-headless.default.svc:9092"},
		{"Kafka configured wins", "kafka-0.example:19092", "n1:9400", "0.0.0.0:9092", "kafka-0.example:19092"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := advertisedAddress(tc.configured, tc.advertise, tc.bound); got != tc.want {
				t.Errorf("advertisedAddress(%q, %q, %q) = %q, want %q", tc.configured, tc.advertise, tc.bound, got, tc.want)
			}
		})
	}
}
