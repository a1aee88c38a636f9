package batch_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// reframe rebuilds a canonical batch's record entries through entry, which
// appends one entry (tag, length, body) to dst; crc is set to 0.
func reframe(t testing.TB, canonical []byte, entry func(dst, body []byte) []byte) []byte {
	t.Helper()
	out := clone(canonical[:batch.HeaderSize])
	rest := canonical[batch.HeaderSize:]
	for len(rest) > 0 {
		body, n := protowire.ConsumeBytes(rest[1:])
		if n < 0 {
			t.Fatal("bad entry")
		}
		out = entry(out, body)
		rest = rest[1+n:]
	}
	return withHeader(t, out, func(*batch.Header) {})
}

// nonCanonicalFraming returns valid RecordBatch encodings that start with a
// canonical header (so Canonicalize tries its fast path) but whose records
// region is not canonically framed.
func nonCanonicalFraming(t testing.TB, good []byte) map[string][]byte {
	overlongTag := reframe(t, good, func(dst, body []byte) []byte {
		dst = append(dst, 0xe2, 0x00) // field 12, wire type 2, as a 2-byte varint
		return protowire.AppendBytes(dst, body)
	})
	overlongLen := reframe(t, good, func(dst, body []byte) []byte {
		dst = append(dst, 0x62)
		dst = protowire.AppendVarint(dst, uint64(len(body))|1<<28) // 5 bytes
		dst = dst[:len(dst)-1]
		dst = append(dst, 0x00) // same value, overlong: high bits cleared
		return append(dst, body...)
	})
	// A header field repeated after the records: last one wins in protobuf.
	h, _ := batch.ParseHeader(good)
	trailing := protowire.AppendTag(clone(good), 11, protowire.Fixed32Type)
	trailing = protowire.AppendFixed32(trailing, uint32(h.RecordCount))
	trailing = protowire.AppendTag(trailing, 6, protowire.Fixed64Type)
	trailing = protowire.AppendFixed64(trailing, uint64(h.BaseTimestamp))
	trailing = withHeader(t, trailing, func(*batch.Header) {})
	// Records interleaved with a repeated header field.
	interleaved := clone(good[:batch.HeaderSize])
	rest := good[batch.HeaderSize:]
	for len(rest) > 0 {
		_, n := protowire.ConsumeBytes(rest[1:])
		interleaved = append(interleaved, rest[:1+n]...)
		interleaved = protowire.AppendTag(interleaved, 4, protowire.Fixed32Type)
		interleaved = protowire.AppendFixed32(interleaved, h.Attributes)
		rest = rest[1+n:]
	}
	interleaved = withHeader(t, interleaved, func(*batch.Header) {})
	return map[string][]byte{
		"overlong record tag":        overlongTag,
		"overlong record length":     overlongLen,
		"header field after records": trailing,
		"records interleaved":        interleaved,
	}
}

// Regression: the fast path used to accept an overlong record tag and store
// it as sent, producing a batch that Verify (and so recovery and followers)
// rejects; and an overlong length or a repeated header field after the
// records made the fast path disagree with the slow path.
func TestCanonicalizeNonCanonicalFraming(t *testing.T) {
	good := build(t, batch.Producer{ID: 4, Epoch: 2, BaseSequence: 8}, batch.AttrTransactional, sampleRecords())
	want, wantH, err := batch.Canonicalize(clone(good))
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range nonCanonicalFraming(t, good) {
		t.Run(name, func(t *testing.T) {
			// The input is a valid RecordBatch with the same records.
			m := toMessage(t, in)
			if len(m.Records) != len(sampleRecords()) {
				t.Fatalf("input decodes to %d records", len(m.Records))
			}
			out, h, err := batch.Canonicalize(clone(in))
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if _, err := batch.Verify(out); err != nil {
				t.Fatalf("output fails Verify: %v", err)
			}
			if !bytes.Equal(out, want) || h != wantH {
				t.Errorf("output differs from the canonical batch\n got %x\nwant %x", out, want)
			}
			// Same answer through the slow path.
			slow, _, err := batch.Canonicalize(shuffled(t, out))
			if err != nil || !bytes.Equal(slow, out) {
				t.Errorf("slow path: %v, equal %v", err, bytes.Equal(slow, out))
			}
		})
	}
	// After a canonical header, non-record bytes still get the right code.
	bad := map[string]struct {
		in   []byte
		want sluicev1.ErrorCode
	}{
		"unknown field after records": {append(clone(good), 0x68, 0x01), sluicev1.ErrorCode_INVALID_RECORD},
		"garbage after records":       {append(clone(good), 0xff), sluicev1.ErrorCode_CORRUPT_RECORD},
		"truncated overlong tag":      {append(clone(good), 0xe2), sluicev1.ErrorCode_CORRUPT_RECORD},
		"overlong tag, short entry":   {append(clone(good), 0xe2, 0x00, 0x05, 0x00), sluicev1.ErrorCode_CORRUPT_RECORD},
	}
	for name, tc := range bad {
		out, _, err := batch.Canonicalize(withHeader(t, tc.in, func(*batch.Header) {}))
		if errs.Code(err) != tc.want || out != nil {
			t.Errorf("%s: %v (out %d bytes), want %v", name, err, len(out), tc.want)
		}
	}
}

