package kafka

import (
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-io/sluice/api"
)

// Request entry limits (docs/operations.md "Request sizes", the Kafka
// listener's paragraph): the same bounds as the gRPC listeners'
// (api/limits.go), on every list of every request this door serves. A
// request over one closes the connection once it is parsed, before it is
// authorized, looked up or acted on — Kafka's answer to a request it will
// not serve (InvalidRequestException), and nothing else can be answered
// without answering each entry, which is the cost the bound prevents.
// Kafka bounds only the frame (socket.request.max.bytes); without these,
// one FindCoordinator of a few megabytes made the node authorize and
// look up a million keys and answer them all.
//
// The counts are far above what a client sends (a consumer fetches at
// most the partitions one broker leads, a classic group's leader assigns
// each member once); a client with more asks in several requests.
const (
	// maxJoinProtocols bounds the protocols (assignors) of one
	// JoinGroup: clients send a handful, and the group coordinator
	// compares each member's against the others'.
	maxJoinProtocols = 100
	// maxConfigNames bounds the config names one DescribeConfigs
	// resource asks for: more than a broker has configs.
	maxConfigNames = 1_000
)

// entryLimit bounds one list field of a request: at most max entries in
// one list, and when total is set at most total over the whole request
// (every list at that path together).
type entryLimit struct {
	max, total    int
	why, totalWhy string
}

func topicsLimit() entryLimit {
	return entryLimit{max: api.MaxRequestTopics, why: "topics per request"}
}

func partitionsLimit() entryLimit {
	return entryLimit{max: api.MaxPartitionsPerTopic, why: "partitions per topic", total: api.MaxRequestPartitions, totalWhy: "partitions per request"}
}

func idsLimit(what string) entryLimit {
	return entryLimit{max: api.MaxRequestIDs, why: what + " per request"}
}

func membersLimit() entryLimit { return entryLimit{max: api.MaxRequestIDs, why: "members per request"} }

func filtersLimit() entryLimit { return entryLimit{max: api.MaxStateFilters, why: "filters"} }

func replicasLimit() entryLimit {
	return entryLimit{max: api.MaxReplicaList, why: "brokers per replica list"}
}

func configsLimit() entryLimit {
	return entryLimit{max: api.MaxTopicConfigs, why: "configs per resource"}
}

func txnBatchLimit() entryLimit {
	return entryLimit{max: api.MaxTxnBatchEntries, why: "entries per transaction batch", total: api.MaxTxnBatchEntries, totalWhy: "entries per transaction batch"}
}

