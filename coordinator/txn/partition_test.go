package txn

import (
	"encoding/json"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Published FNV-1a 32-bit values (the FNV reference test suite), so the
// algorithm is pinned independently of Go's hash/fnv.
func TestIDHashIsFNV1a32(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint32
	}{
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
	} {
		if got := IDHash(tc.in); got != tc.want {
			t.Errorf("IDHash(%q) = %#08x, want %#08x", tc.in, got, tc.want)
		}
	}
}

// partitionVector is one line of testdata/partitions.json: the test
// vectors for implementations in other languages.
type partitionVector struct {
	TransactionalID string `json:"transactional_id"`
	UTF8Hex         string `json:"utf8_hex,omitempty"`
	FNV1a32         uint32 `json:"fnv1a32"`
	Partition50     int32  `json:"partition_50"`
	Partition7      int32  `json:"partition_7"`
	Partition1      int32  `json:"partition_1"`
}

// vectorIDs covers the edge cases another implementation gets wrong:
// empty-adjacent ids (one space, one NUL byte, one byte above 0x7f once
// encoded), multi-byte UTF-8 (2, 3 and 4 bytes per code point), the same
// text in NFC and NFD (different bytes, so different partitions: ids are
// not normalised), hashes with the top bit set (signed arithmetic would
// differ), and a long id.
var vectorIDs = []string{
	" ", "\x00", "a", "A", "u12-txn", "u12-fence", "order-writer",
	"txn-0", "txn-1", "é", "e\u0301", "日本語のトランザクション", "🚀-txn", "Ünïcödé-ïd",
	strings.Repeat("x", 1000),
}

func TestPartitionForVectors(t *testing.T) {
	var vs []partitionVector
	for _, id := range vectorIDs {
		h := fnv.New32a()
		h.Write([]byte(id))
		if got, want := IDHash(id), h.Sum32(); got != want {
			t.Errorf("IDHash(%q) = %#x, hash/fnv says %#x", id, got, want)
		}
		v := partitionVector{
			TransactionalID: id,
			FNV1a32:         IDHash(id),
			Partition50:     PartitionFor(id, DefaultStatePartitions),
			Partition7:      PartitionFor(id, 7),
			Partition1:      PartitionFor(id, 1),
		}
		if len(id) < 64 {
			v.UTF8Hex = hexBytes(id)
		}
		if v.Partition1 != 0 || v.Partition50 < 0 || v.Partition50 >= 50 || int64(v.Partition50) != int64(v.FNV1a32%50) {
			t.Errorf("%q: partitions %+v out of range or not hash mod N", id, v)
		}
		vs = append(vs, v)
	}
	var b strings.Builder
	b.WriteString("[\n")
	for i, v := range vs {
		line, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("  ")
		b.Write(line)
		if i < len(vs)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	golden(t, "partitions.json", []byte(b.String()))

	// The file as another language would read it: every line recomputes.
	raw, err := os.ReadFile(filepath.Join("testdata", "partitions.json"))
	if err != nil {
		t.Fatal(err)
	}
	var read []partitionVector
	if err := json.Unmarshal(raw, &read); err != nil {
		t.Fatal(err)
	}
	for _, v := range read {
		if IDHash(v.TransactionalID) != v.FNV1a32 || PartitionFor(v.TransactionalID, 50) != v.Partition50 {
			t.Errorf("vector %+v does not recompute", v)
		}
	}
}

// The partition of a given id never changes across releases: these are
// pinned here as well as in the golden file (which -update rewrites).
func TestPartitionForIsStable(t *testing.T) {
	for id, want := range map[string]int32{"u12-txn": 10} {
		if IDHash(id) != 0x6920d2a8 {
			t.Fatalf("IDHash(%q) = %#x", id, IDHash(id))
		}
		if got := PartitionFor(id, 50); got != want {
			t.Errorf("PartitionFor(%q, 50) = %d, want %d", id, got, want)
		}
	}
}

func TestPartitionForPanicsWithoutPartitions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("PartitionFor(id, 0) did not panic")
		}
	}()
	PartitionFor("a", 0)
}

func hexBytes(s string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, digits[s[i]>>4], digits[s[i]&0xf])
	}
	return string(out)
}
