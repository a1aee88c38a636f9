package storage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

var t0 = time.UnixMilli(1_700_000_000_000)

// testConfig is a small-segment config for tests.
func testConfig() Config {
	c := DefaultConfig()
	c.SegmentBytes = 4096
	c.IndexIntervalBytes = 256
	return c
}

// makeBatch builds a batch of n records with timestamps ts, ts+1, ...
// and values tagged with tag.
func makeBatch(n int, ts int64, tag string) []byte {
	var bl batch.Builder
	bl.Reset(ts)
	for i := 0; i < n; i++ {
		bl.Add(ts+int64(i), []byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("%s-%d-%s", tag, i, "payload-payload")), nil)
	}
	return bl.Finish(batch.PlainProducer, 0)
}

func openLog(t testing.TB, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg, t0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// stored is what a test expects at an offset range: a copy of the batch
// as written (base offset and epoch patched).
type stored struct {
	base, last int64
	bytes      []byte
}

// fillEpoch is the leader epoch fill appends under.
const fillEpoch = 7

// appendEpoch is a leader epoch Append accepts next on l: its latest epoch
// (which a flipped byte in a batch's leader epoch, not covered by the CRC,
// may have raised), at least fillEpoch.
func appendEpoch(l *Log) int32 { return max(l.LatestEpoch(), fillEpoch) }

// fill appends n batches of 1..maxRecs records and returns copies of them.
func fill(t testing.TB, l *Log, n, maxRecs int, ts int64) []stored {
	t.Helper()
	var out []stored
	for i := 0; i < n; i++ {
		b := makeBatch(1+i%maxRecs, ts+int64(i)*10, fmt.Sprintf("b%d", i))
		res, err := l.Append(b, fillEpoch, t0)
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, stored{res.BaseOffset, res.LastOffset, append([]byte(nil), b...)})
	}
	return out
}

// readAll reads the whole log from StartOffset, checking every batch
// passes Verify and offsets are contiguous.
func readAll(t testing.TB, l *Log) [][]byte {
	t.Helper()
	var out [][]byte
	off := l.StartOffset()
	for off < l.EndOffset() {
		res, err := l.Read(off, 1<<20, 1<<62)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(res.Batches) == 0 {
			t.Fatalf("Read(%d) returned nothing before end %d", off, l.EndOffset())
		}
		for _, b := range res.Batches {
			h, err := batch.Verify(b)
			if err != nil {
				t.Fatalf("served batch at %d fails Verify: %v", off, err)
			}
			if h.BaseOffset != off {
				t.Fatalf("batch base %d, want contiguous %d", h.BaseOffset, off)
			}
			off = h.NextOffset()
			out = append(out, b)
		}
		if res.NextOffset != off {
			t.Fatalf("NextOffset %d, want %d", res.NextOffset, off)
		}
	}
	return out
}

func wantCode(t testing.TB, err error, code sluicev1.ErrorCode) {
	t.Helper()
	if got := errs.Code(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
}

// crash simulates a crash before any flush: the clean-shutdown marker and
// the recovery point are gone, so Open must rescan everything.
func crash(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{cleanShutdownFile, recoveryPointFile} {
		if err := os.Remove(filepath.Join(l.dir, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

func sameBatch(a, b []byte) bool { return bytes.Equal(a, b) }