// requestLimits bounds every list field of every request the door serves,
// by its path from the request type (kmsg's names). A test
// (TestEveryKafkaRequestListHasALimit) makes sure none is missing; one
// missing would be bounded by defaultEntryLimit.
var requestLimits = map[string]entryLimit{
	"ProduceRequest.Topics":                                    topicsLimit(),
	"ProduceRequest.Topics.Partitions":                         partitionsLimit(),
	"FetchRequest.Topics":                                      topicsLimit(),
	"FetchRequest.Topics.Partitions":                           partitionsLimit(),
	"FetchRequest.ForgottenTopics":                             topicsLimit(),
	"FetchRequest.ForgottenTopics.Partitions":                  partitionsLimit(),
	"ListOffsetsRequest.Topics":                                topicsLimit(),
	"ListOffsetsRequest.Topics.Partitions":                     partitionsLimit(),
	"MetadataRequest.Topics":                                   topicsLimit(),
	"OffsetCommitRequest.Topics":                               topicsLimit(),
	"OffsetCommitRequest.Topics.Partitions":                    partitionsLimit(),
	"OffsetFetchRequest.Topics":                                topicsLimit(),
	"OffsetFetchRequest.Topics.Partitions":                     partitionsLimit(),
	"OffsetFetchRequest.Groups":                                idsLimit("groups"),
	"OffsetFetchRequest.Groups.Topics":                         {max: api.MaxRequestTopics, why: "topics per group", total: api.MaxRequestTopics, totalWhy: "topics per request"},
	"OffsetFetchRequest.Groups.Topics.Partitions":              partitionsLimit(),
	"FindCoordinatorRequest.CoordinatorKeys":                   idsLimit("coordinator keys"),
	"JoinGroupRequest.Protocols":                               {max: maxJoinProtocols, why: "protocols per join"},
	"LeaveGroupRequest.Members":                                membersLimit(),
	"SyncGroupRequest.GroupAssignment":                         membersLimit(),
	"DescribeGroupsRequest.Groups":                             idsLimit("groups"),
	"ListGroupsRequest.StatesFilter":                           filtersLimit(),
	"ListGroupsRequest.TypesFilter":                            filtersLimit(),
	"CreateTopicsRequest.Topics":                               topicsLimit(),
	"CreateTopicsRequest.Topics.ReplicaAssignment":             partitionsLimit(),
	"CreateTopicsRequest.Topics.ReplicaAssignment.Replicas":    replicasLimit(),
	"CreateTopicsRequest.Topics.Configs":                       configsLimit(),
	"DeleteTopicsRequest.TopicNames":                           topicsLimit(),
	"DeleteTopicsRequest.Topics":                               topicsLimit(),
	"OffsetForLeaderEpochRequest.Topics":                       topicsLimit(),
	"OffsetForLeaderEpochRequest.Topics.Partitions":            partitionsLimit(),
	"AddPartitionsToTxnRequest.Topics":                         topicsLimit(),
	"AddPartitionsToTxnRequest.Topics.Partitions":              partitionsLimit(),
	"AddPartitionsToTxnRequest.Transactions":                   txnBatchLimit(),
	"AddPartitionsToTxnRequest.Transactions.Topics":            txnBatchLimit(),
	"AddPartitionsToTxnRequest.Transactions.Topics.Partitions": txnBatchLimit(),
	"TxnOffsetCommitRequest.Topics":                            topicsLimit(),
	"TxnOffsetCommitRequest.Topics.Partitions":                 partitionsLimit(),
	"DescribeConfigsRequest.Resources":                         topicsLimit(),
	"DescribeConfigsRequest.Resources.ConfigNames":             {max: maxConfigNames, why: "config names per resource"},
	"AlterConfigsRequest.Resources":                            topicsLimit(),
	"AlterConfigsRequest.Resources.Configs":                    configsLimit(),
	"IncrementalAlterConfigsRequest.Resources":                 topicsLimit(),
	"IncrementalAlterConfigsRequest.Resources.Configs":         configsLimit(),
	"CreatePartitionsRequest.Topics":                           topicsLimit(),
	"CreatePartitionsRequest.Topics.Assignment":                partitionsLimit(),
	"CreatePartitionsRequest.Topics.Assignment.Replicas":       replicasLimit(),
	"DeleteGroupsRequest.Groups":                               idsLimit("groups"),
	"OffsetDeleteRequest.Topics":                               topicsLimit(),
	"OffsetDeleteRequest.Topics.Partitions":                    partitionsLimit(),
	"DescribeProducersRequest.Topics":                          topicsLimit(),
	"DescribeProducersRequest.Topics.Partitions":               partitionsLimit(),
	"DescribeTransactionsRequest.TransactionalIDs":             idsLimit("transactional ids"),
	"ListTransactionsRequest.StateFilters":                     filtersLimit(),
	"ListTransactionsRequest.ProducerIDFilters":                idsLimit("producer ids"),
	"ConsumerGroupHeartbeatRequest.SubscribedTopicNames":       topicsLimit(),
	"ConsumerGroupHeartbeatRequest.Topics":                     topicsLimit(),
	"ConsumerGroupHeartbeatRequest.Topics.Partitions":          partitionsLimit(),
	"ConsumerGroupDescribeRequest.Groups":                      idsLimit("groups"),
}

// defaultEntryLimit bounds a list field missing from requestLimits.
var defaultEntryLimit = entryLimit{max: api.MaxRequestPartitions, why: "entries per list"}

// listField is a list field of a struct type: where it is, its path, its
// bound, and the plan of its elements when they are structs.
type listField struct {
	index []int
	path  string
	limit entryLimit
	elem  *structPlan
	// slot is where the request's total of this list is counted (when
	// limit.total is set): an index into checkLimits' counters.
	slot int
}

// maxTotalSlots bounds the lists with a total bound in one request type
// (OffsetFetch and AddPartitionsToTxn have the most: 3 and 4).
const maxTotalSlots = 8

// structPlan is what checkLimits walks in one struct type: its list
// fields, and the struct fields (not lists) that hold lists.
type structPlan struct {
	lists  []listField
	nested []nestedField
}

type nestedField struct {
	index []int
	ptr   bool
	plan  *structPlan
}

