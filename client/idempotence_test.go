package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/wait"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Tests of the idempotent producer against the fake cluster, which applies
// the broker's sequence rules (storage.ProducerState) and can hold, fail,
// lose and reorder requests.

// locked reads a fake's counter under its lock.
func locked(f *fakeBroker, read func() int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return read()
}

func newIdempotentProducer(t *testing.T, f *fakeBroker, opts ...ProducerOption) *Producer {
	t.Helper()
	c, err := New([]string{f.addr}, WithRequestTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := c.NewProducer(append([]ProducerOption{WithBatchBytes(1024), WithLinger(time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if !p.Idempotent() {
		t.Fatal("producer is not idempotent by default")
	}
	return p
}

// acks records callbacks per partition in the order they ran.
type acks struct {
	mu   sync.Mutex
	byP  map[int32][]ackEntry
	errs []error
}

type ackEntry struct {
	value  string
	offset int64
}

func (a *acks) cb(value string) func(RecordMetadata, error) {
	return func(md RecordMetadata, err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		if err != nil {
			a.errs = append(a.errs, err)
			return
		}
		if a.byP == nil {
			a.byP = map[int32][]ackEntry{}
		}
		a.byP[md.Partition] = append(a.byP[md.Partition], ackEntry{value, md.Offset})
	}
}

// send sends n records to each of partitions, values "<prefix>-<p>-<i>",
// in round-robin order, and returns the values sent per partition.
func send(p *Producer, a *acks, prefix string, partitions []int32, n int) map[int32][]string {
	sent := map[int32][]string{}
	for i := 0; i < n; i++ {
		for _, part := range partitions {
			v := fmt.Sprintf("%s-%d-%05d-%s", prefix, part, i, strings.Repeat("x", 40))
			sent[part] = append(sent[part], v)
			p.Send(context.Background(), Record{Topic: "t", Partition: part, Value: []byte(v)}, a.cb(v))
		}
	}
	return sent
}

func flush(t *testing.T, p *Producer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// checkExactlyOnceInOrder checks that partition holds exactly want, in
// order, and that the callbacks ran in order with each record's offset.
func checkExactlyOnceInOrder(t *testing.T, f *fakeBroker, a *acks, partition int32, want []string) {
	t.Helper()
	got := f.records(t, "t", partition)
	if len(got) != len(want) {
		t.Errorf("partition %d holds %d records, want %d (exactly once)", partition, len(got), len(want))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			t.Errorf("partition %d offset %d = %.20q, want %.20q (order)", partition, i, got[i], want[i])
			break
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, err := range a.errs {
		t.Errorf("callback error: %v", err)
	}
	cbs := a.byP[partition]
	if len(cbs) != len(want) {
		t.Errorf("partition %d: %d callbacks, want %d", partition, len(cbs), len(want))
	}
	for i, e := range cbs {
		if e.offset != int64(i) || i < len(want) && e.value != want[i] {
			t.Errorf("partition %d callback %d: value %.20q offset %d, want %.20q at %d", partition, i, e.value, e.offset, want[min(i, len(want)-1)], i)
			break
		}
	}
}

// checkSequences checks the stored batches' producer fields: one producer
// id, and within an epoch each batch continues the previous one's
// sequence; a new epoch starts at 0.
func checkSequences(t *testing.T, hs []batch.Header) (epochs []int32) {
	t.Helper()
	for i, h := range hs {
		if h.ProducerID < 1000 {
			t.Fatalf("batch %d has producer id %d", i, h.ProducerID)
		}
		if i == 0 || h.ProducerEpoch != hs[i-1].ProducerEpoch {
			epochs = append(epochs, h.ProducerEpoch)
			if i > 0 && h.BaseSequence != 0 {
				t.Errorf("batch %d opens epoch %d at sequence %d, want 0", i, h.ProducerEpoch, h.BaseSequence)
			}
			continue
		}
		if want := hs[i-1].LastSequence() + 1; h.BaseSequence != want {
			t.Errorf("batch %d: base sequence %d, want %d", i, h.BaseSequence, want)
		}
	}
	return epochs
}

// The producer calls InitProducerId (retrying COORDINATOR_LOAD_IN_PROGRESS)
// before its first send, and numbers each partition's batches from 0, each
// continuing the last.
func TestIdempotentProducerGetsIDAndNumbersBatches(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	f.initFailures = 2
	p := newIdempotentProducer(t, f)
	var a acks
	sent := send(p, &a, "v", []int32{0, 1}, 500)
	flush(t, p)
	if n := locked(f, func() int { return f.initCalls }); n != 3 {
		t.Errorf("InitProducerId called %d times, want 3 (two retriable failures)", n)
	}
	for _, part := range []int32{0, 1} {
		checkExactlyOnceInOrder(t, f, &a, part, sent[part])
		hs := f.headers("t", part)
		if len(hs) < 10 {
			t.Fatalf("partition %d: only %d batches, the test needs many", part, len(hs))
		}
		if hs[0].ProducerID != 1000 || hs[0].BaseSequence != 0 {
			t.Errorf("first batch: producer %d seq %d, want 1000 and 0", hs[0].ProducerID, hs[0].BaseSequence)
		}
		if epochs := checkSequences(t, hs); len(epochs) != 1 || epochs[0] != 0 {
			t.Errorf("epochs %v, want only 0", epochs)
		}
	}
}

// pipeline warms the producer up (the window opens after the first ack),
// then holds the fake's requests while many batches are sent, until
// in-flight requests fill the window; fault is applied just before the
// held requests are let go together (the fake then serves them in any
// order, as gRPC does).
func pipeline(t *testing.T, f *fakeBroker, p *Producer, a *acks, partitions []int32, fault func()) map[int32][]string {
	t.Helper()
	warm := send(p, a, "w", partitions, 1)
	flush(t, p)
	f.mu.Lock()
	f.hold = make(chan struct{})
	f.mu.Unlock()
	sent := send(p, a, "v", partitions, 400)
	wait.Until(t, 10*time.Second, "5 requests held", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.held == MaxInFlightLimit
	})
	f.mu.Lock()
	if fault != nil {
		fault()
	}
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	flush(t, p)
	for _, part := range partitions {
		sent[part] = append(warm[part], sent[part]...)
	}
	return sent
}

// With idempotence a partition has up to 5 batches in flight, never more,
// and records stay exactly once and in order although the broker serves
// the pipelined requests in any order (a batch that overtakes its
// predecessor is refused OUT_OF_ORDER and retried after it).
func TestIdempotentProducerPipelinesFivePerPartition(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0}, nil)
	if got := locked(f, func() int { return f.maxInflight["t/0"] }); got != MaxInFlightLimit {
		t.Errorf("at most %d requests of the partition in flight, want %d", got, MaxInFlightLimit)
	}
	checkExactlyOnceInOrder(t, f, &a, 0, sent[0])
	checkSequences(t, f.headers("t", 0))
	t.Logf("out-of-order answers %d, duplicates %d", locked(f, func() int { return f.outOfOrder }), locked(f, func() int { return f.duplicates }))
}

// A retriable failure in the middle of a pipeline: the batches behind it
// are refused OUT_OF_ORDER and all are retried in sequence order, with the
// sequences they were first sent with (no epoch bump).
func TestIdempotentRetriesKeepSequencesAndOrder(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0}, func() { f.failing["t/0"] = 2 })
	checkExactlyOnceInOrder(t, f, &a, 0, sent[0])
	if epochs := checkSequences(t, f.headers("t", 0)); len(epochs) != 1 {
		t.Errorf("epochs %v: a retriable failure must not bump the epoch", epochs)
	}
	if st := p.Stats(); st.Retries < 2 || st.EpochBumps != 0 {
		t.Errorf("stats %+v: want the 2 injected failures retried and no epoch bump", st)
	}
	if locked(f, func() int { return f.failing["t/0"] }) != 0 {
		t.Error("injected failures were not consumed")
	}
}

// Lost answers: the broker wrote the batch but the answer (REQUEST_TIMED_OUT
// for one partition, UNAVAILABLE for a whole request) never arrived. The
// retry is a duplicate, answered with the original offset: every record is
// stored once, and its callback has the offset it is stored at.
func TestIdempotentLostResponsesWrittenOnce(t *testing.T) {
	f := startFake(t, map[string]int{"t": 2})
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0, 1}, func() {
		f.lose["t/0"] = 4
		f.lose["t/1"] = 1
		f.dropRequests = 2
	})
	for _, part := range []int32{0, 1} {
		checkExactlyOnceInOrder(t, f, &a, part, sent[part])
		checkSequences(t, f.headers("t", part))
	}
	if n := locked(f, func() int { return f.duplicates }); n < 5 {
		t.Errorf("%d duplicates answered, want at least the 5 lost answers", n)
	}
}

