package api_test

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// probeEntries is the number of entries of the amplifying requests (the
// issue's were up to 30 million; -probe-entries=10000000 repeats them).
var probeEntries = flag.Int("probe-entries", 1_000_000, "entries of the amplifying requests of TestAmplifyingRequestsRefused")

// maxProbeAlloc bounds what the process (node and client) may allocate
// while one amplifying request is sent and refused: the request's bytes
// (a few MB) are sent, received and checked, and nothing per entry is
// built.
const maxProbeAlloc = 64 << 20

// probe is a request of many entries on one of a node's listeners.
type probe struct {
	name     string
	internal bool // sent to the internal listener
	method   string
	stream   bool // the method is a client stream
	// inBand: the stream answers the refusal (a ProduceStreamResponse
	// with error_code) and goes on, rather than ending with it.
	inBand bool
	req    func(n int) proto.Message
}

// times returns n elements made by f.
func times[T any](n int, f func(i int) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func same[T any](v T) func(int) T { return func(int) T { return v } }

func ints(n int) []int32 { return times(n, func(i int) int32 { return int32(i) }) }

// probes are the amplifying request shapes, one (at least) per RPC with a
// repeated field, on both listeners: the four first.
var probes = []probe{
	{name: "Fetch of empty partition entries", method: sluicev1.Log_Fetch_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: "t", Partitions: times(n, same(&sluicev1.FetchPartition{}))}}}
	}},
	{name: "Produce of one partition repeated", method: sluicev1.Log_Produce_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.ProduceRequestView{Topics: []*internalv1.TopicProduceDataView{{Name: "t", Partitions: times(n, same(&internalv1.PartitionProduceDataView{}))}}}
	}},
	{name: "Metadata of empty topic names", method: sluicev1.Admin_Metadata_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.MetadataRequest{Topics: make([]string, n)}
	}},
	{name: "Produce of empty topic entries", method: sluicev1.Log_Produce_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.ProduceRequestView{Topics: times(n, same(&internalv1.TopicProduceDataView{}))}
	}},
	{name: "ProduceStream of empty topic entries", method: sluicev1.Log_ProduceStream_FullMethodName, stream: true, inBand: true, req: func(n int) proto.Message {
		return &internalv1.ProduceStreamRequestView{CorrelationId: 1, Request: &internalv1.ProduceRequestView{Topics: times(n, same(&internalv1.TopicProduceDataView{}))}}
	}},
	{name: "Fetch of a long topic name", method: sluicev1.Log_Fetch_FullMethodName, req: func(n int) proto.Message {
		// Each partition's error named the topic: 1,000 x 64 KiB.
		return &sluicev1.FetchRequest{Topics: []*sluicev1.FetchTopic{{Name: strings.Repeat("n", 64<<10),
			Partitions: times(1000, func(i int) *sluicev1.FetchPartition { return &sluicev1.FetchPartition{Partition: int32(i)} })}}}
	}},
	{name: "ListOffsets of distinct partitions", method: sluicev1.Log_ListOffsets_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ListOffsetsRequest{Topics: []*sluicev1.ListOffsetsTopic{{Name: "t",
			Partitions: times(n, func(i int) *sluicev1.ListOffsetsPartition { return &sluicev1.ListOffsetsPartition{Partition: int32(i)} })}}}
	}},
	{name: "CreateTopics of invalid names", method: sluicev1.Admin_CreateTopics_FullMethodName, req: createTopics},
	{name: "DeleteTopics of unknown names", method: sluicev1.Admin_DeleteTopics_FullMethodName, req: deleteTopics},
	{name: "AlterPartitionReassignments of many replicas", method: sluicev1.Admin_AlterPartitionReassignments_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.AlterPartitionReassignmentsRequest{Topic: "nope", Replicas: ints(n)}
	}},
	{name: "ListPartitionReassignments of one topic repeated", method: sluicev1.Admin_ListPartitionReassignments_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ListPartitionReassignmentsRequest{Topics: times(n, same("t"))}
	}},
	{name: "ElectLeaders of many partitions", method: sluicev1.Admin_ElectLeaders_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{{Name: "nope", Partitions: ints(n)}}}
	}},
	{name: "DescribeProducers of many partitions", method: sluicev1.Admin_DescribeProducers_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.DescribeProducersRequest{Topics: []*sluicev1.DescribeProducersTopic{{Name: "t", Partitions: ints(n)}}}
	}},
	{name: "AlterUserScramCredentials of empty deletions", method: sluicev1.Admin_AlterUserScramCredentials_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.AlterUserScramCredentialsRequest{Deletions: times(n, same(&sluicev1.ScramCredentialDeletion{}))}
	}},
	{name: "AlterUserScramCredentials of empty upsertions", method: sluicev1.Admin_AlterUserScramCredentials_FullMethodName, req: scramUpsertions},
	{name: "DescribeUserScramCredentials of many users", method: sluicev1.Admin_DescribeUserScramCredentials_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.DescribeUserScramCredentialsRequest{Users: times(n, func(i int) string { return fmt.Sprint("user-", i) })}
	}},
	{name: "CreateAcls of empty creations", method: sluicev1.Admin_CreateAcls_FullMethodName, req: aclCreations},
	{name: "DeleteAcls of empty filters", method: sluicev1.Admin_DeleteAcls_FullMethodName, req: aclFilters},
	{name: "FindCoordinator of many keys", method: sluicev1.Transactions_FindCoordinator_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.FindCoordinatorRequest{Keys: times(n, func(i int) string { return fmt.Sprint("key-", i) })}
	}},
	{name: "DescribeTransactions of many ids", method: sluicev1.Transactions_DescribeTransactions_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.DescribeTransactionsRequest{TransactionalIds: times(n, func(i int) string { return fmt.Sprint("tx-", i) })}
	}},
	{name: "ListTransactions of many state filters", method: sluicev1.Transactions_ListTransactions_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ListTransactionsRequest{StateFilters: times(n, func(i int) string { return fmt.Sprint("state-", i) })}
	}},
	{name: "ConsumerGroupHeartbeat of many subscriptions", method: sluicev1.Groups_ConsumerGroupHeartbeat_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g", SubscribedTopicNames: times(n, func(i int) string { return fmt.Sprint("topic-", i) })}
	}},
	{name: "ConsumerGroupHeartbeat of many owned partitions", method: sluicev1.Groups_ConsumerGroupHeartbeat_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ConsumerGroupHeartbeatRequest{GroupId: "g", TopicPartitions: []*sluicev1.GroupTopicPartitions{{Topic: "t", Partitions: ints(n)}}}
	}},
	{name: "OffsetCommit of many partitions", method: sluicev1.Groups_OffsetCommit_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.OffsetCommitRequest{GroupId: "g", Topics: []*sluicev1.OffsetCommitTopic{{Name: "t", Partitions: commitPartitions(n)}}}
	}},
	{name: "OffsetFetch of many partitions", method: sluicev1.Groups_OffsetFetch_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.OffsetFetchRequest{GroupId: "g", Topics: []*sluicev1.OffsetFetchTopic{{Name: "t", Partitions: ints(n)}}}
	}},
	{name: "TxnOffsetCommit of many partitions", method: sluicev1.Groups_TxnOffsetCommit_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.TxnOffsetCommitRequest{TransactionalId: "tx", GroupId: "g", Topics: []*sluicev1.OffsetCommitTopic{{Name: "t", Partitions: commitPartitions(n)}}}
	}},
	{name: "ListGroups of many state filters", method: sluicev1.Groups_ListGroups_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ListGroupsRequest{StatesFilter: times(n, func(i int) string { return fmt.Sprint("state-", i) })}
	}},
	{name: "DescribeGroups of many ids", method: sluicev1.Groups_DescribeGroups_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.DescribeGroupsRequest{GroupIds: times(n, func(i int) string { return fmt.Sprint("group-", i) })}
	}},
	{name: "DeleteGroups of many ids", method: sluicev1.Groups_DeleteGroups_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.DeleteGroupsRequest{GroupIds: times(n, func(i int) string { return fmt.Sprint("group-", i) })}
	}},
	// The internal listener: a confused node is a client too. Broker 99
	// is no broker of the cluster.
	{name: "BrokerHeartbeat of many offline replicas", internal: true, method: internalv1.Controller_BrokerHeartbeat_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.BrokerHeartbeatRequest{BrokerId: 99, OfflineReplicas: times(n, same(&sluicev1.OfflineReplica{}))}
	}},
	{name: "AlterPartition of a long ISR", internal: true, method: internalv1.Controller_AlterPartition_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.AlterPartitionRequest{BrokerId: 99, Topic: "t", NewIsr: ints(n)}
	}},
	{name: "controller CreateTopics of invalid names", internal: true, method: internalv1.Controller_CreateTopics_FullMethodName, req: createTopics},
	{name: "controller DeleteTopics of unknown names", internal: true, method: internalv1.Controller_DeleteTopics_FullMethodName, req: deleteTopics},
	{name: "controller ElectLeaders of many partitions", internal: true, method: internalv1.Controller_ElectLeaders_FullMethodName, req: func(n int) proto.Message {
		return &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{{Name: "nope", Partitions: ints(n)}}}
	}},
	{name: "controller AlterUserScramCredentials of empty upsertions", internal: true, method: internalv1.Controller_AlterUserScramCredentials_FullMethodName, req: scramUpsertions},
	{name: "controller CreateAcls of empty creations", internal: true, method: internalv1.Controller_CreateAcls_FullMethodName, req: aclCreations},
	{name: "controller DeleteAcls of empty filters", internal: true, method: internalv1.Controller_DeleteAcls_FullMethodName, req: aclFilters},
	{name: "ReplicaFetch of many partitions", internal: true, method: internalv1.Replica_ReplicaFetch_FullMethodName, req: replicaFetch},
	{name: "ReplicaFetchStream of many partitions", internal: true, method: internalv1.Replica_ReplicaFetchStream_FullMethodName, stream: true, req: replicaFetch},
	{name: "OffsetForLeaderEpoch of many partitions", internal: true, method: internalv1.Replica_OffsetForLeaderEpoch_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.OffsetForLeaderEpochRequest{ReplicaId: 99, Partitions: times(n, func(i int) *internalv1.EpochQuery { return &internalv1.EpochQuery{Topic: "t", Partition: int32(i)} })}
	}},
	// A goroutine per transaction, or per partition, before: a fifth of
	// the entries is enough.
	{name: "AddPartitionsToTxn of many transactions", internal: true, method: internalv1.TxnBroker_AddPartitionsToTxn_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.AddPartitionsToTxnRequest{BrokerId: 99, Transactions: times(n/5, func(i int) *internalv1.AddPartitionsToTxnTransaction {
			return &internalv1.AddPartitionsToTxnTransaction{TransactionalId: fmt.Sprint("tx-", i)}
		})}
	}},
	{name: "WriteTxnMarkers of many partitions", internal: true, method: internalv1.TxnBroker_WriteTxnMarkers_FullMethodName, req: func(n int) proto.Message {
		return &internalv1.WriteTxnMarkersRequest{BrokerId: 99, Markers: []*internalv1.TxnMarker{{ProducerId: 1, ProducerEpoch: 1,
			Partitions: times(n/5, func(i int) *internalv1.TxnPartition {
				return &internalv1.TxnPartition{Topic: "nope", Partition: int32(i)}
			})}}}
	}},
}

