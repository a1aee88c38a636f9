package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/proto/batch"
)

// dump-log prints one kafka-dump-log style line per batch, one line per
// record with --records, and reports a torn tail instead of failing.
func TestDumpLogReportsBatchesAndTornTail(t *testing.T) {
	var seg []byte
	var bld batch.Builder
	for i := 0; i < 2; i++ {
		bld.Reset(1000)
		for j := 0; j < 10; j++ {
			bld.Add(1000+int64(j), []byte("k"), []byte("value"), nil)
		}
		b := bld.Finish(batch.PlainProducer, 0)
		batch.SetBaseOffset(b, int64(10*i))
		seg = batch.AppendFrame(seg, b)
	}
	whole := len(seg)
	bld.Reset(1)
	bld.Add(1, nil, []byte("torn"), nil)
	seg = append(seg, batch.AppendFrame(nil, bld.Finish(batch.PlainProducer, 0))[:20]...)
	path := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(path, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"dump-log", path, "--records"}, nil, &out, &errb); err != nil {
		t.Fatalf("dump-log: %v (%s)", err, errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[1], "baseOffset: 0 lastOffset: 9 count: 10 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false position: 0 CreateTime: 1009 ") ||
		!strings.HasSuffix(lines[1], "isvalid: true") {
		t.Errorf("first batch line = %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 5 key: k payload: value") {
		t.Errorf("first record line = %q", lines[2])
	}
	if !strings.Contains(out.String(), "baseOffset: 10 lastOffset: 19") {
		t.Errorf("second batch missing:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "torn tail at position: "+strconv.Itoa(whole)) {
		t.Errorf("torn tail not reported at %d:\n%s", whole, out.String())
	}
}
