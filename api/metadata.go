package api

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// Metadata describes the live brokers and the requested topics (all when
// none are named) from this broker's metadata image. Unknown topics answer
// UNKNOWN_TOPIC_OR_PARTITION; topics are never created by Metadata.
//
// A named topic costs only itself: the answer is built from the image's
// entries for the names asked, never from the whole catalogue. Listing
// all topics may be narrowed (topic_prefix, exclude_internal,
// partition_filter), slimmed (exclude_partitions, exclude_configs) and
// paged (page_size, page_token), so that a client of a cluster with tens
// of thousands of partitions asks for what it shows (issue 31).
//
// Authorization (auth.Operations, as Kafka's Metadata): DESCRIBE on each
// topic. A named topic refused answers TOPIC_AUTHORIZATION_FAILED whether
// or not it exists (its existence is not revealed); a listing leaves out
// the topics the caller may not describe, silently (no audit line: not
// seeing a topic is not an attempt to act on it), before it pages them.
// The brokers are always listed.
func (s *Server) Metadata(ctx context.Context, req *sluicev1.MetadataRequest) (*sluicev1.MetadataResponse, error) {
	if err := s.metadataLoaded(); err != nil {
		// A restarted broker's image is empty until its first metadata
		// snapshot: "topic does not exist" would be a lie that clients
		// cache. UNAVAILABLE sends them to another broker or a retry.
		return nil, errs.Status(err, nil)
	}
	if err := checkMetadataRequest(req); err != nil {
		return nil, err
	}
	im := s.cache.Image()
	resp := &sluicev1.MetadataResponse{ClusterId: im.ClusterID, ControllerId: s.cache.ControllerLeader()}
	for _, id := range im.LiveBrokers() {
		b := im.Brokers[id]
		resp.Brokers = append(resp.Brokers, &sluicev1.BrokerMetadata{NodeId: b.ID, Address: b.Address, Rack: b.Rack})
	}
	if len(req.Topics) > 0 {
		for _, name := range req.Topics {
			if !s.authz.Allowed(ctx, auth.OpDescribe, auth.Topic(name)) {
				code, msg := ItemError(ctx, auth.OpDescribe, auth.Topic(name))
				resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: name, ErrorCode: code, ErrorMessage: msg})
				continue
			}
			t := im.Topics[name]
			if t == nil {
				resp.Topics = append(resp.Topics, &sluicev1.TopicMetadata{Name: name, ErrorCode: sluicev1.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION, ErrorMessage: "topic " + strconv.Quote(name) + " does not exist"})
				continue
			}
			tm, _ := topicMetadata(im, t, req)
			resp.Topics = append(resp.Topics, tm)
		}
		return resp, nil
	}
	names := im.TopicNames()
	// Names are sorted: the listing starts at the page token or the
	// prefix, whichever comes later, and the prefix's names are one run.
	used := int32(0)
	for _, name := range names[sort.SearchStrings(names, max(req.PageToken, req.TopicPrefix)):] {
		if !strings.HasPrefix(name, req.TopicPrefix) {
			break
		}
		if req.ExcludeInternal && cluster.IsInternalTopic(name) {
			continue
		}
		if !s.authz.AllowedQuiet(ctx, auth.OpDescribe, auth.Topic(name)) {
			continue
		}
		tm, matched := topicMetadata(im, im.Topics[name], req)
		if matched == 0 && req.PartitionFilter != sluicev1.PartitionFilter_PARTITION_FILTER_UNSPECIFIED {
			continue
		}
		cost := max(int32(len(tm.Partitions)), 1)
		if req.PageSize > 0 && len(resp.Topics) > 0 && used+cost > req.PageSize {
			resp.NextPageToken = name
			break
		}
		used += cost
		resp.Topics = append(resp.Topics, tm)
	}
	return resp, nil
}

