package api_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fetchedRecords decodes the batches of a fetch answer with proto/batch,
// compressed ones included (as the Go client does), and returns the
// values of the records at or above from.
func fetchedRecords(t *testing.T, pd *sluicev1.PartitionData, from int64) []string {
	t.Helper()
	var out []string
	for _, m := range pd.Batches {
		raw, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := batch.Canonicalize(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := batch.ForEachRecord(b, func(r batch.Record) error {
			if r.Offset >= from {
				out = append(out, string(r.Value))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The gRPC door takes compressed batches (decision 67) with every codec,
// canonical or as generated code encodes them: checked on append, stored
// and fetched as sent (attributes and compressed_records), the records
// read back through proto/batch. A compressed batch whose records do not
// hold what its header says is refused and nothing is stored.
func TestProduceCompressedBatches(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("z", 1, nil)
	var want []string
	for i, codec := range []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd} {
		b, err := batch.SetCodec(makeBatch(codec.String(), 3, int64(1000*i)), nil, codec)
		if err != nil {
			t.Fatal(err)
		}
		comp, _ := batch.CompressedRecords(b)
		produce := tn.produceRaw
		if i%2 == 1 {
			produce = tn.producePublic
		}
		if r := produce("z", 0, b); r.ErrorCode != sluicev1.ErrorCode_NONE || r.BaseOffset != int64(3*i) {
			t.Fatalf("%v: %v", codec, r)
		}
		pd := tn.fetch("z", 0, int64(3*i), 0)
		m := pd.Batches[0]
		if m.Attributes&7 != uint32(codec) || !bytes.Equal(m.CompressedRecords, comp) || len(m.Records) != 0 || m.RecordCount != 3 {
			t.Fatalf("%v: fetched attributes %x, %d compressed bytes, %d records", codec, m.Attributes, len(m.CompressedRecords), len(m.Records))
		}
		for j := range 3 {
			want = append(want, fmt.Sprintf("%s-%d", codec, j))
		}
	}
	if got := fetchedRecords(t, tn.fetch("z", 0, 0, 0), 0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("fetched %v, want %v", got, want)
	}
	// record_count says 4, the records are 3.
	b, _ := batch.SetCodec(makeBatch("bad", 3, 1), nil, kafkarecords.Zstd)
	h, _ := batch.ParseHeader(b)
	h.RecordCount, h.LastOffsetDelta, h.CRC = 4, 3, 0
	batch.PutHeader(b, h)
	if r := tn.produceRaw("z", 0, b); r.ErrorCode != sluicev1.ErrorCode_INVALID_RECORD {
		t.Fatalf("wrong record_count: %v", r)
	}
	if pd := tn.fetch("z", 0, 0, 0); pd.HighWatermark != 12 {
		t.Fatalf("high watermark %d after a refused batch", pd.HighWatermark)
	}
}
