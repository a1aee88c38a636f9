package kafkabatch_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/proto/kafkabatch"
)

// benchBatches are the shapes measured: 16 records of 1 KiB values, and
// 500 small ones (16-byte key, 32-byte value, a header on every tenth),
// as a Kafka producer sends them. Values are random words of a small
// alphabet, compressible about as text is.
func benchBatches() []struct {
	name string
	kb   kbatch
} {
	rnd := rand.New(rand.NewPCG(1, 2))
	text := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			if b[i] = byte('a' + rnd.IntN(16)); rnd.IntN(6) == 0 {
				b[i] = ' '
			}
		}
		return b
	}
	var big, small []kmsg.Record
	for i := range 16 {
		big = append(big, rec(i, int64(i), []byte(fmt.Sprintf("key-%012d", i)), text(1024)))
	}
	for i := range 500 {
		r := rec(i, int64(i/10), []byte(fmt.Sprintf("key-%012d", i)), text(32))
		if i%10 == 0 {
			r.Headers = []kmsg.Header{{Key: "trace", Value: []byte("0123456789abcdef")}}
		}
		small = append(small, r)
	}
	idem := plainHeader()
	idem.ProducerID, idem.ProducerEpoch, idem.FirstSequence = 1000, 0, 0
	return []struct {
		name string
		kb   kbatch
	}{
		{"1KiBx16", kbatch{idem, big}},
		{"small500", kbatch{idem, small}},
	}
}

// BenchmarkFromKafka converts a produced Kafka batch into a canonical
// one (into a reused buffer, as a produce path that recycles buffers
// would); MB/s of Kafka batch bytes.
func BenchmarkFromKafka(b *testing.B) {
	for _, bb := range benchBatches() {
		for _, codec := range []kafkabatch.Codec{kafkabatch.None, kafkabatch.LZ4, kafkabatch.Zstd} {
			in := bb.kb.build(b, codec)
			plain := bb.kb.build(b, kafkabatch.None)
			b.Run(bb.name+"/"+codec.String(), func(b *testing.B) {
				dst, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{})
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(plain))) // uncompressed bytes, to compare codecs
				b.ReportAllocs()
				for b.Loop() {
					dst, _, _ = kafkabatch.FromKafka(dst, in, kafkabatch.Limits{})
				}
			})
		}
	}
}

// BenchmarkAppendKafka converts a stored canonical batch into Kafka's
// bytes, appended to a fetch answer's buffer (reused); MB/s of Kafka
// batch bytes.
func BenchmarkAppendKafka(b *testing.B) {
	for _, bb := range benchBatches() {
		canonical, _ := fromKafka(b, bb.kb.build(b, kafkabatch.None))
		for _, codec := range []kafkabatch.Codec{kafkabatch.None, kafkabatch.LZ4, kafkabatch.Zstd} {
			b.Run(bb.name+"/"+codec.String(), func(b *testing.B) {
				plain := toKafka(b, canonical, kafkabatch.None)
				var dst []byte
				b.SetBytes(int64(len(plain)))
				b.ReportAllocs()
				for b.Loop() {
					dst, _ = kafkabatch.AppendKafka(dst[:0], canonical, codec)
				}
			})
		}
		b.Run(bb.name+"/none/new-buffer", func(b *testing.B) {
			b.SetBytes(int64(len(toKafka(b, canonical, kafkabatch.None))))
			b.ReportAllocs()
			for b.Loop() {
				_, _ = kafkabatch.AppendKafka(nil, canonical, kafkabatch.None)
			}
		})
	}
}
