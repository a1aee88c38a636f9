package kafka

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// TestEveryKafkaRequestListHasALimit: every list field of every request
// the door serves, at every version kmsg knows, has a bound of its own in
// requestLimits, and requestLimits names no field that does not exist.
func TestEveryKafkaRequestListHasALimit(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range listPaths() {
		seen[p] = true
	}
	for key := range handlers {
		req := kmsg.RequestForKey(key)
		if req == nil || limitPlans[key] == nil {
			t.Errorf("API %d (%s) has no limit plan", key, APIName(key))
		}
	}
	for p := range seen {
		if _, ok := requestLimits[p]; ok {
			continue
		}
		if servedPath(p) {
			t.Errorf("%s has no bound in requestLimits", p)
		}
	}
	for p := range requestLimits {
		if !seen[p] {
			t.Errorf("requestLimits names %s, which no request has", p)
		}
	}
}

// servedPath reports whether a list path is of a request the door serves.
func servedPath(path string) bool {
	for key := range handlers {
		if req := kmsg.RequestForKey(key); req != nil {
			name := fmt.Sprintf("%T", req)[len("*kmsg."):]
			if len(path) > len(name) && path[:len(name)] == name && path[len(name)] == '.' {
				return true
			}
		}
	}
	return false
}

// kafkaProbe is a request over a limit, built with n entries.
type kafkaProbe struct {
	name string
	req  func(n int) kmsg.Request
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "k" + strconv.Itoa(i)
	}
	return out
}

func partitions(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

var kafkaProbes = []kafkaProbe{
	{"FindCoordinator keys", func(n int) kmsg.Request {
		r := kmsg.NewPtrFindCoordinatorRequest()
		r.Version, r.CoordinatorType, r.CoordinatorKeys = 4, 0, keys(n)
		return r
	}},
	{"DescribeGroups groups", func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeGroupsRequest()
		r.Version, r.Groups = 5, keys(n)
		return r
	}},
	{"DeleteGroups groups", func(n int) kmsg.Request {
		r := kmsg.NewPtrDeleteGroupsRequest()
		r.Version, r.Groups = 2, keys(n)
		return r
	}},
	{"DescribeTransactions ids", func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeTransactionsRequest()
		r.TransactionalIDs = keys(n)
		return r
	}},
	{"ConsumerGroupDescribe groups", func(n int) kmsg.Request {
		r := kmsg.NewPtrConsumerGroupDescribeRequest()
		r.Groups = keys(n)
		return r
	}},
	{"OffsetFetch groups", func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetFetchRequest()
		r.Version = 8
		for _, g := range keys(n) {
			r.Groups = append(r.Groups, kmsg.OffsetFetchRequestGroup{Group: g})
		}
		return r
	}},
	{"LeaveGroup members", func(n int) kmsg.Request {
		r := kmsg.NewPtrLeaveGroupRequest()
		r.Version, r.Group = 5, "g"
		for _, m := range keys(n) {
			r.Members = append(r.Members, kmsg.LeaveGroupRequestMember{MemberID: m})
		}
		return r
	}},
	{"Metadata topics", func(n int) kmsg.Request {
		r := kmsg.NewPtrMetadataRequest()
		r.Version = 12
		for _, name := range keys(n) {
			r.Topics = append(r.Topics, kmsg.MetadataRequestTopic{Topic: kmsg.StringPtr(name)})
		}
		return r
	}},
	{"Fetch partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.Version, r.MaxBytes, r.MaxWaitMillis = 12, 1<<20, 0
		tp := kmsg.FetchRequestTopic{Topic: "t"}
		for p := range n {
			tp.Partitions = append(tp.Partitions, kmsg.FetchRequestTopicPartition{Partition: int32(p), PartitionMaxBytes: 1})
		}
		r.Topics = []kmsg.FetchRequestTopic{tp}
		return r
	}},
	{"Fetch topics of one partition", func(n int) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.Version, r.MaxBytes = 12, 1<<20
		for _, name := range keys(n) {
			r.Topics = append(r.Topics, kmsg.FetchRequestTopic{Topic: name,
				Partitions: []kmsg.FetchRequestTopicPartition{{PartitionMaxBytes: 1}}})
		}
		return r
	}},
	{"Produce partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.Version, r.Acks, r.TimeoutMillis = 9, 1, 1000
		tp := kmsg.ProduceRequestTopic{Topic: "t"}
		for range n {
			tp.Partitions = append(tp.Partitions, kmsg.ProduceRequestTopicPartition{})
		}
		r.Topics = []kmsg.ProduceRequestTopic{tp}
		return r
	}},
	{"ListOffsets partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrListOffsetsRequest()
		r.Version = 7
		tp := kmsg.ListOffsetsRequestTopic{Topic: "t"}
		for p := range n {
			tp.Partitions = append(tp.Partitions, kmsg.ListOffsetsRequestTopicPartition{Partition: int32(p), Timestamp: -1})
		}
		r.Topics = []kmsg.ListOffsetsRequestTopic{tp}
		return r
	}},
	{"OffsetCommit partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Version, r.Group, r.Generation = 8, "g", -1
		tp := kmsg.OffsetCommitRequestTopic{Topic: "t"}
		for p := range n {
			tp.Partitions = append(tp.Partitions, kmsg.OffsetCommitRequestTopicPartition{Partition: int32(p)})
		}
		r.Topics = []kmsg.OffsetCommitRequestTopic{tp}
		return r
	}},
	{"AddPartitionsToTxn partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrAddPartitionsToTxnRequest()
		r.Version, r.TransactionalID, r.ProducerID = 3, "x", 1
		r.Topics = []kmsg.AddPartitionsToTxnRequestTopic{{Topic: "t", Partitions: partitions(n)}}
		return r
	}},
	{"OffsetForLeaderEpoch partitions", func(n int) kmsg.Request {
		r := kmsg.NewPtrOffsetForLeaderEpochRequest()
		r.Version, r.ReplicaID = 4, -1
		tp := kmsg.OffsetForLeaderEpochRequestTopic{Topic: "t"}
		for p := range n {
			tp.Partitions = append(tp.Partitions, kmsg.OffsetForLeaderEpochRequestTopicPartition{Partition: int32(p)})
		}
		r.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{tp}
		return r
	}},
	{"DeleteTopics names", func(n int) kmsg.Request {
		r := kmsg.NewPtrDeleteTopicsRequest()
		r.Version, r.TopicNames = 3, keys(n)
		return r
	}},
	{"ConsumerGroupHeartbeat subscription", func(n int) kmsg.Request {
		r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		r.Group, r.MemberEpoch, r.SubscribedTopicNames, r.RebalanceTimeoutMillis = "g", 0, keys(n), 1000
		return r
	}},
	{"DescribeConfigs resources", func(n int) kmsg.Request {
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.Version = 4
		for _, name := range keys(n) {
			r.Resources = append(r.Resources, kmsg.DescribeConfigsRequestResource{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: name})
		}
		return r
	}},
}

