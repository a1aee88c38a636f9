package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-io/sluice/coordinator/txn"
	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// rawTxn drives transactions with nothing but the generated gRPC stubs and
// protobuf messages — what a client in any language has (docs/
// transactions.md, "Any language"): FindCoordinator, InitProducerId,
// Produce with transactional_id and hand-built RecordBatch messages (crc 0:
// the broker computes it), EndTxn, Fetch. No Sluice client code is used,
// so the tests built on it check the protocol itself.
type rawTxn struct {
	t     *testing.T
	c     *testCluster
	conns map[string]*grpc.ClientConn
}

func newRawTxn(t *testing.T, c *testCluster) *rawTxn {
	r := &rawTxn{t: t, c: c, conns: map[string]*grpc.ClientConn{}}
	t.Cleanup(func() {
		for _, cc := range r.conns {
			cc.Close()
		}
	})
	return r
}

// conn returns a connection to addr.
func (r *rawTxn) conn(addr string) *grpc.ClientConn {
	if cc := r.conns[addr]; cc != nil {
		return cc
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	r.conns[addr] = cc
	return cc
}

// anyAddr is the address of a running node.
func (r *rawTxn) anyAddr() string {
	for _, id := range r.c.ids() {
		if r.c.node(id).Running() {
			return r.c.addrs([]int32{id})[0]
		}
	}
	r.t.Fatal("no node is running")
	return ""
}

func rpcCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// retriable reports whether code may succeed when sent again.
func retriable(code sluicev1.ErrorCode) bool {
	for _, e := range errs.Table() {
		if e.Code == code {
			return e.Retriable
		}
	}
	return false
}

// coordinator finds the coordinator of id (retrying retriable answers and
// unreachable nodes for up to 60 s) and returns its address.
func (r *rawTxn) coordinator(id string) string {
	r.t.Helper()
	var addr string
	r.c.eventually(60*time.Second, "coordinator of "+id, func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewTransactionsClient(r.conn(r.anyAddr())).FindCoordinator(ctx, &sluicev1.FindCoordinatorRequest{
			KeyType: sluicev1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION, Keys: []string{id}})
		if err != nil {
			return err
		}
		if len(resp.Coordinators) != 1 {
			r.t.Fatalf("FindCoordinator answered %d coordinators for one key", len(resp.Coordinators))
		}
		co := resp.Coordinators[0]
		if co.ErrorCode != sluicev1.ErrorCode_NONE {
			if !retriable(co.ErrorCode) {
				r.t.Fatalf("FindCoordinator %s: %v %s", id, co.ErrorCode, co.ErrorMessage)
			}
			return fmt.Errorf("%v: %s", co.ErrorCode, co.ErrorMessage)
		}
		addr = co.Address
		return nil
	})
	return addr
}

// pidEpoch is a producer id and epoch.
type pidEpoch struct {
	ID    int64
	Epoch int32
}

// initPID runs InitProducerId for transactional id until a non-retriable
// answer, re-finding the coordinator on NOT_COORDINATOR, and returns the
// answer and every retriable code seen on the way.
func (r *rawTxn) initPID(id string, timeoutMs int32) (pidEpoch, sluicev1.ErrorCode, []sluicev1.ErrorCode) {
	r.t.Helper()
	var got pidEpoch
	var code sluicev1.ErrorCode
	var seen []sluicev1.ErrorCode
	r.c.eventually(60*time.Second, "InitProducerId "+id, func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewTransactionsClient(r.conn(r.coordinator(id))).InitProducerId(ctx, &sluicev1.InitProducerIdRequest{
			TransactionalId: id, TransactionTimeoutMs: timeoutMs})
		if err != nil {
			return err
		}
		if retriable(resp.ErrorCode) {
			seen = append(seen, resp.ErrorCode)
			return fmt.Errorf("%v: %s", resp.ErrorCode, resp.ErrorMessage)
		}
		got, code = pidEpoch{resp.ProducerId, resp.ProducerEpoch}, resp.ErrorCode
		return nil
	})
	return got, code, seen
}

