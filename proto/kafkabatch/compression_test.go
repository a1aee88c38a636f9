package kafkabatch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkabatch"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// withCompressed is the batch kb compressed by codec, its records field
// replaced by compressed (which the test built as a client would).
func withCompressed(t testing.TB, kb kbatch, codec kafkabatch.Codec, compressed []byte) []byte {
	t.Helper()
	var h kmsg.RecordBatch
	if err := h.ReadFrom(kb.build(t, codec)); err != nil {
		t.Fatal(err)
	}
	h.Records = compressed
	return seal(h)
}

// Each codec reads the shapes real clients write: the Java client's
// xerial-framed snappy (32 KiB blocks), zstd streamed without a content
// size and with the Java client's default 2 MiB window, several gzip
// members, several zstd and lz4 frames, lz4's 64 KiB to 4 MiB blocks.
func TestCodecsReadWhatClientsWrite(t *testing.T) {
	kb := kmsgBatches()["large-values"] // 390 KiB of records: several blocks
	raw := encodeRecords(kb.records)
	want, _ := fromKafka(t, kb.build(t, kafkabatch.None))
	half := len(raw) / 2

	gz := func(b []byte) []byte { return compressWith(t, b, kafkabatch.Gzip) }
	zs := func(b []byte) []byte { return compressWith(t, b, kafkabatch.Zstd) }
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
		codec kafkabatch.Codec
		data  []byte
	}{
		{"gzip", kafkabatch.Gzip, gz(raw)},
		{"gzip-two-members", kafkabatch.Gzip, append(gz(raw[:half]), gz(raw[half:])...)},
		{"snappy-raw-block", kafkabatch.Snappy, s2.EncodeSnappy(nil, raw)},
		{"snappy-xerial-java", kafkabatch.Snappy, xerialSnappy(raw)},
		{"lz4-64KiB-blocks-java", kafkabatch.LZ4, lz(raw, lz4.Block64Kb)},
		{"lz4-4MiB-blocks-franz-go", kafkabatch.LZ4, compressWith(t, raw, kafkabatch.LZ4)},
		{"lz4-two-frames", kafkabatch.LZ4, append(lz(raw[:half], lz4.Block256Kb), lz(raw[half:], lz4.Block1Mb)...)},
		{"zstd-franz-go", kafkabatch.Zstd, zs(raw)},
		{"zstd-streamed-java", kafkabatch.Zstd, zstdStream(raw)},
		{"zstd-two-frames", kafkabatch.Zstd, append(zs(raw[:half]), zs(raw[half:])...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, info := fromKafka(t, withCompressed(t, kb, c.codec, c.data))
			if info.Codec != c.codec || !bytes.Equal(got, want) {
				t.Fatalf("codec %v: canonical form differs from the uncompressed batch's", info.Codec)
			}
		})
	}
}

// bomb compresses n zero bytes with codec into a batch's records, a
// few KiB (snappy, whose best ratio is about 21, a few hundred) streamed
// so that the test does not hold the n bytes. Windows and blocks are
// small, so that the decoders' own memory is small beside the limit.
func bomb(t testing.TB, codec kafkabatch.Codec, n int) []byte {
	t.Helper()
	zeros := make([]byte, 1<<20)
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case kafkabatch.Gzip:
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case kafkabatch.LZ4:
		lw := lz4.NewWriter(&buf)
		if err := lw.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			t.Fatal(err)
		}
		w = lw
	case kafkabatch.Zstd:
		// RLE blocks of 128 KiB, 4 bytes each, in a 128 KiB window.
		return zstdFrame(17, n, nil)
	case kafkabatch.Snappy:
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