// Errors from the batch codec carry codes through wrapping, and their
// retriable flags follow the table.
func TestBatchErrorCodes(t *testing.T) {
	good := build(t, batch.PlainProducer, 0, sampleRecords())
	corrupt := clone(good)
	corrupt[len(corrupt)-1] ^= 1
	cases := []struct {
		name      string
		err       error
		want      sluicev1.ErrorCode
		retriable bool
	}{
		{"crc", func() error { _, _, err := batch.Canonicalize(corrupt); return err }(), sluicev1.ErrorCode_CORRUPT_RECORD, true},
		{"verify", func() error { _, err := batch.Verify(corrupt); return err }(), sluicev1.ErrorCode_CORRUPT_RECORD, true},
		{"empty", func() error { _, _, err := batch.Canonicalize(nil); return err }(), sluicev1.ErrorCode_INVALID_RECORD, false},
		{"codec 5", func() error {
			_, _, err := batch.Canonicalize(withHeader(t, compressedBatch(t, 3, sampleRecords()), func(h *batch.Header) { h.Attributes |= 5 }))
			return err
		}(), sluicev1.ErrorCode_UNSUPPORTED_COMPRESSION_TYPE, false},
		{"not leader", errs.New(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, "leader is 2"), sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER, true},
	}
	for _, tc := range cases {
		for depth, err := range []error{tc.err, fmt.Errorf("append: %w", tc.err), fmt.Errorf("produce t/0: %w", fmt.Errorf("append: %w", tc.err))} {
			if got := errs.Code(err); got != tc.want {
				t.Errorf("%s (wrap depth %d): Code %v, want %v", tc.name, depth, got, tc.want)
			}
			if got := errs.Retriable(errs.Code(err)); got != tc.retriable {
				t.Errorf("%s: Retriable %v, want %v", tc.name, got, tc.retriable)
			}
			var e *errs.Error
			if !errors.As(err, &e) || e.Retriable() != tc.retriable {
				t.Errorf("%s (wrap depth %d): errors.As %v", tc.name, depth, err)
			}
		}
	}
	if !errs.Retriable(sluicev1.ErrorCode_NOT_LEADER_OR_FOLLOWER) || errs.Retriable(sluicev1.ErrorCode_INVALID_RECORD) {
		t.Error("retriable flags of NOT_LEADER_OR_FOLLOWER / INVALID_RECORD")
	}
	if errs.Code(errors.New("plain")) != sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR || errs.Code(nil) != sluicev1.ErrorCode_NONE {
		t.Error("Code of a plain error or nil")
	}
}

// ResetBuffer builds the same batch as Reset whatever the recycled buffer
// holds, and builds into its storage when it is large enough.
func TestBuilderResetBuffer(t *testing.T) {
	recs := sampleRecords()
	want := build(t, batch.Producer{ID: 2, Epoch: 0, BaseSequence: 3}, 0, recs)
	bufs := map[string][]byte{
		"nil":     nil,
		"tiny":    make([]byte, 3),
		"garbage": bytes.Repeat([]byte{0xee}, 64<<10),
		"used":    clone(want),
	}
	for name, buf := range bufs {
		var bld batch.Builder
		bld.ResetBuffer(buf, baseTS)
		for _, r := range recs {
			bld.Add(r.ts, r.key, r.value, r.headers)
		}
		got := bld.Finish(batch.Producer{ID: 2, Epoch: 0, BaseSequence: 3}, 0)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: batch differs from Reset's", name)
		}
		if cap(buf) >= len(want) && &got[0] != &buf[:1][0] {
			t.Errorf("%s: did not build into the recycled buffer", name)
		}
	}
}