func createTopics(n int) proto.Message {
	return &sluicev1.CreateTopicsRequest{Topics: times(n, func(i int) *sluicev1.CreatableTopic {
		return &sluicev1.CreatableTopic{Name: fmt.Sprint("x ", i)} // the space makes it invalid
	})}
}

func deleteTopics(n int) proto.Message {
	return &sluicev1.DeleteTopicsRequest{Names: times(n, func(i int) string { return fmt.Sprint("nope-", i) })}
}

// scramUpsertions are n upsertions (empty: each would be answered for
// its user).
func scramUpsertions(n int) proto.Message {
	return &sluicev1.AlterUserScramCredentialsRequest{Upsertions: times(n, same(&sluicev1.ScramCredentialUpsertion{}))}
}

// aclCreations are n empty creations (each would be refused for itself).
func aclCreations(n int) proto.Message {
	return &sluicev1.CreateAclsRequest{Creations: times(n, same(&sluicev1.AclBinding{}))}
}

// aclFilters are n empty filters (each would match every ACL).
func aclFilters(n int) proto.Message {
	return &sluicev1.DeleteAclsRequest{Filters: times(n, same(&sluicev1.AclBindingFilter{}))}
}

func commitPartitions(n int) []*sluicev1.OffsetCommitPartition {
	return times(n, func(i int) *sluicev1.OffsetCommitPartition {
		return &sluicev1.OffsetCommitPartition{Partition: int32(i)}
	})
}

