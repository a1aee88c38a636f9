package api

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sluice-io/sluice/proto/batch"
	"github.com/sluice-io/sluice/proto/errs"
	internalv1 "github.com/sluice-io/sluice/proto/internalv1"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// serverInput is the message a method's request is decoded as on the
// server: the views for the requests decoded in place.
func serverInput(md protoreflect.MessageDescriptor) protoreflect.MessageDescriptor {
	switch md.FullName() {
	case "sluice.v1.ProduceRequest":
		return (*internalv1.ProduceRequestView)(nil).ProtoReflect().Descriptor()
	case "sluice.v1.ProduceStreamRequest":
		return (*internalv1.ProduceStreamRequestView)(nil).ProtoReflect().Descriptor()
	}
	return md
}

// Every repeated field of every request of both listeners' services has
// its bound in requestLimits (a new one falls back on defaultLimit, which
// knows nothing of duplicates), and every entry of requestLimits names a
// field of such a request (a misspelt name would bound nothing).
func TestEveryRequestFieldHasALimit(t *testing.T) {
	reached := map[protoreflect.FullName]bool{}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		fds := md.Fields()
		for i := range fds.Len() {
			fd := fds.Get(i)
			reached[fd.FullName()] = true
			if (fd.IsList() || fd.IsMap()) && requestLimits[fd.FullName()].Max <= 0 {
				t.Errorf("repeated request field %s has no limit in requestLimits", fd.FullName())
			}
			if m := fd.Message(); m != nil && !fd.IsMap() {
				walk(m)
			}
		}
	}
	methods := 0
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if p := fd.Package(); p != "sluice.v1" && p != "sluice.internal.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			ms := fd.Services().Get(i).Methods()
			for j := range ms.Len() {
				methods++
				walk(serverInput(ms.Get(j).Input()))
			}
		}
		return true
	})
	if methods < 40 {
		t.Fatalf("found %d methods: the services' files are not all linked in", methods)
	}
	for name := range requestLimits {
		if !reached[name] {
			t.Errorf("requestLimits names %s, which is no field of a request", name)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	fetch := func(topics ...*sluicev1.FetchTopic) proto.Message { return &sluicev1.FetchRequest{Topics: topics} }
	parts := func(ps ...int32) []*sluicev1.FetchPartition {
		out := make([]*sluicev1.FetchPartition, len(ps))
		for i, p := range ps {
			out[i] = &sluicev1.FetchPartition{Partition: p}
		}
		return out
	}
	n := func(count int) []int32 {
		out := make([]int32, count)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	names := func(count int, name func(i int) string) []string {
		out := make([]string, count)
		for i := range out {
			out[i] = name(i)
		}
		return out
	}
	distinct := func(i int) string {
		return "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
	}
	cases := []struct {
		name string
		req  proto.Message
		want string // "" for accepted, else a part of the refusal
	}{
		{"fetch ok", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(0, 1, 2)}, &sluicev1.FetchTopic{Name: "b", Partitions: parts(0)}), ""},
		{"fetch topic twice", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(0)}, &sluicev1.FetchTopic{Name: "a", Partitions: parts(1)}), `FetchRequest.topics[1] repeats name "a"`},
		{"fetch partition twice", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(0, 1, 0)}), `FetchRequest.topics[0].partitions[2] repeats partition 0`},
		{"empty partition entries are partition 0", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: []*sluicev1.FetchPartition{{}, {}}}), `repeats partition 0`},
		{"fetch the most partitions of a topic", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(n(MaxPartitionsPerTopic)...)}), ""},
		{"fetch too many partitions of a topic", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(n(MaxPartitionsPerTopic + 1)...)}), "FetchRequest.topics[0].partitions has more than 10000 entries (at most 10000 partitions per topic)"},
		{"fetch too many partitions in all", fetch(&sluicev1.FetchTopic{Name: "a", Partitions: parts(n(MaxPartitionsPerTopic)...)},
			&sluicev1.FetchTopic{Name: "b", Partitions: parts(n(MaxPartitionsPerTopic)...)}, &sluicev1.FetchTopic{Name: "c", Partitions: parts(0)}),
			"FetchRequest has more than 20000 FetchTopic.partitions entries in all (at most 20000 partitions per request)"},
		{"fetch topic name too long", fetch(&sluicev1.FetchTopic{Name: strings.Repeat("n", MaxTopicNameLength+1), Partitions: parts(0)}), "FetchRequest.topics[0].name is 250 bytes long (at most 249)"},
		{"metadata names", &sluicev1.MetadataRequest{Topics: []string{"a", "b"}}, ""},
		{"metadata name twice", &sluicev1.MetadataRequest{Topics: []string{"a", "b", "a"}}, `MetadataRequest.topics[2] repeats "a"`},
		{"metadata too many names", &sluicev1.MetadataRequest{Topics: names(MaxRequestTopics+1, distinct)}, "MetadataRequest.topics has more than 20000 entries"},
		{"offset fetch packed partition twice", &sluicev1.OffsetFetchRequest{Topics: []*sluicev1.OffsetFetchTopic{{Name: "a", Partitions: []int32{3, 4, 3}}}},
			"OffsetFetchRequest.topics[0].partitions[2] repeats 3"},
		{"negative partitions compare as the decoder has them", &sluicev1.ElectLeadersRequest{Topics: []*sluicev1.TopicPartitions{{Name: "a", Partitions: []int32{-1, -1}}}}, "repeats -1"},
		{"replica fetch pairs", &internalv1.ReplicaFetchRequest{Partitions: []*internalv1.ReplicaFetchPartition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}, {Topic: "b", Partition: 0}}}, ""},
		{"replica fetch pair twice", &internalv1.ReplicaFetchRequest{Partitions: []*internalv1.ReplicaFetchPartition{{Topic: "a", Partition: 1}, {Topic: "b", Partition: 0}, {Topic: "a", Partition: 1}}},
			`ReplicaFetchRequest.partitions[2] repeats topic "a", partition 1`},
		{"a transaction batch may repeat a partition", &internalv1.AddPartitionsToTxnRequest{Transactions: []*internalv1.AddPartitionsToTxnTransaction{{TransactionalId: "x",
			Partitions: []*internalv1.TxnPartition{{Topic: "a"}, {Topic: "a"}}}}}, ""},
		{"a marker names each partition once", &internalv1.WriteTxnMarkersRequest{Markers: []*internalv1.TxnMarker{{Partitions: []*internalv1.TxnPartition{{Topic: "a"}, {Topic: "a"}}}}},
			`repeats topic "a", partition 0`},
		{"a long id is its owner's to refuse", &sluicev1.DescribeGroupsRequest{GroupIds: []string{strings.Repeat("g", 1<<20)}}, ""},
		{"broker address too long", &internalv1.RegisterBrokerRequest{Address: strings.Repeat("a", MaxAddressLength+1)}, "RegisterBrokerRequest.address is 513 bytes long (at most 512)"},
		{"configs", &sluicev1.CreateTopicsRequest{Topics: []*sluicev1.CreatableTopic{{Name: "a", Configs: map[string]string{"retention.ms": "1"}}}}, ""},
		{"strings in all", &sluicev1.DescribeTransactionsRequest{TransactionalIds: names(MaxRequestStringBytes/(32<<10)+1, func(i int) string {
			return distinct(i) + strings.Repeat("i", 32<<10)
		})}, "strings are more than 16777216 bytes in all"},
		{"unknown fields are skipped", &sluicev1.DescribeClusterRequest{}, ""},
	}
	for _, c := range cases {
		b, err := proto.Marshal(c.req)
		if err != nil {
			t.Fatal(err)
		}
		err = checkRequest(serverInput(c.req.ProtoReflect().Descriptor()), b)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want a refusal with %q", c.name, err, c.want)
		case c.want != "" && requestErrorReason(err) != "INVALID_REQUEST":
			t.Errorf("%s: refusal %v has reason %q, want INVALID_REQUEST", c.name, err, requestErrorReason(err))
		}
	}
}

