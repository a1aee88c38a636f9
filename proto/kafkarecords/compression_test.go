package kafkarecords_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// testRecords is 390 KiB of Kafka-encoded records (any bytes do for
// the codecs): several blocks of every codec.
func testRecords() []byte {
	var b []byte
	for i := 0; len(b) < 390<<10; i++ {
		b = append(b, fmt.Sprintf("record %d: %s;", i, bytes.Repeat([]byte{byte('a' + i%26)}, i%100))...)
	}
	return b
}

// Each codec reads the shapes real clients write: the Java client's
// xerial-framed snappy (32 KiB blocks), zstd streamed without a content
// size and with the Java client's default 2 MiB window, several gzip
// members, several zstd and lz4 frames, lz4's 64 KiB to 4 MiB blocks.
func TestCodecsReadWhatClientsWrite(t *testing.T) {
	raw := testRecords()
	half := len(raw) / 2

	gz := func(b []byte) []byte { return compressWith(t, b, kafkarecords.Gzip) }
	zs := func(b []byte) []byte { return compressWith(t, b, kafkarecords.Zstd) }
	lz := func(b []byte, size lz4.BlockSize) []byte {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.BlockSizeOption(size), lz4.ChecksumOption(true)); err != nil {
			t.Fatal(err)
		}
		write(t, w, b)
		return buf.Bytes()
	}
	zstdStream := func(b []byte) []byte {
		var buf bytes.Buffer
		w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(2<<20), zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		// Written in pieces, as Java's buffered stream does: no content
		// size is known when the frame header is written.
		for p := b; len(p) > 0; p = p[min(len(p), 16<<10):] {
			if _, err := w.Write(p[:min(len(p), 16<<10)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var fh zstd.Header
		if err := fh.Decode(buf.Bytes()); err != nil || fh.HasFCS || fh.WindowSize != 2<<20 {
			t.Fatalf("streamed zstd frame header %+v, %v: want no content size and a 2 MiB window", fh, err)
		}
		return buf.Bytes()
	}
	for _, c := range []struct {
		name  string
		codec kafkarecords.Codec
		data  []byte
	}{
		{"gzip", kafkarecords.Gzip, gz(raw)},
		{"gzip-two-members", kafkarecords.Gzip, append(gz(raw[:half]), gz(raw[half:])...)},
		{"snappy-raw-block", kafkarecords.Snappy, s2.EncodeSnappy(nil, raw)},
		{"snappy-xerial-java", kafkarecords.Snappy, xerialSnappy(raw)},
		{"lz4-64KiB-blocks-java", kafkarecords.LZ4, lz(raw, lz4.Block64Kb)},
		{"lz4-4MiB-blocks-franz-go", kafkarecords.LZ4, compressWith(t, raw, kafkarecords.LZ4)},
		{"lz4-two-frames", kafkarecords.LZ4, append(lz(raw[:half], lz4.Block256Kb), lz(raw[half:], lz4.Block1Mb)...)},
		{"zstd-franz-go", kafkarecords.Zstd, zs(raw)},
		{"zstd-streamed-java", kafkarecords.Zstd, zstdStream(raw)},
		{"zstd-two-frames", kafkarecords.Zstd, append(zs(raw[:half]), zs(raw[half:])...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := kafkarecords.Decompress(c.data, c.codec, kafkarecords.MaxUncompressedBytes)
			if err != nil || !bytes.Equal(got, raw) {
				t.Fatalf("codec %v: %v, or the records differ", c.codec, err)
			}
		})
	}
}

// bomb compresses n zero bytes with codec into a batch's records, a
// few KiB (snappy, whose best ratio is about 21, a few hundred) streamed
// so that the test does not hold the n bytes. Windows and blocks are
// small, so that the decoders' own memory is small beside the limit.
func bomb(t testing.TB, codec kafkarecords.Codec, n int) []byte {
	t.Helper()
	zeros := make([]byte, 1<<20)
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case kafkarecords.Gzip:
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case kafkarecords.LZ4:
		lw := lz4.NewWriter(&buf)
		if err := lw.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			t.Fatal(err)
		}
		w = lw
	case kafkarecords.Zstd:
		// RLE blocks of 128 KiB, 4 bytes each, in a 128 KiB window.
		return zstdFrame(17, n, nil)
	case kafkarecords.Snappy:
		// snappy-java's framing, blocks of 32 KiB: about 1.5 KiB each.
		out := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
		block := s2.EncodeSnappy(nil, zeros[:32<<10])
		for range n / (32 << 10) {
			out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
			out = append(out, block...)
		}
		return out
	}
	for written := 0; written < n; written += len(zeros) {
		if _, err := w.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zstdFrame writes a zstd frame by hand, as RFC 8878 lays it out: no
// content size, a window of 2^windowLog bytes, no checksum; then raw
// blocks of raw if given, else rleBytes zero bytes in RLE blocks. Encoders
// choose their windows; this shows what a client at any level may send.
func zstdFrame(windowLog int, rleBytes int, raw []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, 0xFD2FB528)
	out = append(out, 0x00, byte((windowLog-10)<<3))
	block := func(typ uint32, size int, last bool) {
		h := typ<<1 | uint32(size)<<3
		if last {
			h |= 1
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
	}
	const maxBlock = 128 << 10
	if raw != nil {
		for len(raw) > 0 {
			n := min(len(raw), maxBlock, 1<<windowLog)
			block(0, n, n == len(raw))
			out = append(out, raw[:n]...)
			raw = raw[n:]
		}
		return out
	}
	for left := rleBytes; left > 0; left -= maxBlock {
		block(1, min(left, maxBlock), left <= maxBlock)
		out = append(out, 0)
	}
	return out
}

// Decompression bombs: records that decompress to far more than the
// limit are refused with MESSAGE_TOO_LARGE, and decompressing allocates
// about the limit, not what the bomb expands to.
func TestDecompressionBombsStopAtTheLimit(t *testing.T) {
	const limit = 1 << 20
	type bombIn struct {
		codec kafkarecords.Codec
		data  []byte
	}
	bombs := map[string]bombIn{}
	expands := map[kafkarecords.Codec]int{kafkarecords.Gzip: 64 << 20, kafkarecords.Snappy: 4 << 20, kafkarecords.LZ4: 16 << 20, kafkarecords.Zstd: 1 << 30}
	for codec, n := range expands {
		in := bomb(t, codec, n)
		if len(in) > n/16 {
			t.Fatalf("the %v bomb is %d bytes for %d: not a bomb", codec, len(in), n)
		}
		bombs[codec.String()] = bombIn{codec, in}
	}
	// One raw snappy block and one zstd frame that declare their size:
	// refused before anything is decoded.
	bombs["snappy-raw-block"] = bombIn{kafkarecords.Snappy, s2.EncodeSnappy(nil, make([]byte, 4<<20))}
	bombs["zstd-content-size"] = bombIn{kafkarecords.Zstd, compressWith(t, make([]byte, 4<<20), kafkarecords.Zstd)}
	for name, in := range bombs {
		t.Run(name, func(t *testing.T) {
			decompress := func() error {
				_, err := kafkarecords.Decompress(in.data, in.codec, limit)
				return err
			}
			err := decompress()
			if !errors.Is(err, kafkarecords.ErrDecompressedTooLarge) || errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
				t.Fatalf("Decompress(%d-byte bomb) = %v, want ErrDecompressedTooLarge", len(in.data), err)
			}
			// What decompressing allocates is its output buffer (grown
			// by doubling up to the limit) and the decoders' memory,
			// small here (and pooled).
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_ = decompress()
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 3*limit {
				t.Errorf("a %d-byte bomb allocated %d KiB with a %d KiB limit", len(in.data), got>>10, limit>>10)
			}
		})
	}
	// At the limit exactly, the records are not refused for size.
	raw := []byte("a few records' bytes, compressed")
	for _, codec := range []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd} {
		in := compressWith(t, raw, codec)
		if _, err := kafkarecords.Decompress(in, codec, len(raw)); err != nil {
			t.Errorf("%v: records of exactly the limit: %v", codec, err)
		}
		if _, err := kafkarecords.Decompress(in, codec, len(raw)-1); !errors.Is(err, kafkarecords.ErrDecompressedTooLarge) {
			t.Errorf("%v: records one byte over the limit: %v", codec, err)
		}
	}
}