// limitPlans holds the plan of every request type kmsg knows, by API key;
// built once (planFor) from the types, so a request's check costs no
// reflection on types, only on its values.
var limitPlans = func() map[int16]*structPlan {
	plans := map[int16]*structPlan{}
	for key := range int16(1 << 10) {
		if req := kmsg.RequestForKey(key); req != nil {
			t := reflect.TypeOf(req).Elem()
			slots := 0
			plans[key] = planFor(t, t.Name(), &slots)
			if slots > maxTotalSlots {
				panic(fmt.Sprintf("kafka: %s has %d lists with a total bound, more than maxTotalSlots", t.Name(), slots))
			}
		}
	}
	return plans
}()

// planFor builds the plan of struct type t at path; slots counts the
// lists with a total bound of the request type so far.
func planFor(t reflect.Type, path string, slots *int) *structPlan {
	p := &structPlan{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		ft, ptr := f.Type, false
		if ft.Kind() == reflect.Pointer {
			ft, ptr = ft.Elem(), true
		}
		fpath := path + "." + f.Name
		switch {
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8:
			l, ok := requestLimits[fpath]
			if !ok {
				l = defaultEntryLimit
			}
			lf := listField{index: f.Index, path: fpath, limit: l, slot: -1}
			if l.total > 0 {
				lf.slot = *slots
				*slots++
			}
			if ft.Elem().Kind() == reflect.Struct {
				lf.elem = planFor(ft.Elem(), fpath, slots)
			}
			p.lists = append(p.lists, lf)
		case ft.Kind() == reflect.Struct:
			if np := planFor(ft, fpath, slots); len(np.lists) > 0 || len(np.nested) > 0 {
				p.nested = append(p.nested, nestedField{index: f.Index, ptr: ptr, plan: np})
			}
		}
	}
	return p
}

// errOverLimits is a request over one of requestLimits: the connection
// closes (CloseOverLimits).
type errOverLimits struct{ msg string }

func (e *errOverLimits) Error() string { return e.msg }

// checkLimits checks a parsed request against requestLimits. It looks at
// a list's length before its elements, so a request over a bound costs
// no more than its parse.
func checkLimits(r *request) error {
	p := limitPlans[r.key]
	if p == nil {
		return nil
	}
	var totals [maxTotalSlots]int
	return p.check(reflect.ValueOf(r.msg).Elem(), &totals)
}

func (p *structPlan) check(v reflect.Value, totals *[maxTotalSlots]int) error {
	for i := range p.lists {
		lf := &p.lists[i]
		s := v.FieldByIndex(lf.index)
		if s.Kind() == reflect.Pointer {
			if s.IsNil() {
				continue
			}
			s = s.Elem()
		}
		n := s.Len()
		if n > lf.limit.max {
			return &errOverLimits{fmt.Sprintf("%s has %d entries (at most %d %s)", lf.path, n, lf.limit.max, lf.limit.why)}
		}
		if lf.limit.total > 0 {
			t := totals[lf.slot] + n
			if t > lf.limit.total {
				return &errOverLimits{fmt.Sprintf("%s has more than %d entries in all (at most %d %s)", lf.path, lf.limit.total, lf.limit.total, lf.limit.totalWhy)}
			}
			totals[lf.slot] = t
		}
		if lf.elem != nil {
			for j := range n {
				if err := lf.elem.check(s.Index(j), totals); err != nil {
					return err
				}
			}
		}
	}
	for _, nf := range p.nested {
		f := v.FieldByIndex(nf.index)
		if nf.ptr {
			if f.IsNil() {
				continue
			}
			f = f.Elem()
		}
		if err := nf.plan.check(f, totals); err != nil {
			return err
		}
	}
	return nil
}

// listPaths is every list field's path in the plans (for the test).
func listPaths() []string {
	var out []string
	var walk func(p *structPlan)
	walk = func(p *structPlan) {
		for _, lf := range p.lists {
			out = append(out, lf.path)
			if lf.elem != nil {
				walk(lf.elem)
			}
		}
		for _, nf := range p.nested {
			walk(nf.plan)
		}
	}
	for _, p := range limitPlans {
		walk(p)
	}
	return out
}

// overLimits logs a request refused by checkLimits (a line per API per
// 10 s: a client can provoke them).
func (c *conn) overLimits(r *request, err error) {
	if c.s.limitLogs.Allow(APIName(r.key)) {
		c.s.log.Warn("request over the request limits refused; closing the connection (docs/operations.md, Request sizes)",
			"remote", c.nc.RemoteAddr().String(), "client_id", r.clientID, "api", APIName(r.key), "version", r.version, "err", err)
	}
}
