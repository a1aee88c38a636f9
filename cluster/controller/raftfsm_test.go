package controller

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// fullLog exercises every record type.
func fullLog() []Record {
	return append(withTopic(),
		CreateTopic{Name: "u", TopicID: "id-u", Configs: map[string]string{"x": "y"},
			Partitions: []PartitionAssignment{{Replicas: []int32{2, 3}}, {Replicas: []int32{3, 1}}}},
		DeleteTopic{Name: "u"},
		CreateTopic{Name: "v", TopicID: "id-v", Partitions: []PartitionAssignment{{Replicas: []int32{3}}}},
		PartitionChange{Topic: "t", Leader: 2, ISR: []int32{2, 3}},
		ProducerIDsBlock{BrokerID: 1, NextBlockStart: 1000},
		ProducerIDsBlock{BrokerID: 2, NextBlockStart: 2000},
		FeatureLevel{Name: FeatureTransactionVersion, Level: 2},
		ConfigChange{Topic: "t", Key: "a", Value: "b"},
		ConfigChange{Key: "c", Value: "d"},
		FenceBroker{BrokerID: 3, BrokerEpoch: 3},
		scram("alice", ScramSHA256, 1),
		scram("alice", ScramSHA512, 2),
		scram("bob", ScramSHA256, 3),
		RemoveUserScramCredential{User: "alice", Mechanism: ScramSHA256},
		CreateAcl{Acl: acl(ResourceTopic, "t", PatternLiteral, "User:alice", OperationRead, PermissionAllow)},
		CreateAcl{Acl: acl(ResourceGroup, "g-", PatternPrefixed, "User:alice", OperationRead, PermissionAllow)},
		CreateAcl{Acl: acl(ResourceCluster, ClusterResourceName, PatternLiteral, "User:*", OperationAlter, PermissionDeny)},
		RemoveAcl{Acl: acl(ResourceTopic, "t", PatternLiteral, "User:alice", OperationRead, PermissionAllow)},
	)
}

// applyLog feeds recs to f as raft log entries at indexes 1, 2, ....
func applyLog(t *testing.T, f *FSM, recs []Record) {
	t.Helper()
	for i, r := range recs {
		data, err := EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := responseError(f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data})); err != nil {
			t.Fatalf("record %d (%T): %v", i, r, err)
		}
	}
}

func TestSnapshotRoundTripEqualsImage(t *testing.T) {
	im := build(t, fullLog()...)
	data, err := EncodeSnapshot(im)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, im) {
		t.Fatalf("restored image differs:\n got %+v\nwant %+v", got, im)
	}
}

type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// The raft.FSM adapter: Snapshot+Persist then Restore on a fresh FSM gives
// an equal image, and Restore replaces whatever the FSM held.
func TestFSMSnapshotRestore(t *testing.T) {
	src := NewFSM()
	applyLog(t, src, fullLog())
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Applies after Snapshot must not leak into the persisted copy.
	data, _ := EncodeRecord(DeleteTopic{Name: "t"})
	src.Apply(&raft.Log{Index: 1000, Type: raft.LogCommand, Data: data})

	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v closed=%v", err, sink.closed)
	}
	snap.Release()

	dst := NewFSM()
	applyLog(t, dst, []Record{reg(9, "")}) // replaced by Restore
	if err := dst.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if want := build(t, fullLog()...); !reflect.DeepEqual(dst.Image(), want) {
		t.Fatalf("restored image differs:\n got %+v\nwant %+v", dst.Image(), want)
	}
}

// A rejected record advances the offset (so WaitForOffset on its index
// returns) and its error reaches the proposer.
func TestFSMRejectedRecordAdvancesOffset(t *testing.T) {
	f := NewFSM()
	data, _ := EncodeRecord(DeleteTopic{Name: "nope"})
	_, err := responseError(f.Apply(&raft.Log{Index: 5, Type: raft.LogCommand, Data: data}))
	if errs.Code(err) != sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION {
		t.Fatalf("err = %v", err)
	}
	_, err = responseError(f.Apply(&raft.Log{Index: 6, Type: raft.LogCommand, Data: []byte("junk")}))
	if errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("err = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.WaitForOffset(ctx, 6); err != nil {
		t.Fatal(err)
	}
	if f.Image().Offset != 6 {
		t.Fatalf("offset = %d", f.Image().Offset)
	}
}

func TestWaitForOffsetHonoursContext(t *testing.T) {
	f := NewFSM()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := f.WaitForOffset(ctx, 1); err != context.DeadlineExceeded {
		t.Fatalf("err = %v", err)
	}
}

func TestSubscriptionDeltasThenSnapshotAfterRestore(t *testing.T) {
	f := NewFSM()
	sub := f.Subscribe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	recs := threeBrokers()
	done := make(chan Update, 1)
	go func() {
		u, _ := sub.Next(ctx) // blocks until the first apply
		done <- u
	}()
	applyLog(t, f, recs)
	u := <-done
	if len(u.Deltas) == 0 || u.Snapshot != nil || u.Deltas[0].Offset != 1 {
		t.Fatalf("first update = %+v", u)
	}
	// Catch up on the rest.
	for sub.Offset() < uint64(len(recs)) {
		if u, err := sub.Next(ctx); err != nil || u.Snapshot != nil {
			t.Fatalf("update %+v err %v", u, err)
		}
	}

	// After a restore, a subscriber behind the snapshot gets the full image.
	data, _ := EncodeSnapshot(build(t, fullLog()...))
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	old := f.Subscribe(3)
	u, err := old.Next(ctx)
	if err != nil || u.Snapshot == nil || u.Offset != uint64(len(fullLog())) {
		t.Fatalf("update after restore = %+v, %v", u, err)
	}
	if !reflect.DeepEqual(u.Snapshot, f.Image()) {
		t.Fatal("snapshot update is not the image")
	}
}