// The leader appends a batch, "dies" before answering, and leadership
// moves to node 2, which shares the producer state (as followers do). The
// batches in flight at node 1 are refused NOT_LEADER_OR_FOLLOWER, the
// producer refreshes its metadata and resends to node 2, which answers the
// written batch as a duplicate.
func TestIdempotentLeaderChangeMidFlight(t *testing.T) {
	f := startFakeCluster(t, map[string]int{"t": 1}, 2)
	f.moveOnLose = true
	p := newIdempotentProducer(t, f)
	var a acks
	sent := pipeline(t, f, p, &a, []int32{0}, func() { f.lose["t/0"] = 1 })
	checkExactlyOnceInOrder(t, f, &a, 0, sent[0])
	checkSequences(t, f.headers("t", 0))
	leader := locked(f, func() int { return int(f.leaders["t/0"]) })
	if calls := locked(f, func() int { return f.produceCalls[2] }); leader != 2 || calls == 0 {
		t.Errorf("leader %d, %d requests to node 2: the leader change did not happen", leader, calls)
	}
	if locked(f, func() int { return f.duplicates }) == 0 {
		t.Error("the new leader answered no duplicate for the batch the old one wrote")
	}
}

// A batch refused with a non-retriable error leaves a gap in the
// sequences: the next batch is refused OUT_OF_ORDER with nothing before it
// unresolved, which cannot resolve. The producer bumps the epoch (KIP-360)
// and the batch is written under the new epoch from sequence 0.
func TestIdempotentUnresolvableGapBumpsEpoch(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	p := newIdempotentProducer(t, f)
	var a acks
	first := send(p, &a, "a", []int32{0}, 10)
	flush(t, p)
	f.mu.Lock()
	f.reject["t/0"] = sluicev1.ErrorCode_INVALID_RECORD
	f.mu.Unlock()
	var failed acks
	send(p, &failed, "b", []int32{0}, 10)
	flush(t, p)
	if len(failed.errs) != 10 || errs.Code(failed.errs[0]) != sluicev1.ErrorCode_INVALID_RECORD {
		t.Fatalf("rejected batch: %d errors (%v), want 10 INVALID_RECORD", len(failed.errs), failed.errs)
	}
	third := send(p, &a, "c", []int32{0}, 10)
	flush(t, p)
	checkExactlyOnceInOrder(t, f, &a, 0, append(first[0], third[0]...))
	if epochs := checkSequences(t, f.headers("t", 0)); len(epochs) != 2 || epochs[1] != 1 {
		t.Errorf("epochs %v, want 0 then 1", epochs)
	}
	if locked(f, func() int { return f.outOfOrder }) == 0 {
		t.Error("the broker never answered OUT_OF_ORDER: the gap was not exercised")
	}
	if st := p.Stats(); st.EpochBumps != 1 || st.ProducerID != 1000 || st.Epoch != 1 || st.SequenceErrors == 0 {
		t.Errorf("after the gap: %+v; want 1 bump to producer 1000 epoch 1 (same id) after a sequence error", st)
	}
}

