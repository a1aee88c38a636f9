package kafka

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"

	"github.com/sluice-io/sluice/auth"
	"github.com/sluice-io/sluice/cluster/controller"
	"github.com/sluice-io/sluice/proto/errs"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
)

// kafkaCode is the Kafka protocol's number for a Sluice error code.
// Sluice's table keeps Kafka's names and, from MESSAGE_TOO_LARGE (10) on,
// its numbers; below that it is shifted by one (proto enums start at 0
// and Kafka's UNKNOWN_SERVER_ERROR is −1): Sluice 1 is Kafka's −1 and
// Sluice 2..8 are Kafka's 1..7 (TestKafkaCodesMatchKafkasNames checks
// every value against franz-go's table of Kafka's errors).
func kafkaCode(c sluicev1.ErrorCode) int16 {
	switch {
	case c == sluicev1.ErrorCode_UNKNOWN_SERVER_ERROR:
		return -1
	case c >= sluicev1.ErrorCode_OFFSET_OUT_OF_RANGE && c <= sluicev1.ErrorCode_REQUEST_TIMED_OUT:
		return int16(c) - 1
	}
	return int16(c)
}

// errCode is err's Kafka code (0 for nil).
func errCode(err error) int16 {
	if err == nil {
		return 0
	}
	return kafkaCode(errs.Code(err))
}

// errMessage is err's message for a response's error_message (nil for
// nil).
func errMessage(err error) *string {
	if err == nil {
		return nil
	}
	m := errs.Message(err)
	return &m
}

// Kafka error codes the door answers that have no Sluice error value.
const (
	codeUnsupportedVersion       int16 = 35
	codeUnsupportedForMessageFmt int16 = 43
	codeCorruptMessage           int16 = 2
	codeUnknownTopicOrPartition  int16 = 3
	codeOperationNotAttempted    int16 = 55
	codeUnknownTopicID           int16 = 100
	codeUnsupportedEndpointType  int16 = 115
)

// allowed reports whether the connection's caller may do op on r
// (logging and counting a denial).
func (c *conn) allowed(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	return c.s.cfg.Gate.Allowed(ctx, c.caller.Principal, c.host, op, r)
}

// allowedQuiet is allowed without the audit line: for listings.
func (c *conn) allowedQuiet(ctx context.Context, op auth.Operation, r auth.Resource) bool {
	return c.s.cfg.Gate.AllowedQuiet(ctx, c.caller.Principal, c.host, op, r)
}

// denied is the Kafka code and message of a denial of op on r.
func (c *conn) denied(op auth.Operation, r auth.Resource) (int16, *string) {
	m := auth.DeniedMessage(c.caller.Principal, op, r)
	return kafkaCode(auth.DeniedCode(r.Type)), &m
}

// topicID is a topic's id as Kafka's 16-byte UUID (Sluice keeps it in
// hex); zero if it is not 32 hex digits.
func topicID(t *controller.Topic) [16]byte {
	var id [16]byte
	if b, err := hex.DecodeString(t.ID); err == nil && len(b) == 16 {
		copy(id[:], b)
	}
	return id
}

// topicNames maps topic ids to names for one image (requests of the
// versions that name topics by id). The last image's map is kept.
type topicNames struct {
	mu    sync.Mutex
	image *controller.Image
	names map[[16]byte]string
}

// name is the topic with id in im, or "" if none.
func (n *topicNames) name(im *controller.Image, id [16]byte) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.image != im {
		n.image = im
		n.names = make(map[[16]byte]string, len(im.Topics))
		for name, t := range im.Topics {
			n.names[topicID(t)] = name
		}
	}
	return n.names[id]
}

// splitAddress splits an advertised host:port for Kafka's broker
// entries; ok is false when it does not parse.
func splitAddress(addr string) (host string, port int32, ok bool) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return h, int32(n), true
}
