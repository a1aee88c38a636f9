package client

import "testing"

// TestMurmur2MatchesKafka checks the hash against the vectors of Apache
// Kafka's UtilsTest.testMurmur2, so that keyed records land on the same
// partitions as with a Kafka client.
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for key, want := range cases {
		if got := Murmur2([]byte(key)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestHashPartitionerIsStable pins key -> partition for a 3- and a
// 10-partition topic: changing the hash would move existing keys.
func TestHashPartitionerIsStable(t *testing.T) {
	cases := []struct {
		key  string
		n    int32
		want int32
	}{
		{"21", 3, int32((uint32(0xffffffff-973932308+1) & 0x7fffffff) % 3)},
		{"foobar", 10, int32((uint32(0xffffffff-790332482+1) & 0x7fffffff) % 10)},
		{"abc", 3, 479470107 % 3},
		{"abc", 10, 479470107 % 10},
	}
	var hp HashPartitioner
	for _, c := range cases {
		for i := 0; i < 3; i++ { // stable across calls
			if got := hp.Partition("t", []byte(c.key), c.n); got != c.want {
				t.Errorf("Partition(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
			}
		}
	}
	if got := hp.Partition("t", nil, 3); got != -1 {
		t.Errorf("keyless record: got partition %d, want -1 (sticky)", got)
	}
	// Every partition is reachable and results are in range.
	seen := map[int32]bool{}
	for i := 0; i < 1000; i++ {
		p := hp.Partition("t", []byte{byte(i), byte(i >> 8)}, 7)
		if p < 0 || p >= 7 {
			t.Fatalf("partition %d out of range", p)
		}
		seen[p] = true
	}
	if len(seen) != 7 {
		t.Errorf("only %d of 7 partitions used", len(seen))
	}
}
