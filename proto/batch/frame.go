package batch

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// A segment file (.log) is the encoding of sluice.v1.LogSegment: each batch
// is framed as field 1 (tag 0x0a), a varint length, and the canonical batch.

// FrameTag is the first byte of every frame in a segment file.
const FrameTag = byte(1<<3 | 2)

// ErrShortFrame means the bytes end inside a frame (a torn tail, or a read
// that stopped mid-frame).
var ErrShortFrame = errors.New("batch: frame extends past the end of the data")

// FrameSize is the size of the frame holding a batch of n bytes.
func FrameSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// AppendFrame appends the frame of batch b to dst.
func AppendFrame(dst, b []byte) []byte {
	return append(AppendFrameHeader(dst, len(b)), b...)
}

// MaxFrameHeader is the largest frame header: the tag and a varint length.
const MaxFrameHeader = 1 + 10

// AppendFrameHeader appends the bytes that precede a batch of n bytes in
// its frame (tag and length): the header followed by the batch is the
// frame.
func AppendFrameHeader(dst []byte, n int) []byte {
	dst = append(dst, FrameTag)
	return protowire.AppendVarint(dst, uint64(n))
}

// NextFrame splits the first frame off data. It returns the batch bytes
// (aliasing data) and the frame's total size. ErrShortFrame means data ends
// inside the frame; any other error means the bytes are not a frame.
func NextFrame(data []byte) (b []byte, size int, err error) {
	if len(data) == 0 {
		return nil, 0, ErrShortFrame
	}
	if data[0] != FrameTag {
		return nil, 0, corrupt("segment frame tag is 0x%02x, want 0x%02x", data[0], FrameTag)
	}
	l, m := protowire.ConsumeVarint(data[1:])
	if m < 0 {
		if len(data) < 11 {
			return nil, 0, ErrShortFrame
		}
		return nil, 0, corrupt("malformed segment frame length")
	}
	if l > 1<<31 {
		return nil, 0, corrupt("segment frame length %d is absurd", l)
	}
	end := 1 + m + int(l)
	if end > len(data) {
		return nil, 0, ErrShortFrame
	}
	return data[1+m : end], end, nil
}