// endTxn runs EndTxn until a non-retriable answer and returns it.
func (r *rawTxn) endTxn(id string, p pidEpoch, commit bool) (pidEpoch, sluicev1.ErrorCode) {
	r.t.Helper()
	var got pidEpoch
	var code sluicev1.ErrorCode
	r.c.eventually(60*time.Second, "EndTxn "+id, func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewTransactionsClient(r.conn(r.coordinator(id))).EndTxn(ctx, &sluicev1.EndTxnRequest{
			TransactionalId: id, ProducerId: p.ID, ProducerEpoch: p.Epoch, Committed: commit})
		if err != nil {
			return err
		}
		if retriable(resp.ErrorCode) {
			return fmt.Errorf("%v: %s", resp.ErrorCode, resp.ErrorMessage)
		}
		got, code = pidEpoch{resp.ProducerId, resp.ProducerEpoch}, resp.ErrorCode
		return nil
	})
	return got, code
}

// describeTxn returns DescribeTransactions' answer for id from its
// coordinator.
func (r *rawTxn) describeTxn(id string) *sluicev1.TransactionState {
	r.t.Helper()
	var st *sluicev1.TransactionState
	r.c.eventually(30*time.Second, "DescribeTransactions "+id, func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewTransactionsClient(r.conn(r.coordinator(id))).DescribeTransactions(ctx, &sluicev1.DescribeTransactionsRequest{TransactionalIds: []string{id}})
		if err != nil {
			return err
		}
		if len(resp.TransactionStates) != 1 {
			r.t.Fatalf("DescribeTransactions answered %d states for one id", len(resp.TransactionStates))
		}
		s := resp.TransactionStates[0]
		if s.ErrorCode != sluicev1.ErrorCode_NONE {
			return fmt.Errorf("%v: %s", s.ErrorCode, s.ErrorMessage)
		}
		st = s
		return nil
	})
	return st
}

// waitState waits until id's coordinator describes it in state (a
// Complete* is written after the markers, so after what a reader sees).
func (r *rawTxn) waitState(id, state string) *sluicev1.TransactionState {
	r.t.Helper()
	var st *sluicev1.TransactionState
	r.c.eventually(30*time.Second, fmt.Sprintf("%s in state %s", id, state), func() error {
		st = r.describeTxn(id)
		if st.State != state {
			return fmt.Errorf("state %s", st.State)
		}
		return nil
	})
	return st
}

// leaderAddr returns the address of the leader of topic/partition.
func (r *rawTxn) leaderAddr(topic string, partition int32) string {
	r.t.Helper()
	var addr string
	r.c.eventually(30*time.Second, fmt.Sprintf("leader of %s-%d", topic, partition), func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		md, err := sluicev1.NewAdminClient(r.conn(r.anyAddr())).Metadata(ctx, &sluicev1.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return err
		}
		for _, tm := range md.Topics {
			for _, pm := range tm.Partitions {
				if pm.Partition != partition {
					continue
				}
				for _, b := range md.Brokers {
					if b.NodeId == pm.LeaderId {
						addr = b.Address
						return nil
					}
				}
			}
		}
		return fmt.Errorf("no leader in %v", md.Topics)
	})
	return addr
}

// txnBatch is a transactional batch of values for producer p starting at
// sequence seq, as a client builds it: attributes, producer fields and
// records; offsets and crc are the broker's.
func txnBatch(p pidEpoch, seq int32, values ...string) *sluicev1.RecordBatch {
	now := time.Now().UnixMilli()
	b := &sluicev1.RecordBatch{
		Attributes:      batch.AttrTransactional,
		LastOffsetDelta: int32(len(values) - 1),
		BaseTimestamp:   now,
		MaxTimestamp:    now,
		ProducerId:      p.ID,
		ProducerEpoch:   p.Epoch,
		BaseSequence:    seq,
		RecordCount:     uint32(len(values)),
	}
	for i, v := range values {
		b.Records = append(b.Records, &sluicev1.Record{OffsetDelta: int32(i), Value: []byte(v)})
	}
	return b
}

