package storage

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
)

// Rule (decision 67): the cleaner compacts compressed batches as any
// other — records of a key superseded later go, tombstones past the
// horizon go — and writes the survivors compressed with the batch's own
// codec (Kafka's cleaner does the same); a batch left with no record is
// dropped, or, as a producer's last batch, kept empty and uncompressed.
// Reads, a reopen and a full rescan see the same records.
func TestCleanCompressedBatches(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, compactConfig())
	var before []string
	codecs := []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd}
	for s := 0; s < 4; s++ {
		for i, codec := range codecs {
			// Five records over keys k0..k5: each key again later.
			var kvs []string
			for j := range 5 {
				kvs = append(kvs, fmt.Sprintf("k%d=s%d-%d-%d", (i+j)%6, s, i, j))
			}
			b, err := batch.SetCodec(plainKV(t0.UnixMilli(), kvs...), nil, codec)
			if err != nil {
				t.Fatal(err)
			}
			res := mustAppend(t, l, b)
			for j, kv := range kvs {
				before = append(before, fmt.Sprintf("%s@%d", kv, res.BaseOffset+int64(j)))
			}
		}
		forceRoll(t, l)
	}
	res := mustAppend(t, l, plainKV(t0.UnixMilli(), "k0=active"))
	before = append(before, fmt.Sprintf("k0=active@%d", res.BaseOffset))
	l.SetHighWatermark(l.EndOffset())

	st := mustClean(t, l, t0)
	if !st.Cleaned || st.RecordsRead != 80 || st.RecordsRemoved != 80-6 {
		t.Fatalf("stats %+v", st)
	}
	want := append(latestPerKey(before[:80]), before[80])
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after clean\n got %v\nwant %v", got, want)
	}
	// The survivors' batches kept their codecs.
	for _, b := range readAll(t, l) {
		h, err := batch.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.RecordCount > 0 && h.BaseOffset < 80 && !h.IsCompressed() {
			t.Fatalf("batch at %d of %d records was written uncompressed", h.BaseOffset, h.RecordCount)
		}
	}
	l.Close()
	l = openLog(t, dir, compactConfig())
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after reopen %v", got)
	}
	crash(t, l)
	l = openLog(t, dir, compactConfig())
	defer l.Close()
	if got := logView(t, l); !slices.Equal(got, want) {
		t.Fatalf("after rescan %v", got)
	}
}
