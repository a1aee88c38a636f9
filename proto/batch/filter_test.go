package batch_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func fiveRecordBatch(t *testing.T) []byte {
	t.Helper()
	var bb batch.Builder
	bb.Reset(baseTS)
	for i := 0; i < 5; i++ {
		bb.Add(baseTS+int64(i), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("v%d", i)), nil)
	}
	b := bb.Finish(batch.Producer{ID: 7, Epoch: 2, BaseSequence: 10}, batch.AttrTransactional)
	batch.SetBaseOffset(b, 100)
	return b
}

// Rule (compaction): a filtered batch keeps its base offset, producer,
// attributes, timestamps and last offset delta; the survivors keep their
// offsets; the CRC is recomputed so Verify (followers, recovery) accepts
// it, while Canonicalize (the produce path) still refuses the gaps.
func TestFilterKeepsOffsetsAndHeader(t *testing.T) {
	b := fiveRecordBatch(t)
	orig, _ := batch.ParseHeader(b)
	out, kept, err := batch.Filter(nil, b, func(r batch.Record) bool { return r.Offset == 101 || r.Offset == 104 })
	if err != nil || kept != 2 {
		t.Fatalf("Filter: kept %d, %v", kept, err)
	}
	h, err := batch.Verify(out)
	if err != nil {
		t.Fatalf("Verify(filtered): %v", err)
	}
	want := orig
	want.RecordCount, want.CRC = 2, h.CRC
	if h != want {
		t.Fatalf("header %+v, want %+v", h, want)
	}
	if h.NextOffset() != 105 || h.LastSequence() != orig.LastSequence() {
		t.Fatalf("next offset %d, last sequence %d", h.NextOffset(), h.LastSequence())
	}
	var offs []int64
	var vals [][]byte
	if err := batch.ForEachRecord(out, func(r batch.Record) error {
		offs = append(offs, r.Offset)
		vals = append(vals, bytes.Clone(r.Value))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(offs) != "[101 104]" || string(vals[0]) != "v1" || string(vals[1]) != "v4" {
		t.Fatalf("records %v %q", offs, vals)
	}
	if _, _, err := batch.Canonicalize(bytes.Clone(out)); errs.Code(err) != sluicev1.ErrorCode_INVALID_RECORD {
		t.Fatalf("Canonicalize(filtered) = %v, want INVALID_RECORD", err)
	}

	// Nothing kept: an empty batch still covering offsets 100..104.
	empty, kept, err := batch.Filter(nil, b, func(batch.Record) bool { return false })
	if err != nil || kept != 0 {
		t.Fatalf("Filter none: %d, %v", kept, err)
	}
	if h, err := batch.Verify(empty); err != nil || h.RecordCount != 0 || h.NextOffset() != 105 {
		t.Fatalf("Verify(empty) = %+v, %v", h, err)
	}
}

// Rule: a stored batch claiming fewer covered offsets than records is
// corrupt, as is a record whose offset delta passes the last offset delta.
func TestVerifyRefusesShortLastOffsetDelta(t *testing.T) {
	b := fiveRecordBatch(t)
	h, _ := batch.ParseHeader(b)
	h.LastOffsetDelta = 3
	batch.PutHeader(b, h)
	h.CRC = batch.ComputeCRC(b)
	batch.PutHeader(b, h)
	if _, err := batch.Verify(b); errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
		t.Fatalf("Verify = %v, want CORRUPT_RECORD", err)
	}
	if err := batch.ForEachRecord(b, func(batch.Record) error { return nil }); errs.Code(err) != sluicev1.ErrorCode_CORRUPT_RECORD {
		t.Fatalf("ForEachRecord = %v, want CORRUPT_RECORD", err)
	}
}