// A zstd frame that declares a window beyond 8 MiB (the Java client's
// levels 20 to 22) is refused rather than given that much memory.
func TestZstdWindowIsBounded(t *testing.T) {
	raw := testRecords()[:4<<10]
	for windowLog, ok := range map[int]bool{10: true, 21: true, 23: true, 24: false, 27: false} {
		got, err := kafkarecords.Decompress(zstdFrame(windowLog, 0, raw), kafkarecords.Zstd, kafkarecords.MaxUncompressedBytes)
		if ok && (err != nil || !bytes.Equal(got, raw)) {
			t.Errorf("zstd frame with a 2^%d window: %v", windowLog, err)
		}
		if !ok && !errors.Is(err, kafkarecords.ErrDecompress) {
			t.Errorf("zstd frame with a 2^%d window: %v, want ErrDecompress", windowLog, err)
		}
	}
}

// What Compress writes, Decompress reads back, for every codec; None and
// unknown codecs are refused (ErrCodec), as by Decompress.
func TestCompressRoundTrips(t *testing.T) {
	raw := testRecords()
	for _, codec := range []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd} {
		prefix := []byte("before")
		out, err := kafkarecords.Compress(bytes.Clone(prefix), raw, codec)
		if err != nil || !bytes.HasPrefix(out, prefix) || len(out) > len(raw)/2 {
			t.Fatalf("%v: Compress = %d bytes, %v", codec, len(out), err)
		}
		if got, err := kafkarecords.Decompress(out[len(prefix):], codec, len(raw)); err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("%v: Decompress(Compress(x)) != x: %v", codec, err)
		}
	}
	for _, codec := range []kafkarecords.Codec{kafkarecords.None, 5, 7} {
		if _, err := kafkarecords.Compress(nil, raw, codec); !errors.Is(err, kafkarecords.ErrCodec) || errs.Code(err) != sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE {
			t.Errorf("Compress(%v) = %v, want ErrCodec", codec, err)
		}
		if _, err := kafkarecords.Decompress(raw, codec, len(raw)); !errors.Is(err, kafkarecords.ErrCodec) {
			t.Errorf("Decompress(%v) = %v, want ErrCodec", codec, err)
		}
	}
	for _, c := range []struct {
		name  string
		codec kafkarecords.Codec
		ok    bool
	}{{"none", kafkarecords.None, true}, {"gzip", kafkarecords.Gzip, true}, {"snappy", kafkarecords.Snappy, true},
		{"lz4", kafkarecords.LZ4, true}, {"zstd", kafkarecords.Zstd, true}, {"producer", 0, false}, {"ZSTD", 0, false}} {
		if got, ok := kafkarecords.ParseCodec(c.name); ok != c.ok || got != c.codec || (ok && got.String() != c.name) {
			t.Errorf("ParseCodec(%q) = %v, %v", c.name, got, ok)
		}
	}
}