// Decompression bombs: records that decompress to far more than
// MaxUncompressedBytes are refused with MESSAGE_TOO_LARGE, and the
// conversion allocates about the limit, not what the bomb expands to.
func TestDecompressionBombsStopAtTheLimit(t *testing.T) {
	const limit = 1 << 20
	kb := kmsgBatches()["plain"]
	bombs := map[string][]byte{}
	expands := map[kafkabatch.Codec]int{kafkabatch.Gzip: 64 << 20, kafkabatch.Snappy: 4 << 20, kafkabatch.LZ4: 16 << 20, kafkabatch.Zstd: 1 << 30}
	for codec, n := range expands {
		in := withCompressed(t, kb, codec, bomb(t, codec, n))
		if len(in) > n/16 {
			t.Fatalf("the %v bomb is %d bytes for %d: not a bomb", codec, len(in), n)
		}
		bombs[codec.String()] = in
	}
	// One raw snappy block and one zstd frame that declare their size:
	// refused before anything is decoded.
	bombs["snappy-raw-block"] = withCompressed(t, kb, kafkabatch.Snappy, s2.EncodeSnappy(nil, make([]byte, 4<<20)))
	bombs["zstd-content-size"] = withCompressed(t, kb, kafkabatch.Zstd, compressWith(t, make([]byte, 4<<20), kafkabatch.Zstd))
	for name, in := range bombs {
		t.Run(name, func(t *testing.T) {
			limits := kafkabatch.Limits{MaxUncompressedBytes: limit}
			convert := func() error {
				_, _, err := kafkabatch.FromKafka(nil, in, limits)
				return err
			}
			err := convert()
			if !errors.Is(err, kafkabatch.ErrDecompressedTooLarge) || errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
				t.Fatalf("FromKafka(%d-byte bomb) = %v, want ErrDecompressedTooLarge", len(in), err)
			}
			// What a conversion allocates is its output buffer (grown
			// by doubling up to the limit) and the decoders' memory,
			// small here (and pooled).
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_ = convert()
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 3*limit {
				t.Errorf("a %d-byte bomb allocated %d KiB with a %d KiB limit", len(in), got>>10, limit>>10)
			}
		})
	}
	// At the limit exactly, the records are not refused for size.
	raw := encodeRecords(kb.records)
	for _, codec := range []kafkabatch.Codec{kafkabatch.Gzip, kafkabatch.Snappy, kafkabatch.LZ4, kafkabatch.Zstd} {
		in := kb.build(t, codec)
		if _, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{MaxUncompressedBytes: len(raw)}); err != nil {
			t.Errorf("%v: records of exactly the limit: %v", codec, err)
		}
		if _, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{MaxUncompressedBytes: len(raw) - 1}); !errors.Is(err, kafkabatch.ErrDecompressedTooLarge) {
			t.Errorf("%v: records one byte over the limit: %v", codec, err)
		}
	}
}

// A zstd frame that declares a window beyond 8 MiB (the Java client's
// levels 20 to 22) is refused rather than given that much memory.
func TestZstdWindowIsBounded(t *testing.T) {
	kb := kmsgBatches()["plain"]
	raw := encodeRecords(kb.records)
	want, _ := fromKafka(t, kb.build(t, kafkabatch.None))
	for windowLog, ok := range map[int]bool{10: true, 21: true, 23: true, 24: false, 27: false} {
		in := withCompressed(t, kb, kafkabatch.Zstd, zstdFrame(windowLog, 0, raw))
		got, _, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{})
		if ok && (err != nil || !bytes.Equal(got, want)) {
			t.Errorf("zstd frame with a 2^%d window: %v", windowLog, err)
		}
		if !ok && !errors.Is(err, kafkabatch.ErrDecompress) {
			t.Errorf("zstd frame with a 2^%d window: %v, want ErrDecompress", windowLog, err)
		}
	}
}

// The package is pure: its pooled codecs decode and encode on the
// caller's goroutine and leave none of their own, however many are
// created at once and however many the collector drops.
func TestCodecsStartNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	kb := kmsgBatches()["headers"]
	var inputs [][]byte
	for _, codec := range []kafkabatch.Codec{kafkabatch.Gzip, kafkabatch.Snappy, kafkabatch.LZ4, kafkabatch.Zstd} {
		inputs = append(inputs, kb.build(t, codec))
	}
	done := make(chan error)
	for range 8 {
		go func() {
			for _, in := range inputs {
				canonical, info, err := kafkabatch.FromKafka(nil, in, kafkabatch.Limits{})
				if err == nil {
					_, err = kafkabatch.AppendKafka(nil, canonical, info.Codec)
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
