package kafka

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetch answers carry most of their bytes in record batches. Encoding
// them through kmsg would copy every batch into the frame (and the frame
// grows by doubling): instead each partition's RecordBatches holds a
// 16-byte placeholder while kmsg encodes the answer, and the writer sends
// the encoded answer with each placeholder replaced by its batches — the
// length prefix re-encoded — as one vectored write (net.Buffers). The
// batches are written from where the fetch converted them, never copied
// again.

// placeholderMagic starts every placeholder: random per process, so
// that nothing else in an answer (a topic name, say) matches one.
var placeholderMagic = func() [8]byte {
	var m [8]byte
	if _, err := rand.Read(m[:]); err != nil {
		panic(err)
	}
	return m
}()

// spliced is an answer whose placeholders stand for payloads.
type spliced struct {
	kmsg.Response
	payloads [][]byte
}

// placeholder returns the i-th placeholder.
func placeholder(i int) []byte {
	p := make([]byte, 16)
	copy(p, placeholderMagic[:])
	binary.BigEndian.PutUint64(p[8:], uint64(i))
	return p
}

// add stands payload in for a field: the placeholder to put in the field.
func (s *spliced) add(payload []byte) []byte {
	s.payloads = append(s.payloads, payload)
	return placeholder(len(s.payloads) - 1)
}

// frame splices the payloads into enc — a framed answer (size prefix
// first) whose placeholders are encoded as bytes fields, compact (a
// uvarint of length+1) when flexible else with an int32 length — and
// returns the buffers to write, the frame's size prefix corrected.
func (s *spliced) frame(enc []byte, flexible bool) (net.Buffers, error) {
	out := make(net.Buffers, 0, 2*len(s.payloads)+1)
	size := len(enc) - 4
	cur := 0
	for i, p := range s.payloads {
		ph := placeholder(i)
		at := bytes.Index(enc[cur:], ph)
		if at < 0 {
			return nil, fmt.Errorf("placeholder %d not in the encoded answer", i)
		}
		at += cur
		var prefix []byte
		if flexible {
			if at < 1 || enc[at-1] != 17 {
				return nil, fmt.Errorf("placeholder %d: unexpected length prefix", i)
			}
			out = append(out, enc[cur:at-1])
			prefix = binary.AppendUvarint(nil, uint64(len(p))+1)
			size += len(prefix) - 1
		} else {
			if at < 4 || binary.BigEndian.Uint32(enc[at-4:]) != 16 {
				return nil, fmt.Errorf("placeholder %d: unexpected length prefix", i)
			}
			out = append(out, enc[cur:at-4])
			prefix = binary.BigEndian.AppendUint32(nil, uint32(len(p)))
		}
		size += len(p) - 16
		out = append(out, prefix, p)
		cur = at + 16
	}
	out = append(out, enc[cur:])
	binary.BigEndian.PutUint32(out[0], uint32(size))
	return out, nil
}