// InitProducerId is retried while it is retriable, but records fail once
// their delivery timeout passes, with the reason.
func TestInitProducerIDBoundedByDeliveryTimeout(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.initFailures = 1 << 30
	p := newIdempotentProducer(t, f, WithDeliveryTimeout(300*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("x")})
	if errs.Code(err) != sluicev1.ErrorCode_REQUEST_TIMED_OUT || !strings.Contains(err.Error(), "COORDINATOR_LOAD_IN_PROGRESS") {
		t.Fatalf("send without a producer id: %v, want REQUEST_TIMED_OUT naming COORDINATOR_LOAD_IN_PROGRESS", err)
	}
	if len(f.records(t, "t", 0)) != 0 {
		t.Error("records written without a producer id")
	}
}

// A non-retriable InitProducerId error is fatal: waiting and later records
// fail with it.
func TestInitProducerIDFatalError(t *testing.T) {
	f := startFake(t, map[string]int{"t": 1})
	f.initError = sluicev1.ErrorCode_INVALID_REQUEST
	p := newIdempotentProducer(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, Record{Topic: "t", Partition: 0, Value: []byte("x")}); errs.Code(err) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("first send: %v, want INVALID_REQUEST", err)
	}
	var got error
	p.Send(ctx, Record{Topic: "t", Partition: 0, Value: []byte("y")}, func(_ RecordMetadata, err error) { got = err })
	if errs.Code(got) != sluicev1.ErrorCode_INVALID_REQUEST {
		t.Fatalf("later send: %v before Send returned, want INVALID_REQUEST", got)
	}
}