// The check sees a request as the decoder will: a non-minimal varint is
// the same partition, the occurrences of a singular message field are
// merged, and bytes that do not decode are left to the decoder.
func TestCheckRequestDecodesAsTheDecoder(t *testing.T) {
	view := (*internalv1.ProduceRequestView)(nil).ProtoReflect().Descriptor()
	topic := func(name string, partitions ...[]byte) []byte {
		var t []byte
		t = protowire.AppendTag(t, 1, protowire.BytesType)
		t = protowire.AppendString(t, name)
		for _, p := range partitions {
			t = protowire.AppendTag(t, 2, protowire.BytesType)
			t = protowire.AppendBytes(t, p)
		}
		var r []byte
		r = protowire.AppendTag(r, 4, protowire.BytesType)
		return protowire.AppendBytes(r, t)
	}
	zero := []byte{0x08, 0x00}                 // partition 0
	zeroLong := []byte{0x08, 0x80, 0x80, 0x00} // partition 0, non-minimal
	if err := checkRequest(view, topic("t", zero, zeroLong)); err == nil || !strings.Contains(err.Error(), "repeats partition 0") {
		t.Errorf("non-minimal varint: %v", err)
	}
	// Two occurrences of ProduceStreamRequest.request, each naming t.
	stream := (*internalv1.ProduceStreamRequestView)(nil).ProtoReflect().Descriptor()
	var b []byte
	for range 2 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, topic("t", zero))
	}
	if err := checkRequest(stream, b); err == nil || !strings.Contains(err.Error(), `ProduceStreamRequest.request.topics[1] repeats name "t"`) {
		t.Errorf("merged occurrences: %v", err)
	}
	// A truncated request: the decoder's to refuse.
	if err := checkRequest(view, topic("t", zero)[:5]); err != nil {
		t.Errorf("truncated request: %v, want it left to the decoder", err)
	}
	// A field with another wire type than its own is an unknown field.
	odd := protowire.AppendTag(nil, 4, protowire.VarintType)
	odd = protowire.AppendVarint(odd, 7)
	if err := checkRequest(view, append(odd, topic("t", zero)...)); err != nil {
		t.Errorf("unknown field: %v", err)
	}
}