func replicaFetch(n int) proto.Message {
	return &internalv1.ReplicaFetchRequest{ReplicaId: 99, Partitions: times(n, func(i int) *internalv1.ReplicaFetchPartition {
		return &internalv1.ReplicaFetchPartition{Topic: "t", Partition: int32(i)}
	})}
}

// send sends the encoded request b as p's method on conn and returns the
// call's error (a stream's: its end).
func (p probe) send(t *testing.T, conn *grpc.ClientConn, b []byte) error {
	raw := grpc.ForceCodecV2(rawBytes{})
	if !p.stream {
		var out []byte
		return conn.Invoke(ctx(t), p.method, &b, &out, raw)
	}
	st, err := conn.NewStream(ctx(t), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, p.method, raw)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&b); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		var out []byte
		if err := st.RecvMsg(&out); err != nil {
			return err
		}
		if p.inBand {
			// The answer to the one request sent: its refusal as the
			// status Produce would have answered with.
			var r sluicev1.ProduceStreamResponse
			if err := proto.Unmarshal(out, &r); err != nil {
				return err
			}
			if err := st.RecvMsg(&out); err != io.EOF {
				return fmt.Errorf("the stream goes on after the refusal with %v, want its end", err)
			}
			if r.CorrelationId != 1 || r.Response != nil {
				return fmt.Errorf("answer %v, want request 1 refused", &r)
			}
			return errs.NewStatus(errs.GRPCCode(r.ErrorCode), r.ErrorCode, r.ErrorMessage, nil)
		}
	}
}

