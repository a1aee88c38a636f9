package kafkarecords

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Decompression is bounded: the output never grows beyond the caller's
// limit, and the decoders' own memory is bounded by constants (gzip's
// 32 KiB window, lz4's largest block of 4 MiB, zstd's window of at most
// maxZstdWindow).
//
// Codecs as Kafka clients write them:
//   - gzip: a gzip stream (RFC 1952); several members are read as one.
//   - snappy: the Java client writes snappy-java's xerial framing (a
//     16-byte header, then blocks of a 4-byte big-endian length and a raw
//     snappy block); librdkafka and franz-go may write one raw snappy
//     block. Both are read; the xerial magic tells them apart, as Kafka's
//     and franz-go's readers do.
//   - lz4: the LZ4 frame format (Kafka's KafkaLZ4BlockOutputStream for
//     magic 1 and later); concatenated frames are read as one.
//   - zstd: zstd frames (Java's zstd-jni streams them without a content
//     size, so the frame's window, not its size, is declared).

// MaxUncompressedBytes is the most bytes a batch's records may
// decompress to, on produce and on every read of a stored batch (a
// consumer cannot be made to hold more for one batch): larger is
// ErrDecompressedTooLarge. Kafka has no such bound; 64 MiB is twice the
// largest max.message.bytes Sluice accepts.
const MaxUncompressedBytes = 64 << 20

// maxZstdWindow is the largest zstd window accepted: 8 MiB covers what
// the Java client's levels 1 to 19 declare for a stream of unknown size
// (2 MiB at its default level 3); levels 20 to 22 (32 to 128 MiB) are
// refused (ErrDecompress) rather than allowed to allocate that much for a
// few bytes of input.
const maxZstdWindow = 8 << 20

// xerialMagic starts snappy-java's framing; xerialHeader is the magic,
// the version (1) and the lowest compatible version (1), which the Java
// reader checks.
var (
	xerialMagic  = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}
	xerialHeader = append(append([]byte(nil), xerialMagic...), 0, 0, 0, 1, 0, 0, 0, 1)
)

// xerialBlock is the block size snappy-java writes (and Compress too).
const xerialBlock = 32 << 10

type gzipReader struct {
	src bytes.Reader
	zr  gzip.Reader
}

type lz4Reader struct {
	src bytes.Reader
	zr  *lz4.Reader
}

type zstdReader struct {
	src bytes.Reader
	zr  *zstd.Decoder
}

var (
	gzipReaders = sync.Pool{New: func() any { return new(gzipReader) }}
	lz4Readers  = sync.Pool{New: func() any { return &lz4Reader{zr: lz4.NewReader(nil)} }}
	zstdReaders = sync.Pool{New: func() any {
		// One decoder per goroutine that uses it, synchronous (no
		// goroutines of its own) and frugal: its history buffer is the
		// frame's window plus a block, not twice the window.
		zr, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			panic(err) // constant options
		}
		return &zstdReader{zr: zr}
	}}
)

// Decompress returns the records src decompresses to with codec (not
// None), at most limit bytes (ErrDecompressedTooLarge beyond;
// ErrDecompress when src does not decode, ErrCodec for an unknown
// codec). The result is a new slice.
func Decompress(src []byte, codec Codec, limit int) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch codec {
	case Gzip, Snappy, LZ4, Zstd:
		if len(src) == 0 {
			// Every codec encodes even nothing in a few bytes.
			return nil, corrupt(ErrDecompress, "%s batch without compressed bytes", codec)
		}
	}
	switch codec {
	case Gzip:
		out, err = gunzip(src, limit)
	case Snappy:
		if len(src) >= len(xerialHeader) && bytes.HasPrefix(src, xerialMagic) {
			out, err = unxerial(src[len(xerialHeader):], limit)
		} else {
			out, err = unsnappy(src, limit)
		}
	case LZ4:
		out, err = unlz4(src, limit)
	case Zstd:
		out, err = unzstd(src, limit)
	default:
		return nil, Fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's", codec)
	}
	if err == nil {
		return out, nil
	}
	if errors.Is(err, ErrDecompressedTooLarge) {
		return nil, err
	}
	return nil, corrupt(ErrDecompress, "%s records do not decode: %v", codec, err)
}