// The check of a request allocates nothing per entry once its scanner is
// pooled: the replica fetches of followers go through it all the time.
func TestCheckRequestAllocations(t *testing.T) {
	req := &internalv1.ReplicaFetchRequest{}
	for i := range 1000 {
		req.Partitions = append(req.Partitions, &internalv1.ReplicaFetchPartition{Topic: "topic-" + string(rune('a'+i%20)), Partition: int32(i), FetchOffset: int64(i) << 20})
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	md := req.ProtoReflect().Descriptor()
	if err := checkRequest(md, b); err != nil {
		t.Fatal(err)
	}
	// A few, not one per entry (more than none: under -race the pool
	// drops some of what it is given).
	if a := testing.AllocsPerRun(50, func() { _ = checkRequest(md, b) }); a > 20 {
		t.Errorf("checking a 1000-partition replica fetch allocates %.0f times, want a few", a)
	}
}

func requestErrorReason(err error) string {
	e, _ := errs.FromStatus(err)
	return errs.Code(e).String()
}

// A fetch answer fits in what gRPC sends: with as many partition entries
// as a request can have, each of the most bytes an entry takes besides
// its batches, the batches' budget with their framing fits in
// MaxMessageSize, and still holds the largest batch a topic can have
// (the first partition with data answers one whole batch whatever the
// budget).
func TestFetchAnswerFitsInAMessage(t *testing.T) {
	overhead := MaxRequestTopics*(16+MaxTopicNameLength) + MaxRequestPartitions*answerPartitionOverhead
	budget := batchBudget(overhead)
	framed := budget + budget/batch.HeaderSize*6
	if framed+overhead > MaxMessageSize {
		t.Errorf("an answer of %d bytes of batches (%d framed) and %d of entries exceeds %d", budget, framed, overhead, MaxMessageSize)
	}
	if budget < storage.MaxMessageBytesLimit {
		t.Errorf("the budget of the largest request, %d bytes, is below the largest batch, %d", budget, storage.MaxMessageBytesLimit)
	}
	if b := batchBudget(0); b < DefaultFetchMaxBytes {
		t.Errorf("the budget of a small request, %d bytes, is below the default max bytes %d", b, DefaultFetchMaxBytes)
	}
	long := strings.Repeat("é", maxAnswerErrorMessage)
	if got := cutMessage(long); len(got) > maxAnswerErrorMessage || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Errorf("cutMessage: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// forEachConcurrently runs every call, never more than
// maxRequestConcurrency at once.
func TestForEachConcurrentlyBoundsGoroutines(t *testing.T) {
	var running, peak, calls atomic.Int64
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		forEachConcurrently(10*maxRequestConcurrency, func(int) {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-release
			calls.Add(1)
			running.Add(-1)
		})
		close(done)
	}()
	for peak.Load() < maxRequestConcurrency {
		runtime.Gosched()
	}
	close(release)
	<-done
	if p, c := peak.Load(), calls.Load(); p != maxRequestConcurrency || c != 10*maxRequestConcurrency {
		t.Errorf("peak %d goroutines, %d calls; want %d, %d", p, c, maxRequestConcurrency, 10*maxRequestConcurrency)
	}
}

// BenchmarkCheckReplicaFetch is the check's cost on the replication path:
// a follower's fetch of 1,000 partitions.
func BenchmarkCheckReplicaFetch(b *testing.B) {
	req := &internalv1.ReplicaFetchRequest{}
	for i := range 1000 {
		req.Partitions = append(req.Partitions, &internalv1.ReplicaFetchPartition{Topic: "topic-" + string(rune('a'+i%20)), Partition: int32(i), FetchOffset: int64(i) << 20})
	}
	enc, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	md := req.ProtoReflect().Descriptor()
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkRequest(md, enc); err != nil {
			b.Fatal(err)
		}
	}
}
