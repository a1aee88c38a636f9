package api

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-io/sluice/cluster/controller"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// listAll pages through Metadata with req until next_page_token is
// empty, checking every answer against page_size, and returns the topics
// in order and the number of answers.
func listAll(t *testing.T, s *Server, req *sluicev1.MetadataRequest) (topics []*sluicev1.TopicMetadata, pages int) {
	t.Helper()
	for {
		resp, err := s.Metadata(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		n := int32(0)
		for _, tm := range resp.Topics {
			n += max(int32(len(tm.Partitions)), 1)
		}
		if req.PageSize > 0 && len(resp.Topics) > 1 && n > req.PageSize {
			t.Fatalf("page %d holds %d partitions in %d topics, page_size %d", pages, n, len(resp.Topics), req.PageSize)
		}
		topics = append(topics, resp.Topics...)
		if resp.NextPageToken == "" {
			return topics, pages
		}
		if pages > 1000 {
			t.Fatal("the listing does not end")
		}
		req.PageToken = resp.NextPageToken
	}
}

func names(topics []*sluicev1.TopicMetadata) string {
	var out []string
	for _, tm := range topics {
		out = append(out, tm.Name)
	}
	return strings.Join(out, ",")
}

// A listing paged by page_size answers every topic once, in name order,
// each page within page_size partitions (or one topic larger than it),
// and the same topics as the unpaged listing.
func TestMetadataPagesCoverEveryTopicOnce(t *testing.T) {
	im := scaleImage(25, 4)
	big := &controller.Topic{Name: "topic-0007x", ID: "big", Configs: map[string]string{}}
	for range 30 {
		big.Partitions = append(big.Partitions, &controller.PartitionState{Replicas: []int32{1}, ISR: []int32{1}, Leader: 1})
	}
	im.Topics[big.Name] = big
	s := scaleServer(t, im)
	whole, pages := listAll(t, s, &sluicev1.MetadataRequest{})
	if len(whole) != 26 || pages != 1 {
		t.Fatalf("unpaged: %d topics in %d answers, want 26 in 1", len(whole), pages)
	}
	for _, size := range []int32{1, 4, 9, 10, 100} {
		got, pages := listAll(t, s, &sluicev1.MetadataRequest{PageSize: size})
		if names(got) != names(whole) {
			t.Errorf("page_size %d: %s, want %s", size, names(got), names(whole))
		}
		// 25 topics of 4 and one of 30 partitions: 130 partitions, one
		// topic a page up to page_size 7.
		if size < 8 && pages != 26 || size >= 8 && size < 100 && pages < 130/int(size) || size == 100 && pages != 2 {
			t.Errorf("page_size %d: %d pages", size, pages)
		}
	}
	got, _ := listAll(t, s, &sluicev1.MetadataRequest{PageSize: 3, ExcludePartitions: true, ExcludeConfigs: true})
	if names(got) != names(whole) {
		t.Errorf("exclude_partitions: %s", names(got))
	}
	for _, tm := range got {
		if len(tm.Partitions) != 0 || tm.Configs != nil || tm.PartitionCount == 0 || tm.ReplicationFactor != 3 && tm.Name != big.Name {
			t.Fatalf("exclude_partitions, exclude_configs: %v", tm)
		}
	}
}

// topic_prefix and exclude_internal narrow a listing; the counts of a
// topic cover all its partitions.
func TestMetadataListingFilters(t *testing.T) {
	im := scaleImage(12, 2)
	im.Topics["__consumer_offsets"] = &controller.Topic{Name: "__consumer_offsets", ID: "co", Partitions: []*controller.PartitionState{{Replicas: []int32{1}, ISR: []int32{1}, Leader: 1}}}
	s := scaleServer(t, im)
	got, _ := listAll(t, s, &sluicev1.MetadataRequest{TopicPrefix: "topic-001"})
	if names(got) != "topic-0010,topic-0011" {
		t.Errorf("topic_prefix topic-001: %s", names(got))
	}
	got, _ = listAll(t, s, &sluicev1.MetadataRequest{TopicPrefix: "topic-00", PageSize: 2, PageToken: "topic-0010"})
	if names(got) != "topic-0010,topic-0011" {
		t.Errorf("topic_prefix with a page token: %s", names(got))
	}
	all, _ := listAll(t, s, &sluicev1.MetadataRequest{})
	ext, _ := listAll(t, s, &sluicev1.MetadataRequest{ExcludeInternal: true})
	if len(all) != 13 || all[0].Name != "__consumer_offsets" || !all[0].Internal || len(ext) != 12 || ext[0].Name != "topic-0000" {
		t.Errorf("exclude_internal: all %s, without internal %s", names(all), names(ext))
	}
}

// Each partition_filter answers the partitions in its state, and leaves
// out of a listing the topics with none; a named topic is answered with
// those it has, possibly none. Broker 3 is fenced: topic-0000 partition
// 0 (replicas 1,2,3) lost it from its ISR; topic-0001 partition 1 lost
// its leader 3 and is offline; min.insync.replicas is 2.
func TestMetadataPartitionFilters(t *testing.T) {
	im := scaleImage(3, 2)
	im.Brokers[3].Fenced = true
	p := im.Topics["topic-0000"].Partitions[0]
	p.ISR = []int32{1, 2}
	p = im.Topics["topic-0001"].Partitions[1]
	p.ISR, p.Leader = []int32{3}, controller.NoLeader
	s := scaleServer(t, im)
	for _, tc := range []struct {
		filter sluicev1.PartitionFilter
		want   string // topic-partition,...
	}{
		{sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_REPLICATED, "topic-0000-0,topic-0001-1"},
		{sluicev1.PartitionFilter_PARTITION_FILTER_AT_MIN_ISR, "topic-0000-0"},
		{sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_MIN_ISR, "topic-0001-1"},
		{sluicev1.PartitionFilter_PARTITION_FILTER_UNAVAILABLE, "topic-0001-1,topic-0002-0"},
	} {
		got, _ := listAll(t, s, &sluicev1.MetadataRequest{PartitionFilter: tc.filter, PageSize: 1})
		var tps []string
		for _, tm := range got {
			for _, pm := range tm.Partitions {
				tps = append(tps, fmt.Sprintf("%s-%d", tm.Name, pm.Partition))
			}
		}
		if strings.Join(tps, ",") != tc.want {
			t.Errorf("%v: %v, want %s", tc.filter, tps, tc.want)
		}
	}
	// topic-0002 partition 0 is led by 3 (fenced, not yet re-elected in
	// this image): unavailable, though its ISR is whole.
	resp, err := s.Metadata(context.Background(), &sluicev1.MetadataRequest{Topics: []string{"topic-0002", "topic-0000"},
		PartitionFilter: sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_MIN_ISR})
	if err != nil {
		t.Fatal(err)
	}
	if names(resp.Topics) != "topic-0002,topic-0000" || len(resp.Topics[0].Partitions)+len(resp.Topics[1].Partitions) != 0 {
		t.Errorf("named topics with no partition under min ISR: %v", resp.Topics)
	}
	c := resp.Topics[1]
	if c.PartitionCount != 2 || c.MinInsyncReplicas != 2 || c.UnderReplicatedPartitions != 1 || c.AtMinIsrPartitions != 1 || c.UnderMinIsrPartitions != 0 || c.UnavailablePartitions != 0 {
		t.Errorf("topic-0000 counts: %v", c)
	}
}

// Listing options with named topics, a negative page size and an
// unknown filter are INVALID_REQUEST, saying which field.
func TestMetadataRefusesBadRequests(t *testing.T) {
	s := scaleServer(t, scaleImage(1, 1))
	for _, tc := range []struct {
		req  *sluicev1.MetadataRequest
		want string
	}{
		{&sluicev1.MetadataRequest{PageSize: -1}, "page_size must be >= 0"},
		{&sluicev1.MetadataRequest{PartitionFilter: 99}, "unknown partition_filter 99"},
		{&sluicev1.MetadataRequest{Topics: []string{"a"}, TopicPrefix: "a"}, "topic_prefix applies to a listing"},
		{&sluicev1.MetadataRequest{Topics: []string{"a"}, ExcludeInternal: true}, "exclude_internal applies"},
		{&sluicev1.MetadataRequest{Topics: []string{"a"}, PageSize: 5}, "page_size and page_token apply"},
	} {
		_, err := s.Metadata(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want InvalidArgument %q", tc.req, err, tc.want)
		}
	}
}

// DescribeCluster stays a summary: per broker its leaders, replicas,
// replicas out of sync and offline replicas (all counted, at most
// offline_replicas_limit listed, 100 by default); for the cluster the
// topics, partitions and partitions under and at min ISR.
func TestDescribeClusterIsASummary(t *testing.T) {
	im := scaleImage(100, 5) // 500 partitions, replicas 1,2,3 rotated
	failDisk(im, 1)
	s := scaleServer(t, im)
	for _, tc := range []struct {
		limit int32
		want  int
	}{{0, 100}, {7, 7}, {-1, 500}} {
		resp, err := s.DescribeCluster(context.Background(), &sluicev1.DescribeClusterRequest{OfflineReplicasLimit: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		b := resp.Brokers[0]
		if b.NodeId != 1 || len(b.OfflineReplicas) != tc.want || b.OfflineReplicaCount != 500 || b.Replicas != 500 || b.OutOfSyncReplicas != 500 || b.LeaderPartitions != 0 {
			t.Errorf("limit %d: broker 1 %d listed, count %d, replicas %d, out of sync %d, leaders %d", tc.limit,
				len(b.OfflineReplicas), b.OfflineReplicaCount, b.Replicas, b.OutOfSyncReplicas, b.LeaderPartitions)
		}
		if !slices.IsSortedFunc(b.OfflineReplicas, func(x, y *sluicev1.OfflineReplica) int {
			return strings.Compare(fmt.Sprintf("%s/%05d", x.Topic, x.Partition), fmt.Sprintf("%s/%05d", y.Topic, y.Partition))
		}) {
			t.Errorf("limit %d: offline replicas out of order", tc.limit)
		}
		if resp.Topics != 100 || resp.Partitions != 500 || resp.UnderReplicatedPartitions != 500 || resp.AtMinIsrPartitions != 500 || resp.UnderMinIsrPartitions != 0 {
			t.Errorf("limit %d: cluster counts %d topics, %d partitions, %d under-replicated, %d at min ISR, %d under", tc.limit,
				resp.Topics, resp.Partitions, resp.UnderReplicatedPartitions, resp.AtMinIsrPartitions, resp.UnderMinIsrPartitions)
		}
		if o := resp.Brokers[1]; o.Replicas != 500 || o.OutOfSyncReplicas != 0 || o.LeaderPartitions+resp.Brokers[2].LeaderPartitions != 500 {
			t.Errorf("brokers 2 and 3: %v %v", o, resp.Brokers[2])
		}
	}
}