// TestOverLimitsCounted: a refusal is counted as over_limits, and the
// bound is per list and over the request: 10,000 partitions in each of
// three topics of one Fetch is over the 20,000 partitions a request may
// name.
func TestOverLimitsCounted(t *testing.T) {
	m := newTestMetrics()
	addr := startBare(t, Config{Metrics: m})
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 12
	for _, name := range []string{"a", "b", "c"} {
		tp := kmsg.FetchRequestTopic{Topic: name}
		for p := range 10_000 {
			tp.Partitions = append(tp.Partitions, kmsg.FetchRequestTopicPartition{Partition: int32(p)})
		}
		fetch.Topics = append(fetch.Topics, tp)
	}
	r := &request{key: fetch.Key(), version: fetch.Version, msg: fetch}
	err := checkLimits(r)
	if err == nil {
		t.Fatal("30,000 partitions in one Fetch passed the limits")
	}
	t.Log(err)
	fetch.Topics = fetch.Topics[:2]
	if err := checkLimits(r); err != nil {
		t.Fatalf("20,000 partitions: %v", err)
	}
	c := dial(t, addr)
	if _, err := c.Write(frame(kafkaProbes[0].req(api.MaxRequestIDs+1), 1)); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c)
	m.waitFor(t, "an over_limits close", func(_, _ map[string]int, closed map[CloseReason]int) error {
		if closed[CloseOverLimits] != 1 {
			return fmt.Errorf("closed %v", closed)
		}
		return nil
	})
	if !slices.Contains(CloseReasons, CloseOverLimits) {
		t.Error("CloseReasons lacks CloseOverLimits")
	}
}

// BenchmarkCheckLimits: the limits check on every request's hot path — a
// Produce of one topic with 6 partitions, a Fetch of 6 partitions.
func BenchmarkCheckLimits(b *testing.B) {
	produce := kmsg.NewPtrProduceRequest()
	produce.Version = 9
	pt := kmsg.ProduceRequestTopic{Topic: "t"}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version = 12
	ft := kmsg.FetchRequestTopic{Topic: "t"}
	for p := range int32(6) {
		pt.Partitions = append(pt.Partitions, kmsg.ProduceRequestTopicPartition{Partition: p})
		ft.Partitions = append(ft.Partitions, kmsg.FetchRequestTopicPartition{Partition: p})
	}
	produce.Topics, fetch.Topics = []kmsg.ProduceRequestTopic{pt}, []kmsg.FetchRequestTopic{ft}
	for _, r := range []*request{{key: produce.Key(), version: 9, msg: produce}, {key: fetch.Key(), version: 12, msg: fetch}} {
		b.Run(kmsg.NameForKey(r.key), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := checkLimits(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