// checkMetadataRequest refuses the fields that do not go together:
// listing options with named topics, a negative page size, a filter this
// server does not know.
func checkMetadataRequest(req *sluicev1.MetadataRequest) error {
	if req.PageSize < 0 {
		return invalidRequest("page_size must be >= 0, got %d", req.PageSize)
	}
	if _, ok := sluicev1.PartitionFilter_name[int32(req.PartitionFilter)]; !ok {
		return invalidRequest("unknown partition_filter %d", req.PartitionFilter)
	}
	if len(req.Topics) > 0 {
		switch {
		case req.TopicPrefix != "":
			return invalidRequest("topic_prefix applies to a listing of all topics, not to named topics")
		case req.ExcludeInternal:
			return invalidRequest("exclude_internal applies to a listing of all topics, not to named topics")
		case req.PageSize != 0 || req.PageToken != "":
			return invalidRequest("page_size and page_token apply to a listing of all topics, not to named topics")
		}
	}
	return nil
}

// topicMetadata describes t as req asks (its partitions unless
// exclude_partitions, only those partition_filter selects; its configs
// unless exclude_configs) with its counts over all partitions. matched
// is the number of partitions the filter selects, answered or not.
func topicMetadata(im *controller.Image, t *controller.Topic, req *sluicev1.MetadataRequest) (tm *sluicev1.TopicMetadata, matched int) {
	tm = &sluicev1.TopicMetadata{Name: t.Name, Internal: cluster.IsInternalTopic(t.Name), PartitionCount: int32(len(t.Partitions))}
	if len(t.Partitions) > 0 {
		tm.ReplicationFactor = int32(len(t.Partitions[0].Replicas))
	}
	tm.MinInsyncReplicas = t.MinInsyncReplicas()
	for i, p := range t.Partitions {
		h := im.PartitionHealth(t, int32(i), tm.MinInsyncReplicas)
		countHealth(tm, h)
		if !filterMatches(req.PartitionFilter, h) {
			continue
		}
		matched++
		if req.ExcludePartitions {
			continue
		}
		pm := &sluicev1.PartitionMetadata{Partition: int32(i), LeaderId: p.Leader, LeaderEpoch: p.LeaderEpoch,
			Replicas: slices.Clone(p.Replicas), Isr: slices.Clone(p.ISR),
			AddingReplicas: slices.Clone(p.AddingReplicas), RemovingReplicas: slices.Clone(p.RemovingReplicas)}
		for _, r := range p.Replicas {
			// Fenced brokers, and replicas their broker reported failed
			// on its disk (decision 42).
			if !im.ReplicaLive(t.Name, int32(i), r) {
				pm.OfflineReplicas = append(pm.OfflineReplicas, r)
			}
		}
		if p.Leader == controller.NoLeader {
			pm.ErrorCode, pm.ErrorMessage = partitionError(cluster.NoLeaderError(im, t.Name, int32(i)))
		}
		tm.Partitions = append(tm.Partitions, pm)
	}
	// A topic a filter leaves out of a listing is not answered: spare
	// its configs.
	answered := matched > 0 || req.PartitionFilter == sluicev1.PartitionFilter_PARTITION_FILTER_UNSPECIFIED || len(req.Topics) > 0
	if !req.ExcludeConfigs && answered {
		if tc, err := cluster.ParseTopicConfig(t.Configs, tm.ReplicationFactor); err == nil {
			tm.Configs = tc.Map()
		}
	}
	return tm, matched
}

// countHealth adds a partition in state h to tm's counts.
func countHealth(tm *sluicev1.TopicMetadata, h controller.PartitionHealth) {
	if h.UnderReplicated {
		tm.UnderReplicatedPartitions++
	}
	if h.UnderMinISR {
		tm.UnderMinIsrPartitions++
	}
	if h.AtMinISR {
		tm.AtMinIsrPartitions++
	}
	if h.Unavailable {
		tm.UnavailablePartitions++
	}
}

// filterMatches reports whether a partition in state h passes f.
func filterMatches(f sluicev1.PartitionFilter, h controller.PartitionHealth) bool {
	switch f {
	case sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_REPLICATED:
		return h.UnderReplicated
	case sluicev1.PartitionFilter_PARTITION_FILTER_UNDER_MIN_ISR:
		return h.UnderMinISR
	case sluicev1.PartitionFilter_PARTITION_FILTER_AT_MIN_ISR:
		return h.AtMinISR
	case sluicev1.PartitionFilter_PARTITION_FILTER_UNAVAILABLE:
		return h.Unavailable
	}
	return true
}
