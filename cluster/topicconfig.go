package cluster

import (
	"fmt"
	"strconv"

	"github.com/sluice-io/sluice/proto/errs"
	"github.com/sluice-io/sluice/proto/kafkarecords"
	sluicev1 "github.com/sluice-io/sluice/proto/sluicev1"
	"github.com/sluice-io/sluice/storage"
)

// Limits on topic creation; requests beyond them are refused, not clamped.
const (
	MaxTopicNameLength = 249
	MaxPartitions      = 10000
)

// ValidateTopicName applies Kafka's naming rules: 1..249 characters of
// [a-zA-Z0-9._-], not "." or "..". Names starting with "__" are reserved
// for internal topics.
func ValidateTopicName(name string) error {
	bad := func(why string) error {
		return errs.New(sluicev1.ErrorCode_INVALID_TOPIC_EXCEPTION, "topic name %q is invalid: %s", errs.Echo(name), why)
	}
	switch {
	case name == "":
		return bad("it is empty")
	case len(name) > MaxTopicNameLength:
		return bad(fmt.Sprintf("longer than %d characters", MaxTopicNameLength))
	case name == "." || name == "..":
		return bad("'.' and '..' are not allowed")
	}
	for _, r := range name {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return bad("only ASCII letters, digits, '.', '_' and '-' are allowed")
		}
	}
	if len(name) >= 2 && name[:2] == "__" {
		return bad("names starting with '__' are reserved for internal topics")
	}
	return nil
}

// TopicConfig is a topic's full configuration: storage settings plus those
// the broker applies itself.
type TopicConfig struct {
	Storage           storage.Config
	MinInsyncReplicas int32
	UncleanElection   bool
	// CompressionType is compression.type: CompressionProducer (or
	// empty) keeps each batch as its producer compressed it (or not);
	// "uncompressed" or a codec's name converts every produced batch to
	// it on append (decision 67).
	CompressionType string
	// LogAppendTime is message.timestamp.type=LogAppendTime: the leader
	// stamps each produced batch with its clock at the append
	// (batch.SetLogAppendTime), every record's timestamp from then on;
	// false is CreateTime, the producer's timestamps.
	LogAppendTime bool
}

// Values of message.timestamp.type.
const (
	TimestampCreateTime    = "CreateTime"
	TimestampLogAppendTime = "LogAppendTime"
)

// Values of compression.type besides the codecs' names (gzip, snappy,
// lz4, zstd).
const (
	CompressionProducer     = "producer"
	CompressionUncompressed = "uncompressed"
)

// Codec is the codec compression.type asks produced batches to be
// stored in (kafkarecords.None for uncompressed); ok is false for
// producer: each batch keeps its producer's codec.
func (tc TopicConfig) Codec() (codec kafkarecords.Codec, ok bool) {
	switch tc.CompressionType {
	case "", CompressionProducer:
		return kafkarecords.None, false
	case CompressionUncompressed:
		return kafkarecords.None, true
	}
	return kafkarecords.ParseCodec(tc.CompressionType)
}

// parseCompressionType checks a compression.type value, Kafka's: producer,
// uncompressed, gzip, snappy, lz4 or zstd.
func parseCompressionType(v string) (string, error) {
	if c, ok := kafkarecords.ParseCodec(v); (ok && c != kafkarecords.None) || v == CompressionProducer || v == CompressionUncompressed {
		return v, nil
	}
	return "", errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "compression.type must be producer, uncompressed, gzip, snappy, lz4 or zstd, got %q", errs.Echo(v))
}

// ParseTopicConfig validates user-supplied topic configs and returns the
// effective configuration. Errors are INVALID_CONFIG naming the key.
func ParseTopicConfig(m map[string]string, replicationFactor int32) (TopicConfig, error) {
	sc, err := storage.ParseConfig(m)
	if err != nil {
		return TopicConfig{}, err
	}
	tc := TopicConfig{Storage: sc, MinInsyncReplicas: 1}
	if v, ok := m["min.insync.replicas"]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "min.insync.replicas must be an integer >= 1, got %q", errs.Echo(v))
		}
		if int32(n) > replicationFactor {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "min.insync.replicas %d exceeds the replication factor %d", n, replicationFactor)
		}
		tc.MinInsyncReplicas = int32(n)
	}
	if v, ok := m["unclean.leader.election.enable"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "unclean.leader.election.enable must be true or false, got %q", errs.Echo(v))
		}
		tc.UncleanElection = b
	}
	tc.CompressionType = CompressionProducer
	if v, ok := m["compression.type"]; ok {
		if tc.CompressionType, err = parseCompressionType(v); err != nil {
			return tc, err
		}
	}
	if v, ok := m["message.timestamp.type"]; ok {
		switch v {
		case TimestampCreateTime:
		case TimestampLogAppendTime:
			tc.LogAppendTime = true
		default:
			return tc, errs.New(sluicev1.ErrorCode_INVALID_CONFIG, "message.timestamp.type must be CreateTime or LogAppendTime, got %q", errs.Echo(v))
		}
	}
	return tc, nil
}

// Map returns every effective config value, for describe.
func (tc TopicConfig) Map() map[string]string {
	m := tc.Storage.Map()
	m["min.insync.replicas"] = strconv.Itoa(int(tc.MinInsyncReplicas))
	m["unclean.leader.election.enable"] = strconv.FormatBool(tc.UncleanElection)
	m["message.timestamp.type"] = TimestampCreateTime
	if tc.LogAppendTime {
		m["message.timestamp.type"] = TimestampLogAppendTime
	}
	m["compression.type"] = CompressionProducer
	if tc.CompressionType != "" {
		m["compression.type"] = tc.CompressionType
	}
	return m
}
