package kafka

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handler serves one API: the versions it serves and, for a request,
// the function that does its work — called in the connection's request
// order, one at a time — and returns the function that produces its
// answer (which may wait; see answer).
type handler struct {
	min, max int16
	serve    func(c *conn, r *request) func() kmsg.Response
	// listedFrom, when below min, is the lowest version ApiVersions
	// lists: versions listedFrom..min-1 are listed but refused (legacy
	// answers each). Kafka 4 does this for Produce v0-2 (KAFKA-18659):
	// librdkafka compresses with gzip and snappy only when ApiVersions
	// lists Produce v0.
	listedFrom int16
	legacy     func(c *conn, r *request) kmsg.Response
	// waits says the answer may take long (a coordinator's append, a
	// rebalance): the answers before it are flushed first.
	waits bool
	// charged says the request is answered from the broker's memory:
	// its handling time is charged to the caller's request quota
	// (request_percentage), as the gRPC door charges the same requests
	// (chargeRequest). Produce and Fetch charge themselves; requests
	// that wait on the controller, a coordinator or a rebalance are not
	// charged, as through gRPC.
	charged bool
	// waitsForOthers says the answer waits for other clients' requests
	// (a classic rebalance: every member's JoinGroup, the leader's
	// SyncGroup): its request bytes are given back once it is started,
	// so that it does not hold the budget those requests need.
	waitsForOthers bool
}

// listedMin is the lowest version ApiVersions lists for h.
func (h handler) listedMin() int16 {
	if h.legacy != nil {
		return h.listedFrom
	}
	return h.min
}

// handlers is every API the door serves, by key. The ApiVersions answer
// is made from it, so it lists exactly what is served.
var handlers map[int16]handler

func init() {
	handlers = map[int16]handler{
		0:              {min: 3, max: 12, serve: produce, listedFrom: 0, legacy: refuseOldProduce},
		1:              {min: 4, max: 12, serve: fetch},
		2:              {min: 1, max: 10, serve: now(listOffsets), charged: true},
		3:              {min: 0, max: 12, serve: now(metadata), charged: true},
		17:             {min: 1, max: 1, serve: now(saslHandshake), listedFrom: 0, legacy: refuseSaslHandshakeV0}, // saslHandshakeKey
		apiVersionsKey: {min: 0, max: 5, serve: now(apiVersions)},
		19:             {min: 0, max: 7, serve: now(createTopics)},
		20:             {min: 0, max: 6, serve: now(deleteTopics)},
		8:              {min: 2, max: 9, serve: later(offsetCommit), waits: true},
		9:              {min: 1, max: 9, serve: now(offsetFetch), charged: true},
		10:             {min: 0, max: 6, serve: later(findCoordinator), waits: true},
		11:             {min: 0, max: 9, serve: later(joinGroup), waits: true, waitsForOthers: true},
		12:             {min: 0, max: 4, serve: later(heartbeat), waits: true},
		13:             {min: 0, max: 5, serve: later(leaveGroup), waits: true},
		14:             {min: 0, max: 5, serve: later(syncGroup), waits: true, waitsForOthers: true},
		15:             {min: 0, max: 5, serve: now(describeGroups), charged: true},
		16:             {min: 0, max: 5, serve: now(listGroups), charged: true},
		22:             {min: 0, max: 5, serve: later(initProducerID), waits: true},
		24:             {min: 0, max: 5, serve: later(addPartitionsToTxn), waits: true},
		25:             {min: 0, max: 4, serve: later(addOffsetsToTxn), waits: true},
		26:             {min: 0, max: 5, serve: later(endTxn), waits: true},
		28:             {min: 0, max: 5, serve: later(txnOffsetCommit), waits: true},
		42:             {min: 0, max: 2, serve: later(deleteGroups), waits: true},
		65:             {min: 0, max: 0, serve: now(describeTransactions), charged: true},
		66:             {min: 0, max: 1, serve: now(listTransactions), charged: true},
		68:             {min: 0, max: 1, serve: later(consumerGroupHeartbeat), waits: true},
		69:             {min: 0, max: 1, serve: now(consumerGroupDescribe), charged: true},
		23:             {min: 2, max: 4, serve: now(offsetForLeaderEpoch), charged: true},
		32:             {min: 0, max: 4, serve: now(describeConfigs), charged: true},
		33:             {min: 0, max: 2, serve: now(alterConfigs)},
		36:             {min: 0, max: 2, serve: now(saslAuthenticate)}, // saslAuthenticateKey
		37:             {min: 0, max: 3, serve: now(createPartitions)},
		44:             {min: 0, max: 1, serve: now(incrementalAlterConfigs)},
		47:             {min: 0, max: 0, serve: later(offsetDelete), waits: true},
		60:             {min: 0, max: 1, serve: now(describeCluster), charged: true},
		61:             {min: 0, max: 0, serve: now(describeProducers), charged: true},
	}
}

// now makes a handler whose answer is ready once its work is done.
func now(fn func(c *conn, r *request) kmsg.Response) func(c *conn, r *request) func() kmsg.Response {
	return func(c *conn, r *request) func() kmsg.Response {
		resp := fn(c, r)
		return func() kmsg.Response { return resp }
	}
}

// apiKeys is the ApiVersions list: every served API and its versions, by
// key.
func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(handlers))
	for k, h := range handlers {
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.listedMin(), MaxVersion: h.max})
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}

// apiVersions answers ApiVersions: the served APIs and the features
// (Kafka 4's finalized feature levels that clients read: the
// transaction protocol version Sluice speaks).
func apiVersions(c *conn, r *request) kmsg.Response {
	resp := r.msg.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.ApiKeys = apiKeys()
	if r.version >= 3 {
		// Feature levels (KIP-584), which Kafka 3.x/4.x clients read:
		// transaction.version 2 (KIP-890: the coordinator bumps the epoch
		// at every EndTxn, partitions are added by their leaders) and
		// group.version 1 (KIP-848's consumer protocol served beside the
		// classic one), each supported and finalized at that level, as a
		// Kafka 4 cluster. The epoch is the metadata offset they were read
		// at.
		for _, f := range features {
			resp.SupportedFeatures = append(resp.SupportedFeatures, kmsg.ApiVersionsResponseSupportedFeature{Name: f.name, MinVersion: 0, MaxVersion: f.level})
			resp.FinalizedFeatures = append(resp.FinalizedFeatures, kmsg.ApiVersionsResponseFinalizedFeature{Name: f.name, MinVersionLevel: f.level, MaxVersionLevel: f.level})
		}
		resp.FinalizedFeaturesEpoch = -1
		if c.s.cfg.Metadata != nil {
			resp.FinalizedFeaturesEpoch = int64(c.s.cfg.Metadata.Offset())
		}
	}
	return resp
}

// features are the versioned protocols Kafka clients look up in
// ApiVersions' feature levels, at the level Sluice serves.
var features = []struct {
	name  string
	level int16
}{{"group.version", 1}, {"transaction.version", 2}}

// unsupportedAPIVersions is the answer to an ApiVersions of a version
// this broker does not serve: v0 with UNSUPPORTED_VERSION and the list,
// so that the client retries with a version it finds there (KIP-511).
func unsupportedAPIVersions(*Server) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = 0
	resp.ErrorCode = 35 // UNSUPPORTED_VERSION
	resp.ApiKeys = apiKeys()
	return resp
}