// tooLarge is the error for records that decompress to more than limit.
func tooLarge(codec Codec, limit int) error {
	return Fail(sluicev1.ErrorCode_MESSAGE_TOO_LARGE, ErrDecompressedTooLarge, "%s records decompress to more than %d bytes", codec, limit)
}

func gunzip(src []byte, limit int) ([]byte, error) {
	r := gzipReaders.Get().(*gzipReader)
	defer gzipReaders.Put(r)
	r.src.Reset(src)
	if err := r.zr.Reset(&r.src); err != nil {
		return nil, err
	}
	// The trailer's ISIZE (length mod 2^32) is a hint only: it sizes
	// the first buffer, never beyond the limit.
	hint := 0
	if len(src) >= 18 {
		hint = int(binary.LittleEndian.Uint32(src[len(src)-4:]))
	}
	return readBounded(&r.zr, Gzip, hint, len(src), limit)
}

func unlz4(src []byte, limit int) ([]byte, error) {
	r := lz4Readers.Get().(*lz4Reader)
	defer lz4Readers.Put(r)
	r.src.Reset(src)
	r.zr.Reset(&r.src)
	return readBounded(r.zr, LZ4, 0, len(src), limit)
}

func unzstd(src []byte, limit int) ([]byte, error) {
	// A first frame that declares more than the limit is refused before
	// anything is decoded.
	var fh zstd.Header
	hint := 0
	if fh.Decode(src) == nil && fh.HasFCS {
		if fh.FrameContentSize > uint64(limit) {
			return nil, tooLarge(Zstd, limit)
		}
		hint = int(fh.FrameContentSize)
	}
	r := zstdReaders.Get().(*zstdReader)
	defer zstdReaders.Put(r)
	r.src.Reset(src)
	if err := r.zr.Reset(&r.src); err != nil {
		return nil, err
	}
	out, err := readBounded(r.zr, Zstd, hint, len(src), limit)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, errors.New("zstd window larger than 8 MiB")
	}
	return out, err
}

// unsnappy decodes one raw snappy block, whose header states its decoded
// length: checked against limit before anything is allocated.
func unsnappy(src []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, tooLarge(Snappy, limit)
	}
	return s2.Decode(make([]byte, n), src)
}

var errXerial = errors.New("malformed xerial framing")

// unxerial decodes snappy-java's blocks (after the header): their
// decoded lengths are summed and checked against limit first, so the
// output is allocated once at its size.
func unxerial(src []byte, limit int) ([]byte, error) {
	total := 0
	for b := src; len(b) > 0; {
		if len(b) < 4 {
			return nil, errXerial
		}
		l := binary.BigEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return nil, errXerial
		}
		n, err := s2.DecodedLen(b[4 : 4+l])
		if err != nil {
			return nil, err
		}
		if total += n; total > limit {
			return nil, tooLarge(Snappy, limit)
		}
		b = b[4+l:]
	}
	out := make([]byte, total)
	at := 0
	for b := src; len(b) > 0; {
		l := binary.BigEndian.Uint32(b)
		block := b[4 : 4+l]
		n, _ := s2.DecodedLen(block)
		if _, err := s2.Decode(out[at:at+n], block); err != nil {
			return nil, err
		}
		at += n
		b = b[4+l:]
	}
	return out, nil
}