// produce sends one batch to the leader of topic/partition under
// transactional id (retrying retriable answers) and returns its base
// offset, or the non-retriable error code.
func (r *rawTxn) produce(id, topic string, partition int32, b *sluicev1.RecordBatch) (int64, sluicev1.ErrorCode) {
	r.t.Helper()
	base, code := int64(-1), sluicev1.ErrorCode_NONE
	r.c.eventually(60*time.Second, fmt.Sprintf("produce to %s-%d", topic, partition), func() error {
		ctx, cancel := rpcCtx()
		defer cancel()
		resp, err := sluicev1.NewLogClient(r.conn(r.leaderAddr(topic, partition))).Produce(ctx, &sluicev1.ProduceRequest{
			TransactionalId: id, Acks: sluicev1.Acks_ACKS_ALL,
			Topics: []*sluicev1.TopicProduceData{{Name: topic, Partitions: []*sluicev1.PartitionProduceData{{Partition: partition, Batch: b}}}}})
		if err != nil {
			return err
		}
		pr := resp.Topics[0].Partitions[0]
		if retriable(pr.ErrorCode) {
			return fmt.Errorf("%v: %s", pr.ErrorCode, pr.ErrorMessage)
		}
		base, code = pr.BaseOffset, pr.ErrorCode
		return nil
	})
	return base, code
}

// partitionRead is what a consumer reads from a partition.
type partitionRead struct {
	Records       []string // "value@offset"
	Next          int64    // next_fetch_offset after the last fetch
	HighWatermark int64
	LSO           int64
}

// readAll fetches topic/partition from offset 0 under isolation until a
// fetch returns nothing more.
func (r *rawTxn) readAll(topic string, partition int32, iso sluicev1.IsolationLevel) partitionRead {
	r.t.Helper()
	var out partitionRead
	r.c.eventually(30*time.Second, fmt.Sprintf("read %s-%d %v", topic, partition, iso), func() error {
		out = partitionRead{}
		ctx, cancel := rpcCtx()
		defer cancel()
		cl := sluicev1.NewLogClient(r.conn(r.leaderAddr(topic, partition)))
		for range 1000 {
			resp, err := cl.Fetch(ctx, &sluicev1.FetchRequest{IsolationLevel: iso, Topics: []*sluicev1.FetchTopic{{Name: topic,
				Partitions: []*sluicev1.FetchPartition{{Partition: partition, FetchOffset: out.Next, CurrentLeaderEpoch: -1}}}}})
			if err != nil {
				return err
			}
			pd := resp.Topics[0].Partitions[0]
			if pd.ErrorCode != sluicev1.ErrorCode_NONE {
				return fmt.Errorf("%v: %s", pd.ErrorCode, pd.ErrorMessage)
			}
			out.HighWatermark, out.LSO = pd.HighWatermark, pd.LastStableOffset
			for _, b := range pd.Batches {
				if b.Attributes&batch.AttrControl != 0 {
					return fmt.Errorf("a consumer fetch returned a control batch at offset %d", b.BaseOffset)
				}
				for _, rec := range b.Records {
					if off := b.BaseOffset + int64(rec.OffsetDelta); off >= out.Next {
						out.Records = append(out.Records, fmt.Sprintf("%s@%d", rec.Value, off))
					}
				}
			}
			if pd.NextFetchOffset == out.Next {
				return nil
			}
			out.Next = pd.NextFetchOffset
		}
		return errors.New("no end after 1000 fetches")
	})
	return out
}

