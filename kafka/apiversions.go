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
}

// handlers is every API the door serves, by key. The ApiVersions answer
// is made from it, so it lists exactly what is served.
var handlers map[int16]handler

func init() {
	handlers = map[int16]handler{
		0:              {3, 12, produce},
		1:              {4, 12, fetch},
		2:              {1, 10, now(listOffsets)},
		3:              {0, 12, now(metadata)},
		17:             {1, 1, now(saslHandshake)}, // saslHandshakeKey
		apiVersionsKey: {0, 4, now(apiVersions)},
		19:             {0, 7, now(createTopics)},
		20:             {0, 6, now(deleteTopics)},
		22:             {0, 5, now(initProducerID)},
		23:             {2, 4, now(offsetForLeaderEpoch)},
		36:             {0, 2, now(saslAuthenticate)}, // saslAuthenticateKey
		60:             {0, 1, now(describeCluster)},
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
		keys = append(keys, kmsg.ApiVersionsResponseApiKey{ApiKey: k, MinVersion: h.min, MaxVersion: h.max})
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
	return resp
}

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
