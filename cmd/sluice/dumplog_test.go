package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/coordinator/group"
	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	"github.com/sluice-io/sluice/storage"
)

// dump-log prints one kafka-dump-log style line per batch, one line per
// record with --records (a compressed batch's too, its codec named as
// kafka-dump-log names it), and reports a torn tail instead of failing.
func TestDumpLogReportsBatchesAndTornTail(t *testing.T) {
	var seg []byte
	var bld batch.Builder
	for i := 0; i < 2; i++ {
		bld.Reset(1000)
		for j := 0; j < 10; j++ {
			bld.Add(1000+int64(j), []byte("k"), []byte("value"), nil)
		}
		b := bld.Finish(batch.PlainProducer, 0)
		if i == 1 {
			// Stored compressed (decision 67): printed and decoded.
			var err error
			if b, err = batch.SetCodec(b, nil, kafkarecords.Zstd); err != nil {
				t.Fatal(err)
			}
		}
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
		!strings.HasSuffix(lines[1], "isvalid: true") || !strings.Contains(lines[1], " compresscodec: none crc: ") {
		t.Errorf("first batch line = %q", lines[1])
	}
	if !strings.HasPrefix(lines[2], "| offset: 0 CreateTime: 1000 keySize: 1 valueSize: 5 key: k payload: value") {
		t.Errorf("first record line = %q", lines[2])
	}
	if !strings.Contains(out.String(), "baseOffset: 10 lastOffset: 19") || !strings.Contains(out.String(), " compresscodec: zstd crc: ") {
		t.Errorf("second batch missing, or not zstd:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "| offset: 19 CreateTime: 1009 keySize: 1 valueSize: 5 key: k payload: value") {
		t.Errorf("the zstd batch's records are not printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "torn tail at position: "+strconv.Itoa(whole)) {
		t.Errorf("torn tail not reported at %d:\n%s", whole, out.String())
	}
}

// dump-log shows what a transaction left in a segment: transactional data
// batches with their producer id and epoch, control batches with their
// marker type and coordinator epoch, and the .txnindex beside the .log
// with one line per aborted transaction. The files are written by
// storage.Log as a leader's appends would write them.
func TestDumpLogShowsTransactions(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(1_700_000_000_000)
	l, err := storage.Open(dir, storage.DefaultConfig(), now)
	if err != nil {
		t.Fatal(err)
	}
	txn := func(pid int64, vals ...string) []byte {
		var bl batch.Builder
		bl.Reset(1000)
		for _, v := range vals {
			bl.Add(1000, nil, []byte(v), nil)
		}
		return bl.Finish(batch.Producer{ID: pid, Epoch: 0, BaseSequence: 0}, batch.AttrTransactional)
	}
	steps := []struct {
		b       []byte
		control bool
	}{
		{txn(7, "a", "b"), false}, // offsets 0-1
		{txn(8, "c"), false},      // 2
		{batch.MarkerBatch(batch.Producer{ID: 8, Epoch: 1}, batch.ControlCommit, 5, 1001), true}, // 3
		{batch.MarkerBatch(batch.Producer{ID: 7, Epoch: 1}, batch.ControlAbort, 6, 1002), true},  // 4
	}
	for i, s := range steps {
		if s.control {
			_, err = l.AppendControl(s.b, 0, now)
		} else {
			_, err = l.Append(s.b, 0, now)
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "00000000000000000000.log")
	idxPath := filepath.Join(dir, "00000000000000000000.txnindex")

	out, stderr, err := runCmd(t, "dump-log", logPath, "--records")
	if err != nil {
		t.Fatalf("dump-log: %v (%s)\n%s", err, stderr, out)
	}
	for _, want := range []string{
		"baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false ",
		"baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 0 lastSequence: 0 producerId: 8 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: false ",
		"baseOffset: 3 lastOffset: 3 count: 1 baseSequence: -1 lastSequence: -1 producerId: 8 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: true isControl: true ",
		"isvalid: true endTxnMarker: COMMIT coordinatorEpoch: 5\n",
		"| offset: 3 CreateTime: 1001 endTxnMarker: COMMIT coordinatorEpoch: 5\n",
		"baseOffset: 4 lastOffset: 4 count: 1 baseSequence: -1 lastSequence: -1 producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 0 isTransactional: true isControl: true ",
		"isvalid: true endTxnMarker: ABORT coordinatorEpoch: 6\n",
		"Dumping " + idxPath + "\nabortedTxn: producerId: 7 firstOffset: 0 lastOffset: 4 lastStableOffset: 5 position: 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	// A torn .txnindex: the entries before the tear are printed, the error
	// names the file and the position, and the file is left as it was.
	idx, err := os.ReadFile(idxPath)
	if err != nil {
		t.Fatal(err)
	}
	torn := append(idx, 1, 2, 3, 4, 5)
	if err := os.WriteFile(idxPath, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, "dump-log", idxPath)
	if err == nil || !strings.Contains(err.Error(), idxPath) || !strings.Contains(err.Error(), "position 32: torn entry") {
		t.Errorf("torn .txnindex: err = %v", err)
	}
	if !strings.Contains(out, "abortedTxn: producerId: 7 firstOffset: 0 lastOffset: 4 lastStableOffset: 5") {
		t.Errorf("torn .txnindex: entry before the tear not printed:\n%s", out)
	}
	if after, _ := os.ReadFile(idxPath); !bytes.Equal(after, torn) {
		t.Errorf("dump-log changed %s: %x, was %x", idxPath, after, torn)
	}
	// Dumping the .log reports the index beside it the same way.
	if _, _, err := runCmd(t, "dump-log", logPath); err == nil || !strings.Contains(err.Error(), idxPath) {
		t.Errorf("torn .txnindex beside the .log: err = %v", err)
	}
}

// --transaction-log-decoder decodes __transaction_state records (state,
// producer, partitions, times), tombstones, and says which do not decode.
func TestDumpLogDecodesTheTransactionLog(t *testing.T) {
	var seg []byte
	var bld batch.Builder
	bld.Reset(1000)
	for _, m := range []txn.Metadata{
		{TransactionalID: "tx", ProducerID: 7, PrevProducerID: 7, NextProducerID: -1, ProducerEpoch: 2, LastProducerEpoch: -1, TimeoutMs: 60000,
			State: txn.Ongoing, Partitions: []txn.TopicPartition{{Topic: "b", Partition: 1}, {Topic: "a", Partition: 0}}, StartTimeMs: 1000, UpdateTimeMs: 1001},
		{TransactionalID: "tx", State: txn.Dead},
	} {
		k, v, err := txn.EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		bld.Add(1000, k, v, nil)
	}
	bld.Add(1000, []byte("tx"), []byte("{not json"), nil)
	seg = batch.AppendFrame(seg, bld.Finish(batch.PlainProducer, 0))
	path := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(path, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"dump-log", path, "--transaction-log-decoder"}, nil, &out, &errb); err != nil {
		t.Fatalf("dump-log: %v (%s)", err, errb.String())
	}
	for _, want := range []string{
		"| offset: 0 CreateTime: 1000 key: transaction_metadata::transactionalId=tx payload: state=Ongoing producerId=7 producerEpoch=2 lastProducerEpoch=-1 previousProducerId=7 nextProducerId=-1 timeoutMs=60000 partitions=[a-0,b-1] txnStartTimestamp=1000 txnLastUpdateTimestamp=1001\n",
		"| offset: 1 CreateTime: 1000 key: transaction_metadata::transactionalId=tx payload: <DELETE>\n",
		"| offset: 2 CreateTime: 1000 key: tx payload: {not json decodeError: corrupt transaction record",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// --offsets-decoder decodes __consumer_offsets records (committed
// offsets, group epochs, tombstones) and says which do not decode.
func TestDumpLogDecodesTheOffsetsLog(t *testing.T) {
	var bld batch.Builder
	bld.Reset(1000)
	bld.Add(1000, group.OffsetKey("g", "in", 3), group.OffsetValue(group.Offset{Offset: 42, LeaderEpoch: 1, Metadata: "m", CommitTimeMs: 999}), nil)
	bld.Add(1000, group.GroupKey("g"), group.GroupValue(group.GroupRecord{Epoch: 7, TimeMs: 998}), nil)
	bld.Add(1000, group.OffsetKey("g", "in", 3), nil, nil)
	bld.Add(1000, []byte{0, 9}, []byte("x"), nil)
	seg := batch.AppendFrame(nil, bld.Finish(batch.PlainProducer, 0))
	path := filepath.Join(t.TempDir(), "00000000000000000000.log")
	if err := os.WriteFile(path, seg, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"dump-log", path, "--offsets-decoder"}, nil, &out, &errb); err != nil {
		t.Fatalf("dump-log: %v (%s)", err, errb.String())
	}
	for _, want := range []string{
		`| offset: 0 CreateTime: 1000 key: offset_commit::group=g,partition=in-3 payload: offset=42 leaderEpoch=1 metadata="m" commitTimestamp=999` + "\n",
		"| offset: 1 CreateTime: 1000 key: group_metadata::group=g payload: epoch=7 timestamp=998\n",
		"| offset: 2 CreateTime: 1000 key: offset_commit::group=g,partition=in-3 payload: <DELETE>\n",
		`| offset: 3 CreateTime: 1000 key: \x00\t payload: x decodeError: corrupt __consumer_offsets record: unknown key type 9`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), []string{"dump-log", path, "--offsets-decoder", "--transaction-log-decoder"}, nil, &out, &errb); err == nil {
		t.Fatal("both decoders were accepted")
	}
}
