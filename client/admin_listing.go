package client

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/proto/topic"
)

// MetadataPages lists topics as req asks, one Metadata answer a page: it
// sends req, then req with each answer's next_page_token as page_token,
// until an answer has none or the loop stops. Each page is asked under
// Metadata's retry policy and may come from another broker; a topic
// created or deleted between pages may be missed or seen. It yields an
// error (and ends) when a request fails or a broker answers the
// page_token it was sent. req is not modified. Unlike Metadata it does
// not refresh the client's cache: a filtered or slimmed answer is not a
// topic's whole metadata. A broker from before paging answers everything
// in one page.
func (c *Client) MetadataPages(ctx context.Context, req *sluicev1.MetadataRequest) iter.Seq2[*sluicev1.MetadataResponse, error] {
	return func(yield func(*sluicev1.MetadataResponse, error) bool) {
		req := proto.CloneOf(req)
		for {
			var resp *sluicev1.MetadataResponse
			err := c.invokeAny(ctx, func(ctx context.Context, cc *grpc.ClientConn) error {
				r, err := sluicev1.NewAdminClient(cc).Metadata(ctx, req)
				resp = r
				return err
			})
			if err != nil {
				yield(nil, fmt.Errorf("metadata: %w", err))
				return
			}
			if resp.NextPageToken != "" && resp.NextPageToken == req.PageToken {
				yield(nil, fmt.Errorf("metadata: the broker answered page token %q again", resp.NextPageToken))
				return
			}
			if !yield(resp, nil) || resp.NextPageToken == "" {
				return
			}
			req.PageToken = resp.NextPageToken
		}
	}
}

// DescribeClusterOption adjusts a DescribeCluster request.
type DescribeClusterOption func(*sluicev1.DescribeClusterRequest)

// OfflineReplicasLimit lists at most n offline replicas per broker
// (BrokerStatus.offline_replica_count still counts them all); n < 0 lists
// every one, 0 the broker's default (100), as without the option.
func OfflineReplicasLimit(n int32) DescribeClusterOption {
	return func(r *sluicev1.DescribeClusterRequest) { r.OfflineReplicasLimit = n }
}

// maxWatermarkBatch is the most partitions WatermarksOf puts in one
// ListOffsets request: well below the brokers' limit of 20,000 partitions
// per request (api.MaxRequestPartitions).
const maxWatermarkBatch = 5000

// Watermark is a partition's high watermark and last stable offset as
// its leader answered, or Err when they are unknown.
type Watermark struct {
	HighWatermark, LastStableOffset int64
	Err                             error
}

// WatermarksOf asks the leaders of the partitions in topics (as a
// Metadata answer lists them, with brokers' addresses) for their high
// watermarks and last stable offsets: one ListOffsets per leader and
// isolation level, the leaders in parallel, each tried once like
// Watermarks. It is for tools that show the offsets of many partitions
// beside their metadata. Every partition of topics has an entry; one
// without a leader, on a broker not in brokers, or whose leader did not
// answer within ctx has Err set.
func (c *Client) WatermarksOf(ctx context.Context, brokers []*sluicev1.BrokerMetadata, topics []*sluicev1.TopicMetadata) map[topic.Partition]Watermark {
	addrs := map[int32]string{}
	for _, b := range brokers {
		addrs[b.NodeId] = b.Address
	}
	out := map[topic.Partition]Watermark{}
	byLeader := map[int32][]topic.Partition{}
	for _, t := range topics {
		for _, p := range t.Partitions {
			tp := topic.Partition{Topic: t.Name, Partition: p.Partition}
			switch {
			case p.LeaderId < 0 || p.ErrorCode != sluicev1.ErrorCode_NONE:
				out[tp] = Watermark{Err: errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "no leader")}
			case addrs[p.LeaderId] == "":
				out[tp] = Watermark{Err: errs.New(sluicev1.ErrorCode_LEADER_NOT_AVAILABLE, "leader %d is not a live broker", p.LeaderId)}
			default:
				byLeader[p.LeaderId] = append(byLeader[p.LeaderId], tp)
			}
		}
	}
	var mu sync.Mutex // guards out while the leaders answer
	var wg sync.WaitGroup
	for leader, all := range byLeader {
		wg.Go(func() {
			for tps := range slices.Chunk(all, maxWatermarkBatch) {
				got := c.leaderWatermarks(ctx, addrs[leader], tps)
				mu.Lock()
				maps.Copy(out, got)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// leaderWatermarks asks the broker at addr for the last stable offsets,
// then the high watermarks, of tps (so that lso <= hw, as Watermarks).
func (c *Client) leaderWatermarks(ctx context.Context, addr string, tps []topic.Partition) map[topic.Partition]Watermark {
	out := make(map[topic.Partition]Watermark, len(tps))
	fail := func(err error) map[topic.Partition]Watermark {
		for _, tp := range tps {
			out[tp] = Watermark{Err: err}
		}
		return out
	}
	cc, err := c.conn(addr)
	if err != nil {
		return fail(err)
	}
	req := &sluicev1.ListOffsetsRequest{}
	at := map[string]*sluicev1.ListOffsetsTopic{}
	for _, tp := range tps {
		t := at[tp.Topic]
		if t == nil {
			t = &sluicev1.ListOffsetsTopic{Name: tp.Topic}
			at[tp.Topic] = t
			req.Topics = append(req.Topics, t)
		}
		t.Partitions = append(t.Partitions, &sluicev1.ListOffsetsPartition{Partition: tp.Partition, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST})
	}
	offsets := func(iso sluicev1.IsolationLevel) (map[topic.Partition]int64, map[topic.Partition]error, error) {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout)
		defer cancel()
		req.IsolationLevel = iso
		resp, err := sluicev1.NewLogClient(cc).ListOffsets(rctx, req)
		if err != nil {
			return nil, nil, rpcError(err)
		}
		offs, perr := map[topic.Partition]int64{}, map[topic.Partition]error{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				tp := topic.Partition{Topic: t.Name, Partition: p.Partition}
				if err := codeError(p.ErrorCode, p.ErrorMessage); err != nil {
					perr[tp] = err
				} else {
					offs[tp] = p.Offset
				}
			}
		}
		return offs, perr, nil
	}
	lso, lsoErr, err := offsets(sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
	if err != nil {
		return fail(err)
	}
	hw, hwErr, err := offsets(sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED)
	if err != nil {
		return fail(err)
	}
	for _, tp := range tps {
		l, lok := lso[tp]
		h, hok := hw[tp]
		switch {
		case lsoErr[tp] != nil:
			out[tp] = Watermark{Err: lsoErr[tp]}
		case hwErr[tp] != nil:
			out[tp] = Watermark{Err: hwErr[tp]}
		case !lok || !hok:
			out[tp] = Watermark{Err: errs.New(sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR, "list offsets: no result for %s", tp)}
		default:
			out[tp] = Watermark{HighWatermark: h, LastStableOffset: l}
		}
	}
	return out
}
