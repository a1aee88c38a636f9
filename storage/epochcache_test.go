package storage

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

func cacheOf(pairs ...int64) epochCache {
	var c epochCache
	for i := 0; i < len(pairs); i += 2 {
		c.entries = append(c.entries, EpochEntry{Epoch: int32(pairs[i]), StartOffset: pairs[i+1]})
	}
	return c
}

// Rule (KIP-101): the cache records the first offset of every leader epoch;
// an append under a lower epoch than the latest is refused, the latest
// epoch adds nothing, a larger one opens an entry at the batch's base
// offset (replacing a trailing entry that covers no batch).
func TestEpochCacheAssign(t *testing.T) {
	cases := []struct {
		name    string
		cache   epochCache
		epoch   int32
		start   int64
		code    sluicev1.ErrorCode
		isNew   bool
		entries epochCache
	}{
		{"first epoch on an empty cache", cacheOf(), 0, 0, sluicev1.ErrorCode_NONE, true, cacheOf(0, 0)},
		{"first epoch at a later start", cacheOf(), 3, 120, sluicev1.ErrorCode_NONE, true, cacheOf(3, 120)},
		{"same epoch adds nothing", cacheOf(3, 0), 3, 50, sluicev1.ErrorCode_NONE, false, cacheOf(3, 0)},
		{"larger epoch opens an entry", cacheOf(3, 0), 5, 50, sluicev1.ErrorCode_NONE, true, cacheOf(3, 0, 5, 50)},
		{"larger epoch replaces an empty trailing epoch", cacheOf(3, 0, 5, 50), 6, 50, sluicev1.ErrorCode_NONE, true, cacheOf(3, 0, 6, 50)},
		{"lower epoch is fenced", cacheOf(3, 0, 5, 50), 4, 60, sluicev1.ErrorCode_FENCED_LEADER_EPOCH, false, cacheOf(3, 0, 5, 50)},
		{"negative epoch is invalid", cacheOf(), -1, 0, sluicev1.ErrorCode_INVALID_RECORD, false, cacheOf()},
		{"start before the latest entry is invalid", cacheOf(3, 100), 4, 50, sluicev1.ErrorCode_INVALID_RECORD, false, cacheOf(3, 100)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.cache.clone()
			isNew, err := tc.cache.checkAppend(tc.epoch, tc.start)
			if errs.Code(err) != tc.code || isNew != tc.isNew {
				t.Fatalf("checkAppend(%d, %d) = %v, %v; want new=%v code %v", tc.epoch, tc.start, isNew, err, tc.isNew, tc.code)
			}
			got := tc.cache
			if isNew {
				got = tc.cache.assign(tc.epoch, tc.start)
			}
			if !slices.Equal(got.entries, tc.entries.entries) {
				t.Fatalf("entries %v, want %v", got.entries, tc.entries.entries)
			}
			if !slices.Equal(tc.cache.entries, before) {
				t.Fatalf("assign modified its receiver: %v, was %v", tc.cache.entries, before)
			}
			if err := got.valid(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Rule: truncating the log to offset drops the entries starting at or
// after it; moving the log start up drops the entries wholly below it and
// moves the one holding it up to it (Kafka's truncateFromEnd and
// truncateFromStart).
func TestEpochCacheTruncation(t *testing.T) {
	c := cacheOf(2, 10, 4, 30, 7, 55)
	fromEnd := []struct {
		offset int64
		want   epochCache
	}{
		{100, c}, {56, c}, {55, cacheOf(2, 10, 4, 30)}, {31, cacheOf(2, 10, 4, 30)},
		{30, cacheOf(2, 10)}, {10, cacheOf()}, {0, cacheOf()},
	}
	for _, tc := range fromEnd {
		got, changed := c.truncateFromEnd(tc.offset)
		if !slices.Equal(got.entries, tc.want.entries) || changed != (len(tc.want.entries) != len(c.entries)) {
			t.Errorf("truncateFromEnd(%d) = %v, %v; want %v", tc.offset, got.entries, changed, tc.want.entries)
		}
	}
	fromStart := []struct {
		offset int64
		want   epochCache
	}{
		{0, c}, {10, c}, {11, cacheOf(2, 11, 4, 30, 7, 55)}, {30, cacheOf(4, 30, 7, 55)},
		{54, cacheOf(4, 54, 7, 55)}, {55, cacheOf(7, 55)}, {90, cacheOf(7, 90)},
	}
	for _, tc := range fromStart {
		got, changed := c.truncateFromStart(tc.offset)
		if !slices.Equal(got.entries, tc.want.entries) || changed != !slices.Equal(c.entries, tc.want.entries) {
			t.Errorf("truncateFromStart(%d) = %v, %v; want %v", tc.offset, got.entries, changed, tc.want.entries)
		}
	}
	if !slices.Equal(c.entries, cacheOf(2, 10, 4, 30, 7, 55).entries) {
		t.Fatalf("truncation modified its receiver: %v", c.entries)
	}
	if got, _ := cacheOf().truncateFromStart(5); len(got.entries) != 0 {
		t.Fatalf("empty cache truncateFromStart: %v", got.entries)
	}
}

// Rule: leader-epoch-checkpoint is Kafka's text format (version 0, entry
// count, "epoch startOffset" lines); anything else is rejected so that the
// cache is rebuilt from the log.
func TestEpochCheckpointFormat(t *testing.T) {
	for _, c := range []epochCache{cacheOf(), cacheOf(0, 0), cacheOf(2, 10, 4, 30, 7, 55)} {
		data := encodeEpochCheckpoint(c)
		got, err := decodeEpochCheckpoint(data)
		if err != nil || !slices.Equal(got.entries, c.entries) {
			t.Fatalf("round trip of %v: %v, %v (%q)", c.entries, got.entries, err, data)
		}
	}
	if got := string(encodeEpochCheckpoint(cacheOf(2, 10, 4, 30))); got != "0\n2\n2 10\n4 30\n" {
		t.Fatalf("encoding %q", got)
	}
	bad := map[string]string{
		"empty":              "",
		"unknown version":    "1\n0\n",
		"missing count":      "0\n",
		"negative count":     "0\n-1\n",
		"too few entries":    "0\n2\n2 10\n",
		"too many entries":   "0\n1\n2 10\n4 30\n",
		"three fields":       "0\n1\n2 10 3\n",
		"not a number":       "0\n1\n2 ten\n",
		"epoch out of range": "0\n1\n4294967296 10\n",
		"epochs not rising":  "0\n2\n4 10\n4 30\n",
		"offsets not rising": "0\n2\n2 30\n4 30\n",
		"negative epoch":     "0\n1\n-1 0\n",
		"negative offset":    "0\n1\n1 -5\n",
		"zero bytes":         "\x00\x00\x00\x00",
	}
	for name, data := range bad {
		if c, err := decodeEpochCheckpoint([]byte(data)); err == nil {
			t.Errorf("%s: %q decoded as %v", name, data, c.entries)
		} else if !strings.Contains(err.Error(), "leader epoch checkpoint") {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}
	// Blank trailing lines and surrounding spaces are tolerated.
	if c, err := decodeEpochCheckpoint([]byte("0\n1\n 3 7 \n\n")); err != nil || !slices.Equal(c.entries, cacheOf(3, 7).entries) {
		t.Fatalf("tolerant decode: %v, %v", c.entries, err)
	}
}