// readBounded reads r to its end into a buffer that never grows beyond
// limit bytes; one more byte is ErrDecompressedTooLarge. hint (a size the
// input states, possibly false) sizes the first buffer, else a multiple
// of the input's size srcLen. A full buffer grows only once a byte
// beyond it has been read, so an exact hint costs one allocation.
func readBounded(r io.Reader, codec Codec, hint, srcLen, limit int) ([]byte, error) {
	size := hint
	if size <= 0 {
		size = max(4*srcLen, 4<<10)
	}
	out := make([]byte, 0, min(size, limit))
	var one [1]byte
	for idle := 0; idle < maxIdleReads; {
		buf, probe := out[len(out):cap(out)], false
		if len(buf) == 0 {
			buf, probe = one[:], true
		}
		n, err := r.Read(buf)
		switch {
		case probe && n > 0 && len(out) >= limit:
			return nil, tooLarge(codec, limit)
		case probe && n > 0:
			grown := make([]byte, len(out), min(max(2*cap(out), 4<<10), limit))
			copy(grown, out)
			out = append(grown, one[0])
		default:
			out = out[:len(out)+n]
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			idle++
		} else {
			idle = 0
		}
	}
	return nil, io.ErrNoProgress
}

// maxIdleReads bounds the reads in a row that return nothing, as
// bufio does: a decoder that neither reads on nor ends is an error.
const maxIdleReads = 100

// Compress appends records compressed with codec (not None) to dst, as
// Kafka clients write it: a gzip stream, xerial-framed snappy (what the
// Java client writes and every client reads), an LZ4 frame of 64 KiB
// independent blocks (the Java client's block size), a zstd frame with a
// 64 KiB window (franz-go's setting: a consumer's decoder stays small).
// ErrCodec for None or an unknown codec.
func Compress(dst, records []byte, codec Codec) ([]byte, error) {
	switch codec {
	case Gzip:
		w := gzipWriters.Get().(*gzipWriter)
		defer gzipWriters.Put(w)
		w.out.b = dst
		w.zw.Reset(&w.out)
		if _, err := w.zw.Write(records); err != nil {
			return dst, err
		}
		err := w.zw.Close()
		dst, w.out.b = w.out.b, nil
		return dst, err
	case Snappy:
		dst = append(dst, xerialHeader...)
		for b := records; len(b) > 0; {
			n := min(len(b), xerialBlock)
			at := len(dst)
			dst = append(dst, 0, 0, 0, 0)
			dst = growLen(dst, s2.MaxEncodedLen(n))
			block := s2.EncodeSnappy(dst[at+4:], b[:n])
			binary.BigEndian.PutUint32(dst[at:], uint32(len(block)))
			dst = dst[:at+4+len(block)]
			b = b[n:]
		}
		return dst, nil
	case LZ4:
		w := lz4Writers.Get().(*lz4Writer)
		defer lz4Writers.Put(w)
		w.out.b = dst
		w.zw.Reset(&w.out)
		if _, err := w.zw.Write(records); err != nil {
			return dst, err
		}
		err := w.zw.Close()
		dst, w.out.b = w.out.b, nil
		return dst, err
	case Zstd:
		w := zstdWriters.Get().(*zstd.Encoder)
		defer zstdWriters.Put(w)
		return w.EncodeAll(records, dst), nil
	}
	return dst, Fail(sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, ErrCodec, "compression codec %d is not one of Kafka's", codec)
}

// growLen extends b by n bytes (their contents undefined).
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		g := make([]byte, len(b), len(b)+n)
		copy(g, b)
		b = g
	}
	return b[:len(b)+n]
}

// appender is an io.Writer appending to b.
type appender struct{ b []byte }

func (a *appender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

type gzipWriter struct {
	out appender
	zw  *gzip.Writer
}

type lz4Writer struct {
	out appender
	zw  *lz4.Writer
}

var (
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression)
		return &gzipWriter{zw: zw}
	}}
	lz4Writers = sync.Pool{New: func() any {
		zw := lz4.NewWriter(nil)
		if err := zw.Apply(lz4.BlockSizeOption(lz4.Block64Kb)); err != nil {
			panic(err) // constant options
		}
		return &lz4Writer{zw: zw}
	}}
	zstdWriters = sync.Pool{New: func() any {
		// franz-go's settings: a 64 KiB window keeps a consumer's
		// decoder small; one encoder per user, no goroutines.
		zw, err := zstd.NewWriter(nil,
			zstd.WithWindowSize(64<<10),
			zstd.WithEncoderConcurrency(1),
			zstd.WithZeroFrames(true))
		if err != nil {
			panic(err) // constant options
		}
		return zw
	}}
)
