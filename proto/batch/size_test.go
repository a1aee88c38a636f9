package batch_test

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// maxMessageBytesLimit is storage.MaxMessageBytesLimit, the largest
// max.message.bytes a topic may have (proto/batch sits below storage).
const maxMessageBytesLimit = 32 << 20

// emptyRecords is a simple-produce batch (decision 43) of size bytes or
// one more, all of it empty records (2 bytes each: the entry's tag and a
// zero length). canonical puts a canonical header first (the fast path);
// otherwise the only header field is base_timestamp, as proto.Marshal
// writes a simple batch (the slow path).
func emptyRecords(canonical bool, size int) []byte {
	var b []byte
	if canonical {
		b = make([]byte, batch.HeaderSize, size+1)
		batch.PutHeader(b, batch.Header{BaseTimestamp: baseTS, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})
	} else {
		b = make([]byte, 0, size+1)
		b = protowire.AppendTag(b, 6, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, uint64(baseTS))
	}
	for len(b) < size {
		b = append(b, 0x62, 0)
	}
	return b
}

// bytesAllocated is the heap allocated while fn runs (the tests in this
// package do not run in parallel, so it is fn's).
func bytesAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

var layouts = []struct {
	name      string
	canonical bool
}{{"slow path", false}, {"fast path", true}}

// Issue 29: a simple batch grows when the broker fills its offset deltas
// (an empty record of 2 bytes becomes 7 or 8), so 20 MB of empty records
// within the largest max.message.bytes make a 69 MiB batch. It must be
// refused from the scan, before anything is copied: today's code built
// it first, at a cost of 1.5 GB (slow path) or 90 MB (fast path).
func TestCanonicalizeMaxRefusesFromTheScan(t *testing.T) {
	const bound = 4 << 20
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			in := emptyRecords(l.canonical, 20<<20)
			var err error
			got := bytesAllocated(func() { _, _, err = batch.CanonicalizeMax(in, maxMessageBytesLimit) })
			if errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
				t.Fatalf("CanonicalizeMax = %v, want MESSAGE_TOO_LARGE", err)
			}
			if !strings.Contains(err.Error(), "max.message.bytes 33554432") {
				t.Errorf("error %q does not name the limit", err)
			}
			if got > bound {
				t.Errorf("refusing a %d-byte batch allocated %d bytes, want at most %d", len(in), got, bound)
			}
			t.Logf("refused %d bytes of input (%d records) after allocating %d bytes", len(in), len(in)/2, got)
		})
	}
}

// A batch that is accepted is allocated once, at its canonical size: no
// per-record slice, no second copy (issue 29).
func TestCanonicalizeAllocatesItsOutputOnce(t *testing.T) {
	const slack = 1 << 20
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			in := emptyRecords(l.canonical, 8<<20)
			var out []byte
			var err error
			got := bytesAllocated(func() { out, _, err = batch.Canonicalize(in) })
			if err != nil {
				t.Fatal(err)
			}
			if got > uint64(len(out))+slack {
				t.Errorf("a %d-byte canonical batch cost %d bytes of allocation, want at most %d more", len(out), got, slack)
			}
			t.Logf("%d bytes in, %d out, %d allocated", len(in), len(out), got)
		})
	}
}

// The size checked is exactly that of the canonical form: a limit equal to
// it passes, one byte less is MESSAGE_TOO_LARGE, on both paths, for
// simple batches (whose records grow, and whose explicit offset_delta 0
// fields are dropped) and strict ones.
func TestCanonicalizeMaxIsExact(t *testing.T) {
	strict := build(t, batch.Producer{ID: 3, Epoch: 1, BaseSequence: 5}, 0, sampleRecords())
	// A simple batch whose records carry an explicit offset_delta 0 (an
	// encoder that writes default values), one of them overlong.
	explicitZero := make([]byte, batch.HeaderSize)
	batch.PutHeader(explicitZero, batch.Header{BaseTimestamp: baseTS, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1})
	for _, rec := range [][]byte{
		{2 << 3, 0, 4<<3 | 2, 1, 'a'},
		{1 << 3, 6, 2 << 3, 0x80, 0x00, 4<<3 | 2, 1, 'b'},
		{4<<3 | 2, 1, 'c', 2 << 3, 0},
	} {
		explicitZero = protowire.AppendTag(explicitZero, 12, protowire.BytesType)
		explicitZero = protowire.AppendBytes(explicitZero, rec)
	}
	inputs := map[string][]byte{
		"strict canonical":      strict,
		"strict shuffled":       shuffled(t, strict),
		"simple proto.Marshal":  simpleBatch(t, batch.PlainProducer, sampleRecords()),
		"simple canonical":      simpleCanonical(t, batch.Producer{ID: 3, Epoch: 1, BaseSequence: 5}, sampleRecords()),
		"simple one record":     simpleBatch(t, batch.PlainProducer, sampleRecords()[:1]),
		"simple explicit zeros": explicitZero,
		"simple shuffled zeros": reorder(t, explicitZero, true),
		"many empty records":    emptyRecords(false, 4000),
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			want, wantH, err := batch.Canonicalize(clone(in))
			if err != nil {
				t.Fatal(err)
			}
			got, h, err := batch.CanonicalizeMax(clone(in), len(want))
			if err != nil || !bytes.Equal(got, want) || h != wantH {
				t.Fatalf("CanonicalizeMax(limit %d) = %v, %+v; want the %d-byte canonical batch, %+v", len(want), err, h, len(want), wantH)
			}
			if _, _, err := batch.CanonicalizeMax(clone(in), len(want)-1); errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
				t.Fatalf("CanonicalizeMax(limit %d) = %v, want MESSAGE_TOO_LARGE", len(want)-1, err)
			}
		})
	}
}

// A record_count that the bytes sent cannot hold (a record entry takes at
// least 2 bytes) is INVALID_RECORD, said before the records are walked.
func TestCanonicalizeRecordCountOverBytes(t *testing.T) {
	lying := withHeader(t, build(t, batch.PlainProducer, 0, sampleRecords()), func(h *batch.Header) {
		h.RecordCount, h.LastOffsetDelta = 1<<30, 1<<30-1
	})
	for name, in := range map[string][]byte{"fast path": lying, "slow path": shuffled(t, lying)} {
		t.Run(name, func(t *testing.T) {
			_, _, err := batch.CanonicalizeMax(in, maxMessageBytesLimit)
			if errs.Code(err) != sluicev1.ErrorCode_INVALID_RECORD || !strings.Contains(err.Error(), "can hold") {
				t.Fatalf("CanonicalizeMax = %v, want INVALID_RECORD: record_count more than the bytes can hold", err)
			}
		})
	}
}

// BenchmarkCanonicalizeMaxTooLarge measures refusing 20 MB of empty records
// over the largest max.message.bytes (proto.Marshal layout): a scan, no
// copy.
func BenchmarkCanonicalizeMaxTooLarge(b *testing.B) {
	in := emptyRecords(false, 20<<20)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := batch.CanonicalizeMax(in, maxMessageBytesLimit); errs.Code(err) != sluicev1.ErrorCode_MESSAGE_TOO_LARGE {
			b.Fatal(err)
		}
	}
}