// Issue 29, request amplification: a request of a million entries (empty
// ones, one repeated, distinct ones beyond what can be valid) to any RPC
// with a repeated field, on either listener, is refused as a whole
// (InvalidArgument, INVALID_REQUEST) before it is decoded, and the node
// allocates no more than the request's bytes for it — where before it
// built a decoded copy, per-entry state and an answer per entry (8 GB for
// the Fetch). The node then serves a producer and a consumer as
// before.
func TestAmplifyingRequestsRefused(t *testing.T) {
	tn := startNode(t, t.TempDir())
	tn.createTopic("t", 1, nil)
	canary := func(round string) {
		t.Helper()
		if r := tn.produceRaw("t", 0, makeBatch(round, 1, 1000)); r.ErrorCode != sluicev1.ErrorCode_NONE {
			t.Fatalf("canary produce %s the probes: %v %s", round, r.ErrorCode, r.ErrorMessage)
		}
		if got := values(tn.fetch("t", 0, 0, 0), 0); !strings.Contains(strings.Join(got, ","), round+"-0") {
			t.Fatalf("canary fetch %s the probes: %v", round, got)
		}
	}
	canary("before")
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			b, err := proto.Marshal(p.req(*probeEntries))
			if err != nil {
				t.Fatal(err)
			}
			conn := tn.conn
			if p.internal {
				conn = tn.internal
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err = p.send(t, conn, b)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %.1f MB request, %.1f MiB allocated, heap %+.1f MiB: %v", p.method, float64(len(b))/1e6,
				float64(allocated)/(1<<20), (float64(after.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), cut(err))
			if status.Code(err) != codes.InvalidArgument || errorReason(err) != "INVALID_REQUEST" {
				t.Errorf("answered %v (%s), want InvalidArgument INVALID_REQUEST", cut(err), errorReason(err))
			}
			if allocated > maxProbeAlloc {
				t.Errorf("the request cost %.0f MiB of allocations, want at most %d MiB", float64(allocated)/(1<<20), maxProbeAlloc>>20)
			}
		})
	}
	canary("after")
}

// cut is err's text, cut short for a log line.
func cut(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