// logBatch is one batch of a partition's segment file.
type logBatch struct {
	First, Last int64
	Control     bool
	Marker      string // COMMIT or ABORT for a control batch
	CoordEpoch  int32
	Epoch       int16
	Values      []string
}

// segmentBatches reads the first segment of topic/partition on node id
// straight from its data directory (as sluice dump-log does).
func (r *rawTxn) segmentBatches(id int32, topic string, partition int32) ([]logBatch, []storage.AbortedTxn) {
	r.t.Helper()
	dir := filepath.Join(r.c.node(id).DataDir, "logs", fmt.Sprintf("%s-%d", topic, partition))
	data, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []logBatch
	for len(data) > 0 {
		b, size, err := batch.NextFrame(data)
		if err != nil {
			r.t.Fatalf("%s: %v", dir, err)
		}
		data = data[size:]
		h, err := batch.Verify(b)
		if err != nil {
			r.t.Fatalf("%s: %v", dir, err)
		}
		lb := logBatch{First: h.BaseOffset, Last: h.LastOffset(), Control: h.IsControl(), Epoch: int16(h.ProducerEpoch)}
		var pb sluicev1.RecordBatch
		if err := unmarshalBatch(b, &pb); err != nil {
			r.t.Fatalf("%s: %v", dir, err)
		}
		for _, rec := range pb.Records {
			if lb.Control {
				typ, ce, err := batch.ParseMarker(rec.Key, rec.Value)
				if err != nil {
					r.t.Fatalf("%s: marker at %d: %v", dir, h.BaseOffset, err)
				}
				lb.Marker, lb.CoordEpoch = typ.String(), ce
				continue
			}
			lb.Values = append(lb.Values, string(rec.Value))
		}
		out = append(out, lb)
	}
	idx, err := os.ReadFile(filepath.Join(dir, "00000000000000000000.txnindex"))
	if err != nil {
		r.t.Fatal(err)
	}
	aborted, err := storage.DecodeTxnIndex(idx, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return out, aborted
}

// stateEntry is one record of __transaction_state: a state and the
// producer epoch it carries.
type stateEntry struct {
	State string
	Epoch int16
}

// stateHistory reads id's records from its __transaction_state partition
// (a consumer fetch of the internal topic, read_uncommitted) in log order.
func (r *rawTxn) stateHistory(id string) []stateEntry {
	r.t.Helper()
	part := txn.PartitionFor(id, txn.DefaultStatePartitions)
	var out []stateEntry
	r.c.eventually(30*time.Second, "history of "+id, func() error {
		out = nil
		ctx, cancel := rpcCtx()
		defer cancel()
		cl := sluicev1.NewLogClient(r.conn(r.leaderAddr(txn.StateTopic, part)))
		next := int64(0)
		for range 1000 {
			resp, err := cl.Fetch(ctx, &sluicev1.FetchRequest{IsolationLevel: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED,
				Topics: []*sluicev1.FetchTopic{{Name: txn.StateTopic, Partitions: []*sluicev1.FetchPartition{{Partition: part, FetchOffset: next, CurrentLeaderEpoch: -1}}}}})
			if err != nil {
				return err
			}
			pd := resp.Topics[0].Partitions[0]
			if pd.ErrorCode != sluicev1.ErrorCode_NONE {
				return fmt.Errorf("%v: %s", pd.ErrorCode, pd.ErrorMessage)
			}
			for _, b := range pd.Batches {
				for _, rec := range b.Records {
					if b.BaseOffset+int64(rec.OffsetDelta) < next || string(rec.Key) != id {
						continue
					}
					m, err := txn.DecodeRecord(rec.Key, rec.Value)
					if err != nil {
						r.t.Fatalf("record of %s: %v", id, err)
					}
					out = append(out, stateEntry{m.State.String(), m.ProducerEpoch})
				}
			}
			if pd.NextFetchOffset == next {
				return nil
			}
			next = pd.NextFetchOffset
		}
		return errors.New("no end after 1000 fetches")
	})
	return out
}