// Kafka's option rules (ref §1, ProducerConfig lines 663-676): idempotence
// is the default and needs acks=all; a non-all acks turns it off unless
// idempotence was asked for explicitly, which is an error; more than 5 in
// flight is an error with idempotence.
func TestIdempotenceOptions(t *testing.T) {
	c, err := New([]string{"127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name       string
		opts       []ProducerOption
		idempotent bool
		errHas     string // "" when valid
	}{
		{"default", nil, true, ""},
		{"explicit acks all", []ProducerOption{WithAcks(AcksAll)}, true, ""},
		{"acks leader turns it off", []ProducerOption{WithAcks(AcksLeader)}, false, ""},
		{"acks none turns it off", []ProducerOption{WithAcks(AcksNone)}, false, ""},
		{"off", []ProducerOption{WithIdempotence(false)}, false, ""},
		{"explicit on with acks leader", []ProducerOption{WithIdempotence(true), WithAcks(AcksLeader)}, false, "acks=all"},
		{"acks none with explicit on", []ProducerOption{WithAcks(AcksNone), WithIdempotence(true)}, false, "WithAcks(AcksNone)"},
		{"6 in flight", []ProducerOption{WithMaxInFlight(6)}, false, "at most 5"},
		{"6 in flight explicit on", []ProducerOption{WithIdempotence(true), WithMaxInFlight(6)}, false, "WithMaxInFlight(6)"},
		{"6 in flight plain", []ProducerOption{WithIdempotence(false), WithMaxInFlight(6)}, false, ""},
		{"10 in flight acks leader", []ProducerOption{WithAcks(AcksLeader), WithMaxInFlight(10)}, false, ""},
		{"5 in flight", []ProducerOption{WithMaxInFlight(5)}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := c.NewProducer(tc.opts...)
			if tc.errHas != "" {
				if err == nil {
					p.Close()
					t.Fatalf("want an error mentioning %q", tc.errHas)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %q does not mention %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.Idempotent() != tc.idempotent {
				t.Errorf("Idempotent() = %v, want %v", p.Idempotent(), tc.idempotent)
			}
		})
	}
}