// The package is pure: its pooled codecs decode and encode on the
// caller's goroutine and leave none of their own, however many are
// created at once and however many the collector drops.
func TestCodecsStartNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	raw := testRecords()[:32<<10]
	done := make(chan error)
	for range 8 {
		go func() {
			for _, codec := range []kafkarecords.Codec{kafkarecords.Gzip, kafkarecords.Snappy, kafkarecords.LZ4, kafkarecords.Zstd} {
				comp, err := kafkarecords.Compress(nil, raw, codec)
				if err == nil {
					_, err = kafkarecords.Decompress(comp, codec, len(raw))
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC() // the pools' victim caches too
	wait.Until(t, 5*time.Second, "the test's goroutines to end, and no others to stay", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

// compressWith compresses raw as a Kafka client does: franz-go's gzip,
// lz4 and zstd settings, and snappy as one raw block (librdkafka,
// franz-go's non-streaming path). xerialSnappy is the Java client's.
func compressWith(t testing.TB, raw []byte, codec kafkarecords.Codec) []byte {
	t.Helper()
	switch codec {
	case kafkarecords.None:
		return raw
	case kafkarecords.Gzip:
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
		write(t, w, raw)
		return buf.Bytes()
	case kafkarecords.Snappy:
		return s2.EncodeSnappy(nil, raw)
	case kafkarecords.LZ4:
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(lz4.CompressionLevelOption(lz4.Fast)); err != nil {
			t.Fatal(err)
		}
		write(t, w, raw)
		return buf.Bytes()
	case kafkarecords.Zstd:
		enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(64<<10), zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))
		if err != nil {
			t.Fatal(err)
		}
		return enc.EncodeAll(raw, nil)
	}
	t.Fatalf("codec %d", codec)
	return nil
}

// xerialSnappy frames raw as snappy-java's SnappyOutputStream (the Java
// client) does: the header, then 32 KiB blocks each behind a big-endian
// length.
func xerialSnappy(raw []byte) []byte {
	out := []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1}
	for len(raw) > 0 {
		n := min(len(raw), 32<<10)
		block := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		raw = raw[n:]
	}
	return out
}

func write(t testing.TB, w io.WriteCloser, b []byte) {
	t.Helper()
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
